//! The incremental envelope of the resident mode (`mc-transform serve`).
//!
//! An adapter that keeps what it sent and received on its last call for a
//! session sends only the messages that changed since, and hears back only
//! the messages it must change. Both ends keep one *baseline* per session:
//! the input messages of the last call and the output messages of its
//! answer, named by a key the adapter chose. A request names its base and a
//! new key; its messages are integers (the message at that index of the
//! base's input, unchanged) or whole messages (new or changed). The answer's
//! messages are integers (the message at that index of the base's output,
//! byte for byte) or whole messages.
//!
//! Nothing here decides what a pass does: the pass always runs on the whole
//! input, rebuilt from the baseline, so the answer is the one-shot command's
//! answer, only addressed differently. Any doubt (no baseline for the
//! session, another base, a length or a reference that does not fit) is a
//! *resync*: the adapter sends the whole envelope, which starts a new
//! baseline. Pure bookkeeping: no I/O, no clock.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::render::{ForNextPass, Replay};
use mc_base::codec::PI;
use mc_base::codec::opencode::{Message, decode_all, decode_at};
use mc_base::error::{Error, Result};

/// Sessions whose baselines a resident process keeps, least recently used
/// dropped first (a dropped one costs one whole envelope, never a wrong answer).
pub const DEFAULT_SESSIONS: usize = 16;

/// The `"incremental"` object of a pass request.
#[derive(Debug, Clone, PartialEq)]
pub struct Delta {
    /// The baseline this request builds on; `None` for a whole envelope that
    /// starts a baseline.
    pub base: Option<String>,
    /// The name of the baseline this call makes.
    pub key: String,
    /// How many input messages the adapter's base holds (a cross-check).
    pub base_len: Option<usize>,
    /// Base-relative messages; `None` for a whole envelope (its `messages`).
    pub messages: Option<Vec<Value>>,
}

impl Delta {
    /// Read the request's `"incremental"` value. A wrong shape is an input
    /// error; whether it fits a baseline is decided by [`Baselines::resolve`].
    pub fn from_value(value: Value) -> Result<Delta> {
        let Value::Object(mut map) = value else {
            return Err(Error::input(
                "\"incremental\" must be an object {\"key\", \"base\"?, \"base_len\"?, \"messages\"?}",
            ));
        };
        let key = match map.remove("key") {
            Some(Value::String(key)) if !key.is_empty() => key,
            _ => {
                return Err(Error::input(
                    "\"incremental\" needs \"key\", a non-empty string naming this call's baseline",
                ));
            }
        };
        let base = match map.remove("base") {
            None | Some(Value::Null) => None,
            Some(Value::String(base)) => Some(base),
            Some(_) => return Err(Error::input("\"incremental.base\" must be a string")),
        };
        let base_len = match map.remove("base_len") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => Some(
                n.as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| Error::input("\"incremental.base_len\" must be a count"))?,
            ),
            Some(_) => return Err(Error::input("\"incremental.base_len\" must be a count")),
        };
        let messages = match map.remove("messages") {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) => Some(items),
            Some(_) => return Err(Error::input("\"incremental.messages\" must be an array")),
        };
        if base.is_some() != messages.is_some() {
            return Err(Error::input(
                "\"incremental\" has \"base\" and \"messages\" together (a delta) or neither (a whole envelope)",
            ));
        }
        Ok(Delta {
            base,
            key,
            base_len,
            messages,
        })
    }
}

/// Why an incremental request cannot be rebuilt: the adapter sends the
/// whole envelope instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resync {
    /// No baseline for the session here (a new or restarted process, or one
    /// dropped as least recently used).
    UnknownSession,
    /// The baseline here has another key: a call between them was lost.
    StaleBase,
    /// The adapter's base holds another number of messages.
    BaseLength,
    /// A message is neither an index into the base's input nor an object.
    BadReference,
}

impl Resync {
    pub fn as_str(self) -> &'static str {
        match self {
            Resync::UnknownSession => "unknown_session",
            Resync::StaleBase => "stale_base",
            Resync::BaseLength => "base_length",
            Resync::BadReference => "bad_reference",
        }
    }

    /// The answer to a request that must be sent whole: `{"resync": reason}`.
    pub fn answer(self) -> Value {
        let mut map = Map::new();
        map.insert("resync".into(), Value::from(self.as_str()));
        Value::Object(map)
    }
}

/// What a baseline keeps of one output message: its `info.id` and the
/// fingerprint of its bytes ([`fingerprint`]), so the next answer is
/// compared without the previous output's values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    id: Option<Arc<str>>,
    print: u128,
}

impl Kept {
    /// The message's `info.id`, when it has one.
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }
}

/// A baseline's output: the messages as answered (a whole envelope: they are
/// fingerprinted while the process waits) or, once fingerprinted, what
/// [`delta_of`] compares.
#[derive(Debug)]
pub enum Output {
    Messages(Vec<Value>),
    Kept(Vec<Kept>),
}

impl From<Vec<Value>> for Output {
    fn from(messages: Vec<Value>) -> Output {
        Output::Messages(messages)
    }
}

impl From<Vec<Kept>> for Output {
    fn from(kept: Vec<Kept>) -> Output {
        Output::Kept(kept)
    }
}

impl Output {
    /// Fingerprint the messages if not yet (and let them go).
    fn settle(&mut self) {
        if let Output::Messages(messages) = self {
            *self = Output::Kept(kept(messages));
        }
    }

    fn into_messages(self) -> Vec<Value> {
        match self {
            Output::Messages(messages) => messages,
            Output::Kept(_) => Vec::new(),
        }
    }
}

/// One session's baseline: the last call's input and output messages.
#[derive(Debug)]
struct Baseline {
    harness: String,
    session: String,
    key: String,
    input: Vec<Value>,
    output: Output,
    /// What the pass left for the next (its renderings, and the input
    /// messages it did not render again, decoded: part of the next spare).
    for_next: Option<ForNextPass>,
    /// A twin of `input`, made while the process waits for the next request
    /// ([`Baselines::prepare_spare`]): the next delta takes its pass input
    /// from it and its new baseline from `input`, copying nothing deeply
    /// but its own messages.
    spare: Option<Spare>,
}

/// A baseline input's twin ([`Baseline::spare`]).
#[derive(Debug)]
enum Spare {
    /// Pi's messages, copied: its codec decodes the whole array at once
    /// (by position), so the pass decodes them.
    Values(Vec<Value>),
    /// OpenCode's messages, already decoded: its codec decodes each message
    /// alone, so a delta's pass decodes only the delta's own messages.
    Decoded(Vec<Message>),
}

/// The messages a delta's pass runs on ([`Baselines::resolve_for_pass`]).
#[derive(Debug)]
pub enum PassInput {
    /// As JSON: the pass decodes them.
    Values(Vec<Value>),
    /// Already decoded (OpenCode), as `codec::opencode::decode_all` would
    /// decode the rebuilt input's values.
    Decoded(Vec<Message>),
}

/// The baselines of a resident process, most recently used last.
#[derive(Debug)]
pub struct Baselines {
    cap: usize,
    entries: Vec<Baseline>,
}

impl Default for Baselines {
    fn default() -> Self {
        Baselines::new(DEFAULT_SESSIONS)
    }
}

impl Baselines {
    pub fn new(cap: usize) -> Baselines {
        Baselines {
            cap: cap.max(1),
            entries: Vec::new(),
        }
    }

    fn position(&self, harness: &str, session: &str) -> Option<usize> {
        self.entries
            .iter()
            .position(|b| b.harness == harness && b.session == session)
    }

    /// How many sessions' baselines are kept at most.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Sessions with a baseline.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The whole input of a delta request (`delta.messages` must be set):
    /// each index replaced by that message of the base's input, which is
    /// moved out rather than copied (the caller makes the rebuilt input the
    /// next baseline). Any doubt drops the session's baseline and says why.
    pub fn resolve(
        &mut self,
        harness: &str,
        session: &str,
        delta: Delta,
    ) -> std::result::Result<Vec<Value>, Resync> {
        let resolved = self.rebuild(harness, session, delta);
        if resolved.is_err() {
            self.forget(harness, session);
        }
        resolved
    }

    /// [`Baselines::resolve`], plus what the pass runs on: a second,
    /// separate copy of the input (the rebuilt input itself is the next
    /// baseline), or its messages decoded, both from the baseline's spare
    /// when it has one (so nothing is copied or decoded but the delta's own
    /// messages); and what the base pass's render left for this one (see
    /// `pass::Resident::replay`), the delta's own messages named changed.
    pub fn resolve_for_pass(
        &mut self,
        harness: &str,
        session: &str,
        delta: Delta,
    ) -> std::result::Result<(Vec<Value>, PassInput, Replay), Resync> {
        let resolved = self.rebuild_both(harness, session, delta);
        if resolved.is_err() {
            self.forget(harness, session);
        }
        resolved
    }

    fn rebuild_both(
        &mut self,
        harness: &str,
        session: &str,
        delta: Delta,
    ) -> std::result::Result<(Vec<Value>, PassInput, Replay), Resync> {
        let (spare, for_next, previous_len) = match self
            .position(harness, session)
            .and_then(|at| self.entries.get_mut(at))
        {
            Some(base) => (
                base.spare.take(),
                base.for_next.take(),
                match &base.output {
                    Output::Kept(kept) => kept.len(),
                    Output::Messages(messages) => messages.len(),
                },
            ),
            None => (None, None, 0),
        };
        let items = delta.messages.as_deref().unwrap_or_default();
        let refs: Vec<Option<usize>> = items
            .iter()
            .map(|item| item.as_u64().and_then(|i| usize::try_from(i).ok()))
            .collect();
        let changed = items.iter().filter_map(message_id).map(Box::from).collect();
        let input = self.rebuild(harness, session, delta)?;
        let replay = Replay {
            previous: for_next.map(|f| f.renderings).unwrap_or_default(),
            previous_len,
            changed,
        };
        let Some(spare) = spare else {
            let copy = input.clone();
            return Ok((input, PassInput::Values(copy), replay));
        };
        // The spare is the base input's twin: take each referenced message
        // from it (a message referenced twice is copied; a new one is
        // copied, or decoded, from the rebuilt input).
        let pass = match spare {
            Spare::Values(spare) => PassInput::Values(twin(spare, &refs, &input, Value::clone)),
            Spare::Decoded(spare) => {
                let decoded = twin(spare.into_iter().map(Ok).collect(), &refs, &input, |v| {
                    Message::decode(v.clone())
                });
                match decoded.into_iter().collect::<Result<Vec<_>>>() {
                    Ok(messages) => PassInput::Decoded(messages),
                    // A new message the codec refuses: the pass decodes the
                    // whole input and says which one, as the one-shot would.
                    Err(_) => PassInput::Values(input.clone()),
                }
            }
        };
        Ok((input, pass, replay))
    }

    /// Copy the most recently used baseline's input, if it has no spare yet
    /// (see [`Baseline::spare`]), and fingerprint its output if it was
    /// kept whole; for the time between requests.
    pub fn prepare_spare(&mut self) {
        if let Some(base) = self.entries.last_mut() {
            base.output.settle();
            if base.spare.is_none() && !base.input.is_empty() {
                let unused = base
                    .for_next
                    .as_mut()
                    .map(|f| std::mem::take(&mut f.unused))
                    .unwrap_or_default();
                base.spare = Some(if base.harness == PI {
                    Spare::Values(base.input.clone())
                } else {
                    match decode_reusing(&base.input, unused) {
                        Ok(decoded) => Spare::Decoded(decoded),
                        // Not OpenCode's shape: the pass will say so.
                        Err(_) => Spare::Values(base.input.clone()),
                    }
                });
            }
        }
    }

    fn rebuild(
        &mut self,
        harness: &str,
        session: &str,
        delta: Delta,
    ) -> std::result::Result<Vec<Value>, Resync> {
        let base = self
            .position(harness, session)
            .and_then(|at| self.entries.get_mut(at))
            .ok_or(Resync::UnknownSession)?;
        if delta.base.as_deref() != Some(base.key.as_str()) {
            return Err(Resync::StaleBase);
        }
        if delta.base_len.is_some_and(|n| n != base.input.len()) {
            return Err(Resync::BaseLength);
        }
        let items = delta.messages.ok_or(Resync::BadReference)?;
        // Each base message moves to its first place; a second reference
        // to it copies from there.
        let mut slots: Vec<Option<Value>> = std::mem::take(&mut base.input)
            .into_iter()
            .map(Some)
            .collect();
        let mut placed: Vec<Option<usize>> = vec![None; slots.len()];
        let mut rebuilt: Vec<Value> = Vec::with_capacity(items.len());
        for item in items {
            let message = match item {
                Value::Object(_) => item,
                Value::Number(n) => {
                    let index = n
                        .as_u64()
                        .and_then(|i| usize::try_from(i).ok())
                        .filter(|&i| i < slots.len())
                        .ok_or(Resync::BadReference)?;
                    match (
                        slots.get_mut(index).and_then(Option::take),
                        placed.get(index).copied().flatten(),
                    ) {
                        (Some(message), _) => {
                            if let Some(at) = placed.get_mut(index) {
                                *at = Some(rebuilt.len());
                            }
                            message
                        }
                        (None, Some(at)) => rebuilt.get(at).cloned().ok_or(Resync::BadReference)?,
                        (None, None) => return Err(Resync::BadReference),
                    }
                }
                _ => return Err(Resync::BadReference),
            };
            rebuilt.push(message);
        }
        Ok(rebuilt)
    }

    /// The session's baseline input, if it has one.
    pub fn input(&self, harness: &str, session: &str) -> Option<&[Value]> {
        let at = self.position(harness, session)?;
        self.entries.get(at).map(|base| base.input.as_slice())
    }

    /// What the session's baseline keeps of its output, if it has one
    /// (fingerprinted now if the process had no time for it yet).
    pub fn output(&mut self, harness: &str, session: &str) -> Option<&[Kept]> {
        let at = self.position(harness, session)?;
        let base = self.entries.get_mut(at)?;
        base.output.settle();
        match &base.output {
            Output::Kept(kept) => Some(kept.as_slice()),
            Output::Messages(_) => None,
        }
    }

    /// Make `(input, output)` the session's baseline under `key`, dropping
    /// the least recently used session beyond the cap. Returns the messages
    /// let go, for the caller to free when it has time.
    pub fn remember(
        &mut self,
        harness: &str,
        session: &str,
        key: String,
        input: Vec<Value>,
        output: impl Into<Output>,
        for_next: Option<ForNextPass>,
    ) -> Vec<Value> {
        let mut released = self.forget(harness, session);
        self.entries.push(Baseline {
            harness: harness.to_string(),
            session: session.to_string(),
            key,
            input,
            output: output.into(),
            for_next,
            spare: None,
        });
        while self.entries.len() > self.cap {
            let dropped = self.entries.remove(0);
            released.extend(dropped.input);
            released.extend(dropped.output.into_messages());
            released.extend(dropped.spare.map(Spare::into_values).unwrap_or_default());
            released.extend(unused_values(dropped.for_next));
        }
        released
    }

    /// Keep the session's baseline and mark it most recently used.
    pub fn touch(&mut self, harness: &str, session: &str) {
        if let Some(at) = self.position(harness, session) {
            let entry = self.entries.remove(at);
            self.entries.push(entry);
        }
    }

    /// Drop the session's baseline; returns its messages (see [`Baselines::remember`]).
    pub fn forget(&mut self, harness: &str, session: &str) -> Vec<Value> {
        match self.position(harness, session) {
            Some(at) => {
                let dropped = self.entries.remove(at);
                let mut released = dropped.input;
                released.extend(dropped.output.into_messages());
                released.extend(dropped.spare.map(Spare::into_values).unwrap_or_default());
                released.extend(unused_values(dropped.for_next));
                released
            }
            None => Vec::new(),
        }
    }
}

/// The decoded messages a baseline kept for its spare, as values to free.
fn unused_values(for_next: Option<ForNextPass>) -> impl Iterator<Item = Value> {
    for_next
        .into_iter()
        .flat_map(|f| f.unused)
        .map(Message::encode)
}

impl Spare {
    /// The values to free after the answer (a decoded spare's messages go
    /// back into their values: moves, no copies).
    fn into_values(self) -> Vec<Value> {
        match self {
            Spare::Values(values) => values,
            Spare::Decoded(messages) => messages.into_iter().map(Message::encode).collect(),
        }
    }
}

/// `input` decoded as `decode_all` decodes it, taking a message from
/// `decoded` (messages decoded from values of `input`, by id) where one
/// has its id, and only if no other message of either carries it.
fn decode_reusing(input: &[Value], decoded: Vec<Message>) -> Result<Vec<Message>> {
    if decoded.is_empty() {
        return decode_all(input.to_vec());
    }
    let mut count: rustc_hash::FxHashMap<&str, u32> = Default::default();
    for id in input.iter().filter_map(message_id) {
        *count.entry(id).or_default() += 1;
    }
    let mut by_id: rustc_hash::FxHashMap<Box<str>, Option<Message>> = Default::default();
    for message in decoded {
        let Some(id) = message.id().filter(|id| count.get(id) == Some(&1)) else {
            continue;
        };
        match by_id.get_mut(id) {
            // Decoded twice: neither is taken.
            Some(slot) => *slot = None,
            None => {
                by_id.insert(Box::from(id), Some(message));
            }
        }
    }
    input
        .iter()
        .enumerate()
        .map(|(i, value)| {
            match message_id(value)
                .and_then(|id| by_id.get_mut(id))
                .and_then(Option::take)
            {
                Some(message) => Ok(message),
                None => decode_at(i, value.clone()),
            }
        })
        .collect()
}

/// The pass's twin of a rebuilt `input` from `spare`, the base input's twin:
/// a referenced message is taken from the spare the first time, made from
/// its place in `input` (by `make`) when referenced again or new.
fn twin<T>(
    spare: Vec<T>,
    refs: &[Option<usize>],
    input: &[Value],
    make: impl Fn(&Value) -> T,
) -> Vec<T> {
    let mut spare: Vec<Option<T>> = spare.into_iter().map(Some).collect();
    input
        .iter()
        .zip(refs)
        .map(|(message, at)| {
            at.and_then(|i| spare.get_mut(i).and_then(Option::take))
                .unwrap_or_else(|| make(message))
        })
        .collect()
}

/// The answer's messages for `output` against the `previous` output: the
/// index of an equal message there (equal byte for byte once serialised:
/// same keys in the same order, compared by [`fingerprint`]), else the
/// message itself; and what the next baseline keeps of `output`. An index
/// in `output` (a message the pass knew to be the previous output's) stays
/// that index; `None` if one is out of range. The messages the answer
/// names by index go to `spent`, for the caller to free when it has time.
///
/// Messages are matched by `info.id`; the few without one (the synthetic
/// head and reminders) are compared with the previous ones without one.
pub fn delta_of(
    previous: &[Kept],
    output: Vec<Value>,
    spent: &mut Vec<Value>,
) -> Option<(Vec<Value>, Vec<Kept>)> {
    let mut by_id: rustc_hash::FxHashMap<&str, usize> =
        rustc_hash::FxHashMap::with_capacity_and_hasher(previous.len(), Default::default());
    let mut anonymous = Vec::new();
    for (index, kept) in previous.iter().enumerate() {
        match kept.id.as_deref() {
            // The first of a repeated id wins; a later one is matched by content only if it is first.
            Some(id) => {
                by_id.entry(id).or_insert(index);
            }
            None => anonymous.push(index),
        }
    }
    let mut bytes = Vec::new();
    let mut now = Vec::with_capacity(output.len());
    let mut answer = Vec::with_capacity(output.len());
    for message in output {
        if let Value::Number(n) = &message {
            let index = n.as_u64().and_then(|i| usize::try_from(i).ok())?;
            now.push(previous.get(index)?.clone());
            answer.push(message);
            continue;
        }
        let mine = kept_of(&message, &mut bytes);
        let same = |i: &usize| previous.get(*i).is_some_and(|p| p.print == mine.print);
        let found = match mine.id.as_deref() {
            Some(id) => by_id.get(id).copied().filter(same),
            None => anonymous.iter().copied().find(same),
        };
        answer.push(match found {
            Some(index) => {
                spent.push(message);
                Value::from(index)
            }
            None => message,
        });
        now.push(mine);
    }
    Some((answer, now))
}

fn kept_of(message: &Value, bytes: &mut Vec<u8>) -> Kept {
    Kept {
        id: message_id(message).map(Arc::from),
        print: fingerprint_into(message, bytes),
    }
}

/// What a baseline keeps of each of `output`'s messages.
pub fn kept(output: &[Value]) -> Vec<Kept> {
    let mut bytes = Vec::new();
    output
        .iter()
        .map(|message| kept_of(message, &mut bytes))
        .collect()
}

fn message_id(message: &Value) -> Option<&str> {
    message.get("info")?.get("id")?.as_str()
}

/// A 128-bit fingerprint of `value`'s serialised bytes: XXH3-128 over a
/// canonical encoding of the tree (see [`canonical`]).
///
/// Why equal fingerprints may stand for equal bytes: the encoding is
/// injective (every value is a type tag, then its length, then its
/// contents, keys in their order, so a stream decodes back to exactly one
/// value), and serialisation is a function of the value, so two messages
/// whose bytes differ feed XXH3 different streams. XXH3-128 is no
/// cryptographic hash, but the messages of one session's two consecutive
/// outputs are not chosen to collide: the chance that any of a few hundred
/// changed messages meets its predecessor's fingerprint is about 2^-120 a
/// pass. The worst a collision does is answer one message as unchanged.
pub fn fingerprint(value: &Value) -> u128 {
    fingerprint_into(value, &mut Vec::new())
}

fn fingerprint_into(value: &Value, bytes: &mut Vec<u8>) -> u128 {
    bytes.clear();
    canonical(value, bytes);
    xxhash_rust::xxh3::xxh3_128(bytes)
}

/// The canonical encoding [`fingerprint`] hashes: a tag byte per value;
/// numbers as their kind and 8 bytes (serde_json without
/// `arbitrary_precision` keeps a number as a u64, an i64 or an f64, and
/// prints each as a function of it); strings, arrays and objects with their
/// length first, an object's keys (length, bytes) in their order.
fn canonical(value: &Value, out: &mut Vec<u8>) {
    fn length(out: &mut Vec<u8>, n: usize) {
        out.extend_from_slice(&(n as u64).to_le_bytes());
    }
    match value {
        Value::Null => out.push(0),
        Value::Bool(b) => out.push(1 + u8::from(*b)),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                out.push(3);
                out.extend_from_slice(&u.to_le_bytes());
            } else if let Some(i) = n.as_i64() {
                out.push(4);
                out.extend_from_slice(&i.to_le_bytes());
            } else {
                out.push(5);
                let f = n.as_f64().unwrap_or(f64::NAN);
                out.extend_from_slice(&f.to_bits().to_le_bytes());
            }
        }
        Value::String(s) => {
            out.push(6);
            length(out, s.len());
            out.extend_from_slice(s.as_bytes());
        }
        Value::Array(items) => {
            out.push(7);
            length(out, items.len());
            for item in items {
                canonical(item, out);
            }
        }
        Value::Object(map) => {
            out.push(8);
            length(out, map.len());
            for (key, item) in map {
                length(out, key.len());
                out.extend_from_slice(key.as_bytes());
                canonical(item, out);
            }
        }
    }
}

/// Equal as serialised bytes: the same values with the same keys in the same
/// order (`Value`'s own `==` ignores the order of keys, which the bytes do not).
pub fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y.iter())
                    .all(|((ka, va), (kb, vb))| ka == kb && same(va, vb))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y.iter()).all(|(p, q)| same(p, q))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(id: &str, text: &str) -> Value {
        json!({"info": {"id": id, "role": "user"}, "parts": [{"type": "text", "text": text}]})
    }

    fn delta(base: Option<&str>, key: &str, messages: Option<Vec<Value>>) -> Delta {
        Delta {
            base: base.map(str::to_string),
            key: key.into(),
            base_len: None,
            messages,
        }
    }

    /// The pass's messages as values (decoded ones encoded back).
    fn values_of(pass: PassInput) -> Vec<Value> {
        match pass {
            PassInput::Values(values) => values,
            PassInput::Decoded(messages) => messages.into_iter().map(Message::encode).collect(),
        }
    }

    /// A baseline of `input` for `harness`, its spare made when `spare`.
    fn baseline_of(harness: &str, input: &[Value], spare: bool) -> Baselines {
        let mut baselines = Baselines::default();
        baselines.remember(
            harness,
            "s",
            "k1".into(),
            input.to_vec(),
            Vec::<Value>::new(),
            None,
        );
        if spare {
            baselines.prepare_spare();
        }
        baselines
    }

    #[test]
    fn the_pass_input_is_the_rebuilt_input_with_or_without_a_spare() {
        let input = vec![message("a", "one"), message("b", "two")];
        let new = message("c", "three");
        // Reordered, one message twice, one new.
        let refs = || Some(vec![json!(1), json!(0), json!(1), new.clone()]);
        let want = vec![
            input[1].clone(),
            input[0].clone(),
            input[1].clone(),
            new.clone(),
        ];
        // OpenCode's spare is decoded, Pi's copied; without one, a copy.
        for (harness, spare, decoded) in [
            ("opencode", false, false),
            ("opencode", true, true),
            ("pi", true, false),
        ] {
            let what = format!("{harness}, spare: {spare}");
            let mut baselines = baseline_of(harness, &input, spare);
            let (rebuilt, pass, _) = baselines
                .resolve_for_pass(harness, "s", delta(Some("k1"), "k2", refs()))
                .unwrap();
            assert_eq!(matches!(pass, PassInput::Decoded(_)), decoded, "{what}");
            assert_eq!(rebuilt, want, "{what}");
            assert_eq!(values_of(pass), want, "{what}");
            // A doubt still resyncs and forgets the session.
            baselines.remember(
                harness,
                "s",
                "k2".into(),
                rebuilt,
                Vec::<Value>::new(),
                None,
            );
            baselines.prepare_spare();
            assert!(matches!(
                baselines.resolve_for_pass(harness, "s", delta(Some("k1"), "k3", refs())),
                Err(Resync::StaleBase)
            ));
            assert!(baselines.is_empty());
        }
        // A new message OpenCode's codec refuses: the pass gets the values
        // (and decodes them itself, naming the message, as the one-shot does).
        let mut baselines = baseline_of("opencode", &input, true);
        let odd = json!({"no": "info"});
        let (rebuilt, pass, _) = baselines
            .resolve_for_pass(
                "opencode",
                "s",
                delta(Some("k1"), "k2", Some(vec![json!(0), odd.clone()])),
            )
            .unwrap();
        let PassInput::Values(values) = pass else {
            panic!("a message the codec refuses goes to the pass as JSON");
        };
        assert_eq!(values, vec![input[0].clone(), odd.clone()]);
        assert_eq!(rebuilt, values);
    }

    #[test]
    fn a_delta_is_rebuilt_from_the_base_input() {
        let mut baselines = Baselines::default();
        let input = vec![message("a", "one"), message("b", "two")];
        baselines.remember(
            "opencode",
            "s",
            "k1".into(),
            input.clone(),
            Vec::<Value>::new(),
            None,
        );
        let new = message("c", "three");
        let rebuilt = baselines
            .resolve(
                "opencode",
                "s",
                delta(
                    Some("k1"),
                    "k2",
                    Some(vec![json!(0), json!(1), new.clone()]),
                ),
            )
            .unwrap();
        assert_eq!(rebuilt, [input[0].clone(), input[1].clone(), new]);
        // A message named twice is there twice (moved once, then copied).
        baselines.remember(
            "opencode",
            "s",
            "k2".into(),
            input.clone(),
            Vec::<Value>::new(),
            None,
        );
        let twice = baselines
            .resolve(
                "opencode",
                "s",
                delta(Some("k2"), "k3", Some(vec![json!(1), json!(0), json!(1)])),
            )
            .unwrap();
        assert_eq!(
            twice,
            [input[1].clone(), input[0].clone(), input[1].clone()]
        );
    }

    #[test]
    fn every_doubt_is_a_resync_that_drops_the_baseline() {
        let input = vec![message("a", "one")];
        let fresh = || {
            let mut b = Baselines::default();
            b.remember(
                "opencode",
                "s",
                "k1".into(),
                input.clone(),
                Vec::<Value>::new(),
                None,
            );
            b
        };
        let cases: Vec<(Delta, Resync)> = vec![
            (
                delta(Some("k0"), "k2", Some(vec![json!(0)])),
                Resync::StaleBase,
            ),
            (
                Delta {
                    base_len: Some(2),
                    ..delta(Some("k1"), "k2", Some(vec![json!(0)]))
                },
                Resync::BaseLength,
            ),
            (
                delta(Some("k1"), "k2", Some(vec![json!(1)])),
                Resync::BadReference,
            ),
            (
                delta(Some("k1"), "k2", Some(vec![json!(-1)])),
                Resync::BadReference,
            ),
            (
                delta(Some("k1"), "k2", Some(vec![json!("a")])),
                Resync::BadReference,
            ),
        ];
        for (request, why) in cases {
            let mut baselines = fresh();
            assert_eq!(
                baselines.resolve("opencode", "s", request.clone()),
                Err(why),
                "{request:?}"
            );
            assert!(baselines.is_empty(), "{request:?} left its baseline");
        }
        // Another session, or another harness, has no baseline.
        let mut baselines = fresh();
        let ok = delta(Some("k1"), "k2", Some(vec![json!(0)]));
        assert_eq!(
            baselines.resolve("opencode", "t", ok.clone()),
            Err(Resync::UnknownSession)
        );
        assert_eq!(
            baselines.resolve("claude-code", "s", ok.clone()),
            Err(Resync::UnknownSession)
        );
        assert_eq!(baselines.resolve("opencode", "s", ok), Ok(input.clone()));
    }

    #[test]
    fn the_least_recently_used_session_goes_first() {
        let mut baselines = Baselines::new(2);
        for s in ["a", "b"] {
            baselines.remember(
                "opencode",
                s,
                "k".into(),
                Vec::new(),
                Vec::<Value>::new(),
                None,
            );
        }
        baselines.touch("opencode", "a");
        baselines.remember(
            "opencode",
            "c",
            "k".into(),
            Vec::new(),
            Vec::<Value>::new(),
            None,
        );
        assert!(baselines.output("opencode", "a").is_some());
        assert!(baselines.output("opencode", "b").is_none());
        assert!(baselines.output("opencode", "c").is_some());
    }

    #[test]
    fn the_answer_names_equal_messages_by_their_index() {
        let head = json!({"info": {"role": "user", "syntheticHead": true}, "parts": [{"type": "text", "text": "m0"}]});
        let previous = vec![
            head.clone(),
            message("a", "§1§ one"),
            message("b", "§2§ two"),
        ];
        let changed = message("b", "[dropped §2§]");
        let new = message("c", "§3§ three");
        let output = vec![head, message("a", "§1§ one"), changed.clone(), new.clone()];
        let (answer, now) = delta_of(&kept(&previous), output.clone(), &mut Vec::new()).unwrap();
        assert_eq!(answer, [json!(0), json!(1), changed.clone(), new.clone()]);
        // What the next baseline keeps is the output's own fingerprints.
        assert_eq!(now, kept(&output));
        // A new head (no id) is sent whole.
        let other_head = json!({"info": {"role": "user", "syntheticHead": true}, "parts": [{"type": "text", "text": "m0'"}]});
        assert_eq!(
            delta_of(&kept(&previous), vec![other_head.clone()], &mut Vec::new())
                .unwrap()
                .0,
            [other_head]
        );
        // Against that output, the next call names its messages there; a
        // message that moved is named where it is now, and one changed back
        // is sent whole again.
        let (answer, _) = delta_of(
            &now,
            vec![
                message("c", "§3§ three"),
                output[0].clone(),
                message("b", "§2§ two"),
            ],
            &mut Vec::new(),
        )
        .unwrap();
        assert_eq!(answer, [json!(3), json!(0), message("b", "§2§ two")]);
        // A message whose id repeats is matched against the first of them.
        let twice = vec![message("a", "x"), message("a", "y")];
        assert_eq!(
            delta_of(&kept(&twice), twice.clone(), &mut Vec::new())
                .unwrap()
                .0,
            [json!(0), message("a", "y")]
        );
    }

    #[test]
    fn key_order_counts_as_a_difference() {
        let a = json!({"x": 1, "y": 2});
        let b = json!({"y": 2, "x": 1});
        assert_eq!(a, b, "serde_json's == ignores the order");
        assert!(!same(&a, &b));
        assert_ne!(fingerprint(&a), fingerprint(&b));
        assert!(same(&json!([a.clone(), "s", 1.5]), &json!([a, "s", 1.5])));
    }

    #[test]
    fn fingerprints_tell_apart_what_serialises_apart() {
        // Pairs that differ in their bytes, many of them where a careless
        // encoding would feed the hash the same stream.
        let pairs = [
            (json!("1"), json!(1)),
            (json!(1), json!(1.0)),
            (json!(-1), json!(-1.0)),
            (json!(0.0), json!(-0.0)),
            (json!(u64::MAX), json!(-1)),
            (json!(null), json!(false)),
            (json!(true), json!(false)),
            (json!(""), json!(null)),
            (json!([]), json!({})),
            (json!([[]]), json!([[], []])),
            (json!(["ab"]), json!(["a", "b"])),
            (json!({"a": "b"}), json!({"ab": ""})),
            (json!({"a": ["b"]}), json!({"a": "b"})),
            (json!([{"a": 1}, 2]), json!([{"a": [1, 2]}])),
            (json!({"x": {"y": 1}}), json!({"x": {}, "y": 1})),
            (json!("§1§ one"), json!("§1§ one ")),
        ];
        for (a, b) in &pairs {
            assert_ne!(
                serde_json::to_string(a).unwrap(),
                serde_json::to_string(b).unwrap()
            );
            assert_ne!(fingerprint(a), fingerprint(b), "{a} and {b}");
        }
        // Equal bytes, equal fingerprints, whatever the values' history.
        let built = {
            let mut map = Map::new();
            map.insert("x".into(), json!([1, "two", {"three": 3.5}]));
            Value::Object(map)
        };
        let parsed: Value = serde_json::from_str(r#"{"x":[1,"two",{"three":3.5}]}"#).unwrap();
        assert_eq!(fingerprint(&built), fingerprint(&parsed));
    }

    #[test]
    fn numbers_are_kept_as_values_not_as_their_text() {
        // The canonical encoding hashes a number's value: that stands for its
        // bytes only while serde_json prints every number from its value
        // (no `arbitrary_precision`, which keeps the text it read).
        let read: Value = serde_json::from_str("[1.00, 1e2, 10]").unwrap();
        assert_eq!(serde_json::to_string(&read).unwrap(), "[1.0,100.0,10]");
    }

    #[test]
    fn a_delta_replays_what_the_base_pass_left_and_names_its_own_messages_changed() {
        use crate::render::{Rendering, Renderings};
        let input = vec![message("a", "one"), message("b", "two"), message("c", "3")];
        let mut baselines = Baselines::default();
        let rendering = |first| Rendering {
            key: 7,
            first,
            count: 1,
        };
        let renderings: Renderings = [("a", 0), ("b", 1), ("c", 2)]
            .into_iter()
            .map(|(id, at)| (Box::from(id), rendering(at)))
            .collect();
        // The pass left `a` and `c` unrendered: the spare takes them as they are.
        let unused = decode_all(vec![input[0].clone(), input[2].clone()]).unwrap();
        baselines.remember(
            "opencode",
            "s",
            "k1".into(),
            input.clone(),
            input.clone(),
            Some(ForNextPass {
                renderings: renderings.clone(),
                unused,
            }),
        );
        baselines.prepare_spare();
        let changed_b = message("b", "two, edited");
        let (rebuilt, pass, replay) = baselines
            .resolve_for_pass(
                "opencode",
                "s",
                delta(
                    Some("k1"),
                    "k2",
                    Some(vec![
                        json!(0),
                        changed_b.clone(),
                        json!(2),
                        message("d", "4"),
                    ]),
                ),
            )
            .unwrap();
        let want = vec![
            input[0].clone(),
            changed_b,
            input[2].clone(),
            message("d", "4"),
        ];
        assert_eq!(rebuilt, want);
        assert!(matches!(pass, PassInput::Decoded(_)));
        assert_eq!(values_of(pass), want);
        assert_eq!(replay.previous, renderings);
        assert_eq!(replay.previous_len, 3);
        let mut changed: Vec<&str> = replay.changed.iter().map(|id| &**id).collect();
        changed.sort_unstable();
        assert_eq!(changed, ["b", "d"]);
    }

    #[test]
    fn a_spare_from_messages_the_pass_left_is_the_input_decoded() {
        let input = vec![
            message("a", "one"),
            message("b", "two"),
            message("a", "again"),
        ];
        let all = |decoded: Vec<Message>| -> Vec<Value> {
            decoded.into_iter().map(Message::encode).collect()
        };
        // Left: `b` (taken), and `a`, whose id the input carries twice (not taken).
        let left = decode_all(vec![input[1].clone(), input[0].clone()]).unwrap();
        assert_eq!(all(decode_reusing(&input, left).unwrap()), input);
        assert_eq!(all(decode_reusing(&input, Vec::new()).unwrap()), input);
        // A message the codec refuses is named as decode_all names it.
        let odd = vec![message("a", "one"), json!({"no": "info"})];
        let left = decode_all(vec![odd[0].clone()]).unwrap();
        assert_eq!(
            decode_reusing(&odd, left).unwrap_err().to_string(),
            decode_all(odd.clone()).unwrap_err().to_string()
        );
    }

    #[test]
    fn a_whole_output_is_fingerprinted_while_the_process_waits() {
        let output = vec![message("a", "one")];
        let mut baselines = Baselines::default();
        baselines.remember(
            "opencode",
            "s",
            "k1".into(),
            Vec::new(),
            output.clone(),
            None,
        );
        baselines.prepare_spare();
        assert_eq!(baselines.output("opencode", "s"), Some(&kept(&output)[..]));
        // Or when the next request comes first.
        baselines.remember(
            "opencode",
            "t",
            "k1".into(),
            Vec::new(),
            output.clone(),
            None,
        );
        baselines.touch("opencode", "s");
        assert_eq!(baselines.output("opencode", "t"), Some(&kept(&output)[..]));
    }

    #[test]
    fn a_delta_reads_only_its_two_shapes() {
        let whole = Delta::from_value(json!({"key": "k1"})).unwrap();
        assert_eq!(whole, delta(None, "k1", None));
        let part =
            Delta::from_value(json!({"key": "k2", "base": "k1", "base_len": 3, "messages": [0]}))
                .unwrap();
        assert_eq!(part.base_len, Some(3));
        for bad in [
            json!([]),
            json!({}),
            json!({"key": ""}),
            json!({"key": "k", "base": "k1"}),
            json!({"key": "k", "messages": []}),
            json!({"key": "k", "base": 1, "messages": []}),
            json!({"key": "k", "base": "b", "messages": {}}),
            json!({"key": "k", "base": "b", "base_len": -1, "messages": []}),
        ] {
            assert!(Delta::from_value(bad.clone()).is_err(), "{bad}");
        }
    }
}

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

use serde_json::{Map, Value};

use crate::error::{Error, Result};

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

/// One session's baseline: the last call's input and output messages.
#[derive(Debug)]
struct Baseline {
    harness: String,
    session: String,
    key: String,
    input: Vec<Value>,
    output: Vec<Value>,
    /// A deep copy of `input`, made while the process waits for the next
    /// request ([`Baselines::prepare_spare`]): the next delta takes its pass
    /// input and its new baseline from the two without copying then.
    spare: Option<Vec<Value>>,
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

    /// [`Baselines::resolve`], plus a second, separate copy of the input
    /// (for the next baseline, while the pass consumes the first). The copy
    /// comes from the baseline's spare when it has one, so nothing is copied
    /// deeply but the delta's own messages.
    pub fn resolve_with_copy(
        &mut self,
        harness: &str,
        session: &str,
        delta: Delta,
    ) -> std::result::Result<(Vec<Value>, Vec<Value>), Resync> {
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
    ) -> std::result::Result<(Vec<Value>, Vec<Value>), Resync> {
        let spare = self
            .position(harness, session)
            .and_then(|at| self.entries.get_mut(at))
            .and_then(|base| base.spare.take());
        let refs: Option<Vec<Option<usize>>> = spare.as_ref().and_then(|_| {
            delta.messages.as_ref().map(|items| {
                items
                    .iter()
                    .map(|item| item.as_u64().and_then(|i| usize::try_from(i).ok()))
                    .collect()
            })
        });
        let input = self.rebuild(harness, session, delta)?;
        let (Some(spare), Some(refs)) = (spare, refs) else {
            let copy = input.clone();
            return Ok((input, copy));
        };
        // The spare is the base input's twin: take each referenced message
        // from it (a message referenced twice, or new, is copied).
        let mut spare: Vec<Option<Value>> = spare.into_iter().map(Some).collect();
        let copy = input
            .iter()
            .zip(refs)
            .map(|(message, at)| {
                at.and_then(|i| spare.get_mut(i).and_then(Option::take))
                    .unwrap_or_else(|| message.clone())
            })
            .collect();
        Ok((input, copy))
    }

    /// Copy the most recently used baseline's input, if it has no spare yet
    /// (see [`Baseline::spare`]); for the time between requests.
    pub fn prepare_spare(&mut self) {
        if let Some(base) = self.entries.last_mut()
            && base.spare.is_none()
            && !base.input.is_empty()
        {
            base.spare = Some(base.input.clone());
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

    /// The output messages of the session's baseline, if it has one.
    pub fn output(&self, harness: &str, session: &str) -> Option<&[Value]> {
        let at = self.position(harness, session)?;
        self.entries.get(at).map(|b| b.output.as_slice())
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
        output: Vec<Value>,
    ) -> Vec<Value> {
        let mut released = self.forget(harness, session);
        self.entries.push(Baseline {
            harness: harness.to_string(),
            session: session.to_string(),
            key,
            input,
            output,
            spare: None,
        });
        while self.entries.len() > self.cap {
            let dropped = self.entries.remove(0);
            released.extend(dropped.input);
            released.extend(dropped.output);
            released.extend(dropped.spare.unwrap_or_default());
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
                released.extend(dropped.output);
                released.extend(dropped.spare.unwrap_or_default());
                released
            }
            None => Vec::new(),
        }
    }
}

/// The answer's messages for `output` against the `previous` output: the
/// index of an equal message there (equal byte for byte once serialised:
/// same keys in the same order), else the message itself.
///
/// Messages are matched by `info.id`; the few without one (the synthetic
/// head and reminders) are compared with the previous ones without one.
pub fn delta_of(previous: &[Value], output: &[Value]) -> Vec<Value> {
    let mut by_id: std::collections::HashMap<&str, usize> =
        std::collections::HashMap::with_capacity(previous.len());
    let mut anonymous = Vec::new();
    for (index, message) in previous.iter().enumerate() {
        match message_id(message) {
            // The first of a repeated id wins; a later one is matched by content only if it is first.
            Some(id) => {
                by_id.entry(id).or_insert(index);
            }
            None => anonymous.push(index),
        }
    }
    output
        .iter()
        .map(|message| {
            let found = match message_id(message) {
                Some(id) => by_id
                    .get(id)
                    .copied()
                    .filter(|&i| previous.get(i).is_some_and(|p| same(p, message))),
                None => anonymous
                    .iter()
                    .copied()
                    .find(|&i| previous.get(i).is_some_and(|p| same(p, message))),
            };
            match found {
                Some(index) => Value::from(index),
                None => message.clone(),
            }
        })
        .collect()
}

fn message_id(message: &Value) -> Option<&str> {
    message.get("info")?.get("id")?.as_str()
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

    #[test]
    fn the_baselines_copy_is_the_input_with_or_without_a_spare() {
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
        for spare in [false, true] {
            let mut baselines = Baselines::default();
            baselines.remember("opencode", "s", "k1".into(), input.clone(), Vec::new());
            if spare {
                baselines.prepare_spare();
            }
            let (messages, copy) = baselines
                .resolve_with_copy("opencode", "s", delta(Some("k1"), "k2", refs()))
                .unwrap();
            assert_eq!(messages, want, "spare: {spare}");
            assert_eq!(copy, want, "spare: {spare}");
            // A doubt still resyncs and forgets the session.
            baselines.remember("opencode", "s", "k2".into(), copy, Vec::new());
            baselines.prepare_spare();
            assert_eq!(
                baselines.resolve_with_copy("opencode", "s", delta(Some("k1"), "k3", refs())),
                Err(Resync::StaleBase)
            );
            assert!(baselines.is_empty());
        }
    }

    #[test]
    fn a_delta_is_rebuilt_from_the_base_input() {
        let mut baselines = Baselines::default();
        let input = vec![message("a", "one"), message("b", "two")];
        baselines.remember("opencode", "s", "k1".into(), input.clone(), Vec::new());
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
        baselines.remember("opencode", "s", "k2".into(), input.clone(), Vec::new());
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
            b.remember("opencode", "s", "k1".into(), input.clone(), Vec::new());
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
            baselines.remember("opencode", s, "k".into(), Vec::new(), Vec::new());
        }
        baselines.touch("opencode", "a");
        baselines.remember("opencode", "c", "k".into(), Vec::new(), Vec::new());
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
        assert_eq!(
            delta_of(&previous, &output),
            [json!(0), json!(1), changed, new]
        );
        // A new head (no id) is sent whole.
        let other_head = json!({"info": {"role": "user", "syntheticHead": true}, "parts": [{"type": "text", "text": "m0'"}]});
        assert_eq!(
            delta_of(&previous, std::slice::from_ref(&other_head)),
            [other_head]
        );
    }

    #[test]
    fn key_order_counts_as_a_difference() {
        let a = json!({"x": 1, "y": 2});
        let b = json!({"y": 2, "x": 1});
        assert_eq!(a, b, "serde_json's == ignores the order");
        assert!(!same(&a, &b));
        assert!(same(&json!([a.clone(), "s", 1.5]), &json!([a, "s", 1.5])));
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

//! What a gateway pass keeps of each session between its calls, whatever
//! the wire (Anthropic Messages, and Codex's Responses, which keeps the
//! session's bookkeeping, usage and prompt but reads each request whole): the
//! previous request's bytes and what its codec read of them (`L`, the
//! codec's layout), each message's identity and fingerprint, the decoded
//! messages the pass did not render again, the pass's renderings, and the
//! output bytes of every message sent. With them a call costs what its new
//! messages cost: the bytes it repeats are compared, not read again.
//!
//! **Bounded.** At most [`KEPT_SESSIONS`] sessions, the least recently used
//! one forgotten first (its next call is read whole, the same answer), and
//! at most [`PENDING_CALLS`] calls waiting for their answer.
//!
//! **A panic poisons nothing.** A pass that panics while it holds the
//! memory or the store leaves their locks poisoned; [`lock_memory`] and
//! [`lock_store`] take them back: every session's work is forgotten (its
//! next call read whole, the same answer) and the store's open transaction
//! was rolled back as the panic unwound, so the next call of every session
//! goes through mc's pass again.

use std::sync::{Mutex, MutexGuard};

use rustc_hash::{FxHashMap, FxHashSet};

use mc_base::codec::Message;
use mc_base::codec::anthropic::Span;
use mc_base::domain::envelope::Usage;
use mc_base::store::Store;

use crate::calls::{Prompt, PromptPart};
use crate::render::ForNextPass;

/// Sessions kept in memory, least recently used dropped first (a dropped
/// one costs one whole decode and render, never a wrong answer).
pub const KEPT_SESSIONS: usize = 16;
/// Calls whose answer is still to come, remembered to learn from it.
pub const PENDING_CALLS: usize = 64;

/// What one session keeps between its calls; `L` is what the codec read of
/// the previous request (its spans), kept with the bytes it was read from.
pub struct Kept<L> {
    /// The previous request's body, as it came, and the codec's reading of it.
    pub body: Vec<u8>,
    pub layout: Option<L>,
    /// The previous request's message ids and byte fingerprints, by position.
    pub ids: Vec<String>,
    pub prints: Vec<u64>,
    /// Decoded messages the pass did not render again, by id.
    pub unused: FxHashMap<Box<str>, Message>,
    pub for_next: Option<ForNextPass>,
    /// The previous forwarded messages' bytes, and the input message each
    /// one is (by id), by output position.
    pub output: Vec<Vec<u8>>,
    pub origins: Vec<Option<Box<str>>>,
    /// When each assistant message was first seen (requests carry no times).
    pub seen: FxHashMap<String, i64>,
    /// The usage the provider reported for the session's last call.
    pub usage: Option<Usage>,
    /// The system prompt and tool set of the last call, as the record counted them.
    pub prompt: Prompt,
    /// The harness's context window number of the last call, where it sends
    /// one (Codex's `x-codex-window-id`, grown after its own compaction).
    pub window: Option<u64>,
    pub last_used: u64,
}

impl<L> Default for Kept<L> {
    fn default() -> Self {
        Kept {
            body: Vec::new(),
            layout: None,
            ids: Vec::new(),
            prints: Vec::new(),
            unused: FxHashMap::default(),
            for_next: None,
            output: Vec::new(),
            origins: Vec::new(),
            seen: FxHashMap::default(),
            usage: None,
            prompt: Prompt::default(),
            window: None,
            last_used: 0,
        }
    }
}

impl<L> Kept<L> {
    /// Forget everything but the usage, the window and the prompt the record
    /// counted (after a failed pass nothing else kept is trusted).
    pub fn reset(&mut self, clock: u64) {
        *self = Kept {
            usage: self.usage,
            prompt: std::mem::take(&mut self.prompt),
            window: self.window,
            last_used: clock,
            ..Kept::default()
        };
    }
}

/// The memory of a gateway pass, locked. After a panic of a pass that held
/// it, each session keeps only what [`Kept::reset`] keeps and when its
/// assistant messages were first seen: the rest may be half updated.
pub fn lock_memory<L>(memory: &Mutex<Memory<L>>) -> MutexGuard<'_, Memory<L>> {
    match memory.lock() {
        Ok(guard) => guard,
        Err(poisoned) => {
            let mut guard = poisoned.into_inner();
            guard.forget_work();
            memory.clear_poison();
            guard
        }
    }
}

/// The store of a gateway pass, locked. A panic of a pass that held it
/// unwound through its transaction, which rolled back: nothing of that pass
/// was written, and the store is as the last whole pass left it.
pub fn lock_store(store: &Mutex<Store>) -> MutexGuard<'_, Store> {
    match store.lock() {
        Ok(guard) => guard,
        Err(poisoned) => {
            store.clear_poison();
            poisoned.into_inner()
        }
    }
}

/// Which call an answer belongs to, without hashing the body again: its
/// length and the fingerprint of one span of it (the newest message, which
/// every call of a conversation changes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    len: usize,
    start: usize,
    end: usize,
    print: u64,
}

impl Mark {
    /// The mark of `body` by its bytes `start..end`, fingerprinted as `print`.
    pub fn new(body: &[u8], start: usize, end: usize, print: u64) -> Mark {
        Mark {
            len: body.len(),
            start,
            end,
            print,
        }
    }

    fn matches(&self, body: &[u8]) -> bool {
        body.len() == self.len
            && body
                .get(self.start..self.end)
                .is_some_and(|bytes| fingerprint(bytes) == self.print)
    }
}

/// A call the pass worked on, waiting for its answer.
struct Pending {
    mark: Mark,
    key: String,
    model: Option<String>,
    /// The pass's row of the per-call record, once the pass wrote it.
    call: Option<i64>,
}

/// The call an answer belongs to, as [`Memory::answered`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    pub key: String,
    pub model: Option<String>,
    /// Its row of the per-call record (none when the pass failed or wrote none).
    pub call: Option<i64>,
}

/// Every session's [`Kept`] and the calls waiting for their answer.
pub struct Memory<L> {
    pub sessions: FxHashMap<String, Kept<L>>,
    pending: Vec<Pending>,
    clock: u64,
}

impl<L> Default for Memory<L> {
    fn default() -> Self {
        Memory {
            sessions: FxHashMap::default(),
            pending: Vec::new(),
            clock: 0,
        }
    }
}

impl<L> Memory<L> {
    /// Forget every session's work (after a panic in a pass): each is read
    /// whole at its next call; its usage, prompt, window and first-seen
    /// times stay.
    fn forget_work(&mut self) {
        for kept in self.sessions.values_mut() {
            let seen = std::mem::take(&mut kept.seen);
            let clock = kept.last_used;
            kept.reset(clock);
            kept.seen = seen;
        }
    }

    /// Count a call of session `key` and make room for it (the least
    /// recently used session goes); its [`Kept`], stamped with the call's
    /// clock tick.
    pub fn admit(&mut self, key: &str) -> &mut Kept<L> {
        self.clock += 1;
        if !self.sessions.contains_key(key) && self.sessions.len() >= KEPT_SESSIONS {
            let oldest = self
                .sessions
                .iter()
                .min_by_key(|(k, s)| (s.last_used, (*k).clone()))
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.sessions.remove(&oldest);
            }
        }
        let kept = self.sessions.entry(key.to_string()).or_default();
        kept.last_used = self.clock;
        kept
    }

    /// Remember that the pass worked on the call `mark` names, of session
    /// `key` for `model`, to learn from its answer.
    pub fn expect_answer(&mut self, mark: Mark, key: &str, model: Option<String>) {
        self.pending
            .retain(|p| !(p.mark == mark && p.key.as_str() == key));
        if self.pending.len() >= PENDING_CALLS {
            self.pending.remove(0);
        }
        self.pending.push(Pending {
            mark,
            key: key.to_string(),
            model,
            call: None,
        });
    }

    /// The pass of session `key`'s newest expected call wrote row `call`.
    pub fn recorded(&mut self, key: &str, call: i64) {
        if let Some(p) = self.pending.iter_mut().rev().find(|p| p.key == key) {
            p.call = Some(call);
        }
    }

    /// The call of session `key` whose body is `body`, if the pass worked on
    /// it (it is then no longer waited for).
    pub fn answered(&mut self, key: &str, body: &[u8]) -> Option<Answered> {
        let at = self
            .pending
            .iter()
            .rposition(|p| p.key.as_str() == key && p.mark.matches(body))?;
        let pending = self.pending.remove(at);
        Some(Answered {
            key: pending.key,
            model: pending.model,
            call: pending.call,
        })
    }
}

/// The fingerprint of a message's bytes.
pub fn fingerprint(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// A request's system prompt and tool set (the spans of `body` they sit
/// in) for the per-call record: each counted only when its bytes are not
/// those of the session's previous call (`previous`).
pub fn prompt_of(
    body: &[u8],
    system: Option<Span>,
    tools: Option<Span>,
    previous: &Prompt,
) -> Prompt {
    let piece = |span: Option<Span>, old: &Option<PromptPart>| {
        let bytes = body.get(span?.start..span?.end)?;
        let print = format!("{:016x}", fingerprint(bytes));
        match old {
            Some(old) if old.print == print => Some(old.clone()),
            _ => Some(PromptPart::of_bytes(bytes)),
        }
    };
    Prompt {
        system: piece(system, &previous.system),
        tools: piece(tools, &previous.tools),
    }
}

/// A request's messages as a wire's codec reads them, for [`identify`].
pub trait Wire {
    fn len(&self) -> usize;
    /// Message `i`'s bytes as they came.
    fn item_bytes(&self, i: usize) -> &[u8];
    /// Its identity when it is new (stable while its bytes are).
    fn message_id(&self, i: usize) -> String;
    fn is_assistant(&self, i: usize) -> bool;
    /// Message `i` as mc's message `id` of session `key`, first seen at `seen_ms`.
    fn decode(&self, i: usize, id: &str, key: &str, seen_ms: Option<i64>) -> Message;
}

/// What a request's messages are, measured against the previous request.
pub struct Identified {
    pub ids: Vec<String>,
    pub prints: Vec<u64>,
    pub changed: FxHashSet<Box<str>>,
    pub messages: Vec<Message>,
}

/// Each message's identity (kept while its bytes are the same at the same
/// position), the decoded message (reused when unchanged), and the ids that
/// changed. The first `repeated` messages are known to be the previous
/// request's, byte for byte at the same place: their fingerprints are not
/// computed again.
pub fn identify<L, W: Wire>(
    wire: &W,
    repeated: usize,
    kept: &mut Kept<L>,
    key: &str,
    now_ms: i64,
) -> Identified {
    let n = wire.len();
    let mut ids = Vec::with_capacity(n);
    let mut prints = Vec::with_capacity(n);
    let mut changed: FxHashSet<Box<str>> = FxHashSet::default();
    let mut messages = Vec::with_capacity(n);
    for i in 0..n {
        let known = kept.prints.get(i).copied();
        let p = match known {
            Some(p) if i < repeated => p,
            _ => fingerprint(wire.item_bytes(i)),
        };
        let same = known == Some(p);
        let id = match kept.ids.get(i) {
            Some(id) if same => id.clone(),
            _ => wire.message_id(i),
        };
        let reused = if same {
            kept.unused.remove(id.as_str())
        } else {
            None
        };
        if !same {
            changed.insert(id.as_str().into());
        }
        let message = match reused {
            Some(message) => message,
            None => {
                let seen_ms = wire
                    .is_assistant(i)
                    .then(|| *kept.seen.entry(id.clone()).or_insert(now_ms));
                wire.decode(i, &id, key, seen_ms)
            }
        };
        messages.push(message);
        ids.push(id);
        prints.push(p);
    }
    Identified {
        ids,
        prints,
        changed,
        messages,
    }
}

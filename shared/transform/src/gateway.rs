//! mc's pass behind the gateway ([`mc_base::domain::gateway::Pass`]): a
//! Claude Code request (Anthropic Messages) becomes mc's messages
//! ([`mc_base::codec::anthropic`]), runs through the same pass as OpenCode's
//! and Pi's envelopes, and is spliced back into the body it came in.
//!
//! **Whose call.** The session is the `x-claude-code-session-id` header
//! (what the pinned Claude Code sends on every call, and what its hooks and
//! `mc-search mcp` name the session by). A request that also carries
//! `x-claude-code-agent-id` is a subagent's: it runs in mc's subagent mode as
//! a session of its own, `<session>/agent/<agent id>`. Everything else is a
//! side request and goes upstream untouched (see [`side_reason`]).
//!
//! **Work in proportion to what is new.** Each session keeps, in memory
//! ([`memory`]), its last request's bytes and spans, its messages'
//! identities and fingerprints, the decoded messages the pass did not render
//! again, the pass's renderings and the output bytes of every message sent.
//! A request that repeats the previous one's messages byte for byte up to a
//! new tail (Claude Code's usual call) is read from where they end
//! (`Request::parse_after`); a message whose bytes are the previous
//! request's is not fingerprinted or decoded again; one whose render is the
//! same again is the previous output's bytes (`render::render_replaying`),
//! so a defer pass repeats the previous forwarded request up to its new
//! tail. Anything else (a rewrite by Claude Code, a first call, a forgotten
//! session) is read whole, with the same answer.

use std::path::Path;
use std::sync::{Arc, Mutex};

use rustc_hash::{FxHashMap, FxHashSet};
use serde_json::Value;

use mc_base::codec::Message;
use mc_base::codec::anthropic::{self, Layout, Piece, Request};
use mc_base::config::TransformConfig;
use mc_base::domain::envelope::{Envelope, ModelInfo, Usage};
use mc_base::domain::gateway::{Answer, Api, Call, Forward, Pass};
use mc_base::error::{Error, Result};
use mc_base::store::{Store, StoreOptions};

use crate::calls::Prompt;
use crate::overflow::{self, OverflowRequest};
use crate::pass::{Resident, run_pass_on};
use crate::recall::Recall;
use crate::render::Replay;
use crate::report::PassReport;

pub(crate) mod memory;

use memory::{Identified, Kept, Mark, Memory, Wire, identify, lock_memory, lock_store};
pub use memory::{KEPT_SESSIONS, PENDING_CALLS};

/// The harness whose sessions the gateway's calls belong to.
pub const HARNESS: &str = "claude-code";
/// The prompt of Claude Code's own compaction-summary call (its `/compact`
/// and auto-compaction), as the pinned version words it.
pub const COMPACTION_PROMPT: &str =
    "Your task is to create a detailed summary of the conversation so far";
/// The window of Claude models when nothing better is known (an overflow
/// error teaches the real one).
pub const DEFAULT_WINDOW: u64 = 200_000;

impl Wire for Request<'_> {
    fn len(&self) -> usize {
        self.items.len()
    }

    fn item_bytes(&self, i: usize) -> &[u8] {
        Request::item_bytes(self, i)
    }

    fn message_id(&self, i: usize) -> String {
        Request::message_id(self, i)
    }

    fn is_assistant(&self, i: usize) -> bool {
        self.items.get(i).and_then(|it| it.role.as_deref()) == Some("assistant")
    }

    fn decode(&self, i: usize, id: &str, key: &str, seen_ms: Option<i64>) -> Message {
        Request::decode(self, i, id, key, seen_ms)
    }
}

/// The envelope a gateway call's pass runs on (its messages come decoded,
/// through [`Resident`]).
fn envelope_for(
    key: &str,
    model: Option<String>,
    usage: Option<Usage>,
    now_ms: i64,
    subagent: bool,
) -> Envelope {
    Envelope {
        harness: HARNESS.into(),
        session_id: Some(key.to_string()),
        project_dir: None,
        model: ModelInfo {
            provider: Some("anthropic".into()),
            id: model,
            context_limit: Some(DEFAULT_WINDOW),
            output_limit: None,
        },
        usage,
        now_ms: Some(now_ms),
        subagent,
        wait_for_fold: false,
        system: None,
        messages: Vec::new(),
    }
}

/// A forwarded message's tool results go when the message before it (their
/// calls) is no longer sent: the head covers it.
fn strip_orphaned_results(request: &Request<'_>, entries: &mut [(Option<usize>, Vec<u8>)]) {
    let present: FxHashSet<usize> = entries.iter().filter_map(|(i, _)| *i).collect();
    for (origin, bytes) in entries.iter_mut() {
        if let Some(i) = *origin
            && request.has_results(i)
            && (i == 0 || !present.contains(&(i - 1)))
            && let Some(stripped) = Request::without_results(bytes)
        {
            *bytes = stripped;
        }
    }
}

/// The bytes of every message the pass output (`values`: a message, or the
/// index of a previous output message replayed), each with the input
/// message it is, if any; the head's messages first, the breakpoint mc may
/// add on the last of them. A replayed message's bytes move out of
/// `previous` (a copy only if one is replayed twice).
fn sent_messages(
    request: &Request<'_>,
    values: Vec<Value>,
    previous: Vec<Vec<u8>>,
    previous_origins: &[Option<Box<str>>],
    index_of: &FxHashMap<&str, usize>,
) -> Result<Vec<(Option<usize>, Vec<u8>)>> {
    let mut previous: Vec<Option<Vec<u8>>> = previous.into_iter().map(Some).collect();
    // Where each replayed message went, for a second replay of it.
    let mut moved: FxHashMap<usize, usize> = FxHashMap::default();
    let mut entries: Vec<(Option<usize>, Vec<u8>)> = Vec::with_capacity(values.len());
    let mut pending_head: Vec<Message> = Vec::new();
    let head_cache = request.head_cache();
    let flush_head =
        |head: &mut Vec<Message>, entries: &mut Vec<(Option<usize>, Vec<u8>)>, first: bool| {
            let last = head.len().saturating_sub(1);
            for (k, m) in head.drain(..).enumerate() {
                let cache = (first && k == last)
                    .then_some(head_cache.as_ref())
                    .flatten();
                entries.push((None, anthropic::added(&m, cache)));
            }
        };
    let mut seen_original = false;
    for value in values {
        match value {
            Value::Number(n) => {
                let at = n
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|&n| n < previous.len())
                    .ok_or_else(|| Error::input("the pass replayed a message it never sent"))?;
                let bytes = match previous.get_mut(at).and_then(Option::take) {
                    Some(bytes) => bytes,
                    None => moved
                        .get(&at)
                        .and_then(|&e| entries.get(e))
                        .map(|(_, b)| b.clone())
                        .unwrap_or_default(),
                };
                let origin = previous_origins
                    .get(at)
                    .and_then(Option::as_deref)
                    .and_then(|id| index_of.get(id))
                    .copied();
                if origin.is_some() {
                    flush_head(&mut pending_head, &mut entries, !seen_original);
                    seen_original = true;
                }
                moved.entry(at).or_insert(entries.len());
                entries.push((origin, bytes));
            }
            value => {
                let message = Message::decode(value)?;
                match message.id().and_then(|id| index_of.get(id)).copied() {
                    Some(i) => {
                        flush_head(&mut pending_head, &mut entries, !seen_original);
                        seen_original = true;
                        entries.push((Some(i), request.encode(i, &message)));
                    }
                    None if !seen_original => pending_head.push(message),
                    None => entries.push((None, anthropic::added(&message, None))),
                }
            }
        }
    }
    flush_head(&mut pending_head, &mut entries, !seen_original);
    Ok(entries)
}

/// The body for a call whose pass failed: mc's last shape of the session
/// (the messages it forwarded last, Claude Code's breakpoint taken off any
/// whose input changed since: it moved to the newest message) followed by
/// the messages this request adds, as they came. Only when the request
/// extends the previous one (its first messages are the previous ones, by
/// identity) and the body keeps Anthropic's breakpoint rules; else `None`
/// (the original goes).
fn last_shape(
    request: &Request<'_>,
    kept: &Kept<Layout>,
    ids: &[String],
    prints: &[u64],
) -> Option<Vec<u8>> {
    let before = kept.ids.len();
    if kept.output.is_empty() || before == 0 || ids.get(..before)? != kept.ids.as_slice() {
        return None;
    }
    let position: FxHashMap<&str, usize> = kept
        .ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), i))
        .collect();
    let sent: Vec<std::borrow::Cow<'_, [u8]>> = kept
        .output
        .iter()
        .zip(&kept.origins)
        .map(|(bytes, origin)| {
            let moved = origin
                .as_deref()
                .and_then(|id| position.get(id))
                .is_some_and(|&i| prints.get(i) != kept.prints.get(i));
            match moved
                .then(|| Request::without_cache_control(bytes))
                .flatten()
            {
                Some(stripped) => std::borrow::Cow::Owned(stripped),
                None => std::borrow::Cow::Borrowed(bytes.as_slice()),
            }
        })
        .collect();
    let mut pieces: Vec<Piece<'_>> = sent.iter().map(|b| Piece::Bytes(b)).collect();
    pieces.extend((before..ids.len()).map(Piece::Original));
    let body = request.assemble(&pieces);
    let points = Request::parse(&body).ok()?.breakpoints();
    let ordered = points
        .iter()
        .zip(points.iter().skip(1))
        .all(|(a, b)| a.long || !b.long);
    (points.len() <= anthropic::MAX_BREAKPOINTS && ordered).then_some(body)
}

/// mc's transform as a gateway pass.
pub struct TransformPass {
    store: Mutex<Store>,
    config: TransformConfig,
    memory: Mutex<Memory<Layout>>,
    /// Read a request from where it stops repeating the previous one (off:
    /// every request read whole, the reference the reuse is tested against).
    reuse_bytes: bool,
    /// The search behind recall hints, when the caller brings one.
    recall: Option<Arc<dyn Recall>>,
    /// A test's bug: the next pass panics inside a store transaction that
    /// deleted the per-call record, holding the memory and the store.
    #[cfg(test)]
    panic_armed: std::sync::atomic::AtomicBool,
}

/// Why a call is not the main conversation's (or a subagent's), if it is not.
/// What the pinned Claude Code's requests let us rely on: its main loop and
/// its subagents send `tools` and name the session; title, quota and other
/// small-model calls send no tools; its compaction-summary call ends on
/// [`COMPACTION_PROMPT`] (then, at times, a system message); `count_tokens` and everything else is another path.
pub fn side_reason(call: &Call<'_>, request: &Request<'_>) -> Option<&'static str> {
    if call.api != Api::AnthropicMessages {
        return Some("not an Anthropic Messages call");
    }
    let path = call.path.split('?').next().unwrap_or_default();
    if path != "/v1/messages" {
        return Some("not POST /v1/messages (count_tokens or another endpoint)");
    }
    if call.session_id.is_none_or(str::is_empty) {
        return Some("no x-claude-code-session-id");
    }
    if request.tools == 0 {
        return Some("no tools: a title, quota or other side request");
    }
    if request.items.is_empty() {
        return Some("no messages");
    }
    // The last message that is not a mid-conversation system message.
    let last = (0..request.items.len())
        .rev()
        .find(|&i| request.items.get(i).and_then(|it| it.role.as_deref()) != Some("system"));
    if last
        .is_some_and(|i| anthropic::contains(request.item_bytes(i), COMPACTION_PROMPT.as_bytes()))
    {
        return Some("Claude Code's own compaction-summary call");
    }
    None
}

/// The session a call runs in, and whether it is a subagent's.
fn session_key(call: &Call<'_>) -> Option<(String, bool)> {
    let session = call.session_id.filter(|s| !s.is_empty())?;
    Some(match call.header("x-claude-code-agent-id") {
        Some(agent) if !agent.is_empty() => (format!("{session}/agent/{agent}"), true),
        _ => (session.to_string(), false),
    })
}

/// The request's system prompt and tool set for the per-call record: each
/// counted only when its bytes are not the previous call's.
fn prompt_of(request: &Request<'_>, previous: &Prompt) -> Prompt {
    memory::prompt_of(request.body, request.system, request.tools_span, previous)
}

impl TransformPass {
    /// Open (creating and migrating it if needed) mc's database at
    /// `store_path` and serve the gateway's calls with `config` (the user's
    /// `transform.*`). This is what `mc-transform gateway` hands its server:
    /// `Arc::new(TransformPass::open(&paths.db, &store_options, config)?)`.
    pub fn open(
        store_path: &Path,
        options: &StoreOptions,
        config: TransformConfig,
    ) -> Result<TransformPass> {
        Ok(TransformPass::new(
            Store::open(store_path, options)?,
            config,
        ))
    }

    /// The pass over an open store.
    pub fn new(store: Store, config: TransformConfig) -> TransformPass {
        TransformPass {
            store: Mutex::new(store),
            config,
            memory: Mutex::new(Memory::default()),
            reuse_bytes: true,
            recall: None,
            #[cfg(test)]
            panic_armed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Make the next pass panic (see `panic_armed`).
    #[cfg(test)]
    pub(crate) fn arm_panic(&self) {
        self.panic_armed
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    #[cfg(test)]
    fn panic_if_armed(&self, store: &mut Store) {
        if self
            .panic_armed
            .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            let _ = store.write(|tx| -> Result<()> {
                tx.execute_batch("DELETE FROM calls")
                    .map_err(|e| Error::Internal(e.to_string()))?;
                panic!("a bug in the pass (a test's)");
            });
        }
    }

    /// The same pass with `recall` searching for recall hints.
    pub fn with_recall(mut self, recall: Arc<dyn Recall>) -> TransformPass {
        self.recall = Some(recall);
        self
    }

    /// The same pass reading every request whole: what the reuse of a
    /// request's repeated bytes must answer exactly like.
    #[cfg(any(test, feature = "testkit"))]
    pub fn reading_whole(mut self) -> TransformPass {
        self.reuse_bytes = false;
        self
    }

    /// [`Pass::request`], with the pass's report when a pass ran.
    pub fn run(&self, call: &Call<'_>) -> Result<(Forward, Option<PassReport>)> {
        if call.api != Api::AnthropicMessages {
            return Ok((Forward::Untouched, None));
        }
        let Some((key, subagent)) = session_key(call) else {
            return Ok((Forward::Untouched, None));
        };
        let mut memory = lock_memory(&self.memory);
        // Read from where the session's previous request stops being repeated.
        let (request, repeated) = match memory.sessions.get(&key) {
            Some(Kept {
                body,
                layout: Some(layout),
                ..
            }) if self.reuse_bytes => Request::parse_after(call.body, body, layout)?,
            _ => (Request::parse(call.body)?, 0),
        };
        if side_reason(call, &request).is_some() {
            return Ok((Forward::Untouched, None));
        }
        let model = request.model.clone();
        // The newest message marks the call, to learn from its answer.
        if let Some(last) = request.items.last() {
            let print = memory::fingerprint(request.bytes(last.span));
            let mark = Mark::new(call.body, last.span.start, last.span.end, print);
            memory.expect_answer(mark, &key, model.clone());
        }
        let kept = memory.admit(&key);
        let clock = kept.last_used;

        // Identities and what changed since the previous request.
        let Identified {
            ids,
            prints,
            changed,
            messages,
        } = identify(&request, repeated, kept, &key, call.now_ms);
        // Claude Code rewrote its history from the first message on (its own
        // compaction): the pass may bring the head's fold in now.
        let history_rewritten = kept.ids.first().is_some_and(|old| ids.first() != Some(old));
        kept.body.clear();
        kept.body.extend_from_slice(call.body);
        kept.layout = Some(request.layout());
        let index_of: FxHashMap<&str, usize> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), i))
            .collect();
        let replay = Replay {
            previous: kept
                .for_next
                .take()
                .map(|f| f.renderings)
                .unwrap_or_default(),
            previous_len: kept.output.len(),
            changed,
        };
        let envelope = envelope_for(&key, model, kept.usage, call.now_ms, subagent);
        kept.prompt = prompt_of(&request, &kept.prompt);
        let resident = Resident {
            decoded: Some(messages),
            replay: Some(replay),
            prompt: Some(kept.prompt.clone()),
            history_rewritten,
            recall: self.recall.clone(),
            unencoded: false,
        };
        let output = {
            let mut store = lock_store(&self.store);
            #[cfg(test)]
            self.panic_if_armed(&mut store);
            run_pass_on(&mut store, envelope, resident, &self.config, call.now_ms)
        };
        let mut output = match output {
            Ok(output) => output,
            Err(e) => {
                // Never the raw history when mc's shape can go on: what the
                // pass sent last, and the new tail.
                let fallback = last_shape(&request, kept, &ids, &prints);
                // The replay went with the failed pass and the decoded
                // messages may be part used: the next call is read whole,
                // against what was last sent (kept, to extend again).
                kept.body.clear();
                kept.layout = None;
                kept.for_next = None;
                kept.unused.clear();
                if fallback.is_none() {
                    kept.reset(clock);
                }
                return match fallback {
                    Some(body) if body.as_slice() != call.body => {
                        Ok((Forward::Fallback(body), None))
                    }
                    _ => Err(e),
                };
            }
        };

        // Each output message's bytes and the input message it is, if any.
        let previous = std::mem::take(&mut kept.output);
        let previous_origins = std::mem::take(&mut kept.origins);
        let mut entries = sent_messages(
            &request,
            std::mem::take(&mut output.messages),
            previous,
            &previous_origins,
            &index_of,
        )?;

        // A result whose call is no longer sent (the head covers it) goes too.
        strip_orphaned_results(&request, &mut entries);
        let pieces: Vec<Piece<'_>> = entries
            .iter()
            .map(|(origin, bytes)| match origin {
                Some(i) if request.item_bytes(*i) == bytes.as_slice() => Piece::Original(*i),
                _ => Piece::Bytes(bytes),
            })
            .collect();
        let body = request.assemble(&pieces);
        kept.origins = entries
            .iter()
            .map(|(origin, _)| origin.and_then(|i| ids.get(i)).map(|id| id.as_str().into()))
            .collect();
        kept.output = entries.into_iter().map(|(_, b)| b).collect();
        kept.seen.retain(|id, _| index_of.contains_key(id.as_str()));
        kept.ids = ids;
        kept.prints = prints;
        kept.unused = output
            .for_next
            .as_mut()
            .map(|f| std::mem::take(&mut f.unused))
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| Some((Box::<str>::from(m.id()?), m)))
            .collect();
        kept.for_next = output.for_next;
        if let Some(id) = output.call {
            memory.recorded(&key, id);
        }
        let forward = if body == call.body {
            Forward::Untouched
        } else {
            Forward::Body(body)
        };
        Ok((forward, Some(output.pass)))
    }

    /// [`Pass::answered`], with what it learned: `true` when an overflow
    /// error was recognised.
    pub fn learn(&self, call: &Call<'_>, answer: &Answer<'_>) -> Result<bool> {
        let Some((key, _)) = session_key(call) else {
            return Ok(false);
        };
        let wire = (&self.memory, &self.store, HARNESS, "anthropic");
        learn_from_answer(wire, &key, call, answer)
    }
}

/// What every wire's gateway pass learns from the answer to one of its
/// calls (`key` its session): an error body (an HTTP error, or a stream
/// that said it failed under a 200) goes to the overflow report — `true`
/// when it was a context overflow, whose limit is learned; a 2xx answer's
/// usage is the session's usage on its next pass and goes onto the call's
/// row of the per-call record. An answer to no call the pass marked (a
/// side request) teaches nothing.
pub(crate) fn learn_from_answer<L>(
    (memory, store, harness, provider): (&Mutex<Memory<L>>, &Mutex<Store>, &str, &str),
    key: &str,
    call: &Call<'_>,
    answer: &Answer<'_>,
) -> Result<bool> {
    let mut memory = lock_memory(memory);
    let Some(answered) = memory.answered(key, call.body) else {
        return Ok(false);
    };
    if let Some(error) = answer.error_body {
        drop(memory);
        let session = (harness, answered.key.as_str(), answered.model);
        return learn_overflow(store, session, provider, error, call.now_ms);
    }
    let Some(usage) = answer.usage.filter(|_| (200..300).contains(&answer.status)) else {
        return Ok(false);
    };
    if let Some(kept) = memory.sessions.get_mut(&answered.key) {
        kept.usage = Some(usage);
    }
    drop(memory);
    if let Some(id) = answered.call {
        attach_usage(store, id, &usage)?;
    }
    Ok(false)
}

/// Write the usage of a call's own answer onto its row of the per-call
/// record (`calls::attach_usage`): what every wire's gateway pass does once
/// the answer has gone to the client.
pub(crate) fn attach_usage(store: &Mutex<Store>, call: i64, usage: &Usage) -> Result<()> {
    let mut store = lock_store(store);
    store.write(|tx| crate::calls::attach_usage(tx, call, usage).map(|_| ()))
}

/// Hand a failed call's error body to the overflow path (a context-overflow
/// error teaches the model's limit); `true` when it was recognised. What
/// every wire's gateway pass does with an upstream error.
pub(crate) fn learn_overflow(
    store: &Mutex<Store>,
    (harness, session, model): (&str, &str, Option<String>),
    provider: &str,
    error: &[u8],
    now_ms: i64,
) -> Result<bool> {
    let request = OverflowRequest {
        harness: harness.into(),
        session_id: Some(session.into()),
        model: ModelInfo {
            provider: Some(provider.into()),
            id: model,
            ..ModelInfo::default()
        },
        error: Value::String(String::from_utf8_lossy(error).into_owned()),
    };
    let mut store = lock_store(store);
    Ok(overflow::report(&mut store, &request, now_ms)?.recognised)
}

impl Pass for TransformPass {
    fn request(&self, call: &Call<'_>) -> Result<Forward> {
        self.run(call).map(|(forward, _)| forward)
    }

    fn answered(&self, call: &Call<'_>, answer: &Answer<'_>) {
        // Learning is best effort: the answer has already gone to the client.
        let _ = self.learn(call, answer);
    }
}

#[cfg(test)]
mod reuse_tests;
#[cfg(test)]
mod tests;

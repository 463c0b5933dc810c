//! mc's pass behind the gateway for Codex (OpenAI Responses): a request's
//! `input` becomes mc's messages ([`mc_base::codec::responses`]), runs
//! through the same pass as every other harness's, and is spliced back into
//! the body it came in. The Anthropic side is [`crate::gateway`]; the two
//! share the store, the pass, the overflow report and the per-session memory
//! ([`crate::gateway::memory`]: when assistant messages were first seen, the
//! last usage and window, the prompt the record counted, the calls waiting
//! for their answer) and, as there, the work in proportion to what is new:
//! a request that repeats the previous one's items byte for byte up to a
//! new tail (Codex resends its whole `input` every turn) is read from where
//! they end (`Request::parse_after`), a message whose bytes are the
//! previous request's is not decoded again, one whose render is the same
//! again is the previous output's bytes.
//!
//! **Whose call.** The session is the `session-id` header (`session_id` in
//! older builds): the thread id Codex names its rollout, its hooks' input and
//! its MCP calls by, so `ctx_reduce`, pins and the historian's compartments
//! meet the pass in one session. A request without it, Codex's own
//! compaction (`x-codex-turn-metadata` `request_kind` other than `turn`, or
//! no tools) and anything but `POST …/responses` go upstream untouched.
//!
//! **Codex's own compaction.** After it, Codex resends a new, shorter
//! history under a new window (`x-codex-window-id` `<thread>:<n>`, `n`
//! grown). mc notices it by that number and by the items: the messages mc
//! had tagged are gone, so the pass sees a smaller input; nothing of mc's is
//! rewritten for it — the compaction request itself is never changed, and
//! the turn after it is a miss at the provider anyway.
//!
//! **Usage and errors.** The answer's `response.completed` usage (input,
//! cached, output) goes onto the call's row of the per-call record and is
//! the session's usage on its next pass; an error body
//! (an HTTP error, or a stream's `response.failed`) goes to the overflow
//! report, which learns the window from a `context_length_exceeded`.

use std::path::Path;
use std::sync::{Arc, Mutex};

use rustc_hash::{FxHashMap, FxHashSet};
use serde_json::Value;

use mc_base::codec::Message;
use mc_base::codec::anthropic::Piece;
use mc_base::codec::responses::{self, Layout, Request};
use mc_base::config::TransformConfig;
use mc_base::domain::envelope::{Envelope, ModelInfo};
use mc_base::domain::gateway::{Answer, Api, Call, Forward, Pass};
use mc_base::error::{Error, Result};
use mc_base::store::{Store, StoreOptions};

use crate::gateway::learn_from_answer;
use crate::gateway::memory::{
    self, Identified, Kept, Mark, Memory, Wire, identify, lock_memory, lock_store,
};
use crate::pass::{Resident, run_pass_on};
use crate::recall::Recall;
use crate::render::Replay;
use crate::report::PassReport;

/// The harness whose sessions Codex's calls belong to.
pub const HARNESS: &str = "codex";
/// The window when nothing better is known (Codex's GPT-5 models; an
/// overflow error teaches the real one). Codex compacts at nine tenths of
/// it, above every threshold of mc's.
pub const DEFAULT_WINDOW: u64 = 272_000;

/// Why a call is not Codex's main conversation, if it is not.
pub fn side_reason(call: &Call<'_>, request: &Request<'_>) -> Option<&'static str> {
    if call.api != Api::OpenAiResponses {
        return Some("not an OpenAI Responses call");
    }
    let path = call.path.split('?').next().unwrap_or_default();
    if !path.ends_with("/responses") {
        return Some("not POST …/responses");
    }
    if call.session_id.is_none_or(str::is_empty) {
        return Some("no session-id header");
    }
    if let Some(kind) = request_kind(call)
        && kind != "turn"
    {
        return Some("Codex's own compaction or another side request");
    }
    if request.tools == 0 {
        return Some("no tools: Codex's compaction or another side request");
    }
    if request.groups.is_empty() {
        return Some("no input items");
    }
    None
}

/// `request_kind` of `x-codex-turn-metadata`.
fn request_kind(call: &Call<'_>) -> Option<String> {
    let meta: Value = serde_json::from_str(call.header("x-codex-turn-metadata")?).ok()?;
    meta.get("request_kind")?.as_str().map(str::to_string)
}

/// The window number of `x-codex-window-id` (`<thread>:<n>`).
fn window_number(call: &Call<'_>) -> Option<u64> {
    call.header("x-codex-window-id")?
        .rsplit_once(':')?
        .1
        .parse()
        .ok()
}

/// A request's messages (groups of items) as [`memory::identify`] reads
/// them, their identities computed once.
struct Groups<'r, 'a> {
    request: &'r Request<'a>,
    ids: Vec<String>,
}

impl Wire for Groups<'_, '_> {
    fn len(&self) -> usize {
        self.request.groups.len()
    }

    fn item_bytes(&self, g: usize) -> &[u8] {
        self.request.group_bytes(g)
    }

    fn message_id(&self, g: usize) -> String {
        self.ids.get(g).cloned().unwrap_or_default()
    }

    fn is_assistant(&self, g: usize) -> bool {
        self.request.role(g) == "assistant"
    }

    fn decode(&self, g: usize, id: &str, key: &str, seen_ms: Option<i64>) -> Message {
        self.request.decode(g, id, key, seen_ms)
    }
}

/// mc's transform as the gateway's pass for Codex.
pub struct ResponsesPass {
    store: Mutex<Store>,
    config: TransformConfig,
    memory: Mutex<Memory<Layout>>,
    /// Read a request from where it stops repeating the previous one (off:
    /// every request read whole, the reference the reuse is tested against).
    reuse_bytes: bool,
    /// The search behind recall hints, when the caller brings one.
    recall: Option<Arc<dyn Recall>>,
    /// The window mc measures Codex's calls against ([`ResponsesPass::with_window`]).
    window: u64,
}

impl ResponsesPass {
    /// Open (creating and migrating it if needed) mc's database.
    pub fn open(
        store_path: &Path,
        options: &StoreOptions,
        config: TransformConfig,
    ) -> Result<ResponsesPass> {
        Ok(ResponsesPass::new(
            Store::open(store_path, options)?,
            config,
        ))
    }

    pub fn new(store: Store, config: TransformConfig) -> ResponsesPass {
        ResponsesPass {
            store: Mutex::new(store),
            config,
            memory: Mutex::new(Memory::default()),
            reuse_bytes: true,
            recall: None,
            window: DEFAULT_WINDOW,
        }
    }

    /// The same pass measuring Codex's calls against `window` tokens, not
    /// [`DEFAULT_WINDOW`]: where Codex compacts its own history (its config's
    /// `model_auto_compact_token_limit` or nine tenths of its
    /// `model_context_window`), so mc's thresholds, and the relief that
    /// keeps the context small, come before Codex's own compaction would.
    pub fn with_window(mut self, window: u64) -> ResponsesPass {
        if window > 0 {
            self.window = window;
        }
        self
    }

    /// The same pass with `recall` searching for recall hints.
    pub fn with_recall(mut self, recall: Arc<dyn Recall>) -> ResponsesPass {
        self.recall = Some(recall);
        self
    }

    /// The same pass reading every request whole: what the reuse of a
    /// request's repeated bytes must answer exactly like.
    #[cfg(any(test, feature = "testkit"))]
    pub fn reading_whole(mut self) -> ResponsesPass {
        self.reuse_bytes = false;
        self
    }

    /// [`Pass::request`], with the pass's report when a pass ran.
    pub fn run(&self, call: &Call<'_>) -> Result<(Forward, Option<PassReport>)> {
        if call.api != Api::OpenAiResponses {
            return Ok((Forward::Untouched, None));
        }
        let Some(key) = call.session_id.filter(|s| !s.is_empty()) else {
            return Ok((Forward::Untouched, None));
        };
        let mut memory = lock_memory(&self.memory);
        // Read from where the session's previous request stops being repeated.
        let (request, repeated) = match memory.sessions.get(key) {
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
        // The newest item marks the call, to learn from its answer.
        if let Some(last) = request.items.last() {
            let print = memory::fingerprint(request.bytes(last.span));
            let mark = Mark::new(call.body, last.span.start, last.span.end, print);
            memory.expect_answer(mark, key, request.model.clone());
        }
        let kept = memory.admit(key);
        let clock = kept.last_used;
        let window = window_number(call);
        if window.is_some() && kept.window != window {
            // Codex compacted (or this is a new thread): the usage of the
            // old window says nothing about the new one.
            if kept.window.is_some() {
                kept.usage = None;
            }
            kept.window = window;
        }
        let wire = Groups {
            request: &request,
            ids: request.message_ids(),
        };
        let Identified {
            ids,
            prints,
            changed,
            messages,
        } = identify(&wire, repeated, kept, key, call.now_ms);
        kept.body.clear();
        kept.body.extend_from_slice(call.body);
        kept.layout = Some(request.layout());
        kept.prompt = memory::prompt_of(
            request.body,
            request.instructions,
            request.tools_span,
            &kept.prompt,
        );
        let replay = Replay {
            previous: kept
                .for_next
                .take()
                .map(|f| f.renderings)
                .unwrap_or_default(),
            previous_len: kept.output.len(),
            changed,
        };
        let envelope = envelope_for(key, &request, kept.usage, self.window, call.now_ms);
        let resident = Resident {
            decoded: Some(messages),
            replay: Some(replay),
            // Codex's `instructions` and `tools`.
            prompt: Some(kept.prompt.clone()),
            history_rewritten: false,
            recall: self.recall.clone(),
            unencoded: false,
        };
        let output = {
            let mut store = lock_store(&self.store);
            run_pass_on(&mut store, envelope, resident, &self.config, call.now_ms)
        };
        let mut output = match output {
            Ok(output) => output,
            Err(e) => {
                // The replay went with the failed pass: the next call is
                // read whole.
                kept.reset(clock);
                return Err(e);
            }
        };
        let previous = std::mem::take(&mut kept.output);
        let previous_origins = std::mem::take(&mut kept.origins);
        let index_of: FxHashMap<&str, usize> = ids
            .iter()
            .enumerate()
            .map(|(g, id)| (id.as_str(), g))
            .collect();
        let sent = Sent {
            previous,
            origins: &previous_origins,
            index_of: &index_of,
        };
        let entries = splice_output(&request, std::mem::take(&mut output.messages), sent)?;
        let body = assemble(&request, &entries);
        kept.origins = entries
            .iter()
            .map(|(origin, _)| origin.and_then(|g| ids.get(g)).map(|id| id.as_str().into()))
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
        // The pass's row, for the usage its answer will bring.
        if let Some(id) = output.call {
            memory.recorded(key, id);
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
        let Some(key) = call.session_id.filter(|s| !s.is_empty()) else {
            return Ok(false);
        };
        // A stream's `response.failed` is an error even under a 200.
        let wire = (&self.memory, &self.store, HARNESS, "openai");
        learn_from_answer(wire, key, call, answer)
    }
}

/// The envelope a Codex call's pass runs on (its messages come decoded,
/// through [`Resident`]).
fn envelope_for(
    key: &str,
    request: &Request<'_>,
    usage: Option<mc_base::domain::envelope::Usage>,
    window: u64,
    now_ms: i64,
) -> Envelope {
    Envelope {
        harness: HARNESS.into(),
        session_id: Some(key.to_string()),
        project_dir: None,
        model: ModelInfo {
            provider: Some("openai".into()),
            id: request.model.clone(),
            context_limit: Some(window),
            output_limit: None,
        },
        usage,
        now_ms: Some(now_ms),
        subagent: false,
        wait_for_fold: false,
        system: None,
        messages: Vec::new(),
    }
}

/// What the session sent last: each output message's bytes, and the input
/// message (by id) each one was; how this request's ids sit.
struct Sent<'k> {
    previous: Vec<Vec<u8>>,
    origins: &'k [Option<Box<str>>],
    index_of: &'k FxHashMap<&'k str, usize>,
}

/// The bytes of every message the pass output (a message, or the index of
/// a previous output message replayed), each with the input message it is,
/// if any, in the pass's order: each input message its items as the pass
/// left them (untouched ones byte for byte), each added one (the head) a
/// message item; an output whose call is no longer sent loses its outputs. A replayed message's bytes move out of
/// `sent.previous` (a copy only if one is replayed twice).
fn splice_output(
    request: &Request<'_>,
    output: Vec<Value>,
    sent: Sent<'_>,
) -> Result<Vec<(Option<usize>, Vec<u8>)>> {
    let mut previous: Vec<Option<Vec<u8>>> = sent.previous.into_iter().map(Some).collect();
    // Where each replayed message went, for a second replay of it.
    let mut moved: FxHashMap<usize, usize> = FxHashMap::default();
    let mut entries: Vec<(Option<usize>, Vec<u8>)> = Vec::with_capacity(output.len());
    for value in output {
        if let Value::Number(n) = &value {
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
            let origin = sent
                .origins
                .get(at)
                .and_then(Option::as_deref)
                .and_then(|id| sent.index_of.get(id))
                .copied();
            moved.entry(at).or_insert(entries.len());
            entries.push((origin, bytes));
            continue;
        }
        let message = Message::decode(value)?;
        match message.id().and_then(|id| sent.index_of.get(id)).copied() {
            Some(g) => entries.push((Some(g), request.encode(g, &message))),
            None => entries.push((None, responses::added(&message))),
        }
    }
    // An output group whose calls' group is not sent right before it.
    let present: FxHashSet<usize> = entries.iter().filter_map(|(g, _)| *g).collect();
    for (origin, bytes) in &mut entries {
        if let Some(g) = *origin
            && request.has_results(g)
            && (g == 0 || !present.contains(&(g - 1)))
            && let Some(stripped) = Request::without_results(bytes)
        {
            *bytes = stripped;
        }
    }
    Ok(entries)
}

/// The body the entries make (in the pass's order; an entry that is its
/// input message's bytes is taken from the body as it came). Codex's
/// leading developer (system) messages stay first: mc's head goes after
/// them, where Anthropic's system would be.
fn assemble(request: &Request<'_>, entries: &[(Option<usize>, Vec<u8>)]) -> Vec<u8> {
    let lead = request
        .groups
        .iter()
        .take_while(|g| g.side == responses::Side::Other)
        .count();
    let leading = |(g, _): &&(Option<usize>, Vec<u8>)| g.is_some_and(|g| g < lead);
    let pieces: Vec<Piece<'_>> = entries
        .iter()
        .filter(leading)
        .chain(entries.iter().filter(|e| !leading(e)))
        .map(|(origin, bytes)| match origin {
            Some(g) if request.group_bytes(*g) == bytes.as_slice() => Piece::Original(*g),
            _ => Piece::Bytes(bytes),
        })
        .collect();
    request.assemble(&pieces)
}

impl Pass for ResponsesPass {
    fn request(&self, call: &Call<'_>) -> Result<Forward> {
        self.run(call).map(|(forward, _)| forward)
    }

    fn answered(&self, call: &Call<'_>, answer: &Answer<'_>) {
        let _ = self.learn(call, answer);
    }
}

#[cfg(test)]
mod reuse_tests;
#[cfg(test)]
mod tests;

//! mc's pass behind the gateway for Codex (OpenAI Responses): a request's
//! `input` becomes mc's messages ([`mc_base::codec::responses`]), runs
//! through the same pass as every other harness's, and is spliced back into
//! the body it came in. The Anthropic side is [`crate::gateway`]; the two
//! share the store, the pass, the overflow report and the per-session memory
//! ([`crate::gateway::memory`]: when assistant messages were first seen, the
//! last usage and window, the prompt the record counted, the calls waiting
//! for their answer). Each request is read whole.
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
use mc_base::codec::responses::{self, Request};
use mc_base::config::TransformConfig;
use mc_base::domain::envelope::{Envelope, ModelInfo};
use mc_base::domain::gateway::{Answer, Api, Call, Forward, Pass};
use mc_base::error::{Error, Result};
use mc_base::store::{Store, StoreOptions};

use crate::gateway::memory::{self, Mark, Memory};
use crate::gateway::{attach_usage, learn_overflow};
use crate::pass::{Resident, run_pass_on};
use crate::recall::Recall;
use crate::report::PassReport;

/// The harness whose sessions Codex's calls belong to.
pub const HARNESS: &str = "codex";
/// The window when nothing better is known (Codex's GPT-5 models; an
/// overflow error teaches the real one).
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

/// mc's transform as the gateway's pass for Codex.
pub struct ResponsesPass {
    store: Mutex<Store>,
    config: TransformConfig,
    /// Nothing of the codec's reading is kept: the layout is `()`.
    memory: Mutex<Memory<()>>,
    /// The search behind recall hints, when the caller brings one.
    recall: Option<Arc<dyn Recall>>,
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
            recall: None,
        }
    }

    /// The same pass with `recall` searching for recall hints.
    pub fn with_recall(mut self, recall: Arc<dyn Recall>) -> ResponsesPass {
        self.recall = Some(recall);
        self
    }

    /// [`Pass::request`], with the pass's report when a pass ran.
    pub fn run(&self, call: &Call<'_>) -> Result<(Forward, Option<PassReport>)> {
        if call.api != Api::OpenAiResponses {
            return Ok((Forward::Untouched, None));
        }
        let request = Request::parse(call.body)?;
        if side_reason(call, &request).is_some() {
            return Ok((Forward::Untouched, None));
        }
        let Some(key) = call.session_id.filter(|s| !s.is_empty()) else {
            return Ok((Forward::Untouched, None));
        };
        let ids = request.message_ids();
        let (usage, prompt, messages) = {
            let mut memory = self.memory.lock().map_err(|_| {
                Error::input("the gateway pass's memory is poisoned; forward unchanged")
            })?;
            // The newest item marks the call, to learn from its answer.
            if let Some(last) = request.items.last() {
                let print = memory::fingerprint(request.bytes(last.span));
                let mark = Mark::new(call.body, last.span.start, last.span.end, print);
                memory.expect_answer(mark, key, request.model.clone());
            }
            let kept = memory.admit(key);
            let window = window_number(call);
            if window.is_some() && kept.window != window {
                // Codex compacted (or this is a new thread): the usage of the
                // old window says nothing about the new one.
                if kept.window.is_some() {
                    kept.usage = None;
                }
                kept.window = window;
            }
            let messages: Vec<Message> = ids
                .iter()
                .enumerate()
                .map(|(g, id)| {
                    let seen = (request.role(g) == "assistant")
                        .then(|| *kept.seen.entry(id.clone()).or_insert(call.now_ms));
                    request.decode(g, id, key, seen)
                })
                .collect();
            let live: FxHashSet<&str> = ids.iter().map(String::as_str).collect();
            kept.seen.retain(|id, _| live.contains(id.as_str()));
            kept.prompt = memory::prompt_of(
                request.body,
                request.instructions,
                request.tools_span,
                &kept.prompt,
            );
            (kept.usage, kept.prompt.clone(), messages)
        };
        let envelope = Envelope {
            harness: HARNESS.into(),
            session_id: Some(key.to_string()),
            project_dir: None,
            model: ModelInfo {
                provider: Some("openai".into()),
                id: request.model.clone(),
                context_limit: Some(DEFAULT_WINDOW),
                output_limit: None,
            },
            usage,
            now_ms: Some(call.now_ms),
            subagent: false,
            wait_for_fold: false,
            system: None,
            messages: Vec::new(),
        };
        let resident = Resident {
            decoded: Some(messages),
            replay: None,
            // Codex's `instructions` and `tools`.
            prompt: Some(prompt),
            history_rewritten: false,
            recall: self.recall.clone(),
            unencoded: false,
        };
        let output = {
            let mut store = self.store.lock().map_err(|_| {
                Error::input("the gateway pass's store is poisoned; forward unchanged")
            })?;
            run_pass_on(&mut store, envelope, resident, &self.config, call.now_ms)?
        };
        // The pass's row, for the usage its answer will bring.
        if let (Some(id), Ok(mut memory)) = (output.call, self.memory.lock()) {
            memory.recorded(key, id);
        }
        let body = splice_output(&request, &ids, output.messages)?;
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
        let mut memory = self
            .memory
            .lock()
            .map_err(|_| Error::input("the gateway pass's memory is poisoned"))?;
        let Some(answered) = memory.answered(key, call.body) else {
            return Ok(false);
        };
        let (key, model, row) = (answered.key, answered.model, answered.call);
        // A stream's `response.failed` is an error even under a 200.
        let Some(error) = answer.error_body else {
            if let Some(usage) = answer.usage
                && (200..300).contains(&answer.status)
            {
                if let Some(kept) = memory.sessions.get_mut(&key) {
                    kept.usage = Some(usage);
                }
                drop(memory);
                if let Some(id) = row {
                    attach_usage(&self.store, id, &usage)?;
                }
            }
            return Ok(false);
        };
        drop(memory);
        let session = (HARNESS, key.as_str(), model);
        learn_overflow(&self.store, session, "openai", error, call.now_ms)
    }
}

/// The body the pass's output messages make: each message that is an input
/// message is its items as the pass left them (untouched ones byte for
/// byte), each added one (the head) a message item after Codex's leading
/// developer messages; an output whose call is no longer sent goes.
fn splice_output(request: &Request<'_>, ids: &[String], output: Vec<Value>) -> Result<Vec<u8>> {
    let index_of: FxHashMap<&str, usize> = ids
        .iter()
        .enumerate()
        .map(|(g, id)| (id.as_str(), g))
        .collect();
    let mut entries: Vec<(Option<usize>, Vec<u8>)> = Vec::with_capacity(output.len());
    for value in output {
        if value.is_number() {
            return Err(Error::input(
                "the pass replayed a message it was not asked to",
            ));
        }
        let message = Message::decode(value)?;
        match message.id().and_then(|id| index_of.get(id)).copied() {
            Some(g) => entries.push((Some(g), request.encode(g, &message))),
            None => entries.push((None, responses::added(&message))),
        }
    }
    // Codex's leading developer (system) messages stay first: mc's head goes
    // after them, where Anthropic's system would be.
    let lead = request
        .groups
        .iter()
        .take_while(|g| g.side == responses::Side::Other)
        .count();
    let (mut first, rest): (Vec<_>, Vec<_>) = entries
        .into_iter()
        .partition(|(g, _)| g.is_some_and(|g| g < lead));
    first.extend(rest);
    let mut entries = first;
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
    let pieces: Vec<Piece<'_>> = entries
        .iter()
        .map(|(origin, bytes)| match origin {
            Some(g) if request.group_bytes(*g) == bytes.as_slice() => Piece::Original(*g),
            _ => Piece::Bytes(bytes),
        })
        .collect();
    Ok(request.assemble(&pieces))
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
mod tests;

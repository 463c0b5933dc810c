//! `mc-transform serve`: the commands, resident. One JSON request per line on
//! stdin, one answer per line on stdout, in order; each answer is exactly
//! what the one-shot command prints for the same input, because both call
//! the same function (`cmd/`). The database stays the source of truth:
//! the process keeps its connection open and, for the incremental envelope,
//! the last call's messages per session — never anything a pass reads.

use std::io::{BufWriter, Write};
use std::time::Instant;

use anyhow::{Context, anyhow};
use serde_json::{Map, Value};

use mc_cli::serve::{Line, Lines, code, error_answer, failure_answer};
use mc_cli::{Failure, GlobalArgs, Stores};
use mc_transform_core::fallback;
use mc_transform_core::incremental::{Baselines, Delta, Output, PassInput, delta_of};
use mc_transform_core::{ReduceRequest, Resident};

use crate::cmd::{overflow, pass, recount, reduce, status, system};
use crate::common::{self, Ctx};

/// Serve requests until stdin ends (exit 0) or the parent goes away.
pub fn run(global: &GlobalArgs, max_request_bytes: usize, sessions: usize) -> Result<(), Failure> {
    mc_cli::serve::exit_with_parent();
    // Open (and on a new database create and migrate) the store before the
    // first request arrives: an adapter starts this process while it
    // gathers its first call, so that work overlaps the caller's own.
    let mut stores = Stores::default();
    let warm = mc_cli::session_setup_in(
        &mut stores,
        common::NAME,
        global,
        None,
        None,
        mc_cli::Wait::Hook,
    );
    stores.keep_result(warm.store);
    let mut server = Server {
        global,
        stores,
        baselines: Baselines::new(sessions),
        max_request_bytes,
        garbage: Vec::new(),
    };
    let stdin = std::io::stdin();
    let mut lines = Lines::new(stdin.lock(), max_request_bytes);
    let stdout = std::io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    loop {
        let line = lines
            .next_line()
            .context("cannot read stdin")
            .map_err(Failure::runtime)?;
        let answer = match line {
            Line::End => return Ok(()),
            Line::Text(text) => server.answer(&text, Instant::now()),
            other => server.refuse(&other),
        };
        out.write_all(answer.as_bytes())
            .and_then(|()| out.write_all(b"\n"))
            .and_then(|()| out.flush())
            .context("cannot write stdout")
            .map_err(Failure::runtime)?;
        // Freeing a session's worth of messages takes about as long as the
        // pass that made them: it waits until the answer is out. (On this
        // thread: its allocator reuses the memory for the next request
        // instead of handing pages back and faulting them in again.)
        server.garbage.clear();
        // And copy the baseline the next delta of that session builds on.
        server.baselines.prepare_spare();
    }
}

struct Server<'a> {
    global: &'a GlobalArgs,
    stores: Stores,
    baselines: Baselines,
    max_request_bytes: usize,
    /// Values let go while answering, freed once the answer is written.
    garbage: Vec<Vec<Value>>,
}

/// Compact JSON text of an answer.
fn text(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| {
        text(&error_answer(
            code::INTERNAL_ERROR,
            format!("cannot write the answer: {e}"),
            Some(1),
            &[],
        ))
    })
}

impl Server<'_> {
    /// Free `values` after the answer is out.
    fn discard(&mut self, values: Vec<Value>) {
        self.garbage.push(values);
    }

    /// Drop a session's baseline.
    fn forget(&mut self, harness: &str, session: &str) {
        let released = self.baselines.forget(harness, session);
        self.discard(released);
    }

    fn refuse(&self, line: &Line) -> String {
        text(&match line {
            Line::TooLong(length) => error_answer(
                code::INVALID_REQUEST,
                format!(
                    "request of {length} bytes is larger than the {} bytes this process reads",
                    self.max_request_bytes
                ),
                Some(2),
                &[
                    "send this request to the one-shot command instead (mc-transform with the same input on stdin)".to_string(),
                ],
            ),
            _ => error_answer(
                code::PARSE_ERROR,
                "request is not UTF-8 text".into(),
                Some(2),
                &[],
            ),
        })
    }

    /// The answer line to one request line.
    fn answer(&mut self, line: &str, started: Instant) -> String {
        let value = match common::parse_json(line) {
            Ok(value) => value,
            Err(failure) => {
                return text(&error_answer(
                    code::PARSE_ERROR,
                    format!("{:#}", failure.error),
                    Some(2),
                    &[],
                ));
            }
        };
        let Value::Object(mut map) = value else {
            return text(&error_answer(
                code::INVALID_REQUEST,
                "a request is a JSON object: a command's input with its \"kind\"".into(),
                Some(2),
                &[],
            ));
        };
        let kind = match map.shift_remove("kind") {
            None | Some(Value::Null) => "pass".to_string(),
            Some(Value::String(kind)) => kind,
            Some(_) => {
                return text(&error_answer(
                    code::INVALID_REQUEST,
                    "\"kind\" must be a string".into(),
                    Some(2),
                    &[],
                ));
            }
        };
        let answered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.dispatch(&kind, map, line, started)
        }));
        match answered {
            Ok(Ok(answer)) => answer,
            Ok(Err(failure)) => text(&failure_answer(&failure)),
            Err(payload) => {
                // Whatever was half-done is dropped; the database rolled back.
                self.stores = Stores::default();
                self.baselines = Baselines::new(self.baselines_cap());
                let what = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "no message".into());
                text(&error_answer(
                    code::INTERNAL_ERROR,
                    format!("internal error (a bug in mc): {what}"),
                    Some(1),
                    &[],
                ))
            }
        }
    }

    fn baselines_cap(&self) -> usize {
        self.baselines.cap()
    }

    fn dispatch(
        &mut self,
        kind: &str,
        mut map: Map<String, Value>,
        line: &str,
        started: Instant,
    ) -> Result<String, Failure> {
        let mut ctx = Ctx {
            global: self.global,
            stores: &mut self.stores,
        };
        let value = match kind {
            "pass" => {
                return match map.shift_remove("incremental") {
                    None => pass::pass(
                        &mut ctx,
                        Value::Object(map),
                        Resident::default(),
                        || common::parse_json(line).unwrap_or(Value::Null),
                        started,
                    )
                    .map(|(answer, _)| {
                        let answer = answer.into_value();
                        let line = text(&answer);
                        self.discard(vec![answer]);
                        line
                    }),
                    Some(delta) => self.incremental(map, delta, started),
                };
            }
            "system" => system::system(&mut ctx, Value::Object(map))?,
            "reduce" => {
                let request = ReduceRequest::from_value(Value::Object(map))
                    .map_err(|e| Failure::input(e.into()))?;
                reduce::reduce(&mut ctx, &request)?
            }
            "status" => {
                let (harness, session) = harness_and_session(&map, "status")?;
                let calls = map
                    .get("calls")
                    .and_then(Value::as_u64)
                    .map_or(status::DEFAULT_CALLS, |n| {
                        usize::try_from(n).unwrap_or(usize::MAX)
                    });
                status::status(&mut ctx, &harness, &session, calls)?
            }
            "recount" => recount::recount(&mut ctx, Value::Object(map))?,
            "overflow" => overflow::overflow(&mut ctx, Value::Object(map))?,
            other => {
                return Ok(text(&error_answer(
                    code::METHOD_NOT_FOUND,
                    format!(
                        "unknown kind {other:?} (pass, system, reduce, status, recount, overflow)"
                    ),
                    Some(2),
                    &[],
                )));
            }
        };
        Ok(text(&value))
    }

    /// A pass request with `"incremental"`: a whole envelope that starts a
    /// baseline (answered exactly as the one-shot pass), or a delta against
    /// the session's baseline (answered with only what changed), or a resync.
    fn incremental(
        &mut self,
        mut map: Map<String, Value>,
        delta: Value,
        started: Instant,
    ) -> Result<String, Failure> {
        let (harness, session) = harness_and_session(&map, "an incremental pass")?;
        let delta = match Delta::from_value(delta) {
            Ok(delta) => delta,
            Err(e) => {
                self.forget(&harness, &session);
                return Err(Failure::input(e.into()));
            }
        };
        let key = delta.key.clone();
        let whole = delta.messages.is_none();
        // Should the pass fail: how the input joins the previous answer.
        let base = self.baselines.input(&harness, &session).unwrap_or(&[]);
        let base_len = base.len();
        let unchanged = delta
            .messages
            .as_deref()
            .map_or(0, |items| fallback::unchanged_prefix(items, base));
        // A whole envelope's pass renders everything and says how, for the
        // next delta's.
        let mut resident = Resident {
            decoded: None,
            replay: Some(Default::default()),
            prompt: None,
            history_rewritten: false,
            recall: None,
            unencoded: false,
        };
        let input = if whole {
            match map.get("messages") {
                Some(Value::Array(messages)) => messages.clone(),
                // Not an envelope: the pass says why.
                _ => Vec::new(),
            }
        } else {
            // `input` becomes the next baseline; the pass consumes its twin,
            // made from the spare while the process waited (OpenCode's
            // messages already decoded): nothing is copied or decoded now
            // but the delta's own messages. The messages it references
            // render again only if their render input changed.
            match self.baselines.resolve_for_pass(&harness, &session, delta) {
                Ok((input, pass, replay)) => {
                    resident.replay = Some(replay);
                    match pass {
                        PassInput::Values(messages) => {
                            map.insert("messages".into(), Value::Array(messages));
                        }
                        PassInput::Decoded(messages) => {
                            // The envelope must name its messages; the pass reads `decoded`.
                            map.insert("messages".into(), Value::Array(Vec::new()));
                            resident.decoded = Some(messages);
                        }
                    }
                    input
                }
                Err(resync) => return Ok(text(&resync.answer())),
            }
        };
        let system = map.get("system").cloned();
        let original = || {
            let mut doc = Map::new();
            doc.insert("messages".into(), Value::Array(input.clone()));
            if let Some(system) = system {
                doc.insert("system".into(), system);
            }
            Value::Object(doc)
        };
        let mut ctx = Ctx {
            global: self.global,
            stores: &mut self.stores,
        };
        let (answer, for_next) =
            match pass::pass(&mut ctx, Value::Object(map), resident, original, started) {
                Ok((answer, for_next)) => (answer.into_value(), for_next),
                Err(failure) => {
                    self.forget(&harness, &session);
                    return Err(failure);
                }
            };
        let Value::Object(mut doc) = answer else {
            self.forget(&harness, &session);
            return Err(Failure::runtime(anyhow!("the pass answered no object")));
        };
        let decision = doc
            .get("pass")
            .and_then(|p| p.get("decision"))
            .and_then(Value::as_str);
        let (waits, passthrough) = (decision == Some("wait"), decision == Some("passthrough"));
        if waits {
            // Nothing was kept, and the adapter keeps nothing either: the
            // pass after the fold is sent whole.
            self.forget(&harness, &session);
            if !whole {
                doc.shift_remove("messages");
            }
            return Ok(text_of(&doc));
        }
        let (line, output) = if whole {
            // Exactly the one-shot answer; its messages become the baseline.
            let line = text_of(&doc);
            match doc.shift_remove("messages") {
                Some(Value::Array(output)) => (line, Output::from(output)),
                _ => {
                    self.forget(&harness, &session);
                    return Ok(line);
                }
            }
        } else {
            let Some(Value::Array(mut output)) = doc.shift_remove("messages") else {
                self.forget(&harness, &session);
                return Err(Failure::runtime(anyhow!("the pass answered no messages")));
            };
            let previous = self.baselines.output(&harness, &session).unwrap_or(&[]);
            // A pass that could not run: mc's last answer for the session and
            // what is new since, rather than the raw history.
            if passthrough
                && let Some(shape) = fallback::last_shape(previous, base_len, unchanged, &input)
            {
                self.garbage.push(std::mem::replace(&mut output, shape));
                if let Some(Value::Object(report)) = doc.get_mut("pass") {
                    report.insert(
                        "fallback".into(),
                        serde_json::json!({"shape": "last_shape"}),
                    );
                }
            }
            // The baseline keeps the output's fingerprints, not the output.
            let mut spent = Vec::new();
            let Some((messages, kept)) = delta_of(previous, output, &mut spent) else {
                self.forget(&harness, &session);
                return Err(Failure::runtime(anyhow!(
                    "the pass named a message the previous answer does not have"
                )));
            };
            self.discard(spent);
            let mut answer = Map::new();
            answer.insert("messages".into(), Value::Array(messages));
            answer.extend(doc);
            (text_of(&answer), Output::from(kept))
        };
        let released = self
            .baselines
            .remember(&harness, &session, key, input, output, for_next);
        self.discard(released);
        Ok(line)
    }
}

fn text_of(map: &Map<String, Value>) -> String {
    serde_json::to_string(map).unwrap_or_else(|e| {
        text(&error_answer(
            code::INTERNAL_ERROR,
            format!("cannot write the answer: {e}"),
            Some(1),
            &[],
        ))
    })
}

/// `harness` (default `opencode`) and the required `session_id` of a request.
fn harness_and_session(map: &Map<String, Value>, what: &str) -> Result<(String, String), Failure> {
    let harness = match map.get("harness") {
        None | Some(Value::Null) => "opencode".to_string(),
        Some(Value::String(h)) => h.clone(),
        Some(_) => return Err(Failure::input(anyhow!("\"harness\" must be a string"))),
    };
    let session = map
        .get("session_id")
        .and_then(Value::as_str)
        .ok_or_else(|| Failure::input(anyhow!("{what} request needs \"session_id\"")))?
        .to_string();
    Ok((harness, session))
}

//! A fake OpenAI Responses API provider for the real Codex: `POST
//! {base_url}/responses`, answered as server-sent events on 127.0.0.1.
//! Replies follow a script (text or a function call, with the usage the test
//! wants reported); every request is recorded so tests can assert on the
//! exact bytes Codex sent.
//!
//! [`FakeResponses::strict`] makes it refuse what the real API refuses: an
//! output without its call, a call without its output, a reasoning item whose
//! `encrypted_content` is not byte for byte what it sent (400, recorded in
//! [`FakeResponses::refusals`]); its reasoning replies put a reasoning item
//! before each call, and it reports cached tokens by the common prefix of the
//! body with the previous one (a byte a quarter token), as a provider's
//! prefix cache would.
//!
//! Codex's own compaction request (its last user message asks for a "CONTEXT
//! CHECKPOINT COMPACTION", and `x-codex-turn-metadata` says
//! `request_kind: compaction`, observed with 0.169.0) gets a summary and does
//! not consume the script; anything but a POST gets a 404.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use serde_json::{Value, json};
use tiny_http::{Header, Response, Server};

/// The usage reported with a reply (tokens).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Usage {
    pub input: u64,
    pub cached: u64,
    pub output: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Text(String),
    /// A function call; an MCP tool is `namespace` `mcp__<server>` and its
    /// tool's `name` (as Codex 0.169.0 offers them).
    Call {
        namespace: Option<String>,
        name: String,
        arguments: Value,
    },
    /// An error answer: the status and the JSON body, as sent.
    Error {
        status: u16,
        body: String,
    },
}

#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// `x-codex-turn-metadata`, parsed (null when absent).
    pub turn_metadata: Value,
    pub body: Value,
    pub raw: Vec<u8>,
    /// Every header, lower-cased names, in the order received.
    pub headers: Vec<(String, String)>,
}

impl Recorded {
    /// The first value of a header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Codex's compaction request.
    pub fn is_compaction(&self) -> bool {
        self.turn_metadata["request_kind"] == "compaction"
            || self.body["input"]
                .as_array()
                .and_then(|items| items.last())
                .is_some_and(|last| last.to_string().contains("CONTEXT CHECKPOINT COMPACTION"))
    }

    /// A model turn (not a compaction).
    pub fn is_turn(&self) -> bool {
        self.method == "POST" && self.path.ends_with("/responses") && !self.is_compaction()
    }

    /// How many times `text` occurs in the body as sent (`text` should need
    /// no JSON escaping).
    pub fn count(&self, text: &str) -> usize {
        String::from_utf8_lossy(&self.raw).matches(text).count()
    }

    /// The outputs of the function calls this request carries, by call id.
    pub fn call_outputs(&self) -> Vec<(String, String)> {
        self.body["input"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|i| i["type"] == "function_call_output")
            .map(|i| {
                let text = match &i["output"] {
                    Value::String(s) => s.clone(),
                    Value::Array(items) => items
                        .iter()
                        .filter_map(|x| x["text"].as_str())
                        .collect::<Vec<_>>()
                        .join("\n"),
                    other => other.to_string(),
                };
                (i["call_id"].as_str().unwrap_or_default().to_string(), text)
            })
            .collect()
    }
}

#[derive(Default)]
struct State {
    script: VecDeque<(Reply, Option<Usage>)>,
    usage: Usage,
    requests: Vec<Recorded>,
    calls: u64,
    strict: bool,
    /// The `encrypted_content` of every reasoning item sent, by item id.
    reasoning: std::collections::BTreeMap<String, String>,
    refusals: Vec<String>,
    previous: Vec<u8>,
}

pub struct FakeResponses {
    state: Arc<Mutex<State>>,
    server: Arc<Server>,
    thread: Option<JoinHandle<()>>,
    port: u16,
}

impl FakeResponses {
    pub fn start() -> FakeResponses {
        let server = Arc::new(Server::http("127.0.0.1:0").expect("bind 127.0.0.1:0"));
        let port = server.server_addr().to_ip().expect("an IP listener").port();
        let state = Arc::new(Mutex::new(State {
            usage: Usage {
                input: 1000,
                cached: 0,
                output: 10,
            },
            ..State::default()
        }));
        let thread = {
            let (server, state) = (server.clone(), state.clone());
            std::thread::spawn(move || {
                for mut request in server.incoming_requests() {
                    let mut raw = Vec::new();
                    let _ = request.as_reader().read_to_end(&mut raw);
                    let turn_metadata = request
                        .headers()
                        .iter()
                        .find(|h| h.field.equiv("x-codex-turn-metadata"))
                        .and_then(|h| serde_json::from_str(h.value.as_str()).ok())
                        .unwrap_or(Value::Null);
                    let headers = request
                        .headers()
                        .iter()
                        .map(|h| {
                            (
                                h.field.as_str().as_str().to_ascii_lowercase(),
                                h.value.as_str().to_string(),
                            )
                        })
                        .collect();
                    let recorded = Recorded {
                        headers,
                        method: request.method().as_str().to_string(),
                        path: request.url().to_string(),
                        turn_metadata,
                        body: serde_json::from_slice(&raw).unwrap_or(Value::Null),
                        raw,
                    };
                    if recorded.method != "POST" {
                        state.lock().unwrap().requests.push(recorded);
                        let _ = request.respond(Response::empty(404));
                        continue;
                    }
                    let (status, kind, body) = respond(&state, recorded);
                    let header = Header::from_bytes("Content-Type", kind).unwrap();
                    let _ = request.respond(
                        Response::from_string(body)
                            .with_status_code(status)
                            .with_header(header),
                    );
                }
            })
        };
        FakeResponses {
            state,
            server,
            thread: Some(thread),
            port,
        }
    }

    /// The provider's `base_url` (Codex posts to `{base_url}/responses`).
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// Queue a reply for the next model turn; `usage` overrides the default.
    pub fn push(&self, reply: Reply, usage: Option<Usage>) {
        self.state.lock().unwrap().script.push_back((reply, usage));
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.lock().unwrap().requests.clone()
    }

    /// The model turns, oldest first (compactions left out).
    pub fn turns(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(Recorded::is_turn)
            .collect()
    }

    /// Refuse unpaired calls and changed reasoning, answer calls with a
    /// reasoning item first, report cached tokens by common prefix.
    pub fn strict(&self) {
        self.state.lock().unwrap().strict = true;
    }

    /// What a strict fake refused, and why.
    pub fn refusals(&self) -> Vec<String> {
        self.state.lock().unwrap().refusals.clone()
    }

    pub fn compactions(&self) -> usize {
        self.requests().iter().filter(|r| r.is_compaction()).count()
    }
}

impl Drop for FakeResponses {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Why the real API would refuse this input, if it would: an output with
/// no call before it, a call with no output after it, a reasoning item not
/// as it was sent.
fn refusal(
    input: &[Value],
    reasoning: &std::collections::BTreeMap<String, String>,
) -> Option<String> {
    let mut calls = Vec::new();
    for item in input {
        let call = item["call_id"].as_str().unwrap_or_default().to_string();
        match item["type"].as_str() {
            Some("function_call") => calls.push(call),
            Some("function_call_output") if !calls.contains(&call) => {
                return Some(format!(
                    "No tool call found for function call output with call_id {call}."
                ));
            }
            Some("reasoning") => {
                let id = item["id"].as_str().unwrap_or_default();
                if let Some(sent) = reasoning.get(id)
                    && item["encrypted_content"].as_str() != Some(sent.as_str())
                {
                    return Some(format!(
                        "The encrypted content for item {id} could not be verified."
                    ));
                }
            }
            _ => {}
        }
    }
    let outputs: Vec<&str> = input
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .filter_map(|i| i["call_id"].as_str())
        .collect();
    calls
        .iter()
        .find(|c| !outputs.contains(&c.as_str()))
        .map(|c| format!("No tool output found for function call {c}."))
}

/// The status, content type and body answering one request.
fn respond(state: &Mutex<State>, recorded: Recorded) -> (u16, &'static str, String) {
    let mut state = state.lock().unwrap();
    let strict = state.strict;
    if strict {
        let input = recorded.body["input"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if let Some(why) = refusal(&input, &state.reasoning) {
            state.refusals.push(why.clone());
            state.requests.push(recorded);
            let body = json!({"error": {"message": why, "type": "invalid_request_error",
                                        "param": "input", "code": null}});
            return (400, "application/json", body.to_string());
        }
    }
    if !recorded.is_compaction()
        && matches!(state.script.front(), Some((Reply::Error { .. }, _)))
        && let Some((Reply::Error { status, body }, _)) = state.script.pop_front()
    {
        state.requests.push(recorded);
        return (status, "application/json", body);
    }
    let prefix_usage = strict.then(|| {
        let common = state
            .previous
            .iter()
            .zip(&recorded.raw)
            .take_while(|(a, b)| a == b)
            .count();
        state.previous = recorded.raw.clone();
        Usage {
            input: recorded.raw.len() as u64 / 4,
            cached: common as u64 / 4,
            output: 10,
        }
    });
    (
        200,
        "text/event-stream",
        sse(&mut state, recorded, prefix_usage),
    )
}

/// The SSE body answering one request (`prefix_usage`: the usage a strict
/// fake reports instead of the script's).
fn sse(state: &mut State, recorded: Recorded, prefix_usage: Option<Usage>) -> String {
    state.calls += 1;
    let n = state.calls;
    let compaction = recorded.is_compaction();
    state.requests.push(recorded);
    let (reply, usage) = if compaction {
        (
            Reply::Text(format!("Compaction summary number {n}.")),
            Usage {
                input: 1000,
                cached: 0,
                output: 20,
            },
        )
    } else {
        // A scripted usage wins; else a strict fake's by common prefix.
        let usage = prefix_usage.unwrap_or(state.usage);
        state
            .script
            .pop_front()
            .map(|(r, u)| (r, u.unwrap_or(usage)))
            .unwrap_or((Reply::Text("ok".into()), usage))
    };
    let mut items = Vec::new();
    match reply {
        // Answered before the stream (see `respond`).
        Reply::Error { body, .. } => return body,
        Reply::Text(text) => items.push({
            json!({"type": "message", "role": "assistant", "id": format!("msg_fake_{n}"),
                                    "content": [{"type": "output_text", "text": text}]})
        }),
        Reply::Call {
            namespace,
            name,
            arguments,
        } => {
            let mut item = json!({"type": "function_call", "id": format!("fc_fake_{n}"),
                                  "call_id": format!("call_fake_{n}"), "name": name,
                                  "arguments": arguments.to_string()});
            if let Some(ns) = namespace {
                item["namespace"] = json!(ns);
            }
            if state.strict {
                let id = format!("rs_fake_{n}");
                let sealed = format!("gAAAAB{n}+sealed/reasoning=={n}");
                state.reasoning.insert(id.clone(), sealed.clone());
                items.push(json!({"type": "reasoning", "id": id,
                    "summary": [{"type": "summary_text", "text": "thinking"}],
                    "encrypted_content": sealed}));
            }
            items.push(item);
        }
    }
    let mut events =
        vec![json!({"type": "response.created", "response": {"id": format!("resp_fake_{n}")}})];
    for item in items {
        events.push(json!({"type": "response.output_item.done", "item": item}));
    }
    events.push(
        json!({"type": "response.completed", "response": {"id": format!("resp_fake_{n}"), "usage": {
            "input_tokens": usage.input, "input_tokens_details": {"cached_tokens": usage.cached},
            "output_tokens": usage.output, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage.input + usage.output}}}),
    );
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
        .collect()
}

//! A fake OpenAI Responses API provider for the real Codex: `POST
//! {base_url}/responses`, answered as server-sent events on 127.0.0.1.
//! Replies follow a script (text or a function call, with the usage the test
//! wants reported); every request is recorded so tests can assert on the
//! exact bytes Codex sent.
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
}

#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// `x-codex-turn-metadata`, parsed (null when absent).
    pub turn_metadata: Value,
    pub body: Value,
    pub raw: Vec<u8>,
}

impl Recorded {
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
                    let recorded = Recorded {
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
                    let body = respond(&state, recorded);
                    let header = Header::from_bytes("Content-Type", "text/event-stream").unwrap();
                    let _ = request.respond(Response::from_string(body).with_header(header));
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

/// The SSE body answering one request.
fn respond(state: &Mutex<State>, recorded: Recorded) -> String {
    let mut state = state.lock().unwrap();
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
        let usage = state.usage;
        state
            .script
            .pop_front()
            .map(|(r, u)| (r, u.unwrap_or(usage)))
            .unwrap_or((Reply::Text("ok".into()), usage))
    };
    let item = match reply {
        Reply::Text(text) => {
            json!({"type": "message", "role": "assistant", "id": format!("msg_fake_{n}"),
                                    "content": [{"type": "output_text", "text": text}]})
        }
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
            item
        }
    };
    let events = [
        json!({"type": "response.created", "response": {"id": format!("resp_fake_{n}")}}),
        json!({"type": "response.output_item.done", "item": item}),
        json!({"type": "response.completed", "response": {"id": format!("resp_fake_{n}"), "usage": {
            "input_tokens": usage.input, "input_tokens_details": {"cached_tokens": usage.cached},
            "output_tokens": usage.output, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage.input + usage.output}}}),
    ];
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
        .collect()
}

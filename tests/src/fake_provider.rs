//! A fake model provider for a real OpenCode or Claude Code: Anthropic's
//! Messages API with server-sent-event streaming, on 127.0.0.1. Replies follow
//! a script (text or a tool call, with the usage figures the test wants the
//! provider to report); every request is recorded so tests can assert on the
//! exact wire bytes.
//!
//! Requests without tools (OpenCode's title and summary agents, Claude Code's
//! small side calls) get a canned text reply and do not consume the script;
//! neither do token counts (`/v1/messages/count_tokens`, answered with the
//! request's bytes / 4) nor anything but a POST (Claude Code's `GET /`
//! reachability probe gets a 404). A request that asks for no stream
//! (`"stream": false`) gets the same reply as one JSON message. The
//! historian's prompt as OpenCode sends it for mc-historian (no tools, a
//! `<messages first=…>` chunk) gets a streamed `<history>` answer folding the
//! chunk, or the next reply of the historian script
//! ([`FakeProvider::push_historian`]).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use serde_json::{Value, json};
use tiny_http::{Header, Response, Server};

/// What the provider reports as the prompt's size for one reply.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Usage {
    pub input: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub output: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Text(String),
    /// A tool call; OpenCode runs the tool and calls the provider again.
    Tool {
        name: String,
        input: Value,
    },
    /// The request is rejected: this HTTP status and JSON body, not streamed
    /// (as Anthropic answers a prompt that is too long).
    Error {
        status: u16,
        body: Value,
    },
}

impl Reply {
    /// Anthropic's real answer to a prompt over the model's window: HTTP 400,
    /// `invalid_request_error`, "prompt is too long: N tokens > M maximum".
    pub fn prompt_too_long(tokens: u64, maximum: u64) -> Reply {
        Reply::Error {
            status: 400,
            body: json!({"type": "error", "error": {"type": "invalid_request_error",
                "message": format!("prompt is too long: {tokens} tokens > {maximum} maximum")}}),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Recorded {
    /// `POST`, `GET`, …
    pub method: String,
    pub path: String,
    pub body: Value,
    /// The raw request bytes, as OpenCode sent them.
    pub raw: Vec<u8>,
    /// The request's headers, names lower-case, in the order received.
    pub headers: Vec<(String, String)>,
}

impl Recorded {
    /// The first value of a header, by its lower-case name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// A request of the main agent (a Messages call that offers tools), as
    /// opposed to the harness's title or summary calls and token counts.
    pub fn is_agent(&self) -> bool {
        self.method == "POST"
            && !self.is_token_count()
            && !self.is_compaction()
            && self.body["tools"].as_array().is_some_and(|t| !t.is_empty())
    }

    /// Claude Code's compaction request: the conversation and, in its last
    /// user message, the instruction to summarise it (observed with 2.1.197).
    pub fn is_compaction(&self) -> bool {
        self.method == "POST"
            && self.body["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|m| m["role"] == "user")
                .any(|m| {
                    m.to_string()
                        .contains("create a detailed summary of the conversation so far")
                })
    }

    /// How many times `text` occurs in the request body as sent (JSON
    /// escaping aside: `text` should need none).
    pub fn count(&self, text: &str) -> usize {
        String::from_utf8_lossy(&self.raw).matches(text).count()
    }

    /// A `count_tokens` request (Claude Code measures prompts this way).
    pub fn is_token_count(&self) -> bool {
        self.path.contains("/count_tokens")
    }

    /// The `tool_use` blocks of the assistant messages this request carries,
    /// as (id, name, input).
    pub fn tool_uses(&self) -> Vec<(String, String, Value)> {
        let mut out = Vec::new();
        for message in self.body["messages"].as_array().into_iter().flatten() {
            for block in message["content"].as_array().into_iter().flatten() {
                if block["type"] == "tool_use" {
                    out.push((
                        block["id"].as_str().unwrap_or_default().to_string(),
                        block["name"].as_str().unwrap_or_default().to_string(),
                        block["input"].clone(),
                    ));
                }
            }
        }
        out
    }

    /// The `tool_result` blocks this request carries, as (tool_use_id, text
    /// of its content, is_error).
    pub fn tool_results(&self) -> Vec<ToolResult> {
        let mut out = Vec::new();
        for message in self.body["messages"].as_array().into_iter().flatten() {
            for block in message["content"].as_array().into_iter().flatten() {
                if block["type"] != "tool_result" {
                    continue;
                }
                let text = match &block["content"] {
                    Value::String(s) => s.clone(),
                    Value::Array(items) => items
                        .iter()
                        .filter_map(|i| i["text"].as_str())
                        .collect::<Vec<_>>()
                        .join(""),
                    Value::Null => String::new(),
                    other => other.to_string(),
                };
                out.push(ToolResult {
                    tool_use_id: block["tool_use_id"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    text,
                    is_error: block["is_error"].as_bool().unwrap_or(false),
                });
            }
        }
        out
    }

    /// mc-historian's prompt as OpenCode sends it: no tools, a chunk of messages.
    pub fn is_historian(&self) -> bool {
        !self.is_agent() && prompt_text(&self.body).contains("<messages first=\"")
    }
}

/// One `tool_result` block as the harness sent it back.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub tool_use_id: String,
    pub text: String,
    pub is_error: bool,
}

#[derive(Default)]
struct State {
    script: VecDeque<(Reply, Option<Usage>)>,
    usage: Usage,
    /// Report usage from the request itself (bytes / 4, the part shared with
    /// the previous agent request as cache reads) instead of `usage`.
    auto_usage: bool,
    /// Refuse what the real API refuses ([`refusal`]) with its 400.
    strict: bool,
    /// Start every agent reply with a signed thinking block ([`FakeProvider::think`]).
    thinking: bool,
    /// The thinking blocks replies carried: (signature, thinking), in order.
    issued: Vec<(String, String)>,
    requests: Vec<Recorded>,
    calls: u64,
    /// Requests for this model are the historian's: answered (not streamed)
    /// with one compartment over the chunk the prompt names.
    historian_model: Option<String>,
    /// Replies to the historian's prompts that come through OpenCode, in
    /// order; when empty, a fold of the chunk.
    historian_script: VecDeque<Reply>,
}

pub struct FakeProvider {
    state: Arc<Mutex<State>>,
    server: Arc<Server>,
    thread: Option<JoinHandle<()>>,
    port: u16,
}

impl FakeProvider {
    pub fn start() -> FakeProvider {
        let server = Arc::new(Server::http("127.0.0.1:0").expect("bind 127.0.0.1:0"));
        let port = server.server_addr().to_ip().expect("an IP listener").port();
        let state = Arc::new(Mutex::new(State {
            usage: Usage {
                input: 1000,
                output: 10,
                ..Usage::default()
            },
            ..State::default()
        }));
        let thread = {
            let (server, state) = (server.clone(), state.clone());
            std::thread::spawn(move || {
                for mut request in server.incoming_requests() {
                    let mut raw = Vec::new();
                    let _ = request.as_reader().read_to_end(&mut raw);
                    let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
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
                        method: request.method().as_str().to_string(),
                        path: request.url().to_string(),
                        body,
                        raw,
                        headers,
                    };
                    let json_header =
                        || Header::from_bytes("Content-Type", "application/json").unwrap();
                    if recorded.method != "POST" {
                        state.lock().unwrap().requests.push(recorded);
                        let _ = request.respond(Response::empty(404));
                        continue;
                    }
                    if recorded.is_token_count() {
                        let tokens = recorded.raw.len() / 4;
                        state.lock().unwrap().requests.push(recorded);
                        let answer = json!({"input_tokens": tokens});
                        let _ = request.respond(
                            Response::from_string(answer.to_string()).with_header(json_header()),
                        );
                        continue;
                    }
                    let historian = state.lock().unwrap().historian_model.clone();
                    if historian.is_some_and(|m| recorded.body["model"] == m.as_str()) {
                        let answer = historian_answer(&recorded.body, recorded.raw.len());
                        state.lock().unwrap().requests.push(recorded);
                        let header =
                            Header::from_bytes("Content-Type", "application/json").unwrap();
                        let _ = request
                            .respond(Response::from_string(answer.to_string()).with_header(header));
                        continue;
                    }
                    let streamed = recorded.body["stream"] != false;
                    let response = match respond(&state, recorded) {
                        Ok(answer) if streamed => Response::from_string(stream(&answer))
                            .with_header(
                                Header::from_bytes("Content-Type", "text/event-stream").unwrap(),
                            ),
                        Ok(answer) => Response::from_string(whole(&answer).to_string())
                            .with_header(json_header()),
                        Err((status, body)) => Response::from_string(body.to_string())
                            .with_status_code(status)
                            .with_header(
                                Header::from_bytes("Content-Type", "application/json").unwrap(),
                            ),
                    };
                    let _ = request.respond(response);
                }
            })
        };
        FakeProvider {
            state,
            server,
            thread: Some(thread),
            port,
        }
    }

    /// The base URL to configure as the provider's `baseURL`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// Queue a reply for the next agent request; `usage` overrides the current one.
    pub fn push(&self, reply: Reply, usage: Option<Usage>) {
        self.state.lock().unwrap().script.push_back((reply, usage));
    }

    /// The usage reported from now on (unless a scripted reply overrides it).
    pub fn set_usage(&self, usage: Usage) {
        self.state.lock().unwrap().usage = usage;
    }

    /// Report usage measured on each request: its bytes / 4, of which the
    /// prefix shared with the previous agent request counts as cache reads.
    pub fn auto_usage(&self) {
        self.state.lock().unwrap().auto_usage = true;
    }

    /// Refuse, as the real API does with a 400, a request whose `tool_use`
    /// has no `tool_result` right after it, with more than four
    /// `cache_control` blocks, or with a 1-hour one after a 5-minute one.
    /// Start every agent reply with a `thinking` block whose text and
    /// signature are new each time (non-ASCII text; `+`, `/` and `=` in the
    /// signature). Strict, a thinking block that comes back must carry a
    /// signature this provider issued, with the very text it was issued
    /// with, or the request gets the real API's 400.
    pub fn think(&self) {
        self.state.lock().unwrap().thinking = true;
    }

    /// The thinking blocks replies carried so far: (signature, thinking).
    pub fn issued_thinking(&self) -> Vec<(String, String)> {
        self.state.lock().unwrap().issued.clone()
    }

    pub fn strict(&self) {
        self.state.lock().unwrap().strict = true;
    }

    /// Play the historian for requests naming `model`: a non-streamed Messages
    /// answer folding the whole chunk (`<messages first=… last=…>`) into one
    /// compartment. Its usage, as for the historian's prompts through
    /// OpenCode, is measured: request and answer bytes / 4.
    pub fn play_historian(&self, model: &str) {
        self.state.lock().unwrap().historian_model = Some(model.to_string());
    }

    /// Queue a reply for the next historian prompt that comes through
    /// OpenCode (text that is not the format, a rejection); once the queue
    /// is empty, such prompts get a fold of their chunk again.
    pub fn push_historian(&self, reply: Reply) {
        self.state.lock().unwrap().historian_script.push_back(reply);
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.lock().unwrap().requests.clone()
    }

    /// The historian's prompts that came through OpenCode (streamed, no tools).
    pub fn historian_requests(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(Recorded::is_historian)
            .collect()
    }

    pub fn agent_requests(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(Recorded::is_agent)
            .collect()
    }
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The reply (with its usage and response number), or the status and body of
/// a scripted rejection.
fn respond(state: &Mutex<State>, recorded: Recorded) -> Result<Answer, (u16, Value)> {
    let mut state = state.lock().unwrap();
    state.calls += 1;
    let id = state.calls;
    if state.strict
        && let Some(refused) =
            refusal(&recorded.body).or_else(|| thinking_refusal(&recorded.body, &state.issued))
    {
        state.requests.push(recorded);
        return Err((400, refused));
    }
    let agent = recorded.is_agent();
    let historian = recorded.is_historian();
    if agent && state.auto_usage {
        let shared = state
            .requests
            .iter()
            .rev()
            .find(|r| r.is_agent())
            .map_or(0, |previous| common_prefix(&previous.raw, &recorded.raw));
        state.usage = Usage {
            input: ((recorded.raw.len() - shared) / 4) as u64,
            cache_read: (shared / 4) as u64,
            cache_write: 0,
            output: 50,
        };
    }
    let fold = historian.then(|| fold_text(&recorded.body));
    // The real API names the model it was asked for; Claude Code drops the
    // thinking of an answer from another model than the one it calls.
    let model = match recorded.body["model"].as_str() {
        Some(model) if state.thinking => model.to_string(),
        _ => "mock-sonnet".to_string(),
    };
    let request_tokens = (recorded.raw.len() / 4) as u64;
    let compaction = recorded.is_compaction();
    state.requests.push(recorded);
    let (reply, usage) = if let Some(fold) = fold {
        let reply = state
            .historian_script
            .pop_front()
            .unwrap_or(Reply::Text(fold));
        // The historian's usage as measured: its request and its answer, bytes / 4.
        let output = match &reply {
            Reply::Text(text) => (text.len() / 4) as u64,
            _ => 0,
        };
        (
            reply,
            Usage {
                input: request_tokens,
                output,
                ..Usage::default()
            },
        )
    } else if compaction {
        // A summary, without touching the script.
        (
            Reply::Text(format!(
                "<analysis>Read it.</analysis>\n<summary>Compaction number {id}.</summary>"
            )),
            Usage {
                input: 1000,
                output: 20,
                ..Usage::default()
            },
        )
    } else if agent {
        let usage = state.usage;
        state
            .script
            .pop_front()
            .map(|(r, u)| (r, u.unwrap_or(usage)))
            .unwrap_or((Reply::Text("ok".into()), usage))
    } else {
        (
            Reply::Text("Test session".into()),
            Usage {
                input: 100,
                output: 3,
                ..Usage::default()
            },
        )
    };
    if let Reply::Error { status, body } = reply {
        return Err((status, body));
    }
    let thinking = (state.thinking && agent && !compaction).then(|| {
        let issued = (
            format!("EqMBCkYIBxgCKkD{id:04}+mc/fake/signature/{id}=="),
            format!("Thinking\u{2026} about reply {id} \u{2014} \u{ab}ok\u{bb}, \"quoted\"."),
        );
        state.issued.push(issued.clone());
        issued
    });
    Ok(Answer {
        reply,
        usage,
        id,
        thinking,
        model,
    })
}

/// What one Messages call is answered with.
struct Answer {
    reply: Reply,
    usage: Usage,
    id: u64,
    /// A thinking block first: (signature, thinking).
    thinking: Option<(String, String)>,
    /// The model the answer names.
    model: String,
}

/// The real API's 400 for a thinking block that did not come back as it was
/// issued (its signature unknown, or its text changed), or `None`.
pub fn thinking_refusal(body: &Value, issued: &[(String, String)]) -> Option<Value> {
    let messages = body["messages"].as_array()?;
    for (i, message) in messages.iter().enumerate() {
        let Some(blocks) = message["content"].as_array() else {
            continue;
        };
        for (j, block) in blocks.iter().enumerate() {
            if block["type"] != "thinking" {
                continue;
            }
            let signature = block["signature"].as_str().unwrap_or_default();
            let text = block["thinking"].as_str().unwrap_or_default();
            if !issued.iter().any(|(s, t)| s == signature && t == text) {
                return Some(
                    json!({"type": "error", "error": {"type": "invalid_request_error",
                    "message": format!("messages.{i}.content.{j}: Invalid `signature` in `thinking` block")}}),
                );
            }
        }
    }
    None
}

/// The real API's 400 body for a Messages request it refuses (the wording
/// it answers with), or `None` for one it takes.
pub fn refusal(body: &Value) -> Option<Value> {
    let error = |message: String| {
        Some(
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}}),
        )
    };
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let blocks = |message: &Value| message["content"].as_array().cloned().unwrap_or_default();
    for (i, message) in messages.iter().enumerate() {
        if message["role"] != "assistant" {
            continue;
        }
        let uses: Vec<String> = blocks(message)
            .iter()
            .filter(|b| b["type"] == "tool_use")
            .filter_map(|b| b["id"].as_str().map(str::to_string))
            .collect();
        let answered: Vec<String> = messages
            .get(i + 1)
            .map(|next| {
                blocks(next)
                    .iter()
                    .filter(|b| b["type"] == "tool_result")
                    .filter_map(|b| b["tool_use_id"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let missing: Vec<&str> = uses
            .iter()
            .filter(|id| !answered.contains(id))
            .map(String::as_str)
            .collect();
        // The last message may be an open call only when nothing follows it.
        if !missing.is_empty() && i + 1 < messages.len() {
            return error(format!(
                "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. \
                 Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                missing.join(", ")
            ));
        }
    }
    // Breakpoints, in the order the API reads them: tools, system, messages.
    let mut breakpoints: Vec<(String, bool)> = Vec::new();
    let mut note = |path: String, block: &Value| {
        if let Some(control) = block.get("cache_control") {
            breakpoints.push((format!("{path}.cache_control.ttl"), control["ttl"] == "1h"));
        }
    };
    for (i, tool) in body["tools"].as_array().into_iter().flatten().enumerate() {
        note(format!("tools.{i}"), tool);
    }
    for (i, block) in body["system"].as_array().into_iter().flatten().enumerate() {
        note(format!("system.{i}"), block);
    }
    for (i, message) in messages.iter().enumerate() {
        for (j, block) in blocks(message).iter().enumerate() {
            note(format!("messages.{i}.content.{j}"), block);
        }
    }
    if breakpoints.len() > 4 {
        return error(format!(
            "A maximum of 4 blocks with cache_control may be provided. Found {}.",
            breakpoints.len()
        ));
    }
    let mut seen_short = false;
    for (path, long) in &breakpoints {
        if *long && seen_short {
            return error(format!(
                "{path}: a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block. \
                 Note that blocks are processed in the following order: tools, system, messages."
            ));
        }
        seen_short |= !long;
    }
    None
}

/// One Messages API response, not streamed.
fn whole(answer: &Answer) -> Value {
    let (reply, usage, id) = (&answer.reply, answer.usage, answer.id);
    let (mut content, stop) = match reply {
        Reply::Text(text) => (json!([{"type": "text", "text": text}]), "end_turn"),
        Reply::Tool { name, input } => (
            json!([{"type": "tool_use", "id": format!("toolu_fake_{id}"), "name": name, "input": input}]),
            "tool_use",
        ),
        Reply::Error { .. } => unreachable!("a rejection is not a message"),
    };
    if let (Some((signature, thinking)), Some(blocks)) = (&answer.thinking, content.as_array_mut())
    {
        blocks.insert(
            0,
            json!({"type": "thinking", "thinking": thinking, "signature": signature}),
        );
    }
    json!({"id": format!("msg_fake_{id}"), "type": "message", "role": "assistant",
           "model": answer.model, "content": content, "stop_reason": stop, "stop_sequence": null,
           "usage": {"input_tokens": usage.input, "output_tokens": usage.output,
                     "cache_read_input_tokens": usage.cache_read,
                     "cache_creation_input_tokens": usage.cache_write}})
}

/// The SSE body of one streamed Messages API response.
fn stream(answer: &Answer) -> String {
    let (reply, usage, id) = (&answer.reply, answer.usage, answer.id);
    // The reply's block comes after the thinking block, when there is one.
    let at = u64::from(answer.thinking.is_some());
    let mut events = vec![(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": format!("msg_fake_{id}"), "type": "message", "role": "assistant",
            "model": answer.model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": usage.input, "output_tokens": 1,
                      "cache_read_input_tokens": usage.cache_read,
                      "cache_creation_input_tokens": usage.cache_write}}}),
    )];
    if let Some((signature, thinking)) = &answer.thinking {
        events.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        ));
        events.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "thinking_delta", "thinking": thinking}}),
        ));
        events.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "signature_delta", "signature": signature}}),
        ));
        events.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ));
    }
    let stop = match reply {
        Reply::Text(text) => {
            events.push((
                "content_block_start",
                json!({"type": "content_block_start", "index": at,
                "content_block": {"type": "text", "text": ""}}),
            ));
            events.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": at,
                "delta": {"type": "text_delta", "text": text}}),
            ));
            "end_turn"
        }
        Reply::Tool { name, input } => {
            events.push(("content_block_start", json!({"type": "content_block_start", "index": at,
                "content_block": {"type": "tool_use", "id": format!("toolu_fake_{id}"), "name": name, "input": {}}})));
            events.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": at,
                "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
            ));
            "tool_use"
        }
        Reply::Error { .. } => unreachable!("a rejection is not streamed"),
    };
    events.push((
        "content_block_stop",
        json!({"type": "content_block_stop", "index": at}),
    ));
    events.push(("message_delta", json!({"type": "message_delta",
        "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": usage.output}})));
    events.push(("message_stop", json!({"type": "message_stop"})));
    events
        .into_iter()
        .map(|(event, data)| format!("event: {event}\ndata: {data}\n\n"))
        .collect()
}

/// Length of the longest common prefix of two byte strings.
pub fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The text of a request's messages, concatenated.
fn prompt_text(body: &Value) -> String {
    let mut prompt = String::new();
    for message in body["messages"].as_array().into_iter().flatten() {
        match &message["content"] {
            Value::String(text) => prompt.push_str(text),
            Value::Array(blocks) => blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .for_each(|t| prompt.push_str(t)),
            _ => {}
        }
    }
    prompt
}

/// A Messages API answer (not streamed) folding the chunk the historian's
/// prompt names into one compartment.
fn historian_answer(body: &Value, request_bytes: usize) -> Value {
    let text = fold_text(body);
    json!({"id": "msg_fake_historian", "type": "message", "role": "assistant", "model": body["model"],
           "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": null,
           "usage": {"input_tokens": request_bytes / 4, "output_tokens": text.len() / 4}})
}

/// A `<history>` document folding the chunk the prompt names (`<messages
/// first=… last=…>`) into one compartment.
fn fold_text(body: &Value) -> String {
    let prompt = prompt_text(body);
    let attr = |name: &str| -> Option<i64> {
        let rest = &prompt[prompt.find("<messages first=")?..];
        let key = format!("{name}=\"");
        let rest = &rest[rest.find(&key)? + key.len()..];
        rest[..rest.find('"')?].parse().ok()
    };
    let (first, last) = (attr("first").unwrap_or(1), attr("last").unwrap_or(1));
    format!(
        "<history>\n<compartment start=\"{first}\" end=\"{last}\" importance=\"60\" episode=\"feature\">\n\
         <title>Folded messages {first}-{last}</title>\n<p1>The user asked for reads of the library; \
         the agent read it.</p1>\n<p2>Reads of the library.</p2>\n<p3>Library reads.</p3>\n\
         <p4>Reads</p4>\n</compartment>\n<facts>\n</facts>\n<unprocessed_from>{}</unprocessed_from>\n</history>",
        last + 1
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn captured(name: &str) -> Value {
        let path = format!(
            "{}/testdata/claude-code/{name}.body.json",
            env!("CARGO_MANIFEST_DIR")
        );
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    fn message(refused: Option<Value>) -> String {
        refused
            .map(|r| r["error"]["message"].as_str().unwrap().to_string())
            .unwrap_or_default()
    }

    #[test]
    fn the_real_claude_code_s_requests_are_taken() {
        for name in [
            "main-turn-1-tools",
            "main-turn-1-tool-result",
            "follow-up-resumed",
            "subagent-first",
            "oauth-main-turn",
            "title-side-request",
        ] {
            assert_eq!(refusal(&captured(name)), None, "{name}");
        }
    }

    #[test]
    fn a_tool_use_without_its_result_is_refused_as_the_api_does() {
        let mut body = captured("main-turn-1-tool-result");
        let id = body["messages"][2]["content"][0]["id"]
            .as_str()
            .unwrap()
            .to_string();
        body["messages"][3]["content"][0]["type"] = json!("text");
        body["messages"][3]["content"][0]["text"] = json!("no result");
        let text = message(refusal(&body));
        assert!(text.starts_with(&format!("messages.2: `tool_use` ids were found without `tool_result` blocks immediately after: {id}.")), "{text}");
    }

    #[test]
    fn breakpoints_over_four_or_out_of_ttl_order_are_refused() {
        let mut body = captured("main-turn-1-tools");
        body["tools"][0]["cache_control"] = json!({"type": "ephemeral"});
        body["tools"][1]["cache_control"] = json!({"type": "ephemeral"});
        assert_eq!(
            message(refusal(&body)),
            "A maximum of 4 blocks with cache_control may be provided. Found 5."
        );
        let mut body = captured("main-turn-1-tools");
        body["system"][2]["cache_control"] = json!({"type": "ephemeral", "ttl": "1h"});
        let text = message(refusal(&body));
        assert!(text.starts_with("system.2.cache_control.ttl: a ttl='1h' cache_control block must not come after a ttl='5m'"), "{text}");
    }

    #[test]
    fn a_thinking_block_must_come_back_as_it_was_issued() {
        let issued = vec![("EqMB+sig/1==".to_string(), "Think\u{2026}".to_string())];
        let body = |signature: &str, thinking: &str| {
            json!({"messages": [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": thinking, "signature": signature},
                    {"type": "text", "text": "ok"}]}]})
        };
        assert_eq!(
            thinking_refusal(&body("EqMB+sig/1==", "Think\u{2026}"), &issued),
            None
        );
        for (signature, thinking) in [
            ("EqMB+sig/2==", "Think\u{2026}"),
            ("EqMB+sig/1==", "Think..."),
        ] {
            assert_eq!(
                message(thinking_refusal(&body(signature, thinking), &issued)),
                "messages.1.content.0: Invalid `signature` in `thinking` block"
            );
        }
    }
}

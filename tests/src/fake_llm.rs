//! A fake LLM provider on 127.0.0.1 for tests (Anthropic and OpenAI wire formats).
//!
//! `POST …/v1/messages` answers in Anthropic's Messages format and
//! `POST …/chat/completions` in OpenAI's chat-completions format, so one
//! server can stand in for providers of both kinds. Replies are scripted per
//! model (the request body's `model`): complete answers, answers cut at the
//! output limit, HTTP errors with a body (and `Retry-After`), slow answers,
//! bodies in no known format, or a function of the request. Every request is
//! recorded (path, headers, JSON body). Each request is served on its own
//! thread, so a slow reply does not hold up others. The server stops when
//! dropped.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// A scripted reply.
#[derive(Clone)]
pub enum Reply {
    /// A complete answer with this text.
    Text(String),
    /// An answer the provider cut at the output limit (`stop_reason:
    /// max_tokens` / `finish_reason: length`).
    Truncated(String),
    /// An HTTP error: status, body, and a `Retry-After` in seconds.
    Status {
        code: u16,
        body: String,
        retry_after: Option<u32>,
    },
    /// Wait, then reply.
    Slow(Duration, Box<Reply>),
    /// A 200 with this raw body (not the provider's format, or a router's error object).
    Raw(String),
    /// A reply computed from the request body.
    With(Arc<dyn Fn(&Value) -> Reply + Send + Sync>),
}

impl Reply {
    pub fn text(text: impl Into<String>) -> Reply {
        Reply::Text(text.into())
    }

    pub fn status(code: u16, body: impl Into<String>) -> Reply {
        Reply::Status {
            code,
            body: body.into(),
            retry_after: None,
        }
    }

    pub fn slow(delay: Duration, then: Reply) -> Reply {
        Reply::Slow(delay, Box::new(then))
    }

    pub fn with(f: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> Reply {
        Reply::With(Arc::new(f))
    }
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Text(t) => write!(f, "Text({} bytes)", t.len()),
            Reply::Truncated(t) => write!(f, "Truncated({} bytes)", t.len()),
            Reply::Status { code, .. } => write!(f, "Status({code})"),
            Reply::Slow(d, r) => write!(f, "Slow({d:?}, {r:?})"),
            Reply::Raw(_) => f.write_str("Raw"),
            Reply::With(_) => f.write_str("With(fn)"),
        }
    }
}

/// One request the server received.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub path: String,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Value,
    pub model: Option<String>,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The user message of either wire format.
    pub fn user_text(&self) -> String {
        user_text(&self.body)
    }
}

/// The user message of a request body of either wire format.
pub fn user_text(body: &Value) -> String {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The system prompt of a request body of either wire format.
pub fn system_text(body: &Value) -> String {
    if let Some(system) = body["system"].as_str() {
        return system.to_string();
    }
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "system")
        .filter_map(|m| m["content"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

#[derive(Default)]
struct State {
    /// Per model: replies to give in order.
    queues: Mutex<HashMap<String, VecDeque<Reply>>>,
    /// Per model: the reply once its queue is empty.
    always: Mutex<HashMap<String, Reply>>,
    requests: Mutex<Vec<Recorded>>,
    stopping: AtomicBool,
}

pub struct FakeLlm {
    url: String,
    state: Arc<State>,
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
}

/// Script key for requests whose model has no script of its own.
pub const ANY_MODEL: &str = "*";

impl FakeLlm {
    /// Start on a free port of 127.0.0.1.
    pub fn start() -> FakeLlm {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind 127.0.0.1:0"));
        let port = server.server_addr().to_ip().expect("an IP listener").port();
        let state = Arc::new(State::default());
        let thread = {
            let server = Arc::clone(&server);
            let state = Arc::clone(&state);
            std::thread::spawn(move || {
                for request in server.incoming_requests() {
                    let state = Arc::clone(&state);
                    std::thread::spawn(move || handle(&state, request));
                }
            })
        };
        FakeLlm {
            url: format!("http://127.0.0.1:{port}"),
            state,
            server,
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT`: an Anthropic base URL as is, or an OpenAI one
    /// with any path prefix (`/v1`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Queue replies for `model` (or [`ANY_MODEL`]), given in order.
    pub fn script(&self, model: &str, replies: impl IntoIterator<Item = Reply>) {
        self.state
            .queues
            .lock()
            .unwrap()
            .entry(model.to_string())
            .or_default()
            .extend(replies);
    }

    /// The reply for `model` (or [`ANY_MODEL`]) whenever its queue is empty.
    pub fn always(&self, model: &str, reply: Reply) {
        self.state
            .always
            .lock()
            .unwrap()
            .insert(model.to_string(), reply);
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
    }

    /// The models asked, in order.
    pub fn models_asked(&self) -> Vec<String> {
        self.requests()
            .into_iter()
            .map(|r| r.model.unwrap_or_default())
            .collect()
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.state.stopping.store(true, Ordering::SeqCst);
        self.server.unblock();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn next_reply(state: &State, model: &str) -> Option<Reply> {
    for key in [model, ANY_MODEL] {
        if let Some(reply) = state
            .queues
            .lock()
            .unwrap()
            .get_mut(key)
            .and_then(VecDeque::pop_front)
        {
            return Some(reply);
        }
        if let Some(reply) = state.always.lock().unwrap().get(key) {
            return Some(reply.clone());
        }
    }
    None
}

#[derive(Clone, Copy, PartialEq)]
enum Wire {
    Anthropic,
    OpenAi,
}

fn handle(state: &State, mut request: tiny_http::Request) {
    let path = request.url().split('?').next().unwrap_or("").to_string();
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
    let mut text = String::new();
    let _ = request.as_reader().read_to_string(&mut text);
    let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let model = body["model"].as_str().map(str::to_string);
    state.requests.lock().unwrap().push(Recorded {
        path: path.clone(),
        headers,
        body: body.clone(),
        model: model.clone(),
    });
    let wire = if path.ends_with("/v1/messages") {
        Wire::Anthropic
    } else if path.ends_with("/chat/completions") {
        Wire::OpenAi
    } else {
        respond(
            request,
            404,
            &json!({"error": "no such route"}).to_string(),
            None,
        );
        return;
    };
    let model = model.unwrap_or_default();
    let mut reply = next_reply(state, &model).unwrap_or_else(|| {
        Reply::status(
            500,
            json!({"error": {"message": format!("fake: no reply scripted for model {model:?}")}})
                .to_string(),
        )
    });
    loop {
        reply = match reply {
            Reply::Slow(delay, then) => {
                let until = Instant::now() + delay;
                while Instant::now() < until && !state.stopping.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(10));
                }
                *then
            }
            Reply::With(f) => f(&body),
            other => break reply = other,
        };
    }
    let prompt_tokens = (text.len() / 4) as u64;
    match reply {
        Reply::Text(answer) => {
            let body = success(wire, &model, &answer, false, prompt_tokens);
            respond(request, 200, &body.to_string(), None);
        }
        Reply::Truncated(answer) => {
            let body = success(wire, &model, &answer, true, prompt_tokens);
            respond(request, 200, &body.to_string(), None);
        }
        Reply::Status {
            code,
            body,
            retry_after,
        } => respond(request, code, &body, retry_after),
        Reply::Raw(body) => respond(request, 200, &body, None),
        Reply::Slow(..) | Reply::With(_) => unreachable!("resolved above"),
    }
}

fn success(wire: Wire, model: &str, answer: &str, truncated: bool, prompt_tokens: u64) -> Value {
    let output_tokens = (answer.len() / 4) as u64 + 1;
    match wire {
        Wire::Anthropic => json!({
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": answer}],
            "stop_reason": if truncated { "max_tokens" } else { "end_turn" },
            "stop_sequence": null,
            "usage": {"input_tokens": prompt_tokens, "output_tokens": output_tokens},
        }),
        Wire::OpenAi => json!({
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "model": model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": answer},
                "finish_reason": if truncated { "length" } else { "stop" },
            }],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": output_tokens,
                      "total_tokens": prompt_tokens + output_tokens},
        }),
    }
}

fn respond(request: tiny_http::Request, code: u16, body: &str, retry_after: Option<u32>) {
    let mut response = tiny_http::Response::from_string(body)
        .with_status_code(code)
        .with_header(
            tiny_http::Header::from_bytes("content-type", "application/json")
                .expect("a valid header"),
        );
    if let Some(seconds) = retry_after {
        response = response.with_header(
            tiny_http::Header::from_bytes("retry-after", seconds.to_string())
                .expect("a valid header"),
        );
    }
    let _ = request.respond(response);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post(url: &str, body: &Value) -> (u16, Value) {
        let agent: ureq_free::Agent = ureq_free::agent();
        agent.post(url, body)
    }

    /// A minimal HTTP client over std, so this crate needs no HTTP client dependency.
    mod ureq_free {
        use std::io::{Read, Write};
        use std::net::TcpStream;

        use serde_json::Value;

        pub struct Agent;

        pub fn agent() -> Agent {
            Agent
        }

        impl Agent {
            pub fn post(&self, url: &str, body: &Value) -> (u16, Value) {
                let rest = url.strip_prefix("http://").unwrap();
                let (host, path) = rest.split_once('/').unwrap();
                let mut stream = TcpStream::connect(host).unwrap();
                let body = body.to_string();
                write!(
                    stream,
                    "POST /{path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
                .unwrap();
                let mut response = String::new();
                stream.read_to_string(&mut response).unwrap();
                let status: u16 = response[9..12].parse().unwrap();
                let body = response.split("\r\n\r\n").nth(1).unwrap_or("");
                (status, serde_json::from_str(body).unwrap_or(Value::Null))
            }
        }
    }

    #[test]
    fn answers_in_both_wire_formats_and_records_requests() {
        let fake = FakeLlm::start();
        fake.script("a", [Reply::text("hello"), Reply::Truncated("cut".into())]);
        fake.always("o", Reply::text("openai says hi"));
        let url = fake.url().to_string();
        let (status, body) = post(
            &format!("{url}/v1/messages"),
            &json!({"model": "a", "messages": [{"role": "user", "content": "q"}]}),
        );
        assert_eq!(status, 200);
        assert_eq!(body["content"][0]["text"], "hello");
        assert_eq!(body["stop_reason"], "end_turn");
        let (_, body) = post(&format!("{url}/v1/messages"), &json!({"model": "a"}));
        assert_eq!(body["stop_reason"], "max_tokens");
        let (_, body) = post(
            &format!("{url}/v1/chat/completions"),
            &json!({"model": "o", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}),
        );
        assert_eq!(body["choices"][0]["message"]["content"], "openai says hi");
        let (status, _) = post(&format!("{url}/v1/messages"), &json!({"model": "a"}));
        assert_eq!(status, 500, "an empty script is an error");
        assert_eq!(fake.models_asked(), ["a", "a", "o", "a"]);
        assert_eq!(user_text(&fake.requests()[2].body), "u");
        assert_eq!(system_text(&fake.requests()[2].body), "s");
    }

    #[test]
    fn errors_slow_and_computed_replies() {
        let fake = FakeLlm::start();
        fake.script(
            ANY_MODEL,
            [
                Reply::Status {
                    code: 429,
                    body: "{\"error\":\"slow down\"}".into(),
                    retry_after: Some(2),
                },
                Reply::slow(
                    Duration::from_millis(200),
                    Reply::with(|body| {
                        Reply::text(format!("echo {}", body["model"].as_str().unwrap()))
                    }),
                ),
            ],
        );
        let url = format!("{}/v1/messages", fake.url());
        let (status, body) = post(&url, &json!({"model": "x"}));
        assert_eq!((status, body["error"].as_str()), (429, Some("slow down")));
        // (That a slow reply is slow shows in the historian's timeout test:
        // only a late answer makes the 400 ms timeout fire.)
        let (_, body) = post(&url, &json!({"model": "y"}));
        assert_eq!(body["content"][0]["text"], "echo y");
    }
}

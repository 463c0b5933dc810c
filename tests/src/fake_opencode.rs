//! A fake OpenCode server on 127.0.0.1 for tests.
//!
//! It serves the v1 routes mc uses — `GET`/`PATCH`/`DELETE /session/:id`,
//! `POST /session` (a new session, a child when it names a `parentID`),
//! `GET /session/:id/children`,
//! `GET /session/:id/message[?limit=N]`, `GET /session/:id/message/:mid`,
//! `POST /session/:id/prompt_async`, `POST /session/:id/message` (the model's
//! answer comes from [`FakeOpenCode::answer_prompts`]), `POST
//! /session/:id/abort`, `GET /config` and `GET /config/providers` — from
//! in-memory sessions and messages, records every request, and can be told
//! to fail a route. `PATCH` replaces the metadata wholesale and
//! `prompt_async` stores a user message, as OpenCode does. The server runs in
//! a thread and stops when dropped.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use serde_json::{Value, json};

/// One request the server received.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub method: String,
    /// The path, percent-decoded (`/session/ses_1/message`).
    pub path: String,
    /// The raw query string (`limit=20&directory=%2Fhome`), empty when none.
    pub query: String,
    /// The body, when it was JSON.
    pub body: Option<Value>,
}

impl Recorded {
    /// The decoded value of a query parameter.
    pub fn query_param(&self, name: &str) -> Option<String> {
        self.query.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            (decode(k) == name).then(|| decode(v))
        })
    }
}

/// A scripted failure: every request with this method whose path ends with
/// `path_suffix` gets this answer instead.
#[derive(Debug, Clone)]
struct Scripted {
    method: String,
    path_suffix: String,
    status: u16,
    content_type: &'static str,
    body: String,
}

/// Answers `POST /session/:id/message`: the request body → `{info, parts}`.
type Answerer = Box<dyn Fn(&Value) -> Value + Send>;

#[derive(Default)]
struct State {
    sessions: BTreeMap<String, Value>,
    messages: BTreeMap<String, Vec<Value>>,
    requests: Vec<Recorded>,
    failures: Vec<Scripted>,
    prompt_counter: u64,
    session_counter: u64,
    answerer: Option<Answerer>,
    config: Option<Value>,
    providers: Option<Value>,
}

pub struct FakeOpenCode {
    url: String,
    state: Arc<Mutex<State>>,
    server: Arc<tiny_http::Server>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakeOpenCode {
    /// Start a server on a free port of 127.0.0.1.
    pub fn start() -> FakeOpenCode {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind 127.0.0.1:0"));
        let port = server.server_addr().to_ip().expect("an IP listener").port();
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (server, state, stop) = (server.clone(), state.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match server.recv() {
                        Ok(request) => handle(&state, request),
                        Err(_) => continue,
                    }
                }
            })
        };
        FakeOpenCode {
            url: format!("http://127.0.0.1:{port}"),
            state,
            server,
            stop,
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Add (or replace) a session object; it must have an `id`.
    pub fn add_session(&self, session: Value) {
        let id = session["id"].as_str().expect("a session id").to_string();
        let mut state = self.lock();
        state.messages.entry(id.clone()).or_default();
        state.sessions.insert(id, session);
    }

    /// Append a `{info, parts}` message to its session (`info.sessionID`).
    pub fn add_message(&self, message: Value) {
        let session = message["info"]["sessionID"]
            .as_str()
            .expect("info.sessionID")
            .to_string();
        self.lock()
            .messages
            .entry(session)
            .or_default()
            .push(message);
    }

    /// Delete a message (as a revert would): fetching it answers 404.
    pub fn remove_message(&self, session_id: &str, message_id: &str) {
        if let Some(list) = self.lock().messages.get_mut(session_id) {
            list.retain(|m| m["info"]["id"] != message_id);
        }
    }

    /// The session as stored now.
    pub fn session(&self, session_id: &str) -> Value {
        self.lock()
            .sessions
            .get(session_id)
            .cloned()
            .unwrap_or(Value::Null)
    }

    /// The session's metadata as stored now (`null` when it has none).
    pub fn metadata(&self, session_id: &str) -> Value {
        self.session(session_id)
            .get("metadata")
            .cloned()
            .unwrap_or(Value::Null)
    }

    pub fn set_metadata(&self, session_id: &str, metadata: Value) {
        if let Some(session) = self.lock().sessions.get_mut(session_id) {
            session["metadata"] = metadata;
        }
    }

    /// The session's messages as stored now, oldest first.
    pub fn messages(&self, session_id: &str) -> Vec<Value> {
        self.lock()
            .messages
            .get(session_id)
            .cloned()
            .unwrap_or_default()
    }

    /// Answer every `method` request whose path ends with `path_suffix` with
    /// `status` and a JSON `body` instead of serving it.
    pub fn fail(&self, method: &str, path_suffix: &str, status: u16, body: &str) {
        self.script(method, path_suffix, status, "application/json", body);
    }

    /// Answer with an HTML page and 200, as a web UI's fallback route would.
    pub fn answer_html(&self, method: &str, path_suffix: &str) {
        let page = "<!doctype html><html><body><div id=\"app\"></div></body></html>";
        self.script(method, path_suffix, 200, "text/html", page);
    }

    fn script(
        &self,
        method: &str,
        suffix: &str,
        status: u16,
        content_type: &'static str,
        body: &str,
    ) {
        self.lock().failures.push(Scripted {
            method: method.to_string(),
            path_suffix: suffix.to_string(),
            status,
            content_type,
            body: body.to_string(),
        });
    }

    /// Answer `POST /session/:id/message` (a prompt that waits for the
    /// model) with `answer(body)`: OpenCode's `{info, parts}` of the reply.
    pub fn answer_prompts(&self, answer: impl Fn(&Value) -> Value + Send + 'static) {
        self.lock().answerer = Some(Box::new(answer));
    }

    /// What `GET /config` answers (default `{}`).
    pub fn set_config(&self, config: Value) {
        self.lock().config = Some(config);
    }

    /// What `GET /config/providers` answers (default no providers).
    pub fn set_providers(&self, providers: Value) {
        self.lock().providers = Some(providers);
    }

    /// Every session now stored, by id.
    pub fn session_ids(&self) -> Vec<String> {
        self.lock().sessions.keys().cloned().collect()
    }

    /// Serve normally again.
    pub fn clear_failures(&self) {
        self.lock().failures.clear();
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.lock().requests.clone()
    }

    pub fn clear_requests(&self) {
        self.lock().requests.clear();
    }

    /// The bodies of the `prompt_async` requests for a session.
    pub fn prompts(&self, session_id: &str) -> Vec<Value> {
        let path = format!("/session/{session_id}/prompt_async");
        self.requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path == path)
            .filter_map(|r| r.body)
            .collect()
    }
}

impl Drop for FakeOpenCode {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.server.unblock();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

type Answer = (u16, &'static str, String);

fn json_answer(status: u16, value: &Value) -> Answer {
    (status, "application/json", value.to_string())
}

fn not_found(what: &str) -> Answer {
    json_answer(
        404,
        &json!({"name": "NotFoundError", "data": {"message": format!("{what} not found")}}),
    )
}

fn handle(state: &Arc<Mutex<State>>, mut request: tiny_http::Request) {
    let method = request.method().as_str().to_string();
    let url = request.url().to_string();
    let (raw_path, query) = url.split_once('?').unwrap_or((url.as_str(), ""));
    let segments: Vec<String> = raw_path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(decode)
        .collect();
    let path = format!("/{}", segments.join("/"));
    let mut text = String::new();
    let _ = request.as_reader().read_to_string(&mut text);
    let body: Option<Value> = serde_json::from_str(&text).ok();

    let (status, content_type, payload) = {
        let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
        state.requests.push(Recorded {
            method: method.clone(),
            path: path.clone(),
            query: query.to_string(),
            body: body.clone(),
        });
        let scripted = state
            .failures
            .iter()
            .find(|f| f.method == method && path.ends_with(&f.path_suffix))
            .cloned();
        match scripted {
            Some(f) => (f.status, f.content_type, f.body),
            None => route(&mut state, &method, &segments, query, body),
        }
    };
    let header =
        tiny_http::Header::from_bytes("Content-Type", content_type).expect("a valid header");
    let response = tiny_http::Response::from_string(payload)
        .with_status_code(status)
        .with_header(header);
    let _ = request.respond(response);
}

fn route(
    state: &mut State,
    method: &str,
    segments: &[String],
    query: &str,
    body: Option<Value>,
) -> Answer {
    let parts: Vec<&str> = segments.iter().map(String::as_str).collect();
    match (method, parts.as_slice()) {
        ("GET", ["session", id]) => match state.sessions.get(*id) {
            Some(session) => json_answer(200, session),
            None => not_found(&format!("session {id}")),
        },
        ("PATCH", ["session", id]) => {
            let Some(session) = state.sessions.get_mut(*id) else {
                return not_found(&format!("session {id}"));
            };
            let body = body.unwrap_or(Value::Null);
            if let Some(metadata) = body.get("metadata") {
                // OpenCode replaces the metadata wholesale.
                session["metadata"] = metadata.clone();
            }
            if let Some(title) = body.get("title") {
                session["title"] = title.clone();
            }
            json_answer(200, session)
        }
        ("GET", ["session", id, "message"]) => {
            if !state.sessions.contains_key(*id) {
                return not_found(&format!("session {id}"));
            }
            let all = state.messages.get(*id).cloned().unwrap_or_default();
            let limit = query.split('&').find_map(|p| {
                p.strip_prefix("limit=")
                    .and_then(|n| n.parse::<usize>().ok())
            });
            let list = match limit {
                Some(n) if n < all.len() => all[all.len() - n..].to_vec(),
                _ => all,
            };
            json_answer(200, &Value::Array(list))
        }
        ("GET", ["session", id, "message", mid]) => {
            let found = state
                .messages
                .get(*id)
                .and_then(|list| list.iter().find(|m| m["info"]["id"] == *mid));
            match found {
                Some(message) => json_answer(200, message),
                None => not_found(&format!("message {mid}")),
            }
        }
        ("POST", ["session"]) => {
            state.session_counter += 1;
            let body = body.unwrap_or(Value::Null);
            let id = format!("ses_child_{:04}", state.session_counter);
            let mut session = json!({"id": id, "title": body.get("title").cloned().unwrap_or(json!("New session")),
                                     "time": {"created": 1_900_000_000_000i64}});
            for field in ["parentID", "metadata", "permission"] {
                if let Some(value) = body.get(field) {
                    session[field] = value.clone();
                }
            }
            state.messages.insert(id.clone(), Vec::new());
            state.sessions.insert(id, session.clone());
            json_answer(200, &session)
        }
        ("DELETE", ["session", id]) => match state.sessions.remove(*id) {
            Some(_) => {
                state.messages.remove(*id);
                json_answer(200, &json!(true))
            }
            None => not_found(&format!("session {id}")),
        },
        ("POST", ["session", _, "abort"]) => json_answer(200, &json!(true)),
        ("GET", ["session", id, "children"]) => {
            let children: Vec<Value> = state
                .sessions
                .values()
                .filter(|s| s["parentID"] == *id)
                .cloned()
                .collect();
            json_answer(200, &Value::Array(children))
        }
        ("POST", ["session", id, "message"]) => {
            if !state.sessions.contains_key(*id) {
                return not_found(&format!("session {id}"));
            }
            let body = body.unwrap_or(Value::Null);
            match &state.answerer {
                Some(answer) => json_answer(200, &answer(&body)),
                None => json_answer(
                    500,
                    &json!({"name": "UnknownError", "data": {"message": "no model answers here"}}),
                ),
            }
        }
        ("GET", ["config"]) => json_answer(200, state.config.as_ref().unwrap_or(&json!({}))),
        ("GET", ["config", "providers"]) => json_answer(
            200,
            state
                .providers
                .as_ref()
                .unwrap_or(&json!({"providers": [], "default": {}})),
        ),
        ("POST", ["session", id, "prompt_async"]) => {
            if !state.sessions.contains_key(*id) {
                return not_found(&format!("session {id}"));
            }
            let body = body.unwrap_or(Value::Null);
            state.prompt_counter += 1;
            let message = json!({
                "info": {"id": format!("msg_prompt_{:04}", state.prompt_counter), "sessionID": id,
                         "role": "user", "time": {"created": 1_900_000_000_000i64 + state.prompt_counter as i64},
                         "agent": body.get("agent").cloned().unwrap_or(json!("build")),
                         "model": body.get("model").cloned().unwrap_or(Value::Null)},
                "parts": body.get("parts").cloned().unwrap_or(json!([])),
            });
            state
                .messages
                .entry(id.to_string())
                .or_default()
                .push(message);
            (204, "application/json", String::new())
        }
        _ => not_found("route"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding() {
        assert_eq!(decode("%2Fhome%2Fme%20x"), "/home/me x");
        assert_eq!(decode("a%2"), "a%2");
        assert_eq!(decode("100%"), "100%");
        assert_eq!(decode("plain"), "plain");
    }
}

//! An `opencode` provider: a running OpenCode server (`opencode serve`)
//! answers the prompt with a model and a login the user already set up there.
//!
//! One call is three requests to the server:
//!
//! 1. `POST /session` — a child of the folded session (`parentID`), so it
//!    never shows in the user's list of sessions as work of theirs, with
//!    every tool denied (`permission`) and marked `metadata.mc.historian`
//!    so mc's plugin leaves its messages alone (with `max_output_tokens`,
//!    which mc's plugin applies to the answer as `max_tokens` is elsewhere);
//! 2. `POST /session/{child}/message` — the prompt: OpenCode's hidden
//!    `compaction` agent (its short summarising prompt instead of the coding
//!    agent's, and no tools), the historian's system prompt as `system`, the
//!    model as `providerID/modelID`. It answers when the model is done, with
//!    the text, the token counts and any error;
//! 3. `DELETE /session/{child}` — always, whatever happened (after a
//!    timeout, `POST /session/{child}/abort` first).
//!
//! Before the first, any historian child the folded session still has is
//! deleted (`GET /session/{parent}/children`): one left by a run that was
//! killed mid-call (the lease lets one run at a time on a session).
//!
//! The model part of `provider/model` is OpenCode's `providerID/modelID`
//! (`opencode/anthropic/claude-haiku-4-5`). Without mc's plugin in that
//! OpenCode, the answer's length is OpenCode's own limit for the model.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::http::{Http, Method};
use super::{CallFailure, Completion, Event, HarnessSession, LlmError, ModelRef, Options, Prompt};
use super::{Target, excerpt};

/// The agent the prompt runs as: hidden, no tools, a short prompt of its own.
pub(super) const AGENT: &str = "compaction";
/// The child session's title (seen only by someone who lists child sessions).
const TITLE: &str = "mc historian";
/// The short requests around the prompt (create, abort, delete, config).
const SHORT_TIMEOUT: Duration = Duration::from_secs(15);

/// The server to call: the provider's `base_url`, else the run's server.
fn base_url<'a>(target: &'a Target, harness: &'a HarnessSession) -> Option<&'a str> {
    target
        .provider
        .base_url
        .as_deref()
        .or(harness.opencode_url.as_deref())
        .map(|url| url.trim_end_matches('/'))
}

/// `base` + `path`, with `?directory=` when the session names its folder.
fn url(base: &str, path: &[&str], directory: Option<&str>) -> String {
    let mut url = base.to_string();
    for segment in path {
        url.push('/');
        url.push_str(&encode(segment));
    }
    if let Some(directory) = directory.filter(|d| !d.is_empty()) {
        url.push_str("?directory=");
        url.push_str(&encode(directory));
    }
    url
}

/// Percent-encode everything but RFC 3986 unreserved characters.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// OpenCode's `{providerID, modelID}` for the model part of the name, or
/// `None` (OpenCode's default model) when it has no slash.
fn server_model(model: &ModelRef) -> Option<Value> {
    let (provider, id) = model.model.split_once('/')?;
    (!provider.is_empty() && !id.is_empty()).then(|| json!({"providerID": provider, "modelID": id}))
}

fn create_body(harness: &HarnessSession, prompt: &Prompt) -> Value {
    let mut body = Map::new();
    if let Some(parent) = &harness.session_id {
        body.insert("parentID".into(), json!(parent));
    }
    body.insert("title".into(), json!(TITLE));
    body.insert(
        "permission".into(),
        json!([{"permission": "*", "pattern": "*", "action": "deny"}]),
    );
    body.insert(
        "metadata".into(),
        json!({"mc": {"historian": true, "max_output_tokens": prompt.max_tokens}}),
    );
    Value::Object(body)
}

fn prompt_body(target: &Target, prompt: &Prompt) -> Value {
    let mut body = Map::new();
    body.insert("agent".into(), json!(AGENT));
    if let Some(model) = server_model(&target.model) {
        body.insert("model".into(), model);
    }
    body.insert("system".into(), json!(prompt.system));
    body.insert("tools".into(), json!({"*": false}));
    body.insert(
        "parts".into(),
        json!([{"type": "text", "text": prompt.user}]),
    );
    Value::Object(body)
}

/// The requests a call would make (`mc-historian prompt`).
pub(super) fn describe(target: &Target, prompt: &Prompt, harness: &HarnessSession) -> Value {
    let base = base_url(target, harness).unwrap_or("<the OpenCode server>");
    let directory = harness.directory.as_deref();
    let child = "<child session>";
    json!({
        "kind": "opencode",
        "requests": [
            {"method": "POST", "url": url(base, &["session"], directory), "body": create_body(harness, prompt)},
            {"method": "POST", "url": url(base, &["session", child, "message"], directory),
             "body": prompt_body(target, prompt)},
            {"method": "DELETE", "url": url(base, &["session", child], directory)},
        ],
    })
}

/// What to check when the server cannot be reached.
fn server_hint(base: &str) -> String {
    format!(
        "is OpenCode still running and serving {base}? (mc's plugin passes its own server to \
         mc-historian as --opencode-url)"
    )
}

/// A transport failure names the server to check instead of a provider's base_url.
fn with_server_hint(error: LlmError, base: &str) -> LlmError {
    match error.kind {
        CallFailure::Transport | CallFailure::Timeout => LlmError {
            hints: vec![server_hint(base)],
            ..error
        },
        _ => error,
    }
}

/// The error for a non-2xx answer of the server itself.
fn server_status(model: &ModelRef, what: &str, status: u16, body: &str) -> LlmError {
    let mut error = LlmError::new(
        Some(model),
        CallFailure::Status(status),
        format!(
            "OpenCode answered {status} to {what}: {}",
            excerpt(&one_line(body), 600)
        ),
    );
    if matches!(status, 400 | 404 | 422) {
        error = error.with_hint(format!(
            "check the model (OpenCode's providerID/modelID: {}) and that OpenCode has its \
             \"{AGENT}\" agent",
            model.model
        ));
    }
    error
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub(super) fn call(
    http: &Http,
    options: &Options,
    target: &Target,
    prompt: &Prompt,
    harness: &HarnessSession,
    events: &mut dyn FnMut(Event),
) -> Result<Completion, LlmError> {
    let model = &target.model;
    let Some(base) = base_url(target, harness) else {
        return Err(LlmError::new(
            Some(model),
            CallFailure::Unavailable,
            "no OpenCode server to call (the provider has no base_url, and the run was given \
             no server)",
        )
        .with_hint(
            "run mc-historian with --opencode-url URL (mc's OpenCode plugin does), set \
             OPENCODE_URL, or give the provider a base_url",
        ));
    };
    let directory = harness.directory.as_deref();
    let short = SHORT_TIMEOUT.min(options.timeout);
    if let Some(parent) = &harness.session_id {
        sweep(http, model, base, directory, parent, short, events);
    }
    // 1. The child session.
    let created = http
        .send(
            model,
            Method::Post,
            &url(base, &["session"], directory),
            Some(&create_body(harness, prompt)),
            short,
        )
        .map_err(|e| with_server_hint(e, base))?;
    if !(200..300).contains(&created.status) {
        return Err(server_status(
            model,
            "creating the historian's child session",
            created.status,
            &created.body,
        ));
    }
    let child = serde_json::from_str::<Value>(&created.body)
        .ok()
        .and_then(|v| v.get("id").and_then(Value::as_str).map(str::to_string))
        .ok_or_else(|| {
            LlmError::new(
                Some(model),
                CallFailure::Protocol,
                format!(
                    "OpenCode's answer to creating a session has no id: {}",
                    excerpt(&one_line(&created.body), 600)
                ),
            )
            .with_hint(format!(
                "is {base} the OpenCode server itself (opencode serve)?"
            ))
        })?;
    // 2. The prompt; 3. the child is deleted whatever happened.
    let answer = http.send(
        model,
        Method::Post,
        &url(base, &["session", &child, "message"], directory),
        Some(&prompt_body(target, prompt)),
        options.timeout,
    );
    if let Err(error) = &answer
        && error.kind == CallFailure::Timeout
    {
        // The model may still be working: stop it before deleting its session.
        let _ = http.send(
            model,
            Method::Post,
            &url(base, &["session", &child, "abort"], directory),
            Some(&json!({})),
            short,
        );
    }
    let deleted = http.send(
        model,
        Method::Delete,
        &url(base, &["session", &child], directory),
        None,
        short,
    );
    match deleted {
        Ok(answer) if (200..300).contains(&answer.status) => {}
        Ok(answer) => events(Event::Note {
            model: model.clone(),
            message: format!(
                "could not delete OpenCode's child session {child}: it answered {}: {}",
                answer.status,
                excerpt(&one_line(&answer.body), 300)
            ),
        }),
        Err(error) => events(Event::Note {
            model: model.clone(),
            message: format!(
                "could not delete OpenCode's child session {child}: {}",
                error.message
            ),
        }),
    }
    let answer = answer.map_err(|e| with_server_hint(e, base))?;
    if !(200..300).contains(&answer.status) {
        return Err(server_status(
            model,
            "the historian's prompt",
            answer.status,
            &answer.body,
        ));
    }
    let value: Value = serde_json::from_str(&answer.body).map_err(|e| {
        LlmError::new(
            Some(model),
            CallFailure::Protocol,
            format!(
                "OpenCode's answer to the prompt is not JSON ({e}): {}",
                excerpt(&one_line(&answer.body), 600)
            ),
        )
    })?;
    parse(model, &value)
}

/// Delete the historian children `parent` still has (a killed run's). A
/// server that cannot list them is left for the create call to report.
fn sweep(
    http: &Http,
    model: &ModelRef,
    base: &str,
    directory: Option<&str>,
    parent: &str,
    timeout: Duration,
    events: &mut dyn FnMut(Event),
) {
    let listed = http.send(
        model,
        Method::Get,
        &url(base, &["session", parent, "children"], directory),
        None,
        timeout,
    );
    let Ok(answer) = listed else { return };
    let children: Vec<Value> = match serde_json::from_str(&answer.body) {
        Ok(Value::Array(children)) if (200..300).contains(&answer.status) => children,
        _ => return,
    };
    for child in &children {
        let ours = child
            .pointer("/metadata/mc/historian")
            .and_then(Value::as_bool)
            == Some(true);
        let Some(id) = child.get("id").and_then(Value::as_str).filter(|_| ours) else {
            continue;
        };
        let deleted = http.send(
            model,
            Method::Delete,
            &url(base, &["session", id], directory),
            None,
            timeout,
        );
        if !deleted.is_ok_and(|a| (200..300).contains(&a.status)) {
            events(Event::Note {
                model: model.clone(),
                message: format!("could not delete an earlier historian child session {id}"),
            });
        }
    }
}

/// The assistant message OpenCode answered with: its text, or its error.
pub fn parse(model: &ModelRef, value: &Value) -> Result<Completion, LlmError> {
    let (Some(info), Some(parts)) = (
        value.get("info").filter(|i| i.is_object()),
        value.get("parts").and_then(Value::as_array),
    ) else {
        return Err(LlmError::new(
            Some(model),
            CallFailure::Protocol,
            format!(
                "OpenCode's answer to the prompt is not a message ({{info, parts}}): {}",
                excerpt(&value.to_string(), 600)
            ),
        ));
    };
    let mut truncated = info.get("finish").and_then(Value::as_str) == Some("length");
    if let Some(error) = info.get("error").filter(|e| !e.is_null()) {
        let name = error.get("name").and_then(Value::as_str).unwrap_or("");
        if name == "MessageOutputLengthError" {
            // The text so far comes back, marked cut short: the parser says why.
            truncated = true;
        } else {
            return Err(answer_error(model, info, error));
        }
    }
    let text: String = parts
        .iter()
        .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
        .filter(|p| p.get("synthetic").and_then(Value::as_bool) != Some(true))
        .filter(|p| p.get("ignored").and_then(Value::as_bool) != Some(true))
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n");
    let tokens = info.get("tokens");
    let count = |path: &[&str]| -> u64 {
        let mut at = tokens;
        for key in path {
            at = at.and_then(|v| v.get(key));
        }
        // OpenCode's numbers are JSON numbers (floats in its schema).
        at.and_then(|v| v.as_u64().or_else(|| v.as_f64().map(|f| f.max(0.0) as u64)))
            .unwrap_or(0)
    };
    Ok(Completion {
        tokens_in: count(&["input"])
            .saturating_add(count(&["cache", "read"]))
            .saturating_add(count(&["cache", "write"])),
        tokens_out: count(&["output"]).saturating_add(count(&["reasoning"])),
        text,
        model: model.clone(),
        truncated,
    })
}

/// The failure an assistant message of the child session carries.
fn answer_error(model: &ModelRef, info: &Value, error: &Value) -> LlmError {
    let name = error.get("name").and_then(Value::as_str).unwrap_or("error");
    let data = error.get("data");
    let message = data
        .and_then(|d| d.get("message"))
        .and_then(Value::as_str)
        .map(one_line)
        .unwrap_or_else(|| excerpt(&error.to_string(), 300));
    let status = data
        .and_then(|d| d.get("statusCode"))
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok());
    let provider = info
        .get("providerID")
        .and_then(Value::as_str)
        .unwrap_or("the model's provider");
    let text = format!(
        "OpenCode's call to the model failed ({name}): {}",
        excerpt(&message, 600)
    );
    match (name, status) {
        ("APIError", Some(code)) => {
            let error = LlmError::new(Some(model), CallFailure::Status(code), text);
            match code {
                401 | 403 => error.with_hint(format!(
                    "check OpenCode's login for {provider} (opencode auth login)"
                )),
                _ => error,
            }
        }
        ("ProviderAuthError", _) => LlmError::new(Some(model), CallFailure::Harness, text)
            .with_hint(format!(
                "log in to {provider} in OpenCode (opencode auth login), or set \
                 historian.model in mc's user config"
            )),
        ("ContextOverflowError", _) => LlmError::new(Some(model), CallFailure::Harness, text)
            .with_hint(
                "lower historian.chunk_tokens in mc's user config, or set a historian.model \
                 with a larger window",
            ),
        _ => LlmError::new(Some(model), CallFailure::Harness, text),
    }
}

/// A model's price per million tokens, as the server lists it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelPrice {
    pub input: f64,
    pub output: f64,
}

/// What a server says about its models: its default, its small model, and
/// the prices it knows (`providerID/modelID` → price).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerModels {
    /// `model` of OpenCode's config.
    pub model: Option<String>,
    /// `small_model` of OpenCode's config.
    pub small_model: Option<String>,
    pub prices: BTreeMap<String, ModelPrice>,
}

impl ServerModels {
    /// From the answers of `GET /config` and `GET /config/providers`.
    pub fn from_answers(config: &Value, providers: &Value) -> ServerModels {
        let text = |v: &Value, key: &str| {
            v.get(key)
                .and_then(Value::as_str)
                .filter(|s| s.contains('/'))
                .map(str::to_string)
        };
        let mut prices = BTreeMap::new();
        let list = providers
            .get("providers")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for provider in list {
            let Some(id) = provider.get("id").and_then(Value::as_str) else {
                continue;
            };
            let Some(models) = provider.get("models").and_then(Value::as_object) else {
                continue;
            };
            for (key, model) in models {
                let cost = model.get("cost");
                let price = |field: &str| cost.and_then(|c| c.get(field)).and_then(Value::as_f64);
                if let (Some(input), Some(output)) = (price("input"), price("output")) {
                    prices.insert(format!("{id}/{key}"), ModelPrice { input, output });
                }
            }
        }
        ServerModels {
            model: text(config, "model"),
            small_model: text(config, "small_model"),
            prices,
        }
    }

    /// The model a fold should use on this server: the session's, unless
    /// the user's `small_model` costs no more (by the server's prices, both
    /// known, input and output alike); never a dearer one. Without a
    /// session model, the server's default. Answers the model
    /// (`providerID/modelID`, `None`: the server decides) and why.
    pub fn pick(&self, session_model: Option<&str>) -> (Option<String>, String) {
        let (base, whose) = match session_model {
            Some(model) => (Some(model.to_string()), "the session's model"),
            None => (self.model.clone(), "OpenCode's default model"),
        };
        let Some(base) = base else {
            return (
                None,
                "the model OpenCode picks (neither the session nor OpenCode's config names one)"
                    .into(),
            );
        };
        let Some(small) = self.small_model.as_deref().filter(|s| *s != base) else {
            return (Some(base.clone()), format!("{whose} {base}"));
        };
        match (self.prices.get(small), self.prices.get(&base)) {
            (Some(s), Some(b)) if s.input <= b.input && s.output <= b.output => (
                Some(small.to_string()),
                format!("OpenCode's small_model {small}, which costs no more than {whose} {base}"),
            ),
            (Some(_), Some(_)) => (
                Some(base.clone()),
                format!("{whose} {base} (OpenCode's small_model {small} costs more)"),
            ),
            _ => (
                Some(base.clone()),
                format!("{whose} {base} (OpenCode's small_model {small} has no price to compare)"),
            ),
        }
    }
}

/// Ask the server at `base` (for the session's folder) for its models.
pub fn opencode_models(
    base: &str,
    directory: Option<&str>,
    options: &Options,
) -> Result<ServerModels, LlmError> {
    let base = base.trim_end_matches('/');
    let http = Http::new(options);
    let model = ModelRef {
        provider: "opencode".into(),
        model: "config".into(),
    };
    let short = SHORT_TIMEOUT.min(options.timeout);
    let get = |path: &[&str]| -> Result<Value, LlmError> {
        let target = url(base, path, directory);
        let answer = http
            .send(&model, Method::Get, &target, None, short)
            .map_err(|e| with_server_hint(e, base))?;
        if !(200..300).contains(&answer.status) {
            return Err(server_status(
                &model,
                &format!("GET {target}"),
                answer.status,
                &answer.body,
            ));
        }
        serde_json::from_str(&answer.body).map_err(|_| {
            LlmError::new(
                Some(&model),
                CallFailure::Protocol,
                format!(
                    "OpenCode's answer to GET {target} is not JSON: {}",
                    excerpt(&one_line(&answer.body), 300)
                ),
            )
        })
    };
    let config = get(&["config"])?;
    // Prices only matter when there is a small model to weigh.
    let providers = if config.get("small_model").and_then(Value::as_str).is_some() {
        get(&["config", "providers"])?
    } else {
        Value::Null
    };
    Ok(ServerModels::from_answers(&config, &providers))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(name: &str) -> ModelRef {
        ModelRef::parse(name).unwrap()
    }

    #[test]
    fn an_answer_gives_its_text_tokens_and_truncation() {
        let answer = json!({
            "info": {"role": "assistant", "providerID": "mock", "modelID": "m", "finish": "stop",
                     "tokens": {"input": 100, "output": 40, "reasoning": 2,
                                "cache": {"read": 900, "write": 5}}},
            "parts": [
                {"type": "step-start"},
                {"type": "reasoning", "text": "thinking"},
                {"type": "text", "text": "<history>"},
                {"type": "text", "text": "note", "synthetic": true},
                {"type": "text", "text": "</history>"},
                {"type": "step-finish"},
            ],
        });
        let c = parse(&model("opencode/mock/m"), &answer).unwrap();
        assert_eq!(c.text, "<history>\n</history>");
        assert_eq!((c.tokens_in, c.tokens_out), (1005, 42));
        assert!(!c.truncated);
        let mut cut = answer.clone();
        cut["info"]["error"] = json!({"name": "MessageOutputLengthError", "data": {}});
        assert!(parse(&model("opencode/mock/m"), &cut).unwrap().truncated);
    }

    #[test]
    fn an_answer_with_an_error_fails_with_its_reason() {
        let m = model("opencode/mock/m");
        let with = |error: Value| {
            parse(
                &m,
                &json!({"info": {"providerID": "mock", "error": error}, "parts": []}),
            )
            .unwrap_err()
        };
        let e =
            with(json!({"name": "APIError", "data": {"message": "overloaded", "statusCode": 529}}));
        assert_eq!(e.kind, CallFailure::Status(529));
        assert!(e.is_retryable());
        assert!(e.message.contains("overloaded"), "{e}");
        let e = with(
            json!({"name": "ProviderAuthError", "data": {"providerID": "mock", "message": "no key"}}),
        );
        assert_eq!(e.kind, CallFailure::Harness);
        assert!(e.hints[0].contains("opencode auth login"), "{:?}", e.hints);
        let e = with(json!({"name": "UnknownError", "data": {"message": "boom"}}));
        assert_eq!(
            e.to_string(),
            "opencode/mock/m: OpenCode's call to the model failed (UnknownError): boom"
        );
        let e = parse(&m, &json!({"id": "x"})).unwrap_err();
        assert_eq!(e.kind, CallFailure::Protocol);
    }

    #[test]
    fn the_small_model_is_used_only_when_it_costs_no_more() {
        let providers = json!({"providers": [{"id": "a", "models": {
            "big": {"cost": {"input": 3.0, "output": 15.0}},
            "small": {"cost": {"input": 1.0, "output": 5.0}},
            "odd": {"cost": {"input": 0.5, "output": 20.0}},
            "free": {}
        }}]});
        let server = |small: Option<&str>| {
            ServerModels::from_answers(&json!({"model": "a/big", "small_model": small}), &providers)
        };
        let (m, why) = server(Some("a/small")).pick(Some("a/big"));
        assert_eq!(m.as_deref(), Some("a/small"));
        assert!(why.contains("costs no more"), "{why}");
        // Cheaper input but dearer output: not cheaper.
        let (m, why) = server(Some("a/odd")).pick(Some("a/big"));
        assert_eq!(m.as_deref(), Some("a/big"));
        assert!(why.contains("costs more"), "{why}");
        // A small model dearer than the session's is never taken.
        let (m, _) = server(Some("a/big")).pick(Some("a/small"));
        assert_eq!(m.as_deref(), Some("a/small"));
        // No price to compare: the session's.
        let (m, why) = server(Some("a/free")).pick(Some("a/big"));
        assert_eq!(m.as_deref(), Some("a/big"));
        assert!(why.contains("no price"), "{why}");
        // No small model; no session model: the server's default.
        assert_eq!(
            server(None).pick(Some("a/small")).0.as_deref(),
            Some("a/small")
        );
        assert_eq!(server(None).pick(None).0.as_deref(), Some("a/big"));
        assert_eq!(ServerModels::default().pick(None).0, None);
    }

    #[test]
    fn requests_name_the_child_the_agent_and_no_tools() {
        let target = Target {
            model: model("opencode/anthropic/claude-haiku-4-5"),
            provider: mc_base::config::ProviderConfig {
                kind: mc_base::config::ProviderKind::Opencode,
                base_url: None,
                api_key_env: None,
                command: None,
            },
            key: None,
        };
        let harness = HarnessSession {
            opencode_url: Some("http://127.0.0.1:4096/".into()),
            directory: Some("/home/me/my repo".into()),
            session_id: Some("ses_1".into()),
        };
        let prompt = Prompt {
            system: "S".into(),
            user: "U".into(),
            max_tokens: 100,
        };
        let d = describe(&target, &prompt, &harness);
        let requests = d["requests"].as_array().unwrap();
        assert_eq!(
            requests[0]["url"],
            "http://127.0.0.1:4096/session?directory=%2Fhome%2Fme%2Fmy%20repo"
        );
        assert_eq!(requests[0]["body"]["parentID"], "ses_1");
        assert_eq!(requests[0]["body"]["permission"][0]["action"], "deny");
        assert_eq!(
            requests[0]["body"]["metadata"],
            json!({"mc": {"historian": true, "max_output_tokens": 100}})
        );
        let body = &requests[1]["body"];
        assert_eq!(body["agent"], AGENT);
        assert_eq!(body["tools"], json!({"*": false}));
        assert_eq!(
            body["model"],
            json!({"providerID": "anthropic", "modelID": "claude-haiku-4-5"})
        );
        assert_eq!(body["system"], "S");
        assert_eq!(requests[2]["method"], "DELETE");
    }
}

//! Recovery from a context overflow the estimate missed.
//!
//! When a provider rejects a request as too long, the harness's adapter hands
//! the error to `mc-transform overflow`. [`recognise`] reads the known
//! wordings (pure); [`report`] stores the limit the provider stated for the
//! model (`model_limits`) and marks the session (`sessions.overflow_ms`).
//! Every later pass on that model uses the smaller of that limit and the
//! harness's ([`Recovery::model`]); the session's next pass is an emergency
//! ([`Recovery::raise`]): usage at least the emergency band, or the rejected
//! prompt's own size when the error stated it, so the tiered emergency drop
//! runs and the historian fold is blocking.

use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde::Serialize;
use serde_json::{Map, Value};

use mc_base::error::{Error, Result};
use mc_base::store::Store;
use mc_history::trigger::Pressure;

use mc_base::domain::envelope::ModelInfo;
use mc_base::domain::measure::{self, EMERGENCY_PERCENT};
use mc_base::domain::models::{LearnedLimit, cap, learned_limit};
use mc_base::domain::sessions;

/// A limit below this is no model's window: a misread, ignored.
const MIN_LIMIT: u64 = 1024;
/// Numbers longer than this are not token counts.
const MAX_DIGITS: usize = 12;
/// Strings looked at in one error (nested bodies included), and how deep.
const MAX_TEXTS: usize = 256;
const MAX_DEPTH: usize = 8;
/// The stored and reported message is cut to this many characters.
const MESSAGE_CHARS: usize = 500;

/// What an overflow error said.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Overflow {
    /// Whose wording matched: anthropic | bedrock | openai | copilot, or
    /// harness when only the harness's own classification said so.
    pub source: &'static str,
    /// The model's limit in tokens, when the error states it.
    pub limit: Option<u64>,
    /// The rejected prompt's size in tokens, when the error states it.
    pub tokens: Option<u64>,
    /// The text that matched (at most 500 characters).
    pub message: String,
}

/// One wording: the text (ASCII-lowercased) → (source, limit, tokens).
type Matcher = fn(&str) -> Option<(&'static str, Option<u64>, Option<u64>)>;

/// Wordings that state numbers come first, so a generic message next to a
/// detailed body ("Bad Request" beside the provider's JSON) reads the body.
const MATCHERS: &[Matcher] = &[
    anthropic_prompt_too_long,
    anthropic_context_limit,
    copilot_prompt_token_count,
    openai_maximum_context_length,
    bedrock_input_too_long,
    openai_context_window,
    error_codes,
];

/// Is `error` a provider's context-overflow error, and what does it say?
///
/// `error` is what the harness has: the provider's message, its JSON body,
/// or the harness's error object (OpenCode's `{name, data: {message,
/// responseBody}}`); strings holding JSON are read too. Pure.
fn recognise(error: &Value) -> Option<Overflow> {
    let mut texts = Vec::new();
    collect_texts(error, 0, &mut texts);
    let lowered: Vec<String> = texts.iter().map(|t| t.to_ascii_lowercase()).collect();
    for matcher in MATCHERS {
        for (text, lower) in texts.iter().zip(&lowered) {
            if let Some((source, limit, tokens)) = matcher(lower) {
                return Some(Overflow {
                    source,
                    limit: limit.filter(|&l| l >= MIN_LIMIT),
                    tokens,
                    message: text.trim().chars().take(MESSAGE_CHARS).collect(),
                });
            }
        }
    }
    // OpenCode classifies overflow errors itself (ContextOverflowError); a
    // wording mc does not know still counts, without numbers.
    texts
        .iter()
        .any(|t| t == "ContextOverflowError")
        .then(|| Overflow {
            source: "harness",
            limit: None,
            tokens: None,
            message: texts
                .iter()
                .find(|t| *t != "ContextOverflowError" && !t.trim().is_empty())
                .map(|t| t.trim().chars().take(MESSAGE_CHARS).collect())
                .unwrap_or_else(|| "ContextOverflowError".into()),
        })
}

/// Every string in `value`, depth first in document order; a string that
/// holds a JSON object or array (a response body) gives its own strings instead.
fn collect_texts(value: &Value, depth: usize, out: &mut Vec<String>) {
    if depth > MAX_DEPTH || out.len() >= MAX_TEXTS {
        return;
    }
    match value {
        Value::String(text) => {
            let body = matches!(text.trim_start().chars().next(), Some('{' | '['))
                .then(|| serde_json::from_str::<Value>(text).ok())
                .flatten();
            match body {
                Some(body) => collect_texts(&body, depth + 1, out),
                None => out.push(text.clone()),
            }
        }
        Value::Array(items) => items
            .iter()
            .for_each(|item| collect_texts(item, depth + 1, out)),
        Value::Object(map) => map
            .values()
            .for_each(|item| collect_texts(item, depth + 1, out)),
        _ => {}
    }
}

/// The number `text` starts with, after spaces and `:`, `(`, `~` or "about".
fn lead_number(text: &str) -> Option<u64> {
    let skip = |t: &str| -> String { t.trim_start_matches([' ', '\t', ':', '(', '~']).to_string() };
    let mut rest = skip(text);
    if let Some(after) = rest.strip_prefix("about") {
        rest = skip(after);
    }
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    if digits.is_empty() || digits.len() > MAX_DIGITS {
        return None;
    }
    digits.parse().ok()
}

/// The number `text` ends with, before trailing spaces.
fn trailing_number(text: &str) -> Option<u64> {
    let digits: String = text
        .trim_end()
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect();
    if digits.is_empty() || digits.len() > MAX_DIGITS {
        return None;
    }
    digits.chars().rev().collect::<String>().parse().ok()
}

/// The number after the first `marker` in `text`.
fn number_after(text: &str, marker: &str) -> Option<u64> {
    text.split_once(marker)
        .and_then(|(_, rest)| lead_number(rest))
}

/// Anthropic: "prompt is too long: 210000 tokens > 200000 maximum".
fn anthropic_prompt_too_long(text: &str) -> Option<(&'static str, Option<u64>, Option<u64>)> {
    let (_, rest) = text.split_once("prompt is too long")?;
    Some(("anthropic", number_after(rest, ">"), lead_number(rest)))
}

/// Anthropic: "input length and `max_tokens` exceed context limit: 197367 +
/// 8192 > 200000, decrease input length or `max_tokens` and try again".
fn anthropic_context_limit(text: &str) -> Option<(&'static str, Option<u64>, Option<u64>)> {
    let (_, rest) = text.split_once("exceed context limit")?;
    Some(("anthropic", number_after(rest, ">"), lead_number(rest)))
}

/// GitHub Copilot: "prompt token count of 139639 exceeds the limit of 128000"
/// (code `model_max_prompt_tokens_exceeded`, or none).
fn copilot_prompt_token_count(text: &str) -> Option<(&'static str, Option<u64>, Option<u64>)> {
    let (_, rest) = text.split_once("prompt token count of")?;
    let limit = number_after(rest, "exceeds the limit of")?;
    Some(("copilot", Some(limit), lead_number(rest)))
}

/// OpenAI and compatible servers (OpenRouter, vLLM, Groq, ...): "This model's
/// maximum context length is 128000 tokens. However, your messages resulted
/// in 130000 tokens" — or "you requested N tokens (M in the messages, ...)",
/// or "your request has N input tokens".
fn openai_maximum_context_length(text: &str) -> Option<(&'static str, Option<u64>, Option<u64>)> {
    let (_, rest) = text.split_once("maximum context length is")?;
    let limit = lead_number(rest);
    let tokens = number_after(rest, "resulted in")
        .or_else(|| {
            rest.split_once(" in the messages")
                .and_then(|(before, _)| trailing_number(before))
        })
        .or_else(|| number_after(rest, "request has"));
    Some(("openai", limit, tokens))
}

/// Anthropic models on Amazon Bedrock: "Input is too long for requested model."
fn bedrock_input_too_long(text: &str) -> Option<(&'static str, Option<u64>, Option<u64>)> {
    text.contains("input is too long for requested model")
        .then_some(("bedrock", None, None))
}

/// OpenAI's Responses API: "Your input exceeds the context window of this model."
fn openai_context_window(text: &str) -> Option<(&'static str, Option<u64>, Option<u64>)> {
    text.contains("exceeds the context window")
        .then_some(("openai", None, None))
}

/// The error codes alone: OpenAI's `context_length_exceeded`, Copilot's
/// `model_max_prompt_tokens_exceeded`.
fn error_codes(text: &str) -> Option<(&'static str, Option<u64>, Option<u64>)> {
    match text.trim() {
        "context_length_exceeded" => Some(("openai", None, None)),
        "model_max_prompt_tokens_exceeded" => Some(("copilot", None, None)),
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// the store

/// A limit a provider stated for a model.
/// An overflow the session has not recovered from yet.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pending {
    pub since_ms: i64,
    /// The rejected prompt's size, when the error stated it.
    pub tokens: Option<u64>,
}

pub fn pending(conn: &Connection, harness: &str, session_id: &str) -> Result<Option<Pending>> {
    Ok(conn
        .prepare_cached(
            "SELECT overflow_ms, overflow_tokens FROM sessions
             WHERE harness = ?1 AND session_id = ?2 AND overflow_ms IS NOT NULL",
        )?
        .query_row(params![harness, session_id], |r| {
            Ok(Pending {
                since_ms: r.get(0)?,
                tokens: r.get::<_, Option<i64>>(1)?.map(|t| t.max(0) as u64),
            })
        })
        .optional()?)
}

/// The recovering pass is done: clear the mark, unless a newer overflow
/// arrived since the pass read it.
pub fn clear(tx: &Transaction<'_>, session: i64, seen: &Pending) -> Result<()> {
    tx.prepare_cached(
        "UPDATE sessions SET overflow_ms = NULL, overflow_tokens = NULL
         WHERE id = ?1 AND overflow_ms = ?2",
    )?
    .execute(params![session, seen.since_ms])?;
    Ok(())
}

/// What the pass takes from earlier overflows: the model's learned limit and
/// the session's unrecovered overflow.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recovery {
    pub learned: Option<LearnedLimit>,
    pub pending: Option<Pending>,
}

impl Recovery {
    pub fn load(
        conn: &Connection,
        harness: &str,
        session_id: &str,
        model: &ModelInfo,
    ) -> Result<Recovery> {
        Ok(Recovery {
            learned: match model.key() {
                Some(key) => learned_limit(conn, &key)?,
                None => None,
            },
            pending: pending(conn, harness, session_id)?,
        })
    }

    /// The model with its context limit capped by the learned one.
    pub fn model(&self, model: &ModelInfo) -> ModelInfo {
        cap(model, self.learned.as_ref())
    }

    /// On the recovering pass, the prompt is taken to be at least the
    /// rejected one and at least the emergency band of the window.
    pub fn raise(&self, pressure: &mut Pressure) {
        let Some(pending) = self.pending else { return };
        let band = (pressure.window as f64 * EMERGENCY_PERCENT / 100.0).ceil() as u64;
        let tokens = pressure
            .prompt_tokens
            .max(pending.tokens.unwrap_or(0))
            .max(band);
        pressure.prompt_tokens = tokens;
        pressure.sampled = true;
        pressure.usage_percent = measure::usage_percent(tokens, pressure.window);
    }

    /// The pass report's warning on the recovering pass.
    pub fn warning(&self, window: u64) -> Option<String> {
        let pending = self.pending?;
        let size = pending
            .tokens
            .map(|t| format!(" ({t} tokens)"))
            .unwrap_or_default();
        let limit = self
            .learned
            .as_ref()
            .map(|l| {
                format!(
                    ", the {} tokens the provider stated for {}",
                    l.context_limit, l.model
                )
            })
            .unwrap_or_default();
        Some(format!(
            "the provider rejected this session's last request as too long{size}: emergency \
             pass against a usable window of {window} tokens{limit}"
        ))
    }
}

// ---------------------------------------------------------------------------
// `mc-transform overflow`

/// `{"harness", "session_id", "model": {...}, "error": <text or object>}`.
#[derive(Debug, Clone, PartialEq)]
pub struct OverflowRequest {
    pub harness: String,
    /// The session whose request was rejected (its next pass recovers).
    pub session_id: Option<String>,
    /// The model that rejected it; else the one the session's last pass used.
    pub model: ModelInfo,
    pub error: Value,
}

impl OverflowRequest {
    pub fn from_value(value: Value) -> Result<OverflowRequest> {
        let Value::Object(mut map) = value else {
            return Err(Error::input(
                "overflow input must be a JSON object {\"harness\", \"session_id\", \"model\", \"error\"}",
            ));
        };
        let harness = match map.remove("harness") {
            None | Some(Value::Null) => "opencode".to_string(),
            Some(Value::String(h)) => h,
            Some(_) => return Err(Error::input("\"harness\" must be a string")),
        };
        let session_id = match map.remove("session_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(_) => return Err(Error::input("\"session_id\" must be a string")),
        };
        let model = match map.remove("model") {
            None | Some(Value::Null) => ModelInfo::default(),
            Some(v) => {
                serde_json::from_value(v).map_err(|e| Error::input(format!("\"model\": {e}")))?
            }
        };
        let error = match map.remove("error") {
            None | Some(Value::Null) => {
                return Err(Error::input(
                    "overflow input needs \"error\": the provider's error text or object",
                ));
            }
            Some(error) => error,
        };
        Ok(OverflowRequest {
            harness,
            session_id,
            model,
            error,
        })
    }
}

/// The answer: `{"recognised": false}`, or what was recognised and stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OverflowAnswer {
    pub recognised: bool,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub details: Option<Recognised>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recognised {
    #[serde(flatten)]
    pub overflow: Overflow,
    /// provider/model the limit belongs to, when known.
    pub model: Option<String>,
    /// The limit was stored for the model: every later pass on it uses it.
    pub limit_stored: bool,
    /// The session's next pass recovers as an emergency (a known session).
    pub emergency_next_pass: bool,
}

/// `mc-transform overflow`: recognise the error, store the model's limit and
/// mark the session, in one transaction. An unrecognised error writes nothing.
pub fn report(store: &mut Store, request: &OverflowRequest, now_ms: i64) -> Result<OverflowAnswer> {
    let Some(overflow) = recognise(&request.error) else {
        return Ok(OverflowAnswer {
            recognised: false,
            details: None,
        });
    };
    store.write(|tx| {
        let session = match &request.session_id {
            Some(id) => sessions::find_session(tx, &request.harness, id)?,
            None => None,
        };
        let model = request
            .model
            .key()
            .or_else(|| session.as_ref().and_then(|s| s.last_model_key.clone()));
        let limit_stored = match (overflow.limit, &model) {
            (Some(limit), Some(key)) => {
                tx.prepare_cached(
                    "INSERT INTO model_limits (model_key, context_limit, source, message, learned_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (model_key) DO UPDATE SET context_limit = excluded.context_limit,
                         source = excluded.source, message = excluded.message,
                         learned_ms = excluded.learned_ms",
                )?
                .execute(params![
                    key,
                    limit as i64,
                    overflow.source,
                    overflow.message,
                    now_ms
                ])?;
                true
            }
            _ => false,
        };
        if let Some(session) = &session {
            tx.prepare_cached(
                "UPDATE sessions SET overflow_ms = ?2, overflow_tokens = ?3 WHERE id = ?1",
            )?
            .execute(params![
                session.id,
                now_ms,
                overflow.tokens.map(|t| t as i64)
            ])?;
        }
        Ok(OverflowAnswer {
            recognised: true,
            details: Some(Recognised {
                overflow: overflow.clone(),
                model,
                limit_stored,
                emergency_next_pass: session.is_some(),
            }),
        })
    })
}

/// The answer as a JSON object (for the binary).
impl OverflowAnswer {
    pub fn into_value(self) -> Value {
        serde_json::to_value(self).unwrap_or_else(|_| Value::Object(Map::new()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Real error bodies, as providers send them.
    const ANTHROPIC_BODY: &str = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#;
    const ANTHROPIC_MAX_TOKENS_BODY: &str = r#"{"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` exceed context limit: 197367 + 8192 > 200000, decrease input length or `max_tokens` and try again"}}"#;
    const OPENAI_BODY: &str = r#"{
  "error": {
    "message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 130912 tokens. Please reduce the length of the messages.",
    "type": "invalid_request_error",
    "param": "messages",
    "code": "context_length_exceeded"
  }
}"#;
    const OPENAI_COMPLETION_BODY: &str = r#"{"object":"error","message":"This model's maximum context length is 32768 tokens. However, you requested 33512 tokens (29416 in the messages, 4096 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#;
    const OPENAI_RESPONSES_BODY: &str = r#"{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}"#;
    const COPILOT_BODY: &str = r#"{"error":{"message":"prompt token count of 139639 exceeds the limit of 128000","code":"model_max_prompt_tokens_exceeded"}}"#;
    const COPILOT_BARE_BODY: &str = r#"{"error":{"message":"prompt token count of 93854 exceeds the limit of 90000","param":"","code":"","type":""}}"#;

    fn body(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    fn read(error: Value) -> (&'static str, Option<u64>, Option<u64>) {
        let o = recognise(&error).unwrap_or_else(|| panic!("not recognised: {error}"));
        (o.source, o.limit, o.tokens)
    }

    #[test]
    fn anthropic_bodies_and_messages() {
        let expected = ("anthropic", Some(200_000), Some(210_000));
        assert_eq!(read(body(ANTHROPIC_BODY)), expected);
        // The body as a string (OpenCode's responseBody), and the bare message.
        assert_eq!(read(json!(ANTHROPIC_BODY)), expected);
        assert_eq!(
            read(json!("prompt is too long: 210000 tokens > 200000 maximum")),
            expected
        );
        assert_eq!(
            read(body(ANTHROPIC_MAX_TOKENS_BODY)),
            ("anthropic", Some(200_000), Some(197_367))
        );
        assert_eq!(
            read(json!("Input is too long for requested model.")),
            ("bedrock", None, None)
        );
    }

    #[test]
    fn openai_compatible_bodies() {
        assert_eq!(
            read(body(OPENAI_BODY)),
            ("openai", Some(128_000), Some(130_912))
        );
        assert_eq!(
            read(body(OPENAI_COMPLETION_BODY)),
            ("openai", Some(32_768), Some(29_416))
        );
        assert_eq!(read(body(OPENAI_RESPONSES_BODY)), ("openai", None, None));
        // The code alone says it, whatever the message.
        assert_eq!(
            read(
                json!({"error": {"message": "Request too large", "code": "context_length_exceeded"}})
            ),
            ("openai", None, None)
        );
    }

    #[test]
    fn copilot_bodies() {
        assert_eq!(
            read(body(COPILOT_BODY)),
            ("copilot", Some(128_000), Some(139_639))
        );
        assert_eq!(
            read(body(COPILOT_BARE_BODY)),
            ("copilot", Some(90_000), Some(93_854))
        );
        // As Copilot clients print it.
        assert_eq!(
            read(json!(
                "CAPIError: 400 prompt token count of 184399 exceeds the limit of 128000"
            )),
            ("copilot", Some(128_000), Some(184_399))
        );
    }

    #[test]
    fn opencode_session_error_events() {
        // OpenCode 1.18's session.error event, as the plugin receives it.
        let event = json!({"name": "ContextOverflowError", "data": {
            "message": "prompt is too long: 210000 tokens > 200000 maximum",
            "responseBody": ANTHROPIC_BODY}});
        assert_eq!(
            read(event.clone()),
            ("anthropic", Some(200_000), Some(210_000))
        );
        assert_eq!(
            recognise(
                &json!({"name": "APIError", "data": {"message": "Bad Request",
                "responseBody": ANTHROPIC_BODY}})
            )
            .unwrap()
            .message,
            "prompt is too long: 210000 tokens > 200000 maximum",
            "the body's message, not the body"
        );
        // An APIError whose message is generic: the body carries the numbers.
        let api = json!({"name": "APIError", "data": {"message": "Bad Request", "statusCode": 400,
            "isRetryable": false, "responseBody": COPILOT_BODY}});
        assert_eq!(read(api), ("copilot", Some(128_000), Some(139_639)));
        // OpenCode's own classification, in a wording mc does not know.
        let unknown =
            json!({"name": "ContextOverflowError", "data": {"message": "too big for the model"}});
        let o = recognise(&unknown).unwrap();
        assert_eq!(
            (o.source, o.limit, o.message.as_str()),
            ("harness", None, "too big for the model")
        );
    }

    #[test]
    fn other_errors_are_not_overflows() {
        for error in [
            json!({"name": "MessageAbortedError", "data": {"message": "The operation was aborted."}}),
            json!({"name": "APIError", "data": {"message": "Overloaded", "statusCode": 529, "isRetryable": true,
                "responseBody": r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#}}),
            json!({"type": "error", "error": {"type": "rate_limit_error", "message": "Number of request tokens has exceeded your per-minute rate limit"}}),
            json!(
                "max_tokens: 64000 > 32000, which is the maximum allowed number of output tokens"
            ),
            json!(null),
            json!(42),
            json!("{not json"),
        ] {
            assert_eq!(recognise(&error), None, "{error}");
        }
    }

    #[test]
    fn implausible_numbers_are_dropped() {
        let o = recognise(&json!("prompt is too long: 5 tokens > 7 maximum")).unwrap();
        assert_eq!((o.limit, o.tokens), (None, Some(5)));
        let o = recognise(&json!(
            "prompt is too long: 99999999999999999999 tokens > 200000 maximum"
        ))
        .unwrap();
        assert_eq!((o.limit, o.tokens), (Some(200_000), None));
    }

    #[test]
    fn cap_only_ever_lowers() {
        let learned = LearnedLimit {
            model: "a/b".into(),
            context_limit: 150_000,
            source: "anthropic".into(),
            learned_ms: 1,
        };
        let model = |c| ModelInfo {
            provider: Some("a".into()),
            id: Some("b".into()),
            context_limit: c,
            output_limit: Some(8_000),
        };
        assert_eq!(
            cap(&model(Some(200_000)), Some(&learned)).context_limit,
            Some(150_000)
        );
        assert_eq!(
            cap(&model(Some(100_000)), Some(&learned)).context_limit,
            Some(100_000)
        );
        assert_eq!(
            cap(&model(None), Some(&learned)).context_limit,
            Some(150_000)
        );
        assert_eq!(
            cap(&model(Some(200_000)), None).context_limit,
            Some(200_000)
        );
    }

    #[test]
    fn raise_takes_the_rejected_size_or_the_emergency_band() {
        let pressure = |tokens| Pressure {
            prompt_tokens: tokens,
            sampled: true,
            window: 100_000,
            usage_percent: measure::usage_percent(tokens, 100_000),
        };
        let recovery = |tokens| Recovery {
            learned: None,
            pending: Some(Pending {
                since_ms: 1,
                tokens,
            }),
        };
        let mut p = pressure(40_000);
        recovery(Some(120_000)).raise(&mut p);
        assert_eq!((p.prompt_tokens, p.usage_percent), (120_000, 120.0));
        let mut p = pressure(40_000);
        recovery(None).raise(&mut p);
        assert_eq!((p.prompt_tokens, p.usage_percent), (95_000, 95.0));
        let mut p = pressure(99_000);
        recovery(Some(10_000)).raise(&mut p);
        assert_eq!(p.prompt_tokens, 99_000, "never below the sample");
        let mut p = pressure(40_000);
        Recovery::default().raise(&mut p);
        assert_eq!(p.prompt_tokens, 40_000, "no overflow, no raise");
    }

    #[test]
    fn requests_parse_and_refuse_bad_input() {
        let r = OverflowRequest::from_value(json!({"session_id": "s", "error": "x",
            "model": {"provider": "p", "id": "m"}}))
        .unwrap();
        assert_eq!(r.harness, "opencode");
        assert_eq!(r.model.key().as_deref(), Some("p/m"));
        for bad in [
            json!([]),
            json!({"session_id": "s"}),
            json!({"error": "x", "session_id": 3}),
            json!({"error": "x", "model": "m"}),
        ] {
            assert!(matches!(
                OverflowRequest::from_value(bad),
                Err(Error::Input(_))
            ));
        }
    }

    #[test]
    fn an_unrecognised_error_answers_false_and_writes_nothing() {
        let mut store = Store::open_in_memory().unwrap();
        let request = OverflowRequest::from_value(json!({"session_id": "s", "error": "Overloaded",
            "model": {"provider": "p", "id": "m"}}))
        .unwrap();
        let answer = report(&mut store, &request, 5).unwrap();
        assert_eq!(answer.clone().into_value(), json!({"recognised": false}));
        let n: i64 = store
            .conn()
            .query_row("SELECT count(*) FROM model_limits", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 0);
    }
}

//! What every tool is told about a call: the envelope (README, mc-transform), the
//! model and its limits, the provider's usage sample.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::{Error, Result};

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct ModelInfo {
    #[serde(default)]
    pub provider: Option<String>,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub context_limit: Option<u64>,
    #[serde(default)]
    pub output_limit: Option<u64>,
}

impl ModelInfo {
    /// `provider/model`, the key model changes are detected on.
    pub fn key(&self) -> Option<String> {
        match (&self.provider, &self.id) {
            (Some(p), Some(m)) => Some(format!("{p}/{m}")),
            (None, Some(m)) => Some(m.clone()),
            _ => None,
        }
    }
}

/// Provider-reported token usage of the latest response.
#[derive(Debug, Clone, Copy, Default, Deserialize, serde::Serialize, PartialEq)]
pub struct Usage {
    #[serde(default)]
    pub input: u64,
    #[serde(default)]
    pub cache_read: u64,
    #[serde(default)]
    pub cache_write: u64,
    #[serde(default)]
    pub output: u64,
}

impl Usage {
    /// What the prompt occupied: every input token, cached or not. The
    /// harness's numbers may be anything, so the sum saturates.
    pub fn prompt_tokens(&self) -> u64 {
        self.input
            .saturating_add(self.cache_read)
            .saturating_add(self.cache_write)
    }
}

#[derive(Debug, Clone)]
pub struct Envelope {
    pub harness: String,
    pub session_id: Option<String>,
    pub project_dir: Option<PathBuf>,
    pub model: ModelInfo,
    pub usage: Option<Usage>,
    pub now_ms: Option<i64>,
    pub subagent: bool,
    /// The adapter can run the historian and wait for it: when a blocking
    /// fold is due, the pass answers `wait` before writing anything.
    pub wait_for_fold: bool,
    pub system: Option<Value>,
    pub messages: Vec<Value>,
}

pub const SUPPORTED_HARNESSES: &[&str] = &["opencode", "pi"];

/// The `harness` (default `opencode`) and the required `session_id` of a
/// subcommand's request; `what` names the request in the error.
pub fn session_key(map: &Map<String, Value>, what: &str) -> Result<(String, String)> {
    let harness = match map.get("harness") {
        None | Some(Value::Null) => "opencode".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(Error::input("\"harness\" must be a string")),
    };
    let session_id = map
        .get("session_id")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::input(format!("{what} input needs \"session_id\"")))?
        .to_string();
    Ok((harness, session_id))
}

impl Envelope {
    /// The session the pass will work on: `session_id`, else the
    /// `info.sessionID` of the newest user message that has one, else of any
    /// message (as the pass derives it after decoding).
    pub fn session_hint(&self) -> Option<String> {
        if let Some(id) = &self.session_id {
            return Some(id.clone());
        }
        let session_of = |m: &Value| m.pointer("/info/sessionID")?.as_str().map(str::to_string);
        let role_is_user =
            |m: &&Value| m.pointer("/info/role").and_then(Value::as_str) == Some("user");
        self.messages
            .iter()
            .rev()
            .filter(role_is_user)
            .chain(self.messages.iter().rev())
            .find_map(session_of)
    }

    /// Parse a decoded JSON document. Missing `messages` or a wrong type is
    /// an input error (the binary exits 2); unknown top-level keys are ignored.
    pub fn from_value(value: Value) -> Result<Envelope> {
        let Value::Object(mut map) = value else {
            return Err(Error::input(
                "input must be a JSON object with a \"messages\" array",
            ));
        };
        let messages = match map.remove("messages") {
            Some(Value::Array(items)) => items,
            Some(_) => return Err(Error::input("\"messages\" must be an array")),
            None => return Err(Error::input("input has no \"messages\" array")),
        };
        let harness = match map.remove("harness") {
            None | Some(Value::Null) => "opencode".to_string(),
            Some(Value::String(h)) => h,
            Some(_) => return Err(Error::input("\"harness\" must be a string")),
        };
        if !SUPPORTED_HARNESSES.contains(&harness.as_str()) {
            return Err(Error::input(format!(
                "harness {harness:?} is not supported yet (supported: {})",
                SUPPORTED_HARNESSES.join(", ")
            )));
        }
        Ok(Envelope {
            harness,
            session_id: take_field(&mut map, "session_id")?,
            project_dir: take_field(&mut map, "project_dir")?,
            model: take_field(&mut map, "model")?.unwrap_or_default(),
            usage: take_field(&mut map, "usage")?,
            now_ms: take_field(&mut map, "now_ms")?,
            subagent: take_field(&mut map, "subagent")?.unwrap_or(false),
            wait_for_fold: take_field(&mut map, "wait_for_fold")?.unwrap_or(false),
            system: map.remove("system").filter(|v| !v.is_null()),
            messages,
        })
    }
}

fn take_field<T: serde::de::DeserializeOwned>(
    map: &mut Map<String, Value>,
    key: &str,
) -> Result<Option<T>> {
    match map.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v)
            .map(Some)
            .map_err(|e| Error::input(format!("\"{key}\": {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_the_design_envelope() {
        let env = Envelope::from_value(json!({
            "harness": "opencode", "session_id": "ses_1", "project_dir": "/r",
            "model": {"provider": "anthropic", "id": "claude", "context_limit": 200000, "output_limit": 32000},
            "usage": {"input": 1, "cache_read": 2, "cache_write": 3, "output": 4},
            "now_ms": 7, "subagent": true, "system": ["s"], "messages": [], "extra": 1
        }))
        .unwrap();
        assert_eq!(env.session_id.as_deref(), Some("ses_1"));
        assert_eq!(env.model.key().as_deref(), Some("anthropic/claude"));
        assert_eq!(env.usage.unwrap().prompt_tokens(), 6);
        assert_eq!(env.now_ms, Some(7));
        assert!(env.subagent);
        assert_eq!(env.system, Some(json!(["s"])));
    }

    #[test]
    fn missing_or_wrong_messages_is_input_error() {
        for bad in [
            json!({}),
            json!({"messages": {}}),
            json!([1]),
            json!({"messages": [], "harness": "nope"}),
        ] {
            assert!(matches!(Envelope::from_value(bad), Err(Error::Input(_))));
        }
        let err = Envelope::from_value(json!({"messages": [], "now_ms": "soon"})).unwrap_err();
        assert!(err.to_string().contains("now_ms"), "{err}");
    }
}

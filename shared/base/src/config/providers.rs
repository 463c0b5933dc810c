//! The `providers` map: named model providers the historian (and later other
//! tools) call. A map of user-chosen names cannot live in the key table, so
//! it has its own validator here; the JSON Schema comes from the same
//! constants ([`schema`]).
//!
//! Every provider is user-only: a provider says where prompts go, which
//! environment variable holds a secret and which program runs, so a project
//! file (a cloned repository) may not define or change one.

use serde::Serialize;
use serde_json::{Map, Value, json};

/// How a provider is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// Anthropic's Messages API: `POST <base_url>/v1/messages`.
    Anthropic,
    /// An OpenAI-compatible chat-completions API: `POST <base_url>/chat/completions`
    /// (OpenAI, OpenRouter, Ollama, llama.cpp, LM Studio, vLLM).
    Openai,
    /// A program that reads the prompt on stdin and prints the answer.
    Command,
    /// A running OpenCode server (`opencode serve`): the prompt goes to a
    /// hidden child session on the model the server names, with the user's
    /// own provider login; no key passes through mc. Without a `base_url`,
    /// the server the run was given (`--opencode-url`, `OPENCODE_URL`).
    Opencode,
}

impl ProviderKind {
    pub const ALL: [ProviderKind; 4] = [
        ProviderKind::Anthropic,
        ProviderKind::Openai,
        ProviderKind::Command,
        ProviderKind::Opencode,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Openai => "openai",
            ProviderKind::Command => "command",
            ProviderKind::Opencode => "opencode",
        }
    }

    /// The base URL used when a provider of this kind names none.
    fn default_base_url(self) -> Option<&'static str> {
        match self {
            ProviderKind::Anthropic => Some("https://api.anthropic.com"),
            ProviderKind::Openai => Some("https://api.openai.com/v1"),
            ProviderKind::Command | ProviderKind::Opencode => None,
        }
    }
}

/// One entry of `providers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProviderConfig {
    pub kind: ProviderKind,
    /// HTTP kinds: where the API lives (the kind's default when not written);
    /// `opencode`: the server's URL (else the server the run was given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// HTTP kinds: the environment variable holding the API key. Without it no
    /// key is sent (local servers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// `command`: the program and its arguments. `{model}` in an argument is
    /// replaced by the model part of `provider/model`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
}

impl ProviderConfig {
    /// The base URL to call: the configured one, else the kind's default.
    pub fn effective_base_url(&self) -> Option<&str> {
        self.base_url
            .as_deref()
            .or_else(|| self.kind.default_base_url())
    }
}

/// Provider names: what goes before the slash of `provider/model`.
pub(crate) fn is_provider_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && name.len() <= 128
}

const FIELDS: [&str; 4] = ["kind", "base_url", "api_key_env", "command"];

/// Validate one entry. `Err` is why the whole entry is refused (it completes
/// "providers.NAME …"); `Ok` carries warnings about fields that were ignored.
pub(super) fn parse(name: &str, value: &Value) -> Result<(ProviderConfig, Vec<String>), String> {
    if !is_provider_name(name) {
        return Err(
            "is not a valid provider name (letters, digits, \"_\", \".\" and \"-\")".into(),
        );
    }
    let Value::Object(map) = value else {
        return Err("is not an object".into());
    };
    let kind = match map.get("kind").and_then(Value::as_str) {
        Some(k) => ProviderKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == k)
            .ok_or_else(|| {
                format!(
                    "kind {} is not anthropic, openai, command or opencode",
                    show(k)
                )
            })?,
        None => return Err("has no \"kind\" (anthropic, openai, command or opencode)".into()),
    };
    let mut warnings = Vec::new();
    for field in map.keys().filter(|f| !FIELDS.contains(&f.as_str())) {
        let hint = match field.as_str() {
            "api_key" | "key" | "apiKey" => {
                "; API keys are never written in config: name the environment variable \
                 holding it with \"api_key_env\""
            }
            "url" | "baseURL" | "base" => "; did you mean \"base_url\"?",
            "cmd" | "argv" | "program" => "; did you mean \"command\"?",
            _ => "",
        };
        warnings.push(format!("unknown field {}{hint}", show(field)));
    }
    let base_url = match map.get("base_url") {
        None | Some(Value::Null) => None,
        Some(Value::String(url)) if kind != ProviderKind::Command => {
            let url = url.trim();
            let rest = url
                .strip_prefix("https://")
                .or_else(|| url.strip_prefix("http://"));
            if rest.is_none_or(|r| r.is_empty() || r.starts_with('/')) {
                return Err(format!(
                    "base_url {} is not an http:// or https:// URL",
                    show(url)
                ));
            }
            Some(url.trim_end_matches('/').to_string())
        }
        Some(Value::String(_)) => {
            warnings.push("base_url is ignored for a command provider".into());
            None
        }
        Some(other) => return Err(format!("base_url {} is not a string", show_value(other))),
    };
    let api_key_env = match map.get("api_key_env") {
        None | Some(Value::Null) => None,
        // Never echo the value: users sometimes paste the key itself here.
        Some(Value::String(var)) if is_env_name(var) => {
            if kind == ProviderKind::Command {
                warnings.push(
                    "api_key_env is ignored for a command provider (the program has its own login)"
                        .into(),
                );
                None
            } else if kind == ProviderKind::Opencode {
                warnings.push(
                    "api_key_env is ignored for an opencode provider (OpenCode uses its own login)"
                        .into(),
                );
                None
            } else {
                Some(var.clone())
            }
        }
        Some(_) => {
            return Err(
                "api_key_env is not an environment variable name (it names the \
                        variable that holds the key, not the key itself)"
                    .into(),
            );
        }
    };
    let command = match (kind, map.get("command")) {
        (ProviderKind::Command, Some(Value::Array(items))) => {
            let argv = items
                .iter()
                .map(|a| a.as_str().map(str::to_string))
                .collect::<Option<Vec<String>>>()
                .ok_or("command is not a list of strings")?;
            if argv.first().is_none_or(|p| p.trim().is_empty()) {
                return Err("command needs a program as its first element".into());
            }
            Some(argv)
        }
        (ProviderKind::Command, None | Some(Value::Null)) => {
            return Err(
                "has no \"command\" (the program and its arguments, e.g. [\"claude\", \"-p\"])"
                    .into(),
            );
        }
        (ProviderKind::Command, Some(_)) => {
            return Err("command is not a list of strings".into());
        }
        (_, None | Some(Value::Null)) => None,
        (_, Some(_)) => {
            warnings.push(format!(
                "command is ignored for an {} provider",
                match kind {
                    ProviderKind::Opencode => "opencode",
                    _ => "HTTP",
                }
            ));
            None
        }
    };
    Ok((
        ProviderConfig {
            kind,
            base_url,
            api_key_env,
            command,
        },
        warnings,
    ))
}

fn show(text: &str) -> String {
    show_value(&Value::from(text))
}

fn show_value(value: &Value) -> String {
    super::show(value)
}

/// The schema of the `providers` object.
pub(super) fn schema() -> Value {
    let name_pattern = "^[A-Za-z0-9_.-]{1,64}$";
    let kinds: Vec<&str> = ProviderKind::ALL.iter().map(|k| k.as_str()).collect();
    let mut entry = Map::new();
    entry.insert(
        "description".into(),
        "One provider. anthropic: Anthropic's Messages API (POST <base_url>/v1/messages). \
         openai: an OpenAI-compatible chat-completions API (POST <base_url>/chat/completions): \
         OpenAI, OpenRouter, Ollama, llama.cpp, LM Studio, vLLM. command: a program that reads \
         the prompt on stdin and prints the answer on stdout (e.g. [\"claude\", \"-p\"]). \
         opencode: a running OpenCode server (a hidden child session on the model written \
         \"providerID/modelID\" after the provider's name, with OpenCode's own login)."
            .into(),
    );
    entry.insert("type".into(), "object".into());
    entry.insert(
        "properties".into(),
        json!({
            "kind": {
                "description": "How the provider is called.",
                "enum": kinds,
            },
            "base_url": {
                "description": "HTTP kinds: the API's base URL. Defaults: anthropic \
                                https://api.anthropic.com, openai https://api.openai.com/v1. \
                                opencode: the server's URL (default: the server the run was \
                                given, --opencode-url or OPENCODE_URL).",
                "type": "string",
                "pattern": "^https?://[^/]",
            },
            "api_key_env": {
                "description": "HTTP kinds: the name of the environment variable holding the \
                                API key. Without it no key is sent. The key itself never \
                                goes in a config file.",
                "type": "string",
                "pattern": "^[A-Za-z_][A-Za-z0-9_]*$",
            },
            "command": {
                "description": "command kind: the program and its arguments. The prompt is \
                                written to its stdin and its stdout is the answer. \"{model}\" \
                                in an argument is replaced by the model part of \
                                \"provider/model\".",
                "type": "array",
                "items": {"type": "string"},
                "minItems": 1,
            },
        }),
    );
    entry.insert("required".into(), json!(["kind"]));
    entry.insert("additionalProperties".into(), false.into());
    entry.insert(
        "allOf".into(),
        json!([{
            "if": {"properties": {"kind": {"const": "command"}}},
            "then": {"required": ["command"]},
        }]),
    );
    json!({
        "description": "Model providers by name; models elsewhere are written \"name/model\". \
                        User-only: ignored, with a warning, when set in a project file.",
        "type": "object",
        "propertyNames": {"pattern": name_pattern},
        "additionalProperties": Value::Object(entry),
        "default": {},
    })
}

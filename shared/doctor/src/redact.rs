//! Redaction for `--issue`: home paths and user names first, then secrets —
//! known API-key shapes, bearer tokens, JWTs, PEM private keys, and the
//! values of key/token/secret/password-named fields and assignments.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use super::Env;

/// Words that make a field's value secret.
const SECRET_WORDS: &str = "key|token|secret|password|passwd|auth|bearer|credential";

#[allow(clippy::expect_used)] // constant patterns, proven by the tests
fn re(pattern: &str) -> Regex {
    Regex::new(pattern).expect("a valid pattern")
}

/// (pattern, replacement) for token shapes, in order (Anthropic before OpenAI).
static SHAPES: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    vec![
        (
            re(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"),
            "<PRIVATE_KEY_REDACTED>",
        ),
        (
            re(r"sk-ant-(?:api03-)?[A-Za-z0-9_\-]{32,}"),
            "<ANTHROPIC_API_KEY_REDACTED>",
        ),
        (
            re(r"sk-(?:proj-)?[A-Za-z0-9_\-]{32,}"),
            "<OPENAI_API_KEY_REDACTED>",
        ),
        (
            re(r"github_pat_[A-Za-z0-9_]{20,}"),
            "<GITHUB_TOKEN_REDACTED>",
        ),
        (
            re(r"\bgh[opsur]_[A-Za-z0-9]{30,}"),
            "<GITHUB_TOKEN_REDACTED>",
        ),
        (
            re(r"\bglpat-[A-Za-z0-9_\-]{20,}"),
            "<GITLAB_TOKEN_REDACTED>",
        ),
        (re(r"\bhf_[A-Za-z0-9]{30,}"), "<HF_TOKEN_REDACTED>"),
        (re(r"\bnpm_[A-Za-z0-9]{36}"), "<NPM_TOKEN_REDACTED>"),
        (re(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), "<AWS_KEY_REDACTED>"),
        (
            re(r"\bxox[abprsuvc]-[A-Za-z0-9\-]{10,}"),
            "<SLACK_TOKEN_REDACTED>",
        ),
        (re(r"\bAIza[0-9A-Za-z_\-]{35}"), "<GOOGLE_API_KEY_REDACTED>"),
        (
            re(r"\beyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{4,}"),
            "<JWT_REDACTED>",
        ),
    ]
});

static BEARER: LazyLock<Regex> = LazyLock::new(|| re(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=\-]{8,}"));

static QUOTED_PAIR: LazyLock<Regex> = LazyLock::new(|| {
    re(&format!(
        r#"(?i)"([A-Za-z0-9_.\-]*(?:{SECRET_WORDS})[A-Za-z0-9_.\-]*)"(\s*:\s*)"((?:[^"\\]|\\.)*)""#
    ))
});

static ASSIGNMENT: LazyLock<Regex> = LazyLock::new(|| {
    re(&format!(
        r#"(?i)\b([A-Za-z0-9_]*(?:{SECRET_WORDS})[A-Za-z0-9_]*)(\s*[=:]\s*)([^\s'",;]+)"#
    ))
});

/// A value that only names a variable (`ANTHROPIC_API_KEY`, `$KEY`,
/// `<placeholder>`), or is already redacted: not a secret.
fn harmless(value: &str) -> bool {
    let v = value.trim();
    v.is_empty()
        || v.eq_ignore_ascii_case("bearer")
        || v.eq_ignore_ascii_case("basic")
        || v.starts_with('<')
        || v.starts_with('$')
        || v.starts_with("{env:")
        || (v
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
            && v.bytes().next().is_some_and(|b| b.is_ascii_uppercase()))
}

fn last_segment(key: &str) -> &str {
    key.rsplit(['.', '_', '-']).next().unwrap_or(key)
}

/// Secrets in `text` replaced by markers.
pub fn secrets(text: &str) -> String {
    let mut out = text.to_string();
    for (pattern, replacement) in SHAPES.iter() {
        out = pattern.replace_all(&out, *replacement).into_owned();
    }
    out = BEARER
        .replace_all(&out, "${1}<REDACTED:bearer>")
        .into_owned();
    out = QUOTED_PAIR
        .replace_all(&out, |c: &regex::Captures<'_>| {
            let key = c.get(1).map_or("", |m| m.as_str());
            let sep = c.get(2).map_or("", |m| m.as_str());
            let value = c.get(3).map_or("", |m| m.as_str());
            if harmless(value) {
                format!("\"{key}\"{sep}\"{value}\"")
            } else {
                format!("\"{key}\"{sep}\"<REDACTED:{}>\"", last_segment(key))
            }
        })
        .into_owned();
    out = ASSIGNMENT
        .replace_all(&out, |c: &regex::Captures<'_>| {
            let key = c.get(1).map_or("", |m| m.as_str());
            let sep = c.get(2).map_or("", |m| m.as_str());
            let value = c.get(3).map_or("", |m| m.as_str());
            if harmless(value) || value.len() < 6 {
                format!("{key}{sep}{value}")
            } else {
                format!("{key}{sep}<REDACTED:{}>", last_segment(key))
            }
        })
        .into_owned();
    out
}

/// Home paths as `~`, other users' home folders and the user name as `<USER>`.
pub fn paths(env: &Env, text: &str) -> String {
    let mut out = text.to_string();
    let home = env.home.display().to_string();
    if home.len() > 1 {
        out = out.replace(&home, "~");
    }
    static HOMES: LazyLock<Regex> = LazyLock::new(|| re(r"(/Users/|/home/|C:\\Users\\)[^/\\\s]+"));
    out = HOMES.replace_all(&out, "${1}<USER>").into_owned();
    if let Some(user) = env.var("USER").or_else(|| env.var("LOGNAME"))
        && user.len() >= 3
        && let Ok(word) = Regex::new(&format!(r"\b{}\b", regex::escape(user)))
    {
        out = word.replace_all(&out, "<USER>").into_owned();
    }
    out
}

/// Paths, then secrets.
pub fn all(env: &Env, text: &str) -> String {
    secrets(&paths(env, text))
}

/// A config value with every secret-named key's value replaced, and strings
/// sanitised.
pub fn config(env: &Env, value: &Value) -> Value {
    static WORDS: LazyLock<Regex> = LazyLock::new(|| re(&format!("(?i)(?:{SECRET_WORDS})")));
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::String(s) if WORDS.is_match(k) && !harmless(s) => {
                            Value::String(format!("<REDACTED:{k}>"))
                        }
                        other => config(env, other),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(|v| config(env, v)).collect()),
        Value::String(s) => Value::String(all(env, s)),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn env() -> Env {
        let mut env = Env {
            home: PathBuf::from("/home/alice"),
            ..Env::default()
        };
        env.vars.insert("USER".into(), "alice".into());
        env
    }

    #[test]
    fn each_secret_shape_is_redacted() {
        let cases = [
            (
                "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcd",
                "<ANTHROPIC_API_KEY_REDACTED>",
            ),
            (
                "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
                "<OPENAI_API_KEY_REDACTED>",
            ),
            (
                "sk-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
                "<OPENAI_API_KEY_REDACTED>",
            ),
            (
                "github_pat_11ABCDEFG0123456789_abcdefghij",
                "<GITHUB_TOKEN_REDACTED>",
            ),
            (
                "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
                "<GITHUB_TOKEN_REDACTED>",
            ),
            ("glpat-abcdefghij0123456789", "<GITLAB_TOKEN_REDACTED>"),
            (
                "hf_abcdefghijklmnopqrstuvwxyz0123456789",
                "<HF_TOKEN_REDACTED>",
            ),
            ("AKIAABCDEFGHIJKLMNOP", "<AWS_KEY_REDACTED>"),
            ("xoxb-1234567890-abcdefghij", "<SLACK_TOKEN_REDACTED>"),
            (
                "AIzaSyA-abcdefghijklmnopqrstuvwxyz01234",
                "<GOOGLE_API_KEY_REDACTED>",
            ),
            (
                "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
                "<JWT_REDACTED>",
            ),
            (
                "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
                "<PRIVATE_KEY_REDACTED>",
            ),
        ];
        for (secret, marker) in cases {
            let text = format!("before {secret} after");
            let out = secrets(&text);
            assert_eq!(out, format!("before {marker} after"), "{secret}");
        }
    }

    #[test]
    fn bearer_tokens_keep_their_prefix() {
        let out = secrets("Authorization: Bearer abc.def-ghi_jkl012");
        assert_eq!(out, "Authorization: Bearer <REDACTED:bearer>");
    }

    #[test]
    fn named_values_are_redacted_but_variable_names_are_not() {
        let out = secrets(
            r#"{"api_key": "hunter2hunter2", "api_key_env": "ANTHROPIC_API_KEY", "model": "a/b"}"#,
        );
        assert_eq!(
            out,
            r#"{"api_key": "<REDACTED:key>", "api_key_env": "ANTHROPIC_API_KEY", "model": "a/b"}"#
        );
        let out = secrets("export DB_PASSWORD=correct-horse-battery and MY_TOKEN=$OTHER");
        assert_eq!(
            out,
            "export DB_PASSWORD=<REDACTED:PASSWORD> and MY_TOKEN=$OTHER"
        );
        let out = secrets("client_secret: s3cr3t-value-here");
        assert_eq!(out, "client_secret: <REDACTED:secret>");
    }

    #[test]
    fn home_paths_and_user_names() {
        let e = env();
        assert_eq!(
            paths(
                &e,
                "/home/alice/.config/mc and /home/bob/x and /Users/carol/y, user alice"
            ),
            "~/.config/mc and /home/<USER>/x and /Users/<USER>/y, user <USER>"
        );
    }

    #[test]
    fn config_values_under_secret_keys() {
        let e = env();
        let v = serde_json::json!({"providers": {"x": {"api_key_env": "KEY_VAR", "password": "p4ssw0rd!", "base_url": "http://h/home/alice"}}});
        let out = config(&e, &v);
        assert_eq!(out["providers"]["x"]["password"], "<REDACTED:password>");
        assert_eq!(out["providers"]["x"]["api_key_env"], "KEY_VAR");
        assert_eq!(out["providers"]["x"]["base_url"], "http://h~");
    }
}

//! Does a text look like it holds a secret? Team memory never writes one to
//! the repository nor takes one from it, and verify never sends one to a
//! model.
//!
//! The rule, three parts, any one of which is enough:
//!
//! 1. **A known token shape**: `sk-…` (OpenAI, Anthropic), `ghp_`/`gho_`/
//!    `ghu_`/`ghs_`/`ghr_`/`github_pat_` (GitHub), `glpat-` (GitLab),
//!    `xox[abprs]-` (Slack), `AKIA`/`ASIA` + 16 (AWS access keys), `AIza` + 35
//!    (Google), `hf_` (Hugging Face), `npm_`, a JWT (`eyJ….eyJ….…`), or a PEM
//!    `-----BEGIN … PRIVATE KEY-----` block.
//! 2. **A secret-named assignment**: a name ending in `api_key`, `apikey`,
//!    `secret`, `token`, `password`/`passwd`/`pwd`, `private_key`,
//!    `access_key`, `client_secret`, `credential(s)` or `bearer`, then `=`,
//!    `:` or `=>`, then a value of 8 or more characters that has a digit or is
//!    16 or longer — unless the value is a reference, not a secret: `$VAR`,
//!    `${VAR}`, `<placeholder>`, `%s`, an ALL_CAPS variable name, a call
//!    (`(`), or a word like `example`, `placeholder`, `changeme`, `xxxx`.
//! 3. **A high-entropy token**: 24 or more characters of `[A-Za-z0-9+/=_-]`
//!    with upper case, lower case and at least two digits, switching between
//!    those classes at a third of its characters or more, whose Shannon
//!    entropy is at least 4.0 bits per character. (Hex digests and UUIDs have
//!    no upper case; paths repeat their letters; CamelCase identifiers switch
//!    case only between words.)

use std::sync::OnceLock;

use regex::Regex;

fn token_shapes() -> Option<&'static Regex> {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(
            r"(?x)
            \b(
                sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}
              | gh[pousr]_[A-Za-z0-9]{20,}
              | github_pat_[A-Za-z0-9_]{20,}
              | glpat-[A-Za-z0-9_\-]{20,}
              | xox[abprs]-[A-Za-z0-9\-]{10,}
              | (?:AKIA|ASIA)[A-Z0-9]{16}
              | AIza[0-9A-Za-z_\-]{35}
              | hf_[A-Za-z0-9]{30,}
              | npm_[A-Za-z0-9]{36}
              | eyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}
            )
            | -----BEGIN\ [A-Z\ ]*PRIVATE\ KEY-----",
        )
        .ok()
    })
    .as_ref()
}

fn assignments() -> Option<&'static Regex> {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(
            r#"(?ix)
            \b([a-z0-9_.\-]*?(?:api[_\-]?key|secret|token|passw(?:or)?d|pwd|private[_\-]?key
                |access[_\-]?key|client[_\-]?secret|credentials?|bearer))
            ["']?\s*(?:=>|=|:)\s*["']?([^\s"'`,;]{8,})"#,
        )
        .ok()
    })
    .as_ref()
}

fn tokens() -> Option<&'static Regex> {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"[A-Za-z0-9+/=_\-]{24,}").ok())
        .as_ref()
}

/// Why `text` looks like it holds a secret, or `None`.
pub fn secret_reason(text: &str) -> Option<String> {
    // The patterns are constants that compile (the tests run them).
    if let Some(m) = token_shapes().and_then(|re| re.find(text)) {
        let shown: String = m.as_str().chars().take(4).collect();
        return Some(format!("a token shaped like a credential ({shown}…)"));
    }
    for caps in assignments()
        .into_iter()
        .flat_map(|re| re.captures_iter(text))
    {
        let (Some(name), Some(value)) = (caps.get(1), caps.get(2)) else {
            continue;
        };
        if looks_like_secret_value(value.as_str()) {
            return Some(format!("a value assigned to {:?}", name.as_str()));
        }
    }
    for m in tokens().into_iter().flat_map(|re| re.find_iter(text)) {
        if high_entropy(m.as_str()) {
            let shown: String = m.as_str().chars().take(4).collect();
            return Some(format!("a high-entropy token ({shown}…)"));
        }
    }
    None
}

fn looks_like_secret_value(value: &str) -> bool {
    let lower = value.to_ascii_lowercase();
    let reference = value.starts_with('$')
        || value.starts_with('<')
        || value.starts_with('%')
        || value.starts_with('{')
        || value.contains('(')
        || value
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        || [
            "example",
            "placeholder",
            "changeme",
            "your",
            "xxxx",
            "****",
            "redacted",
        ]
        .iter()
        .any(|w| lower.contains(w));
    if reference {
        return false;
    }
    value.chars().any(|c| c.is_ascii_digit()) || value.chars().count() >= 16
}

fn high_entropy(token: &str) -> bool {
    let upper = token.chars().any(|c| c.is_ascii_uppercase());
    let lower = token.chars().any(|c| c.is_ascii_lowercase());
    let digits = token.chars().filter(char::is_ascii_digit).count();
    // Random text switches between upper case, lower case and digits at
    // most characters; a CamelCase identifier only at its word boundaries.
    let class = |c: char| {
        (
            c.is_ascii_uppercase(),
            c.is_ascii_lowercase(),
            c.is_ascii_digit(),
        )
    };
    let chars: Vec<char> = token.chars().collect();
    let switches = chars
        .windows(2)
        .filter(|w| matches!(w, [a, b] if class(*a) != class(*b)))
        .count();
    upper && lower && digits >= 2 && switches * 3 >= chars.len() && entropy(token) >= 4.0
}

/// Shannon entropy of the characters of `text`, bits per character.
fn entropy(text: &str) -> f64 {
    let mut counts = std::collections::BTreeMap::<char, usize>::new();
    let mut total = 0usize;
    for c in text.chars() {
        *counts.entry(c).or_default() += 1;
        total += 1;
    }
    if total == 0 {
        return 0.0;
    }
    counts
        .values()
        .map(|&n| {
            let p = n as f64 / total as f64;
            -p * p.log2()
        })
        .sum()
}

/// `text` with every line that looks like it holds a secret replaced by a
/// marker (what verify sends a model from the project's files).
pub fn redact_lines(text: &str) -> String {
    text.lines()
        .map(|line| {
            if secret_reason(line).is_some() {
                "[line withheld: it looks like it holds a secret]"
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patterns_compile() {
        assert!(token_shapes().is_some() && assignments().is_some() && tokens().is_some());
    }

    #[test]
    fn credentials_are_caught() {
        for secret in [
            "The key is sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv",
            "export OPENAI_API_KEY=sk-proj-1234567890abcdefghij",
            "token ghp_0123456789abcdefghijABCDEFGHIJ012345",
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
            "AWS uses AKIAIOSFODNN7EXAMPLE as the access key id",
            "slack xoxb-1234567890-abcdefghij",
            "google AIzaSyA-1234567890abcdefghijklmnopqrstu",
            "-----BEGIN OPENSSH PRIVATE KEY-----",
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
            "db password = hunter2hunter2",
            "DATABASE_PASSWORD: \"Tr0ub4dor&3x\"",
            "api_key=9f8e7d6c5b4a39281706",
            "client_secret: correcthorsebatterystaple",
            "The staging token is Zk9QmX2vR7tL4pW8nB3cY6hJ1sD5fG0a",
        ] {
            assert!(secret_reason(secret).is_some(), "missed: {secret}");
        }
    }

    #[test]
    fn ordinary_memories_are_not_secrets() {
        for text in [
            "Never log API keys; read them from the variable api_key_env names.",
            "providers.anthropic.api_key_env names ANTHROPIC_API_KEY",
            "The password field must be at least 12 characters.",
            "token: see src/auth/token.rs",
            "api_key = os.environ(\"KEY\")",
            "password = ${DB_PASSWORD}",
            "secret: <your secret here>",
            "Migrations live in shared/src/store/migrations/0010_dream.sql",
            "Commit 3f9a2c1b7e4d5a6b8c9d0e1f2a3b4c5d6e7f8a9b fixed the lease.",
            "Session ids look like 550e8400-e29b-41d4-a716-446655440000.",
            "Use HistorianConfigV2Builder for the chain; risk-free defaults.",
            "Run cargo test -p mc-tests --test suite before pushing.",
            "The tokenizer counts tokens with tiktoken-rs cl100k_base.",
        ] {
            assert_eq!(secret_reason(text), None, "false alarm: {text}");
        }
    }

    #[test]
    fn redaction_withholds_whole_lines() {
        let text = "fn main() {}\nlet key = \"sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv\";\nok";
        assert_eq!(
            redact_lines(text),
            "fn main() {}\n[line withheld: it looks like it holds a secret]\nok"
        );
    }
}

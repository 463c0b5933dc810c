//! `--issue`: a Markdown report to attach to a bug — versions, platform,
//! the effective config (sanitised), the check results, recent failures and
//! the last lines of mc's logs — with home paths and secrets redacted. It
//! is written to a file; nothing is sent anywhere.

use std::path::PathBuf;

use super::{Check, Env, redact};
use mc_base::config;

/// How many lines of each log the report keeps.
pub const LOG_LINES: usize = 50;

/// The report's text.
pub fn report(env: &Env, checks: &[Check], logs: &[PathBuf]) -> String {
    let mut out = String::new();
    out.push_str("# mc issue report\n\n");
    out.push_str("## Description\n\n(what happened, and what you expected)\n\n");
    out.push_str("## Environment\n\n");
    out.push_str(&format!("- mc-doctor {}\n", env.version));
    out.push_str(&format!(
        "- platform: {} {}\n",
        std::env::consts::OS,
        std::env::consts::ARCH
    ));
    for check in checks
        .iter()
        .filter(|c| c.id.starts_with("binary.") || c.id.ends_with(".version"))
    {
        out.push_str(&format!("- {}\n", check.what));
    }
    out.push_str(&format!("- database: {}\n", env.tilde(&env.db)));
    out.push_str("\n## Configuration\n\n");
    let loaded = config::load(&env.layers);
    for source in &loaded.sources {
        out.push_str(&format!("- read {}\n", env.tilde(source)));
    }
    let value = serde_json::to_value(&loaded.config).unwrap_or_default();
    let clean = redact::config(env, &value);
    out.push_str("\n```json\n");
    out.push_str(&serde_json::to_string_pretty(&clean).unwrap_or_default());
    out.push_str("\n```\n\n## Checks\n\n```\n");
    out.push_str(&super::render(checks, false));
    out.push_str("```\n");
    for log in logs {
        let Ok(text) = std::fs::read_to_string(log) else {
            continue;
        };
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines
            .get(lines.len().saturating_sub(LOG_LINES)..)
            .unwrap_or_default();
        out.push_str(&format!(
            "\n## Log {} (last {} lines)\n\n```\n",
            env.tilde(log),
            tail.len()
        ));
        for line in tail {
            out.push_str(line);
            out.push('\n');
        }
        out.push_str("```\n");
    }
    redact::all(env, &out)
}

/// The report's file name for `now_ms`: `mc-issue-YYYYMMDD-HHMMSS.md`.
pub fn file_name(now_ms: i64) -> String {
    let stamp = jiff::Timestamp::from_millisecond(now_ms)
        .map(|t| t.strftime("%Y%m%d-%H%M%S").to_string())
        .unwrap_or_else(|_| now_ms.to_string());
    format!("mc-issue-{stamp}.md")
}

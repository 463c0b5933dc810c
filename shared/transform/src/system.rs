//! The system prompt: guidance about `§N§` tags and ctx_reduce, and a
//! `Today's date:` line that only moves on passes that bust the cache anyway.
//!
//! Harnesses that put the system prompt in the envelope get it back from the
//! pass. OpenCode hands it to a hook of its own that runs after the messages
//! hook; [`system_hook`] serves that one from the session's stored state.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use mc_base::config::TransformConfig;
use mc_base::error::{Error, Result};
use mc_base::store::Store;

use mc_base::domain::envelope::session_key;
use mc_base::domain::sessions;

/// The date lines harnesses write: OpenCode's, Pi's.
const DATE_PREFIXES: [&str; 2] = ["Today's date:", "Current date:"];

fn is_date_line(line: &str) -> bool {
    let line = line.trim_start();
    DATE_PREFIXES.iter().any(|p| line.starts_with(p))
}
/// Marks our section, so it is appended once.
const HEADING: &str = "## Context management (mc)";

/// What the head's blocks are: every harness whose system prompt mc renders.
const HEAD_GUIDANCE: &str = "<session-history> sums up older turns (## a-b: \
    messages), <session-history-since> what came since, <project-memory> project facts, \
    <pinned-messages> what the user pinned: trust them; they omit tool calls, never invent any.";

/// What tags and drops are, where the agent can call ctx_reduce. How to call
/// it is its description's (`mc_search_core::tools`), said once.
const TAG_GUIDANCE: &str = "Messages and tool outputs start with a §N§ tag; a drop leaves \
    [dropped §N§]; write neither. Drop spent output (used reads, logs, \
    results) with ctx_reduce, silently; keep requests and conclusions.";

/// The guidance appended to the first system part: what the tools'
/// descriptions cannot say, on every request, so kept short
/// (`mc_search_core`'s `fixed_tokens_stay_within_their_bound`).
pub fn guidance(reduce_callable: bool) -> String {
    if reduce_callable {
        format!("{HEADING}\n{HEAD_GUIDANCE}\n\n{TAG_GUIDANCE}")
    } else {
        format!("{HEADING}\n{HEAD_GUIDANCE}")
    }
}

/// The guidance a session gets, if any: none when switched off, nor for a
/// subagent that sees no tags.
pub fn guidance_for(config: &TransformConfig, subagent: bool, prefixes: bool) -> Option<String> {
    (config.system_prompt_guidance && (!subagent || prefixes)).then(|| guidance(prefixes))
}

/// `mc-transform system`: the system prompt of one model call, from a hook
/// that runs after that call's pass.
#[derive(Debug, Clone, PartialEq)]
pub struct SystemRequest {
    pub harness: String,
    pub session_id: String,
    /// The system parts as the harness built them.
    pub system: Value,
    /// For a session no pass has seen yet, render what a new session's first
    /// pass will make it (guidance, the date as shown) instead of returning
    /// the parts unchanged: for a harness whose system hook runs before the
    /// first pass of a session (Pi's `before_agent_start`).
    pub render_unknown: bool,
}

impl SystemRequest {
    /// `{"harness" (default "opencode"), "session_id", "system": [..]}`.
    pub fn from_value(value: Value) -> Result<SystemRequest> {
        let Value::Object(mut map) = value else {
            return Err(Error::input(
                "system input must be a JSON object {\"harness\", \"session_id\", \"system\"}",
            ));
        };
        let (harness, session_id) = session_key(&map, "system")?;
        let system = match map.remove("system") {
            Some(system @ Value::Array(_)) => system,
            _ => {
                return Err(Error::input(
                    "system input needs \"system\": the array of system prompt parts",
                ));
            }
        };
        let render_unknown = map
            .get("render_unknown")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        Ok(SystemRequest {
            harness,
            session_id,
            system,
            render_unknown,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SystemOutput {
    /// The parts to send: guidance appended, the date frozen.
    pub system: Value,
    /// False when no pass has seen the session: the parts come back unchanged.
    pub known_session: bool,
    pub guidance: bool,
    /// The `Today's date:` line sent, which moves only on busting passes.
    pub today: Option<String>,
}

/// Render one call's system prompt for a session the pass knows: the same
/// guidance the pass would add, and the frozen date. Records the date the
/// harness showed, so the next busting pass moves the frozen one on to it.
pub fn system_hook(
    store: &mut Store,
    request: &SystemRequest,
    config: &TransformConfig,
) -> Result<SystemOutput> {
    store.write(|tx| {
        let Some(session) = sessions::find_session(tx, &request.harness, &request.session_id)?
        else {
            if request.render_unknown {
                let guidance = guidance_for(config, false, true);
                let today = config
                    .system_prompt_guidance
                    .then(|| today_line(&request.system))
                    .flatten();
                return Ok(SystemOutput {
                    system: render(&request.system, guidance.as_deref(), today.as_deref()),
                    known_session: false,
                    guidance: guidance.is_some(),
                    today,
                });
            }
            return Ok(SystemOutput {
                system: request.system.clone(),
                known_session: false,
                guidance: false,
                today: None,
            });
        };
        let seen = today_line(&request.system);
        if seen.is_some() && (seen != session.seen_today_line || session.today_line.is_none()) {
            sessions::record_seen_today(tx, session.id, seen.as_deref())?;
        }
        let prefixes = session.reduce_callable.unwrap_or(true);
        let guidance = guidance_for(config, session.is_subagent, prefixes);
        let today = config
            .system_prompt_guidance
            .then(|| session.today_line.clone().or(seen))
            .flatten();
        Ok(SystemOutput {
            system: render(&request.system, guidance.as_deref(), today.as_deref()),
            known_session: true,
            guidance: guidance.is_some(),
            today,
        })
    })
}

/// The first `Today's date:` line of the system parts.
pub fn today_line(system: &Value) -> Option<String> {
    system
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .flat_map(str::lines)
        .find(|l| is_date_line(l))
        .map(|l| l.trim().to_string())
}

/// The system parts with the guidance appended to the first string part and
/// every `Today's date:` line replaced by `today` (when given).
pub fn render(system: &Value, guidance: Option<&str>, today: Option<&str>) -> Value {
    let Some(parts) = system.as_array() else {
        return system.clone();
    };
    let mut out = Vec::with_capacity(parts.len());
    let mut guided = guidance.is_none();
    for part in parts {
        let Some(text) = part.as_str() else {
            out.push(part.clone());
            continue;
        };
        let mut text = match today {
            Some(line) if DATE_PREFIXES.iter().any(|p| text.contains(p)) => text
                .split('\n')
                .map(|l| if is_date_line(l) { line } else { l })
                .collect::<Vec<_>>()
                .join("\n"),
            _ => text.to_string(),
        };
        if !guided {
            if !text.contains(HEADING) {
                text.push_str("\n\n");
                text.push_str(guidance.unwrap_or_default());
            }
            guided = true;
        }
        out.push(Value::String(text));
    }
    Value::Array(out)
}

/// A short stable hash of the system parts as sent.
pub fn hash(system: &Value) -> String {
    let digest = Sha256::digest(system.to_string().as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn guidance_is_appended_once_and_date_is_frozen() {
        let system = json!([
            "You are an agent.\nToday's date: Mon Nov 30 2026\nBe brief.",
            "second"
        ]);
        assert_eq!(
            today_line(&system).as_deref(),
            Some("Today's date: Mon Nov 30 2026")
        );
        let g = guidance(true);
        let out = render(&system, Some(&g), Some("Today's date: Sun Nov 29 2026"));
        let first = out[0].as_str().unwrap();
        assert!(first.starts_with(
            "You are an agent.\nToday's date: Sun Nov 29 2026\nBe brief.\n\n## Context"
        ));
        assert!(first.contains("ctx_reduce"));
        assert_eq!(out[1], "second");
        // Rendering the rendered output again adds nothing.
        assert_eq!(
            render(&out, Some(&g), Some("Today's date: Sun Nov 29 2026")),
            out
        );
        assert_ne!(hash(&out), hash(&system));
    }

    #[test]
    fn pis_current_date_line_is_frozen_too() {
        let system =
            json!(["You are pi.\nCurrent date: 2026-12-02\nCurrent working directory: /r"]);
        assert_eq!(
            today_line(&system).as_deref(),
            Some("Current date: 2026-12-02")
        );
        let out = render(&system, None, Some("Current date: 2026-12-01"));
        assert_eq!(
            out,
            json!(["You are pi.\nCurrent date: 2026-12-01\nCurrent working directory: /r"])
        );
    }

    #[test]
    fn no_reduce_variant_omits_the_tool() {
        let g = guidance(false);
        assert!(!g.contains("ctx_reduce"));
        assert!(!g.contains('§'));
        assert!(g.contains("<session-history>"));
    }
}

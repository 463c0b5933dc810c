//! Pins: messages the user marks as obligatory survive every compaction, and
//! are restored right after one.
//!
//! - [`metadata`]: OpenChamber's shape in an OpenCode session's metadata
//!   (`openchamber.context_obligatory_messages`), read and merged (pure).
//! - [`event`]: what arrived on `mc-pin restore`'s stdin (pure).
//! - [`text`]: the restoration text and the hook's size cap (pure).
//! - [`local`]: pins in mc's database (every harness; the transform reads them).
//! - [`opencode`]: pin, unpin, list and restore against a running OpenCode server.
//! - [`hook`]: restore for Claude Code and Codex `SessionStart` hooks.
//! - [`claim`]: one restorer per compaction (a row only one process can insert).
//! - [`locate`]: where Claude Code and Codex keep a session's transcript.
//! - [`codex_config`]: whether Codex's config sends its calls through mc's gateway, and where Codex compacts (pure).

// The I/O rule, enforced: no printing here (and `shared/clippy.toml` refuses the
// environment, stdin/stdout and ureq's environment-reading defaults).
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]
// Nothing reachable from outside input may panic: no expect, no indexing or
// slicing that can go out of range; the few proven invariants carry an
// `allow` with the reason on the smallest item.
#![cfg_attr(
    not(test),
    deny(clippy::expect_used, clippy::indexing_slicing, clippy::string_slice)
)]

pub mod aside;
pub mod claim;
pub mod codex_config;
pub mod event;
pub mod hook;
pub mod local;
pub mod locate;
pub mod metadata;
pub mod opencode;
pub mod text;

use serde::Serialize;
use serde_json::Value;

use mc_base::error::{Error, Result};

pub use event::{CompactedEvent, Event, HookInput, classify};
pub use mc_history::store::Pin;
pub use text::{HOOK_CONTEXT_LIMIT, PinnedText};

/// Whose session a pin belongs to; sessions are keyed by (harness, session id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Harness {
    OpenCode,
    ClaudeCode,
    Codex,
    Pi,
}

impl Harness {
    pub fn parse(name: &str) -> Result<Harness> {
        match name {
            "opencode" => Ok(Harness::OpenCode),
            "claude-code" | "claude" => Ok(Harness::ClaudeCode),
            "codex" => Ok(Harness::Codex),
            "pi" => Ok(Harness::Pi),
            other => Err(Error::input(format!(
                "unknown harness {other:?} (one of opencode, claude-code, codex, pi)"
            ))),
        }
    }

    /// The key of the session rows in mc's database.
    pub fn as_str(self) -> &'static str {
        match self {
            Harness::OpenCode => "opencode",
            Harness::ClaudeCode => "claude-code",
            Harness::Codex => "codex",
            Harness::Pi => "pi",
        }
    }
}

/// The role of a pinned message: only user and assistant messages are pinned.
pub fn check_role(role: &str) -> Result<&'static str> {
    match role {
        "user" => Ok("user"),
        "assistant" => Ok("assistant"),
        other => Err(Error::input(format!(
            "a pinned message's role is user or assistant, not {other:?}"
        ))),
    }
}

/// Which message a pin or unpin is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The message with this id (OpenCode message id, Claude Code line uuid).
    Id(String),
    /// The newest message of this role (`user` or `assistant`) that has text.
    Last(&'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Pin,
    Unpin,
    List,
}

/// One `pin`, `unpin` or `list` request: the flags, or the same fields as JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct PinRequest {
    pub harness: Harness,
    pub session_id: String,
    /// `None` for `list`.
    pub target: Option<Target>,
    /// The pinned message's role when no server or transcript can tell it.
    pub role: Option<String>,
    /// The pinned message's creation time (ms) when no server or transcript can tell it.
    pub created_at: Option<i64>,
    /// A Claude Code session JSONL to find the message in (by `uuid`).
    pub transcript: Option<std::path::PathBuf>,
    /// The transcript size cap (`transcript.max_bytes`).
    pub max_transcript_bytes: u64,
}

/// The fields of a request given as JSON on stdin. Every field is optional
/// here; flags fill in or override them, and the caller checks what is missing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestFields {
    pub harness: Option<String>,
    pub session_id: Option<String>,
    pub message_id: Option<String>,
    pub last: Option<String>,
    pub role: Option<String>,
    pub created_at: Option<i64>,
    pub transcript: Option<String>,
    pub opencode_url: Option<String>,
    pub directory: Option<String>,
}

impl RequestFields {
    /// Read `{"harness", "session_id", "message_id", "last", "role",
    /// "created_at", "transcript", "opencode_url", "directory"}`. The spellings
    /// harnesses use are accepted too: `session`/`sessionID`, `message`/
    /// `messageID`/`id`, `createdAt`, `transcript_path`.
    pub fn from_value(value: &Value) -> Result<RequestFields> {
        let Value::Object(map) = value else {
            return Err(Error::input(
                "expected a JSON object like {\"session_id\": …, \"message_id\": …}",
            ));
        };
        let string = |keys: &[&str]| -> Result<Option<String>> {
            for key in keys {
                match map.get(*key) {
                    None | Some(Value::Null) => {}
                    Some(Value::String(s)) => return Ok(Some(s.clone())),
                    Some(other) => {
                        return Err(Error::input(format!(
                            "field {key:?} must be a string, not {}",
                            mc_base::json::kind_name(other)
                        )));
                    }
                }
            }
            Ok(None)
        };
        let created_at = match map.get("created_at").or_else(|| map.get("createdAt")) {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_i64().ok_or_else(|| {
                Error::input("field \"created_at\" must be an integer (epoch milliseconds)")
            })?),
        };
        Ok(RequestFields {
            harness: string(&["harness"])?,
            session_id: string(&["session_id", "session", "sessionID"])?,
            message_id: string(&["message_id", "message", "messageID", "id"])?,
            last: string(&["last"])?,
            role: string(&["role"])?,
            created_at,
            transcript: string(&["transcript", "transcript_path"])?,
            opencode_url: string(&["opencode_url"])?,
            directory: string(&["directory"])?,
        })
    }
}

/// What `pin`, `unpin` and `list` answer: the session's full pin list,
/// chronological. A dry run adds the requests it would have sent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PinOutcome {
    pub pins: Vec<Pin>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<PlannedRequest>,
    /// For stderr, not the answer.
    #[serde(skip)]
    pub warnings: Vec<String>,
}

/// An HTTP request mc would send (shown by `--dry-run`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedRequest {
    pub method: Method,
    pub url: String,
    pub body: Value,
}

/// The HTTP method of a [`PlannedRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Method {
    Post,
    Patch,
}

/// What `restore` did: `restored`, `dry_run` (nothing sent) or `none`
/// (nothing to do; the report's `reason` says why).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RestoreAction {
    Restored,
    DryRun,
    None,
}

impl RestoreAction {
    /// `restored`, or `dry_run` when nothing is sent.
    pub fn done(dry_run: bool) -> RestoreAction {
        if dry_run {
            RestoreAction::DryRun
        } else {
            RestoreAction::Restored
        }
    }
}

/// Why `restore` did nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NothingReason {
    /// Neither pins nor mc's record to send.
    NothingToSend,
    /// This compaction's pins went out already.
    AlreadyRestored,
    /// Another restorer holds this compaction's claim.
    InProgress,
    /// The harness's context still holds mc's record.
    AlreadyInContext,
    /// The event is no compaction.
    NotACompaction,
    /// A subagent's session: its parent's pins are the parent's.
    ChildSession,
    NoPins,
    /// A compaction with pins whose hook input names no transcript.
    NoTranscript,
    /// OpenCode's session shows no compaction summary.
    NoSummary,
    /// The newest summary is not finished (or failed).
    SummaryUnfinished,
}

/// What `restore` did. For OpenCode this is the answer on stdout; for a hook
/// only `hook_output` is printed (the harness reads stdout).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RestoreReport {
    pub action: RestoreAction,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<NothingReason>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The compaction answered: the summary message id (OpenCode) or the
    /// cursor recorded for it (Claude Code, Codex).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compaction: Option<String>,
    /// Pins whose text was restored, chronological.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub restored: Vec<String>,
    /// Pins that could not be found or had no text: skipped.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
    /// Pins left out to fit the hook's size limit.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub omitted: Vec<String>,
    /// Pins the harness kept through the compaction itself (not printed again).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<String>,
    /// A hook's `additionalContext`, in UTF-16 units (what Claude Code caps).
    #[serde(skip_serializing_if = "is_zero")]
    pub context_chars: usize,
    /// What a dry run would have sent.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<PlannedRequest>,
    /// The hook's stdout document, when there is context to add.
    #[serde(skip)]
    pub hook_output: Option<Value>,
    /// A hook's claim and cursor, to settle once its output is out.
    #[serde(skip)]
    pub pending: Option<hook::Pending>,
    /// For stderr.
    #[serde(skip)]
    pub warnings: Vec<String>,
}

impl RestoreReport {
    /// Nothing to do, and why.
    pub fn none(reason: NothingReason, session_id: Option<&str>) -> RestoreReport {
        RestoreReport {
            action: RestoreAction::None,
            reason: Some(reason),
            session_id: session_id.map(str::to_string),
            compaction: None,
            restored: Vec::new(),
            missing: Vec::new(),
            omitted: Vec::new(),
            kept: Vec::new(),
            context_chars: 0,
            requests: Vec::new(),
            hook_output: None,
            pending: None,
            warnings: Vec::new(),
        }
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Pins in the order restoration and answers use: by creation time, then id.
pub fn sort_chronologically(pins: &mut [Pin]) {
    pins.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
}

/// The text of an OpenCode-shaped message: its text parts (not the ones
/// OpenCode marks `ignored`), trimmed, empty ones dropped, joined by a blank
/// line. Reasoning, tool and file parts do not count.
pub fn message_text(message: &Value) -> String {
    message
        .get("parts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
        .filter(|p| p.get("ignored").and_then(Value::as_bool) != Some(true))
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Whether a message's text is only what the harness wrote (every text part
/// `synthetic`): OpenCode's "continue" after a compaction, a restoration.
fn only_synthetic_text(message: &Value) -> bool {
    let mut texts = message
        .get("parts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
        .peekable();
    texts.peek().is_some()
        && texts.all(|p| p.get("synthetic").and_then(Value::as_bool) == Some(true))
}

/// The newest message of `role` a user would pin: it has text, is not a
/// compaction summary and (for user messages) was not written by the harness.
pub fn newest_pinnable<'a>(messages: &'a [Value], role: &str) -> Option<&'a Value> {
    messages.iter().rev().find(|m| {
        let info = &m["info"];
        info["role"].as_str() == Some(role)
            && info["summary"].as_bool() != Some(true)
            && !only_synthetic_text(m)
            && !message_text(m).is_empty()
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn message_text_keeps_non_empty_text_parts_only() {
        let m = json!({"info": {"id": "m"}, "parts": [
            {"type": "step-start"},
            {"type": "reasoning", "text": "hidden"},
            {"type": "text", "text": "  first  "},
            {"type": "text", "text": "   "},
            {"type": "tool", "callID": "c", "state": {"status": "completed", "output": "tool out"}},
            {"type": "text", "text": "dropped", "ignored": true},
            {"type": "text", "text": "second\n"}
        ]});
        assert_eq!(message_text(&m), "first\n\nsecond");
        assert_eq!(message_text(&json!({"info": {}})), "");
    }

    #[test]
    fn the_newest_pinnable_message_skips_summaries_and_harness_text() {
        let messages = vec![
            json!({"info": {"id": "u1", "role": "user"}, "parts": [{"type": "text", "text": "real"}]}),
            json!({"info": {"id": "a1", "role": "assistant"}, "parts": [{"type": "text", "text": "answer"}]}),
            json!({"info": {"id": "a2", "role": "assistant", "summary": true}, "parts": [{"type": "text", "text": "## Goal"}]}),
            json!({"info": {"id": "u2", "role": "user"}, "parts": [{"type": "text", "text": "Continue", "synthetic": true}]}),
            json!({"info": {"id": "a3", "role": "assistant"}, "parts": [{"type": "tool", "callID": "c"}]}),
        ];
        assert_eq!(
            newest_pinnable(&messages, "user").unwrap()["info"]["id"],
            "u1"
        );
        assert_eq!(
            newest_pinnable(&messages, "assistant").unwrap()["info"]["id"],
            "a1"
        );
    }

    #[test]
    fn request_fields_accept_the_harness_spellings() {
        let f = RequestFields::from_value(&json!({
            "sessionID": "ses_1", "messageID": "msg_1", "createdAt": 5, "transcript_path": "/t.jsonl"
        }))
        .unwrap();
        assert_eq!(f.session_id.as_deref(), Some("ses_1"));
        assert_eq!(f.message_id.as_deref(), Some("msg_1"));
        assert_eq!(f.created_at, Some(5));
        assert_eq!(f.transcript.as_deref(), Some("/t.jsonl"));
        assert!(matches!(
            RequestFields::from_value(&json!({"session_id": 3})),
            Err(Error::Input(m)) if m.contains("session_id")
        ));
        assert!(RequestFields::from_value(&json!([1])).is_err());
    }

    #[test]
    fn harness_names_round_trip() {
        for h in [
            Harness::OpenCode,
            Harness::ClaudeCode,
            Harness::Codex,
            Harness::Pi,
        ] {
            assert_eq!(Harness::parse(h.as_str()).unwrap(), h);
        }
        assert!(Harness::parse("aider").is_err());
        assert!(check_role("system").is_err());
    }

    #[test]
    fn restore_reports_keep_their_wire_strings() {
        let strings = |values: Vec<serde_json::Value>| -> Vec<String> {
            values
                .into_iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect()
        };
        let actions = [
            RestoreAction::Restored,
            RestoreAction::DryRun,
            RestoreAction::None,
        ];
        assert_eq!(
            strings(actions.iter().map(|a| json!(a)).collect()),
            ["restored", "dry_run", "none"]
        );
        let reasons = [
            NothingReason::NothingToSend,
            NothingReason::AlreadyRestored,
            NothingReason::InProgress,
            NothingReason::AlreadyInContext,
            NothingReason::NotACompaction,
            NothingReason::ChildSession,
            NothingReason::NoPins,
            NothingReason::NoTranscript,
            NothingReason::NoSummary,
            NothingReason::SummaryUnfinished,
        ];
        assert_eq!(
            strings(reasons.iter().map(|r| json!(r)).collect()),
            [
                "nothing_to_send",
                "already_restored",
                "in_progress",
                "already_in_context",
                "not_a_compaction",
                "child_session",
                "no_pins",
                "no_transcript",
                "no_summary",
                "summary_unfinished",
            ]
        );
        assert_eq!(
            strings(vec![json!(Method::Post), json!(Method::Patch)]),
            ["POST", "PATCH"]
        );
        let report = json!(RestoreReport::none(NothingReason::NoPins, Some("s")));
        assert_eq!(
            report,
            json!({"action": "none", "reason": "no_pins", "session_id": "s"})
        );
    }
}

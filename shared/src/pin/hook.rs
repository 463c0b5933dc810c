//! Restoration for Claude Code and Codex: a `SessionStart` hook with
//! `source: "compact"` prints the pinned messages as `additionalContext`.
//!
//! The pins are in mc's database; their text is in the session transcript,
//! whose pre-compaction lines stay in the file. The cursor (which compaction
//! was answered) is in mc's database too, and is recorded only once the hook
//! output is out.

use std::path::Path;

use serde_json::json;

use crate::codec::claude::Entry;
use crate::error::Result;
use crate::store::Store;

use super::local::{self, Transcript};
use super::text::{self, HOOK_CONTEXT_LIMIT};
use super::{Harness, HookInput, RestoreReport};

/// The compaction a hook fires for, as far as the transcript shows it. The
/// transcript is written asynchronously, so its marks may not be there yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compaction {
    /// Uuids that identify it: its `compact_boundary` and `isCompactSummary` lines.
    pub marks: Vec<String>,
    /// When it happened (the boundary's or the summary's timestamp).
    pub at_ms: Option<i64>,
    /// What to record: the summary's uuid, else the boundary's, else `at:<now>`.
    pub cursor: String,
}

/// The newest compaction in `entries`. A summary line older than the newest
/// boundary belongs to an earlier compaction and is not counted.
pub fn newest_compaction(entries: &[Entry], now_ms: i64) -> Compaction {
    let last = |pred: fn(&Entry) -> bool| entries.iter().rposition(pred);
    let boundary = last(|e| e.is_compact_boundary).map(|i| (i, &entries[i]));
    let summary = last(|e| e.is_compact_summary).map(|i| (i, &entries[i]));
    let summary = match (boundary, summary) {
        (Some((b, _)), Some((s, _))) if s < b => None,
        (_, summary) => summary.map(|(_, e)| e),
    };
    let boundary = boundary.map(|(_, e)| e);
    let mut marks = Vec::new();
    for uuid in [
        summary.map(|s| s.uuid.as_str()),
        summary.and_then(|s| s.parent_uuid.as_deref()),
        boundary.map(|b| b.uuid.as_str()),
    ]
    .into_iter()
    .flatten()
    {
        if !uuid.is_empty() && !marks.iter().any(|m| m == uuid) {
            marks.push(uuid.to_string());
        }
    }
    let cursor = marks
        .first()
        .cloned()
        .unwrap_or_else(|| format!("at:{now_ms}"));
    Compaction {
        marks,
        at_ms: boundary
            .and_then(|b| b.timestamp_ms)
            .or(summary.and_then(|s| s.timestamp_ms)),
        cursor,
    }
}

/// Whether the stored cursor says this compaction was already answered: it
/// names one of its marks, or it is a time (`at:<ms>`, recorded while the
/// transcript had no marks yet) no earlier than the compaction.
pub fn already_restored(stored: &str, compaction: &Compaction) -> bool {
    if compaction.marks.iter().any(|m| m == stored) {
        return true;
    }
    match (
        stored
            .strip_prefix("at:")
            .and_then(|t| t.parse::<i64>().ok()),
        compaction.at_ms,
    ) {
        (Some(handled_at), Some(at)) => at <= handled_at,
        _ => false,
    }
}

/// Build the hook's answer for a compact `SessionStart`: the pinned messages
/// found in the transcript, chronological, within 10,000 characters. Nothing
/// to say (no pins, none found, already answered) is a report with no
/// `hook_output`. The cursor is left pending; [`commit`] records it. The
/// transcript is read within `max_transcript_bytes` (`transcript.max_bytes`).
pub fn restore(
    store: &Store,
    harness: Harness,
    input: &HookInput,
    transcript_override: Option<&Path>,
    max_transcript_bytes: u64,
    dry_run: bool,
    now_ms: i64,
) -> Result<RestoreReport> {
    let sid = input.session_id.as_str();
    let none = |reason| RestoreReport::none(reason, Some(sid));
    let Some(row) = local::session_row(store.conn(), harness.as_str(), sid)? else {
        return Ok(none("no_pins"));
    };
    let pins = crate::history::store::pins(store.conn(), row)?;
    if pins.is_empty() {
        return Ok(none("no_pins"));
    }
    let Some(path) = transcript_override.or(input.transcript_path.as_deref()) else {
        let mut report = none("no_transcript");
        report.warnings.push(
            "the hook input names no transcript_path, so the pinned texts cannot be found".into(),
        );
        return Ok(report);
    };
    let transcript = Transcript::load(path, sid, max_transcript_bytes)?;
    let compaction = newest_compaction(&transcript.entries, now_ms);
    if let Some(stored) = local::cursor(store.conn(), row)?
        && already_restored(&stored, &compaction)
    {
        let mut report = none("already_restored");
        report.compaction = Some(stored);
        return Ok(report);
    }
    let (found, missing) = local::texts_from_transcript(&transcript, &pins);
    let mut report = none("nothing_to_send");
    report.warnings = transcript.warnings;
    if !missing.is_empty() {
        report.warnings.push(format!(
            "skipped {} pinned message(s) the transcript does not hold (or that have no text): {}",
            missing.len(),
            missing.join(", ")
        ));
    }
    report.missing = missing;
    if found.is_empty() {
        return Ok(report);
    }
    let fitted = text::fit(&found, HOOK_CONTEXT_LIMIT);
    if !fitted.omitted.is_empty() {
        report.warnings.push(format!(
            "left out the {} oldest pinned message(s) to stay within {HOOK_CONTEXT_LIMIT} characters",
            fitted.omitted.len()
        ));
    }
    if let Some(cut) = &fitted.cut {
        report.warnings.push(format!(
            "pinned message {cut} was cut to fit {HOOK_CONTEXT_LIMIT} characters"
        ));
    }
    report.action = if dry_run { "dry_run" } else { "restored" };
    report.reason = None;
    report.compaction = Some(compaction.cursor.clone());
    report.restored = fitted.kept;
    report.omitted = fitted.omitted;
    report.hook_output = Some(json!({
        "hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": fitted.text}
    }));
    if !dry_run {
        report.pending_cursor = Some((row, compaction.cursor));
    }
    Ok(report)
}

/// Record the cursor of a restoration whose output went out.
pub fn commit(store: &mut Store, report: &RestoreReport, now_ms: i64) -> Result<()> {
    if let Some((row, cursor)) = &report.pending_cursor {
        store.write(|tx| local::set_cursor(tx, *row, cursor, now_ms))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::codec::claude::parse_transcript;

    fn lines(values: &[serde_json::Value]) -> Vec<Entry> {
        let text: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        parse_transcript(&text.join("\n")).unwrap()
    }

    fn boundary(uuid: &str, ts: &str) -> serde_json::Value {
        json!({"type": "system", "subtype": "compact_boundary", "uuid": uuid, "parentUuid": null,
               "timestamp": ts, "content": "Conversation compacted"})
    }

    fn summary(uuid: &str, parent: &str, ts: &str) -> serde_json::Value {
        json!({"type": "user", "uuid": uuid, "parentUuid": parent, "timestamp": ts, "isCompactSummary": true,
               "message": {"role": "user", "content": "This session is being continued…"}})
    }

    #[test]
    fn the_cursor_is_the_newest_summary_else_the_boundary_else_the_time() {
        let both = lines(&[
            boundary("b1", "2026-03-02T10:00:00Z"),
            summary("s1", "b1", "2026-03-02T10:00:01Z"),
            boundary("b2", "2026-03-02T12:00:00Z"),
            summary("s2", "b2", "2026-03-02T12:00:01Z"),
        ]);
        let c = newest_compaction(&both, 7);
        assert_eq!(c.cursor, "s2");
        assert_eq!(c.marks, ["s2", "b2"]);
        // The newest boundary's summary is not written yet: the old summary does not count.
        let pending = lines(&[
            boundary("b1", "2026-03-02T10:00:00Z"),
            summary("s1", "b1", "2026-03-02T10:00:01Z"),
            boundary("b2", "2026-03-02T12:00:00Z"),
        ]);
        let c = newest_compaction(&pending, 7);
        assert_eq!((c.cursor.as_str(), c.marks.len()), ("b2", 1));
        let bare = newest_compaction(&[], 1234);
        assert_eq!(bare.cursor, "at:1234");
        assert!(bare.marks.is_empty());
    }

    #[test]
    fn a_replay_is_recognised_by_any_mark_or_by_time() {
        let entries = lines(&[
            boundary("b2", "2026-03-02T12:00:00Z"),
            summary("s2", "b2", "2026-03-02T12:00:01Z"),
        ]);
        let c = newest_compaction(&entries, 0);
        assert!(already_restored("s2", &c));
        assert!(
            already_restored("b2", &c),
            "first handled before the summary was written"
        );
        assert!(!already_restored("s1", &c));
        let at = crate::codec::claude::parse_timestamp("2026-03-02T12:00:00Z").unwrap();
        assert!(already_restored(&format!("at:{}", at + 5_000), &c));
        assert!(!already_restored(&format!("at:{}", at - 5_000), &c));
        // No marks: a time cursor cannot tell, so restore again rather than lose pins.
        assert!(!already_restored("at:99", &newest_compaction(&[], 100)));
    }
}

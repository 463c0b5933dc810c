//! Restoration for Claude Code and Codex: a `SessionStart` hook with
//! `source: "compact"` prints the pinned messages as `additionalContext`.
//!
//! The pins are in mc's database; their text is in the session transcript,
//! whose pre-compaction lines stay in the file. Before printing, the hook
//! claims the compaction in mc's database ([`claim`]), so of several hooks
//! that fire for one compaction only one prints. The cursor (which compaction
//! was answered) is in mc's database too, and is recorded, with the claim
//! marked done, only once the hook output is out.

use std::path::Path;

use rusqlite::Connection;
use serde_json::json;

use crate::codec::claude::Entry;
use crate::error::Result;
use crate::store::Store;

use super::claim::{self, Claim, Found, Outcome};
use super::local::{self, Transcript};
use super::text::{self, HOOK_CONTEXT_LIMIT};
use super::{Harness, HookInput, RestoreReport};

/// Restorers that see no mark of their compaction in the transcript (it is
/// written after the hook fires, or the harness writes none, as Codex) cannot
/// name it; a claim any restorer of the session made less than this long ago
/// is then taken for the same compaction: 30 s. Hooks answering one
/// compaction start within moments of each other, while two compactions of
/// one session are a summary call and a refilled context apart.
pub const UNMARKED_WINDOW_MS: i64 = 30_000;

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

impl Compaction {
    /// The key a restorer claims the compaction by: the boundary's uuid (the
    /// first mark the transcript gets, so restorers that read it a moment
    /// apart agree), else the summary's parent, else the summary's, else the
    /// cursor (`at:<now>`).
    fn claim_key(&self) -> &str {
        self.marks
            .last()
            .map_or(self.cursor.as_str(), String::as_str)
    }
}

/// The newest compaction in `entries`. A summary line older than the newest
/// boundary belongs to an earlier compaction and is not counted.
pub fn newest_compaction(entries: &[Entry], now_ms: i64) -> Compaction {
    let last = |pred: fn(&Entry) -> bool| entries.iter().enumerate().rev().find(|(_, e)| pred(e));
    let boundary = last(|e| e.is_compact_boundary);
    let summary = last(|e| e.is_compact_summary);
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

/// Whether a claim is about `compaction`: the cursor rule says so (it names
/// one of its marks, or a time no earlier than it), or one side saw no mark
/// and the claim is less than [`UNMARKED_WINDOW_MS`] old.
fn same_compaction(row: &claim::Row, compaction: &Compaction, now_ms: i64) -> bool {
    let unmarked = compaction.marks.is_empty() || row.compaction.starts_with("at:");
    already_restored(&row.compaction, compaction)
        || (unmarked && now_ms.saturating_sub(row.claimed_ms) < UNMARKED_WINDOW_MS)
}

/// Whether the compaction was answered (the cursor or a finished claim says
/// so) or is being answered (another restorer's live claim).
fn answered(
    conn: &Connection,
    row: i64,
    harness: &str,
    session_id: &str,
    compaction: &Compaction,
    now_ms: i64,
) -> Result<Option<Outcome>> {
    if let Some(stored) = local::cursor(conn, row)?
        && already_restored(&stored, compaction)
    {
        return Ok(Some(Outcome::Done(stored)));
    }
    let found = claim::find(
        conn,
        harness,
        session_id,
        compaction.claim_key(),
        now_ms,
        |r| same_compaction(r, compaction, now_ms),
    )?;
    Ok(match found {
        Found::Done(key) => Some(Outcome::Done(key)),
        Found::InProgress => Some(Outcome::InProgress),
        Found::Free { .. } => None,
    })
}

/// A restoration whose output is about to go out: the claim to finish and
/// the cursor to record once it is out ([`commit`]), or to give back if it
/// could not be printed ([`release`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub claim: Claim,
    /// The session's row in mc's database.
    pub session: i64,
    pub cursor: String,
}

/// How the hook reads and answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookOptions<'a> {
    /// Read the pinned texts here instead of the hook input's `transcript_path`.
    pub transcript: Option<&'a Path>,
    /// The transcript size cap (`transcript.max_bytes`).
    pub max_transcript_bytes: u64,
    /// Build the output, claim nothing, record nothing.
    pub dry_run: bool,
}

/// Build the hook's answer for a compact `SessionStart`: the pinned messages
/// found in the transcript, chronological, within 10,000 characters. Nothing
/// to say (no pins, none found, already answered, being answered by another
/// hook) is a report with no `hook_output`. Unless this is a dry run, the
/// compaction is claimed before the answer is returned; [`commit`] finishes
/// the claim and records the cursor once the output is out.
pub fn restore(
    store: &mut Store,
    harness: Harness,
    input: &HookInput,
    options: HookOptions<'_>,
    now_ms: i64,
) -> Result<RestoreReport> {
    let sid = input.session_id.as_str();
    let name = harness.as_str();
    let none = |reason| RestoreReport::none(reason, Some(sid));
    let answer = |outcome: Outcome| match outcome {
        Outcome::Done(key) => {
            let mut report = none("already_restored");
            report.compaction = Some(key);
            report
        }
        Outcome::InProgress | Outcome::Won(_) => none("in_progress"),
    };
    let Some(row) = local::session_row(store.conn(), name, sid)? else {
        return Ok(none("no_pins"));
    };
    let pins = crate::history::store::pins(store.conn(), row)?;
    if pins.is_empty() {
        return Ok(none("no_pins"));
    }
    let Some(path) = options.transcript.or(input.transcript_path.as_deref()) else {
        let mut report = none("no_transcript");
        report.warnings.push(
            "the hook input names no transcript_path, so the pinned texts cannot be found".into(),
        );
        return Ok(report);
    };
    let transcript = Transcript::load(path, sid, options.max_transcript_bytes)?;
    let compaction = newest_compaction(&transcript.entries, now_ms);
    if let Some(outcome) = answered(store.conn(), row, name, sid, &compaction, now_ms)? {
        return Ok(answer(outcome));
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
    if !options.dry_run {
        // The claim: looked for again and inserted in one write transaction,
        // so of the hooks racing for this compaction exactly one gets here.
        let outcome = store.write(|tx| {
            if let Some(outcome) = answered(tx, row, name, sid, &compaction, now_ms)? {
                return Ok(outcome);
            }
            claim::take(tx, name, sid, compaction.claim_key(), now_ms, |r| {
                same_compaction(r, &compaction, now_ms)
            })
        })?;
        let claim = match outcome {
            Outcome::Won(claim) => claim,
            other => {
                let mut lost = answer(other);
                lost.warnings = report.warnings;
                return Ok(lost);
            }
        };
        report.pending = Some(Pending {
            claim,
            session: row,
            cursor: compaction.cursor.clone(),
        });
    }
    report.action = if options.dry_run {
        "dry_run"
    } else {
        "restored"
    };
    report.reason = None;
    report.compaction = Some(compaction.cursor.clone());
    report.restored = fitted.kept;
    report.omitted = fitted.omitted;
    report.hook_output = Some(json!({
        "hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": fitted.text}
    }));
    Ok(report)
}

/// The output is out: finish the claim and record the cursor, in one
/// transaction. A claim taken over meanwhile (its holder was taken for dead)
/// is a warning, returned.
pub fn commit(store: &mut Store, report: &RestoreReport, now_ms: i64) -> Result<Option<String>> {
    let Some(pending) = &report.pending else {
        return Ok(None);
    };
    let kept = store.write(|tx| {
        local::set_cursor(tx, pending.session, &pending.cursor, now_ms)?;
        claim::finish(tx, &pending.claim, now_ms)
    })?;
    Ok((!kept).then(|| {
        format!(
            "the claim on compaction {} had expired before the pins were printed; \
             another restorer may have printed them too",
            pending.claim.compaction
        )
    }))
}

/// The output could not be printed: give the compaction back, so the next
/// event can restore it.
pub fn release(store: &mut Store, report: &RestoreReport) -> Result<()> {
    match &report.pending {
        Some(pending) => store.write(|tx| claim::release(tx, &pending.claim)),
        None => Ok(()),
    }
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

    // ------------------------------------------------------------ claims --

    const SID: &str = "9d3c2b1a-0f1e-4d2c-8b7a-6e5f4d3c2b1a";
    /// 2026-03-02T10:00:00Z
    const T0: i64 = 1_772_445_600_000;

    fn pinned_message(ts: &str) -> serde_json::Value {
        json!({"type": "user", "uuid": "u-rule", "parentUuid": null, "timestamp": ts, "sessionId": SID,
               "message": {"role": "user", "content": "Rule: keep answers short."}})
    }

    struct Hooks {
        dir: tempfile::TempDir,
        store: Store,
    }

    impl Hooks {
        fn new() -> Hooks {
            let mut store = Store::open_in_memory().unwrap();
            let row = local::ensure_session(&mut store, "claude-code", SID, None, T0).unwrap();
            store
                .write(|tx| crate::history::store::pin(tx, row, "u-rule", "user", T0).map(|_| ()))
                .unwrap();
            Hooks {
                dir: tempfile::tempdir().unwrap(),
                store,
            }
        }

        fn write(&self, lines: &[serde_json::Value]) {
            let text: Vec<String> = lines.iter().map(|v| v.to_string()).collect();
            std::fs::write(self.dir.path().join("t.jsonl"), text.join("\n")).unwrap();
        }

        fn restore(&mut self, now: i64, dry_run: bool) -> RestoreReport {
            let input = HookInput {
                session_id: SID.into(),
                transcript_path: Some(self.dir.path().join("t.jsonl")),
                cwd: None,
                codex: false,
            };
            let options = HookOptions {
                transcript: None,
                max_transcript_bytes: 1 << 20,
                dry_run,
            };
            restore(&mut self.store, Harness::ClaudeCode, &input, options, now).unwrap()
        }
    }

    fn printed(report: &RestoreReport) -> bool {
        report.hook_output.is_some()
    }

    #[test]
    fn of_hooks_racing_for_one_compaction_only_the_claim_holder_prints() {
        let mut hooks = Hooks::new();
        hooks.write(&[
            pinned_message("2026-03-02T10:00:00Z"),
            boundary("b1", "2026-03-02T11:00:00Z"),
            summary("s1", "b1", "2026-03-02T11:00:01Z"),
        ]);
        let first = hooks.restore(T0 + 3_700_000, false);
        assert!(printed(&first));
        // Another hook while the first one's output is not out yet.
        let second = hooks.restore(T0 + 3_700_001, false);
        assert!(!printed(&second));
        assert_eq!(second.reason, Some("in_progress"));
        // A dry run looks but claims nothing.
        let dry = hooks.restore(T0 + 3_700_001, true);
        assert!(!printed(&dry));
        // The first could not print: the compaction is given back.
        release(&mut hooks.store, &first).unwrap();
        let dry = hooks.restore(T0 + 3_700_002, true);
        assert!(printed(&dry) && dry.pending.is_none());
        let third = hooks.restore(T0 + 3_700_002, false);
        assert!(printed(&third));
        assert_eq!(
            commit(&mut hooks.store, &third, T0 + 3_700_003).unwrap(),
            None
        );
        let row = local::session_row(hooks.store.conn(), "claude-code", SID)
            .unwrap()
            .unwrap();
        assert_eq!(
            local::cursor(hooks.store.conn(), row).unwrap().as_deref(),
            Some("s1")
        );
        let replay = hooks.restore(T0 + 3_700_004, false);
        assert_eq!(replay.reason, Some("already_restored"));
        // A hook that died after claiming holds the next compaction up for
        // the claim timeout only.
        hooks.write(&[
            pinned_message("2026-03-02T10:00:00Z"),
            boundary("b1", "2026-03-02T11:00:00Z"),
            summary("s1", "b1", "2026-03-02T11:00:01Z"),
            boundary("b2", "2026-03-02T12:00:00Z"),
        ]);
        let t = T0 + 7_300_000;
        assert!(printed(&hooks.restore(t, false)));
        assert_eq!(hooks.restore(t + 1, false).reason, Some("in_progress"));
        assert!(printed(&hooks.restore(t + claim::CLAIM_TIMEOUT_MS, false)));
    }

    #[test]
    fn restorers_agree_on_a_compaction_whose_marks_arrive_meanwhile() {
        let mut hooks = Hooks::new();
        // The transcript has no mark of the compaction yet (it lags the hook).
        hooks.write(&[pinned_message("2026-03-02T10:00:00Z")]);
        let now = T0 + 3_700_000;
        let blind = hooks.restore(now, false);
        assert!(printed(&blind));
        assert_eq!(hooks.restore(now + 500, false).reason, Some("in_progress"));
        // The boundary lands; a second hook reading now sees it.
        hooks.write(&[
            pinned_message("2026-03-02T10:00:00Z"),
            boundary("b1", "2026-03-02T11:01:39Z"),
        ]);
        assert_eq!(hooks.restore(now + 800, false).reason, Some("in_progress"));
        commit(&mut hooks.store, &blind, now + 900).unwrap();
        assert_eq!(
            hooks.restore(now + 1_000, false).reason,
            Some("already_restored")
        );
        // The summary too: the same compaction under another mark.
        hooks.write(&[
            pinned_message("2026-03-02T10:00:00Z"),
            boundary("b1", "2026-03-02T11:01:39Z"),
            summary("s1", "b1", "2026-03-02T11:01:40Z"),
        ]);
        assert_eq!(
            hooks.restore(now + 60_000, false).reason,
            Some("already_restored")
        );
    }

    #[test]
    fn without_marks_a_claim_stands_for_thirty_seconds() {
        // Codex writes no Claude Code marks: each compaction is unmarked.
        let mut hooks = Hooks::new();
        hooks.write(&[pinned_message("2026-03-02T10:00:00Z")]);
        let now = T0 + 3_700_000;
        let first = hooks.restore(now, false);
        commit(&mut hooks.store, &first, now).unwrap();
        assert_eq!(
            hooks.restore(now + UNMARKED_WINDOW_MS - 1, false).reason,
            Some("already_restored")
        );
        // Later, an unmarked hook is taken for a new compaction (as before claims).
        assert!(printed(&hooks.restore(now + UNMARKED_WINDOW_MS, false)));
    }

    #[test]
    fn the_claim_key_is_the_boundary_whichever_marks_are_written() {
        let boundary_only = newest_compaction(&lines(&[boundary("b2", "2026-03-02T12:00:00Z")]), 1);
        let both = newest_compaction(
            &lines(&[
                boundary("b2", "2026-03-02T12:00:00Z"),
                summary("s2", "b2", "2026-03-02T12:00:01Z"),
            ]),
            1,
        );
        assert_eq!(boundary_only.claim_key(), "b2");
        assert_eq!(both.claim_key(), "b2");
        assert_eq!(both.cursor, "s2");
        assert_eq!(newest_compaction(&[], 5).claim_key(), "at:5");
    }
}

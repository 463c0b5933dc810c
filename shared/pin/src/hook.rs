//! `SessionStart` for Claude Code and Codex: after a compaction the pinned
//! messages the harness did not keep, and mc's record of the session (its
//! compartments, the project's memory), printed as `additionalContext`; at
//! `startup` and `resume` that record alone, once per context.
//!
//! Neither harness lets a hook rewrite its messages, so what mc adds after a
//! compaction is what survives of a session beyond the harness's one summary.
//! The pins are in mc's database; their text is in the session transcript,
//! whose pre-compaction lines stay in the file.
//!
//! **Which compaction.** Claude Code (observed with 2.1.197) runs the
//! `SessionStart(compact)` hook before it writes that compaction's
//! `compact_boundary` and summary lines, so the transcript cannot name it;
//! the hook input's `prompt_id` can (the same in every hook of one
//! compaction, new for the next). Codex writes its `compacted` line first;
//! its window id names it. Only without either does the hook fall back on
//! the transcript's marks and the time.
//!
//! **What the harness kept.** Claude Code keeps the newest exchange word for
//! word (the newest assistant reply and every line after it: after a manual
//! `/compact` the last reply, after an automatic one also the prompt that
//! triggered it); Codex keeps every earlier user message. A pin among those
//! is in the context already and is not printed again.
//!
//! **Once.** Before printing, the hook claims the compaction in mc's database
//! ([`claim`]), so of several hooks that fire for one compaction (a replay,
//! Codex's `resume` and `compact` of one start) only one prints; the claim
//! is marked done, and the cursor recorded, only once the output is out. At
//! `resume` mc's record is printed only if the current context holds none
//! yet: hook output stays in the context until the next compaction, so
//! printing it at every resume would pile it up.

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;
use serde_json::{Value, json};

use mc_base::codec::claude::{self, Entry, EntryKind};
use mc_base::codec::codex;
use mc_base::error::Result;
use mc_base::store::Store;
use mc_history::head::{self, START_TAG, utf16_len};

use super::aside;
use super::claim::{self, Claim, Found, Outcome};
use super::local::{self, Lines, Transcript};
use super::text::{self, HOOK_CONTEXT_LIMIT, PinnedText};
use super::{Harness, HookInput, NothingReason, Pin, RestoreAction, RestoreReport};

/// Restorers that see no mark of their compaction (an old Claude Code
/// without `prompt_id` whose transcript lags, a Codex rollout without a
/// `compacted` line) cannot name it; a claim any restorer of the session
/// made less than this long ago is then taken for the same compaction: 30 s.
/// Hooks answering one compaction start within moments of each other, while
/// two compactions of one session are a summary call and a refilled context
/// apart.
pub const UNMARKED_WINDOW_MS: i64 = 30_000;

/// The first words of a pin restoration (see [`text::PREAMBLE`]); a hook
/// finds its earlier restorations in a transcript by them.
const RESTORATION_MARK: &str = "Pinned context, restored after compaction.";

/// A compaction a hook answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compaction {
    /// Names that identify it: `prompt:<id>` (Claude Code), `codex:<window>`
    /// (Codex), or its `compact_boundary` and `isCompactSummary` uuids.
    pub marks: Vec<String>,
    /// When it happened (the boundary's or the summary's timestamp).
    pub at_ms: Option<i64>,
    /// What to record: the first mark, else `at:<now>`.
    pub cursor: String,
    /// What the harness carried on word for word.
    kept: Kept,
}

/// What a harness kept through a compaction.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Kept {
    /// Line ids in the context after it.
    ids: Vec<String>,
    /// Texts in the context after it (earlier hook output, kept messages).
    texts: Vec<String>,
}

impl Kept {
    fn holds(&self, pin: &PinnedText) -> bool {
        self.ids.contains(&pin.id) || self.texts.iter().any(|t| t.contains(pin.text.as_str()))
    }

    fn holds_history(&self) -> bool {
        self.texts
            .iter()
            .any(|t| t.contains(&format!("<{START_TAG}>")))
    }
}

impl Compaction {
    /// The key a restorer claims the compaction by: the boundary's uuid (the
    /// first mark the transcript gets, so restorers that read it a moment
    /// apart agree), else the one mark, else the cursor (`at:<now>`).
    fn claim_key(&self) -> &str {
        self.marks
            .last()
            .map_or(self.cursor.as_str(), String::as_str)
    }

    fn named(mark: String, at_ms: Option<i64>, kept: Kept) -> Compaction {
        Compaction {
            cursor: mark.clone(),
            marks: vec![mark],
            at_ms,
            kept,
        }
    }
}

/// The newest compaction on a Pi session's branch, named by its entry id,
/// with the messages Pi kept after it (those pins are not repeated).
fn pi_compaction(file: &mc_base::codec::pi::SessionFile, session_id: &str) -> Option<Compaction> {
    let entry = file.newest_compaction()?;
    let id = entry.get("id")?.as_str()?;
    let at_ms = entry
        .get("timestamp")
        .and_then(Value::as_str)
        .and_then(claude::parse_timestamp);
    // What the model sees after it: a pin among those, or inside an earlier
    // restoration Pi kept, is not repeated.
    let context = mc_base::codec::pi::to_grouped_messages(file, session_id, false);
    let kept = Kept {
        texts: context
            .iter()
            .map(|m| super::message_text(&m.message))
            .collect(),
        ids: context.into_iter().map(|m| m.id).collect(),
    };
    Some(Compaction::named(format!("pi:{id}"), at_ms, kept))
}

/// The newest compaction in a Claude Code transcript, by its marks. A
/// summary line older than the newest boundary belongs to an earlier
/// compaction and is not counted.
pub fn newest_compaction(entries: &[Entry], now_ms: i64) -> Compaction {
    let last = |pred: fn(&Entry) -> bool| entries.iter().enumerate().rev().find(|(_, e)| pred(e));
    let boundary = last(|e| e.is_compact_boundary);
    let summary = last(|e| e.is_compact_summary);
    let summary = match (boundary, summary) {
        (Some((b, _)), Some((s, _))) if s < b => None,
        (_, summary) => summary.map(|(_, e)| e),
    };
    let boundary = boundary.map(|(_, e)| e);
    let mut marks: Vec<String> = Vec::new();
    let prompt = summary
        .and_then(|s| s.raw.get("promptId").and_then(Value::as_str))
        .map(|p| format!("prompt:{p}"));
    for uuid in [
        summary.map(|s| s.uuid.as_str()),
        prompt.as_deref(),
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
        kept: Kept::default(),
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
    row: Option<i64>,
    harness: &str,
    session_id: &str,
    compaction: &Compaction,
    now_ms: i64,
) -> Result<Option<Outcome>> {
    if let Some(row) = row
        && let Some(stored) = local::cursor(conn, row)?
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

// ---------------------------------------------------------------------------
// What a transcript says

/// The texts of the `SessionStart` context Claude Code recorded in `entries`
/// (its `hook_additional_context` attachments).
fn claude_hook_texts<'a>(entries: impl Iterator<Item = &'a Entry>) -> Vec<String> {
    entries
        .filter(|e| e.kind == EntryKind::Other)
        .filter_map(|e| e.raw.get("attachment"))
        .filter(|a| a.get("type").and_then(Value::as_str) == Some("hook_additional_context"))
        .flat_map(|a| match a.get("content") {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
            Some(Value::String(text)) => vec![text.clone()],
            _ => Vec::new(),
        })
        .collect()
}

/// The text of a line's message (user or assistant), for "what was kept".
fn claude_line_text(entry: &Entry) -> Option<String> {
    match entry.raw.pointer("/message/content") {
        Some(Value::String(text)) => Some(text.clone()),
        Some(Value::Array(blocks)) => Some(
            blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n\n"),
        ),
        _ => None,
    }
}

/// What Claude Code keeps of the context from line `start` on (the newest
/// exchange at compaction time), or the lines a written boundary names.
fn claude_kept<'a>(lines: impl Iterator<Item = &'a Entry> + Clone) -> Kept {
    let mut texts = claude_hook_texts(lines.clone());
    texts.extend(lines.clone().filter_map(claude_line_text));
    Kept {
        ids: lines
            .map(|e| e.uuid.clone())
            .filter(|u| !u.is_empty())
            .collect(),
        texts,
    }
}

/// The boundary line of the compaction whose summary carries `prompt_id`.
fn claude_boundary_of<'a>(entries: &'a [Entry], prompt_id: &str) -> Option<&'a Entry> {
    let summary = entries.iter().rev().find(|e| {
        e.is_compact_summary && e.raw.get("promptId").and_then(Value::as_str) == Some(prompt_id)
    })?;
    let parent = summary.parent_uuid.as_deref()?;
    entries
        .iter()
        .find(|e| e.is_compact_boundary && e.uuid == parent)
}

/// The uuids a written `compact_boundary` says Claude Code kept.
fn claude_preserved(boundary: &Entry) -> Vec<String> {
    let meta = boundary.raw.get("compactMetadata");
    meta.and_then(|m| m.pointer("/preservedMessages/allUuids"))
        .or_else(|| meta.and_then(|m| m.pointer("/preservedMessages/uuids")))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// What the context after a written boundary holds: the lines it kept and
/// every line after it.
fn claude_context_after(entries: &[Entry], boundary: usize) -> Vec<&Entry> {
    let Some(b) = entries.get(boundary) else {
        return entries.iter().collect();
    };
    let preserved = claude_preserved(b);
    entries
        .iter()
        .enumerate()
        .filter(|(i, e)| *i >= boundary || preserved.contains(&e.uuid))
        .map(|(_, e)| e)
        .collect()
}

/// The compaction a Claude Code `SessionStart(compact)` fires for.
fn claude_compaction(entries: &[Entry], input: &HookInput, now_ms: i64) -> Compaction {
    let Some(prompt_id) = &input.prompt_id else {
        // No prompt id (before 2.1.196): the transcript's marks, else the time.
        let mut c = newest_compaction(entries, now_ms);
        let boundary = entries.iter().rev().find(|e| e.is_compact_boundary);
        c.kept = match boundary {
            // Written already: it names what it kept.
            Some(b) if c.marks.contains(&b.uuid) => {
                let preserved = claude_preserved(b);
                claude_kept(entries.iter().filter(|e| preserved.contains(&e.uuid)))
            }
            _ => match claude::newest_exchange_start(entries) {
                Some(start) => claude_kept(entries.get(start..).unwrap_or_default().iter()),
                None => Kept::default(),
            },
        };
        return c;
    };
    let mark = format!("prompt:{prompt_id}");
    // Written already (a replay, or a Claude Code that writes first): the
    // boundary names what it kept.
    if let Some(boundary) = claude_boundary_of(entries, prompt_id) {
        let preserved = claude_preserved(boundary);
        let kept = claude_kept(entries.iter().filter(|e| preserved.contains(&e.uuid)));
        let mut c = Compaction::named(mark, boundary.timestamp_ms, kept);
        c.marks.push(boundary.uuid.clone());
        return c;
    }
    let kept = match claude::newest_exchange_start(entries) {
        Some(start) => claude_kept(entries.get(start..).unwrap_or_default().iter()),
        None => Kept::default(),
    };
    Compaction::named(mark, None, kept)
}

/// The newest compaction of a Claude Code transcript that no restoration
/// of mc's followed (its compact hook did not run, or failed), if any.
fn claude_unanswered(entries: &[Entry]) -> Option<Compaction> {
    let boundary = entries.iter().rposition(|e| e.is_compact_boundary)?;
    let after = entries.get(boundary..)?;
    let answered = claude_hook_texts(after.iter())
        .iter()
        .any(|t| t.contains(RESTORATION_MARK) || t.contains(&format!("<{START_TAG}>")));
    if answered {
        return None;
    }
    // What it kept and everything since is in the context.
    let kept = claude_kept(claude_context_after(entries, boundary).into_iter());
    let mut c = newest_compaction(entries, 0);
    c.kept = kept;
    Some(c)
}

/// Whether the current context of a Claude Code transcript holds mc's record.
fn claude_context_has_history(entries: &[Entry]) -> bool {
    let context = match entries.iter().rposition(|e| e.is_compact_boundary) {
        Some(boundary) => claude_context_after(entries, boundary),
        None => entries.iter().collect(),
    };
    claude_hook_texts(context.into_iter())
        .iter()
        .any(|t| t.contains(&format!("<{START_TAG}>")))
}

/// The developer messages (where Codex puts hook output) after `ordinal`.
fn codex_hook_texts(lines: &[codex::Line], after: i64) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l.kind == codex::LineKind::ResponseItem && l.ordinal > after)
        .filter(|l| l.payload.get("role").and_then(Value::as_str) == Some("developer"))
        .flat_map(|l| {
            l.payload
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|c| c.get("text").and_then(Value::as_str))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

fn codex_compaction(c: codex::Compaction) -> Compaction {
    let kept = Kept {
        ids: c.kept_ids,
        texts: c.kept_texts,
    };
    Compaction::named(c.key, c.at_ms, kept)
}

/// The newest Codex compaction no restoration of mc's followed, if any.
fn codex_unanswered(lines: &[codex::Line]) -> Option<Compaction> {
    let c = codex::newest_compaction(lines)?;
    let answered = codex_hook_texts(lines, c.ordinal)
        .iter()
        .any(|t| t.contains(RESTORATION_MARK) || t.contains(&format!("<{START_TAG}>")));
    if answered {
        return None;
    }
    // What it kept and every item since is in the context.
    let ordinal = c.ordinal;
    let mut compaction = codex_compaction(c);
    for line in lines.iter().filter(|l| l.ordinal > ordinal) {
        compaction.kept.ids.push(codex::item_id(line));
    }
    Some(compaction)
}

fn codex_context_has_history(lines: &[codex::Line]) -> bool {
    let after = codex::newest_compaction(lines).map_or(i64::MIN, |c| c.ordinal);
    codex_hook_texts(lines, after)
        .iter()
        .any(|t| t.contains(&format!("<{START_TAG}>")))
}

// ---------------------------------------------------------------------------
// The hook

/// How the hook reads and answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookOptions<'a> {
    /// Read the pinned texts here instead of the hook input's `transcript_path`.
    pub transcript: Option<&'a Path>,
    /// The transcript size cap (`transcript.max_bytes`).
    pub max_transcript_bytes: u64,
    /// Build the output, claim nothing, record nothing.
    pub dry_run: bool,
    /// Add mc's record of the session (compartments, memory, profile).
    pub history: bool,
    /// Put the project's memory and the profile in that record (off when
    /// mc's gateway puts them in the head of every call).
    pub memory: bool,
    /// Render compartment dates (`transform.temporal_awareness`).
    pub dates: bool,
    /// How long the hook may wait for another restorer's claim: the hook's
    /// bound (`sqlite.hook_busy_timeout_ms`), as for the database's lock.
    pub wait: Duration,
}

/// A restoration whose output is about to go out: the claim to finish and
/// the cursor to record once it is out ([`commit`]), or to give back if it
/// could not be printed ([`release`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub claim: Held,
    /// The session's row in mc's database (none when it has none yet and
    /// the database was locked).
    pub session: Option<i64>,
    pub cursor: String,
    /// The hook's wait ([`HookOptions::wait`]), for the claim's last step.
    pub wait: Duration,
}

/// Where a hook's claim is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    Database(Claim),
    /// Kept beside the database while another process held its write lock.
    Aside(aside::Row),
}

impl Pending {
    /// The claim could not go into the database (it was locked): later
    /// writes of this restorer should not wait for it again.
    pub fn locked_out(&self) -> bool {
        matches!(self.claim, Held::Aside(_))
    }
}

/// mc's record for the session's context: its compartments, the memory of
/// its project and the profile, within `limit` UTF-16 units.
fn history(
    conn: &Connection,
    harness: Harness,
    session_id: &str,
    cwd: Option<&str>,
    (dates, memory): (bool, bool),
    limit: usize,
    now_ms: i64,
) -> Result<head::StartHead> {
    use mc_history::store;
    let session = mc_base::domain::sessions::find_session(conn, harness.as_str(), session_id)?;
    let compartments: Vec<_> = match &session {
        Some(s) => store::load_compartments(conn, s.id)?
            .into_iter()
            .map(|c| c.compartment)
            .collect(),
        None => Vec::new(),
    };
    let project = session
        .as_ref()
        .and_then(|s| s.project_identity.clone())
        .or_else(|| cwd.map(|c| mc_base::identity::project_identity(Path::new(c))));
    let memories = match &project {
        Some(p) if memory => store::live_memories(conn, p, now_ms)?,
        _ => Vec::new(),
    };
    let profile = if memory {
        store::profile(conn)?
    } else {
        Vec::new()
    };
    Ok(head::render_session_start(
        &compartments,
        &memories,
        &profile,
        dates,
        limit,
    ))
}

/// The transcript at `path`, if there is a file there yet (Claude Code
/// writes it only after the first prompt, so a `startup` hook finds none).
fn load_if_there(path: &Path, sid: &str, max: u64, needed: bool) -> Result<Option<Transcript>> {
    if !needed && std::fs::symlink_metadata(path).is_err() {
        return Ok(None);
    }
    Transcript::load(path, sid, max).map(Some)
}

/// Build the hook's answer for a `SessionStart`:
///
/// - after a compaction (`compact`, or a `resume` that finds a compaction no
///   restoration followed): the pinned messages the harness did not keep,
///   chronological, then mc's record of the session, within 10,000
///   characters, once per compaction (claimed before it is returned unless
///   this is a dry run; [`commit`] finishes the claim once the output is out);
/// - otherwise mc's record alone, unless the current context already holds it.
///
/// Nothing to say is a report with no `hook_output` and a `reason`.
pub fn restore(
    store: &mut Store,
    harness: Harness,
    input: &HookInput,
    options: HookOptions<'_>,
    now_ms: i64,
) -> Result<RestoreReport> {
    let sid = input.session_id.as_str();
    let none = |reason| RestoreReport::none(reason, Some(sid));
    let row = local::session_row(store.conn(), harness.as_str(), sid)?;
    let pins = match row {
        Some(row) => mc_history::store::pins(store.conn(), row)?,
        None => Vec::new(),
    };
    let compact = input.is_compact();
    let path = options.transcript.or(input.transcript_path.as_deref());
    let mut warnings = Vec::new();
    let transcript = match path {
        // A compaction with pins needs their texts: a missing file is an error.
        Some(path) => load_if_there(
            path,
            sid,
            options.max_transcript_bytes,
            compact && !pins.is_empty(),
        )?,
        None => {
            if compact && !pins.is_empty() {
                let mut report = none(NothingReason::NoTranscript);
                report.warnings.push(
                    "the hook input names no transcript_path, so the pinned texts cannot be found"
                        .into(),
                );
                return Ok(report);
            }
            None
        }
    };
    if let Some(t) = &transcript {
        warnings.extend(t.warnings.iter().cloned());
    }
    // The transcript tells who wrote it; the caller's word counts otherwise.
    let (harness, row, pins) = match transcript.as_ref().map(Transcript::harness) {
        Some(told) if told != harness => {
            let row = local::session_row(store.conn(), told.as_str(), sid)?;
            let pins = match row {
                Some(row) => mc_history::store::pins(store.conn(), row)?,
                None => Vec::new(),
            };
            (told, row, pins)
        }
        _ => (harness, row, pins),
    };
    let name = harness.as_str();
    let compaction = match (&transcript, compact) {
        (Some(t), true) => Some(match &t.lines {
            Lines::Claude(entries) => claude_compaction(entries, input, now_ms),
            Lines::Codex(lines) => codex::newest_compaction(lines)
                .map(codex_compaction)
                .unwrap_or_else(|| newest_compaction(&[], now_ms)),
            Lines::Pi(file) => {
                pi_compaction(file, sid).unwrap_or_else(|| newest_compaction(&[], now_ms))
            }
        }),
        (None, true) => Some(match &input.prompt_id {
            Some(p) => Compaction::named(format!("prompt:{p}"), None, Kept::default()),
            None => newest_compaction(&[], now_ms),
        }),
        // A resumed session whose compaction no hook answered (the hook was
        // not set up then, or failed): answered now.
        (Some(t), false) if input.source == "resume" => match &t.lines {
            Lines::Claude(entries) => claude_unanswered(entries),
            Lines::Codex(lines) => codex_unanswered(lines),
            // Pi's extension answers each compaction as it happens.
            Lines::Pi(_) => None,
        },
        (_, false) => None,
    };
    let cwd = input
        .cwd
        .clone()
        .or_else(|| transcript.as_ref().and_then(Transcript::cwd));
    if let Some(compaction) = compaction {
        match answered(store.conn(), row, name, sid, &compaction, now_ms)? {
            Some(outcome) if compact => {
                let mut report = match outcome {
                    Outcome::Done(key) => {
                        let mut report = none(NothingReason::AlreadyRestored);
                        report.compaction = Some(key);
                        report
                    }
                    Outcome::InProgress | Outcome::Won(_) => none(NothingReason::InProgress),
                };
                report.warnings = warnings;
                return Ok(report);
            }
            Some(_) => {}
            None => {
                let mut report = after_compaction(
                    store,
                    harness,
                    input,
                    &options,
                    row,
                    &pins,
                    transcript.as_ref(),
                    &compaction,
                    cwd.as_deref(),
                    now_ms,
                )?;
                warnings.append(&mut report.warnings);
                report.warnings = warnings;
                return Ok(report);
            }
        }
    }
    // No compaction to answer: mc's record alone, once per context.
    let in_context = transcript.as_ref().is_some_and(|t| match &t.lines {
        Lines::Claude(entries) => claude_context_has_history(entries),
        Lines::Codex(lines) => codex_context_has_history(lines),
        // mc-transform renders mc's record into every call of a Pi session.
        Lines::Pi(_) => true,
    });
    let mut report = none(if in_context {
        NothingReason::AlreadyInContext
    } else {
        NothingReason::NothingToSend
    });
    report.warnings = warnings;
    if in_context || !options.history {
        return Ok(report);
    }
    let head = history(
        store.conn(),
        harness,
        sid,
        cwd.as_deref(),
        (options.dates, options.memory),
        HOOK_CONTEXT_LIMIT,
        now_ms,
    )?;
    if head.text.is_empty() {
        return Ok(report);
    }
    report.action = RestoreAction::done(options.dry_run);
    report.reason = None;
    report.hook_output = Some(output(&head.text));
    report.context_chars = utf16_len(&head.text);
    Ok(report)
}

fn output(text: &str) -> Value {
    json!({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}})
}

/// The pins a compaction's answer prints: read from the transcript, less
/// those the compaction kept, fitted to the hook's limit. What was missing,
/// kept, left out or cut goes into `report`.
fn pins_text(
    pins: &[Pin],
    transcript: Option<&Transcript>,
    compaction: &Compaction,
    report: &mut RestoreReport,
) -> String {
    let (found, missing) = match transcript {
        Some(t) => local::texts_from_transcript(t, pins),
        None => (Vec::new(), pins.iter().map(|p| p.id.clone()).collect()),
    };
    if !missing.is_empty() {
        report.warnings.push(format!(
            "skipped {} pinned message(s) the transcript does not hold (or that have no text): {}",
            missing.len(),
            missing.join(", ")
        ));
    }
    report.missing = missing;
    let (kept, to_print): (Vec<PinnedText>, Vec<PinnedText>) =
        found.into_iter().partition(|p| compaction.kept.holds(p));
    report.kept = kept.into_iter().map(|p| p.id).collect();
    let mut text = String::new();
    if !to_print.is_empty() {
        let fitted = text::fit(&to_print, HOOK_CONTEXT_LIMIT);
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
        report.restored = fitted.kept;
        report.omitted = fitted.omitted;
        text = fitted.text;
    }
    text
}

/// The answer to a compaction nobody answered yet: pins, then mc's record.
#[allow(clippy::too_many_arguments)]
fn after_compaction(
    store: &mut Store,
    harness: Harness,
    input: &HookInput,
    options: &HookOptions<'_>,
    row: Option<i64>,
    pins: &[Pin],
    transcript: Option<&Transcript>,
    compaction: &Compaction,
    cwd: Option<&str>,
    now_ms: i64,
) -> Result<RestoreReport> {
    let sid = input.session_id.as_str();
    let name = harness.as_str();
    let mut report = RestoreReport::none(NothingReason::NothingToSend, Some(sid));
    let mut text = pins_text(pins, transcript, compaction, &mut report);
    if options.history && !compaction.kept.holds_history() {
        let room = HOOK_CONTEXT_LIMIT.saturating_sub(utf16_len(&text) + 2);
        let head = history(
            store.conn(),
            harness,
            sid,
            cwd,
            (options.dates, options.memory),
            room,
            now_ms,
        )?;
        if !head.text.is_empty() {
            if !text.is_empty() {
                text.push_str("\n\n");
            }
            text.push_str(&head.text);
        }
    }
    if text.is_empty() {
        return Ok(report);
    }
    if !options.dry_run {
        let lost = |outcome: Outcome, warnings: Vec<String>| {
            let mut lost = match outcome {
                Outcome::Done(key) => {
                    let mut lost = RestoreReport::none(NothingReason::AlreadyRestored, Some(sid));
                    lost.compaction = Some(key);
                    lost
                }
                Outcome::InProgress | Outcome::Won(_) => {
                    RestoreReport::none(NothingReason::InProgress, Some(sid))
                }
            };
            lost.warnings = warnings;
            lost
        };
        // Restorers of this database claim one at a time ([`aside`]); another
        // that stays in the mutex past its wait is answering this compaction.
        let aside = aside::Aside::beside(store.path());
        let guard = match &aside {
            Some(a) => match a.lock(options.wait) {
                Ok(Some(guard)) => Some(guard),
                Ok(None) => return Ok(lost(Outcome::InProgress, report.warnings)),
                // No file can go beside the database: the database's claim alone.
                Err(_) => None,
            },
            None => None,
        };
        let kept = match (&aside, &guard) {
            (Some(a), Some(g)) => a.rows(g)?,
            _ => Vec::new(),
        };
        let same = |r: &claim::Row| same_compaction(r, compaction, now_ms);
        let kept_says = aside::find(&kept, name, sid, compaction.claim_key(), now_ms, same);
        // The claim: looked for again and inserted in one write transaction,
        // so of the hooks racing for this compaction exactly one gets here.
        // Claims kept aside while the database was locked move in first.
        let claimed = store.write(|tx| {
            let keep = aside::settle(tx, &kept, now_ms)?;
            if let Some(outcome) = kept_says.clone() {
                return Ok((outcome, keep));
            }
            if let Some(outcome) = answered(tx, row, name, sid, compaction, now_ms)? {
                return Ok((outcome, keep));
            }
            let outcome = claim::take(tx, name, sid, compaction.claim_key(), now_ms, same)?;
            Ok((outcome, keep))
        });
        let held = match claimed {
            Ok((outcome, keep)) => {
                if let (Some(a), Some(g)) = (&aside, &guard)
                    && keep != kept
                {
                    // Settled in the database already: a file left behind only repeats it.
                    let _ = a.store(g, &keep);
                }
                match outcome {
                    Outcome::Won(claim) => Held::Database(claim),
                    other => return Ok(lost(other, report.warnings)),
                }
            }
            // Another process holds the write lock past the hook's wait: the
            // pins go out anyway (they were read without it), and the claim
            // is kept beside the database, where every restorer looks.
            Err(e) if e.is_busy() && aside.is_some() && guard.is_some() => {
                if let Some(outcome) = kept_says {
                    return Ok(lost(outcome, report.warnings));
                }
                if let Some(outcome) = answered(store.conn(), row, name, sid, compaction, now_ms)? {
                    return Ok(lost(outcome, report.warnings));
                }
                let mine = aside::Row {
                    harness: name.to_string(),
                    session_id: sid.to_string(),
                    compaction: compaction.claim_key().to_string(),
                    state: "sending".into(),
                    claimed_ms: now_ms,
                    session: row,
                    cursor: compaction.cursor.clone(),
                };
                let mut rows = kept;
                rows.push(mine.clone());
                if let (Some(a), Some(g)) = (&aside, &guard) {
                    a.store(g, &rows)?;
                }
                report.warnings.push(
                    "the database is locked by another process: the pins are printed, and the \
                     claim on this compaction is kept beside the database until it can be recorded"
                        .into(),
                );
                Held::Aside(mine)
            }
            Err(e) => return Err(e),
        };
        drop(guard);
        let session = match (&held, row) {
            (_, Some(row)) => Some(row),
            (Held::Database(_), None) => Some(local::ensure_session(
                store,
                name,
                sid,
                cwd.map(Path::new),
                now_ms,
            )?),
            (Held::Aside(_), None) => None,
        };
        report.pending = Some(Pending {
            claim: held,
            session,
            cursor: compaction.cursor.clone(),
            wait: options.wait,
        });
    }
    report.action = RestoreAction::done(options.dry_run);
    report.reason = None;
    report.compaction = Some(compaction.cursor.clone());
    report.context_chars = utf16_len(&text);
    report.hook_output = Some(output(&text));
    Ok(report)
}

/// The output is out: finish the claim and record the cursor, in one
/// transaction. A claim taken over meanwhile (its holder was taken for dead)
/// is a warning, returned. A claim kept aside becomes `done` there, and moves
/// into the database now if its lock is free (else the next restorer moves it).
pub fn commit(store: &mut Store, report: &RestoreReport, now_ms: i64) -> Result<Option<String>> {
    let Some(pending) = &report.pending else {
        return Ok(None);
    };
    let claim = match &pending.claim {
        Held::Database(claim) => claim,
        Held::Aside(mine) => return commit_aside(store, mine, pending.wait, now_ms),
    };
    let kept = store.write(|tx| {
        if let Some(session) = pending.session {
            local::set_cursor(tx, session, &pending.cursor, now_ms)?;
        }
        claim::finish(tx, claim, now_ms)
    })?;
    Ok((!kept).then(|| {
        format!(
            "the claim on compaction {} had expired before the pins were printed; \
             another restorer may have printed them too",
            claim.compaction
        )
    }))
}

fn commit_aside(
    store: &mut Store,
    mine: &aside::Row,
    wait: Duration,
    now_ms: i64,
) -> Result<Option<String>> {
    let Some(aside) = aside::Aside::beside(store.path()) else {
        return Ok(None);
    };
    let Some(guard) = aside.lock(wait)? else {
        return Ok(Some(format!(
            "the pins were printed, but the claim on compaction {} could not be marked done",
            mine.compaction
        )));
    };
    let mut rows = aside.rows(&guard)?;
    rows.retain(|r| r != mine);
    rows.push(aside::Row {
        state: "done".into(),
        ..mine.clone()
    });
    match store.write(|tx| aside::settle(tx, &rows, now_ms)) {
        Ok(keep) => aside.store(&guard, &keep)?,
        Err(e) if e.is_busy() => aside.store(&guard, &rows)?,
        Err(e) => {
            aside.store(&guard, &rows)?;
            return Err(e);
        }
    }
    Ok(None)
}

/// The output could not be printed: give the compaction back, so the next
/// event can restore it.
pub fn release(store: &mut Store, report: &RestoreReport) -> Result<()> {
    let Some(pending) = &report.pending else {
        return Ok(());
    };
    match &pending.claim {
        Held::Database(claim) => store.write(|tx| claim::release(tx, claim)),
        Held::Aside(mine) => {
            let Some(aside) = aside::Aside::beside(store.path()) else {
                return Ok(());
            };
            if let Some(guard) = aside.lock(pending.wait)? {
                let mut rows = aside.rows(&guard)?;
                rows.retain(|r| r != mine);
                aside.store(&guard, &rows)?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use mc_base::codec::claude::parse_transcript;

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
        let at = mc_base::codec::claude::parse_timestamp("2026-03-02T12:00:00Z").unwrap();
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
                .write(|tx| mc_history::store::pin(tx, row, "u-rule", "user", T0).map(|_| ()))
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

        fn run(
            &mut self,
            harness: Harness,
            source: &str,
            prompt: Option<&str>,
            now: i64,
        ) -> RestoreReport {
            let input = HookInput {
                session_id: SID.into(),
                transcript_path: Some(self.dir.path().join("t.jsonl")),
                cwd: Some(self.dir.path().display().to_string()),
                source: source.into(),
                prompt_id: prompt.map(str::to_string),
            };
            let options = HookOptions {
                transcript: None,
                max_transcript_bytes: 1 << 20,
                dry_run: false,
                history: true,
                memory: true,
                dates: false,
                wait: Duration::from_secs(1),
            };
            let report = restore(&mut self.store, harness, &input, options, now).unwrap();
            commit(&mut self.store, &report, now).unwrap();
            report
        }

        fn pin(&mut self, harness: &str, id: &str, role: &str, at: i64) {
            let row = local::ensure_session(&mut self.store, harness, SID, None, T0).unwrap();
            self.store
                .write(|tx| mc_history::store::pin(tx, row, id, role, at).map(|_| ()))
                .unwrap();
        }

        fn restore(&mut self, now: i64, dry_run: bool) -> RestoreReport {
            let input = HookInput {
                session_id: SID.into(),
                transcript_path: Some(self.dir.path().join("t.jsonl")),
                cwd: None,
                source: "compact".into(),
                prompt_id: None,
            };
            let options = HookOptions {
                transcript: None,
                max_transcript_bytes: 1 << 20,
                dry_run,
                history: false,
                memory: true,
                dates: false,
                wait: Duration::from_secs(1),
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
        assert_eq!(second.reason, Some(NothingReason::InProgress));
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
        assert_eq!(replay.reason, Some(NothingReason::AlreadyRestored));
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
        assert_eq!(
            hooks.restore(t + 1, false).reason,
            Some(NothingReason::InProgress)
        );
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
        assert_eq!(
            hooks.restore(now + 500, false).reason,
            Some(NothingReason::InProgress)
        );
        // The boundary lands; a second hook reading now sees it.
        hooks.write(&[
            pinned_message("2026-03-02T10:00:00Z"),
            boundary("b1", "2026-03-02T11:01:39Z"),
        ]);
        assert_eq!(
            hooks.restore(now + 800, false).reason,
            Some(NothingReason::InProgress)
        );
        commit(&mut hooks.store, &blind, now + 900).unwrap();
        assert_eq!(
            hooks.restore(now + 1_000, false).reason,
            Some(NothingReason::AlreadyRestored)
        );
        // The summary too: the same compaction under another mark.
        hooks.write(&[
            pinned_message("2026-03-02T10:00:00Z"),
            boundary("b1", "2026-03-02T11:01:39Z"),
            summary("s1", "b1", "2026-03-02T11:01:40Z"),
        ]);
        assert_eq!(
            hooks.restore(now + 60_000, false).reason,
            Some(NothingReason::AlreadyRestored)
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
            Some(NothingReason::AlreadyRestored)
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

    fn context(report: &RestoreReport) -> String {
        report
            .hook_output
            .as_ref()
            .and_then(|o| o.pointer("/hookSpecificOutput/additionalContext"))
            .and_then(|c| c.as_str())
            .unwrap_or_default()
            .to_string()
    }

    fn reply(uuid: &str, parent: &str, api_id: &str, text: &str, ts: &str) -> serde_json::Value {
        json!({"type": "assistant", "uuid": uuid, "parentUuid": parent, "timestamp": ts, "sessionId": SID,
               "message": {"id": api_id, "role": "assistant", "model": "claude-opus-4-8",
                           "content": [{"type": "text", "text": text}]}})
    }

    fn user(uuid: &str, text: &str, ts: &str) -> serde_json::Value {
        json!({"type": "user", "uuid": uuid, "parentUuid": null, "timestamp": ts, "sessionId": SID,
               "message": {"role": "user", "content": text}})
    }

    #[test]
    fn each_compaction_is_named_by_its_prompt_id_while_the_transcript_lags() {
        // Claude Code runs SessionStart(compact) before it writes the
        // compaction's marks: the transcript never shows them here.
        let mut hooks = Hooks::new();
        hooks.write(&[
            pinned_message("2026-03-02T10:00:00Z"),
            reply("a-1", "u-rule", "msg_1", "Noted.", "2026-03-02T10:00:01Z"),
            user("u-2", "Next.", "2026-03-02T10:00:02Z"),
            reply("a-2", "u-2", "msg_2", "Done.", "2026-03-02T10:00:03Z"),
        ]);
        let now = T0 + 3_700_000;
        let first = hooks.run(Harness::ClaudeCode, "compact", Some("p-1"), now);
        assert!(context(&first).contains("Rule: keep answers short."));
        assert_eq!(first.compaction.as_deref(), Some("prompt:p-1"));
        // A replay of that hook: nothing.
        let replay = hooks.run(Harness::ClaudeCode, "compact", Some("p-1"), now + 1_000);
        assert_eq!(replay.reason, Some(NothingReason::AlreadyRestored));
        // The next compaction, seconds later and with the same transcript (a
        // time cursor took it for a replay): printed again.
        let second = hooks.run(Harness::ClaudeCode, "compact", Some("p-2"), now + 2_000);
        assert!(
            context(&second).contains("Rule: keep answers short."),
            "{second:?}"
        );
    }

    #[test]
    fn a_pin_claude_code_keeps_through_the_compaction_is_not_printed_again() {
        let mut hooks = Hooks::new();
        hooks.pin("claude-code", "a-1", "assistant", T0 + 1_000);
        let mut lines = vec![
            pinned_message("2026-03-02T10:00:00Z"),
            reply(
                "a-1",
                "u-rule",
                "msg_1",
                "Plan: keep 0001.",
                "2026-03-02T10:00:01Z",
            ),
        ];
        hooks.write(&lines);
        // The pinned reply is the newest exchange: Claude Code keeps it word for word.
        let report = hooks.run(Harness::ClaudeCode, "compact", Some("p-1"), T0 + 9_000);
        let text = context(&report);
        assert!(text.contains("Rule: keep answers short."), "{text}");
        assert!(!text.contains("Plan: keep 0001."), "{text}");
        assert_eq!(report.kept, ["a-1"]);
        // A turn later it is in the part the next compaction summarises.
        lines.push(user("u-2", "Next.", "2026-03-02T10:00:02Z"));
        lines.push(reply(
            "a-2",
            "u-2",
            "msg_2",
            "Done.",
            "2026-03-02T10:00:03Z",
        ));
        hooks.write(&lines);
        let report = hooks.run(Harness::ClaudeCode, "compact", Some("p-2"), T0 + 99_000);
        assert!(context(&report).contains("Plan: keep 0001."));
        assert!(report.kept.is_empty());
    }

    fn rollout(extra: &[serde_json::Value]) -> Vec<serde_json::Value> {
        let line = |ordinal: i64, kind: &str, payload: serde_json::Value| json!({"timestamp": "2026-03-02T10:00:00.000Z", "ordinal": ordinal, "type": kind, "payload": payload});
        let mut lines = vec![
            line(
                0,
                "session_meta",
                json!({"id": SID, "cwd": "/home/dev/shop"}),
            ),
            line(
                1,
                "response_item",
                json!({"type": "message", "id": "msg_u1", "role": "user",
                 "content": [{"type": "input_text", "text": "Rule one: keep answers short."}]}),
            ),
            line(
                2,
                "response_item",
                json!({"type": "message", "id": "msg_a1", "role": "assistant",
                 "content": [{"type": "output_text", "text": "Plan: keep 0001."}]}),
            ),
            line(
                3,
                "compacted",
                json!({"message": "Summary.", "window_id": "w-1",
                 "replacement_history": [{"type": "message", "id": "msg_u1", "role": "user",
                     "content": [{"type": "input_text", "text": "Rule one: keep answers short."}]}]}),
            ),
        ];
        lines.extend(extra.iter().cloned());
        lines
    }

    #[test]
    fn codex_keeps_the_user_s_messages_and_mc_prints_the_rest_once() {
        let mut hooks = Hooks::new();
        hooks.pin("codex", "msg_u1", "user", T0);
        hooks.pin("codex", "msg_a1", "assistant", T0 + 1);
        hooks.write(&rollout(&[]));
        // Codex fires resume, then compact, before the turn: one of them prints.
        let resume = hooks.run(Harness::ClaudeCode, "resume", None, T0 + 5_000);
        let text = context(&resume);
        assert!(text.contains("Plan: keep 0001."), "{resume:?}");
        assert!(!text.contains("Rule one"), "Codex kept it: {text}");
        assert_eq!(resume.compaction.as_deref(), Some("codex:w-1"));
        assert_eq!(resume.kept, ["msg_u1"]);
        let compact = hooks.run(Harness::Codex, "compact", None, T0 + 5_100);
        assert_eq!(compact.reason, Some(NothingReason::AlreadyRestored));
        assert!(compact.hook_output.is_none());
    }

    #[test]
    fn mc_s_record_is_printed_once_per_context() {
        let mut hooks = Hooks::new();
        let project = mc_base::identity::project_identity(hooks.dir.path());
        hooks
            .store
            .write(|tx| {
                mc_history::store::write_memory(
                    tx,
                    &project,
                    "CONSTRAINTS",
                    "Never log keys.",
                    None,
                    "user",
                    T0,
                )
                .map(|_| ())
            })
            .unwrap();
        // Startup: no transcript yet; the project's memory is worth saying.
        let startup = hooks.run(Harness::ClaudeCode, "startup", None, T0);
        let text = context(&startup);
        assert!(
            text.starts_with("<mc-history>") && text.contains("Never log keys."),
            "{text}"
        );
        assert!(
            !text.contains("Rule:"),
            "pins come back after a compaction only"
        );
        // Claude Code recorded that context in the transcript: a resume adds none.
        let recorded = json!({"type": "attachment", "uuid": "at-1", "parentUuid": null, "sessionId": SID,
            "attachment": {"type": "hook_additional_context", "content": [text], "hookEvent": "SessionStart"}});
        hooks.write(&[pinned_message("2026-03-02T10:00:00Z"), recorded]);
        let resume = hooks.run(Harness::ClaudeCode, "resume", None, T0 + 1);
        assert_eq!(resume.reason, Some(NothingReason::AlreadyInContext));
        // Without it (another harness's resume, say), it is printed.
        hooks.write(&[pinned_message("2026-03-02T10:00:00Z")]);
        let resume = hooks.run(Harness::ClaudeCode, "resume", None, T0 + 2);
        assert!(context(&resume).contains("Never log keys."));
    }
}

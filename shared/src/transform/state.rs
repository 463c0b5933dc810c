//! Reading and writing the transform's rows: sessions, messages, tags, drops.

use std::collections::{BTreeMap, HashMap};

use rusqlite::{Connection, OptionalExtension, params};

use crate::codec::Message;
use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagKind {
    Message,
    File,
    Tool,
}

impl TagKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TagKind::Message => "message",
            TagKind::File => "file",
            TagKind::Tool => "tool",
        }
    }

    fn parse(s: &str) -> Result<TagKind> {
        match s {
            "message" => Ok(TagKind::Message),
            "file" => Ok(TagKind::File),
            "tool" => Ok(TagKind::Tool),
            other => Err(Error::Corrupt(format!("unknown tag kind {other:?}"))),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropMode {
    /// The whole tool call goes, call and result together (pairing stays valid).
    Full,
    /// The call stays with `[dropped §N§]` as its output and clamped input.
    Skeleton,
}

impl DropMode {
    pub fn as_str(self) -> &'static str {
        match self {
            DropMode::Full => "full",
            DropMode::Skeleton => "skeleton",
        }
    }

    fn parse(s: &str) -> Result<DropMode> {
        match s {
            "full" => Ok(DropMode::Full),
            "skeleton" => Ok(DropMode::Skeleton),
            other => Err(Error::Corrupt(format!("unknown drop mode {other:?}"))),
        }
    }
}

#[derive(Debug, Clone)]
pub struct TagRow {
    pub number: i64,
    pub kind: TagKind,
    pub identity: String,
    /// `Some` once dropped; the mode is frozen at drop time.
    pub dropped: Option<DropMode>,
    pub tool_name: Option<String>,
    pub tokens: i64,
    pub input_tokens: i64,
    /// Bytes of the content, of a tool's input, and of reasoning attributed to it.
    pub bytes: i64,
    pub caveman_depth: u8,
    pub nudge: Option<String>,
}

/// The session row: counters, last usage, frozen verdicts and watermarks.
#[derive(Debug, Clone, Default)]
pub struct SessionRow {
    pub id: i64,
    pub project_identity: Option<String>,
    pub reduce_callable: Option<bool>,
    pub tag_counter: i64,
    pub ordinal_counter: i64,
    pub last_response_ms: i64,
    pub last_execute_ms: i64,
    pub last_model_key: Option<String>,
    pub heuristics_turn_id: Option<String>,
    pub tool_reclaim_watermark: i64,
    pub reasoning_cleared_through: i64,
    pub deferred_execute_ms: Option<i64>,
    pub is_subagent: bool,
    /// The `Today's date:` line the system prompt keeps until a busting pass.
    pub today_line: Option<String>,
    /// The newest `Today's date:` line the system hook saw (`mc-transform system`).
    pub seen_today_line: Option<String>,
    /// Usage sample the last emergency drop acted on (idempotence latch).
    pub last_emergency_sample: Option<i64>,
    /// Channel 2 may place a reminder (its reminders are in `channel2_reminders`).
    pub nudge2_armed: bool,
    /// Channel 1: last level sent and the reducible tokens then.
    pub nudge1_level: i64,
    pub nudge1_reducible: i64,
    /// The project folder the session's config is read from (recorded once).
    pub project_dir: Option<String>,
    /// The render rules the session's bytes were produced with.
    pub render_version: i64,
}

pub fn find_session(
    conn: &Connection,
    harness: &str,
    session_id: &str,
) -> Result<Option<SessionRow>> {
    Ok(conn
        .prepare_cached(
            "SELECT id, project_identity, reduce_callable, tag_counter, ordinal_counter,
                    last_response_ms, last_execute_ms, last_model_key, heuristics_turn_id,
                    tool_reclaim_watermark, reasoning_cleared_through, deferred_execute_ms,
                    is_subagent, today_line, last_emergency_sample,
                    nudge2_armed, nudge1_level, nudge1_reducible, seen_today_line,
                    project_dir, render_version
             FROM sessions WHERE harness = ?1 AND session_id = ?2",
        )?
        .query_row(params![harness, session_id], |r| {
            Ok(SessionRow {
                id: r.get(0)?,
                project_identity: r.get(1)?,
                reduce_callable: r.get(2)?,
                tag_counter: r.get(3)?,
                ordinal_counter: r.get(4)?,
                last_response_ms: r.get(5)?,
                last_execute_ms: r.get(6)?,
                last_model_key: r.get(7)?,
                heuristics_turn_id: r.get(8)?,
                tool_reclaim_watermark: r.get(9)?,
                reasoning_cleared_through: r.get(10)?,
                deferred_execute_ms: r.get(11)?,
                is_subagent: r.get(12)?,
                today_line: r.get(13)?,
                last_emergency_sample: r.get(14)?,
                nudge2_armed: r.get(15)?,
                nudge1_level: r.get(16)?,
                nudge1_reducible: r.get(17)?,
                seen_today_line: r.get(18)?,
                project_dir: r.get(19)?,
                render_version: r.get(20)?,
            })
        })
        .optional()?)
}

pub fn create_session(
    conn: &Connection,
    harness: &str,
    session_id: &str,
    subagent: bool,
    project_identity: Option<&str>,
    now_ms: i64,
) -> Result<SessionRow> {
    conn.prepare_cached(
        "INSERT INTO sessions (harness, session_id, is_subagent, project_identity, created_ms,
                               updated_ms, render_version)
         VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6)",
    )?
    .execute(params![
        harness,
        session_id,
        subagent,
        project_identity,
        now_ms,
        super::render::RENDER_VERSION
    ])?;
    find_session(conn, harness, session_id)?
        .ok_or_else(|| Error::Corrupt("session row vanished right after insert".into()))
}

/// The project folder a session's config is read from, as recorded by the
/// first pass that knew one; `None` for an unknown session or none recorded.
pub fn session_project_dir(
    conn: &Connection,
    harness: &str,
    session_id: &str,
) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT project_dir FROM sessions WHERE harness = ?1 AND session_id = ?2")?
        .query_row(params![harness, session_id], |r| r.get(0))
        .optional()?
        .flatten())
}

/// The session's Channel 2 reminders: the message each follows, and its text.
pub fn load_reminders(conn: &Connection, session: i64) -> Result<BTreeMap<String, String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT after_message_id, text FROM channel2_reminders WHERE session = ?1",
    )?;
    let rows = stmt.query_map(params![session], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub fn add_reminder(
    conn: &Connection,
    session: i64,
    after_message_id: &str,
    text: &str,
    now_ms: i64,
) -> Result<()> {
    conn.prepare_cached(
        "INSERT OR IGNORE INTO channel2_reminders (session, after_message_id, text, placed_ms)
         VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![session, after_message_id, text, now_ms])?;
    Ok(())
}

/// Ordinals of the known messages from `from_ordinal` on.
pub fn load_message_ordinals(
    conn: &Connection,
    session: i64,
    from_ordinal: i64,
) -> Result<HashMap<String, (i64, bool)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT message_id, ordinal, keep_reasoning FROM messages WHERE session = ?1 AND ordinal >= ?2",
    )?;
    let rows = stmt.query_map(params![session, from_ordinal], |r| {
        Ok((r.get(0)?, (r.get(1)?, r.get(2)?)))
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub fn set_keep_reasoning(conn: &Connection, session: i64, message_id: &str) -> Result<()> {
    conn.prepare_cached(
        "UPDATE messages SET keep_reasoning = 1 WHERE session = ?1 AND message_id = ?2",
    )?
    .execute(params![session, message_id])?;
    Ok(())
}

pub fn set_caveman_depth(conn: &Connection, session: i64, number: i64, depth: u8) -> Result<()> {
    conn.prepare_cached("UPDATE tags SET caveman_depth = ?3 WHERE session = ?1 AND number = ?2")?
        .execute(params![session, number, depth])?;
    Ok(())
}

pub fn set_nudge(conn: &Connection, session: i64, number: i64, text: &str) -> Result<()> {
    conn.prepare_cached("UPDATE tags SET nudge = ?3 WHERE session = ?1 AND number = ?2")?
        .execute(params![session, number, text])?;
    Ok(())
}

pub fn message_ordinal(
    conn: &Connection,
    session: i64,
    message_id: &str,
) -> Result<Option<(i64, bool)>> {
    Ok(conn
        .prepare_cached(
            "SELECT ordinal, keep_reasoning FROM messages WHERE session = ?1 AND message_id = ?2",
        )?
        .query_row(params![session, message_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?)
}

pub fn insert_message(
    conn: &Connection,
    session: i64,
    message_id: &str,
    ordinal: i64,
    role: &str,
    created_ms: Option<i64>,
) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO messages (session, message_id, ordinal, role, created_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![session, message_id, ordinal, role, created_ms])?;
    Ok(())
}

/// A tag row as stored, before its text columns are checked.
struct RawTag {
    number: i64,
    kind: String,
    identity: String,
    status: String,
    mode: Option<String>,
    tool_name: Option<String>,
    tokens: i64,
    input_tokens: i64,
    bytes: i64,
    caveman_depth: u8,
    nudge: Option<String>,
}

fn tag_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawTag> {
    Ok(RawTag {
        number: r.get(0)?,
        kind: r.get(1)?,
        identity: r.get(2)?,
        status: r.get(3)?,
        mode: r.get(4)?,
        tool_name: r.get(5)?,
        tokens: r.get(6)?,
        input_tokens: r.get(7)?,
        bytes: r.get(8)?,
        caveman_depth: r.get(9)?,
        nudge: r.get(10)?,
    })
}

fn build_tag(raw: RawTag) -> Result<TagRow> {
    let dropped = match (raw.status.as_str(), raw.mode) {
        ("active", _) => None,
        ("dropped", Some(mode)) => Some(DropMode::parse(&mode)?),
        ("dropped", None) => Some(DropMode::Full),
        (other, _) => {
            return Err(Error::Corrupt(format!(
                "tag {} has status {other:?}",
                raw.number
            )));
        }
    };
    Ok(TagRow {
        number: raw.number,
        kind: TagKind::parse(&raw.kind)?,
        identity: raw.identity,
        dropped,
        tool_name: raw.tool_name,
        tokens: raw.tokens,
        input_tokens: raw.input_tokens,
        bytes: raw.bytes,
        caveman_depth: raw.caveman_depth,
        nudge: raw.nudge,
    })
}

const TAG_COLUMNS: &str =
    "number, kind, identity, status, drop_mode, tool_name, tokens, input_tokens,
     byte_size + input_bytes + reasoning_bytes, caveman_depth, nudge";

/// Tags hosted by messages from `from_ordinal` on: the visible window.
pub fn load_tags_from_ordinal(
    conn: &Connection,
    session: i64,
    from_ordinal: i64,
) -> Result<Vec<TagRow>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {TAG_COLUMNS} FROM tags WHERE session = ?1 AND ordinal >= ?2"
    ))?;
    let rows = stmt.query_map(params![session, from_ordinal], tag_from_row)?;
    rows.map(|r| build_tag(r?)).collect()
}

pub fn load_tags_by_numbers(
    conn: &Connection,
    session: i64,
    numbers: &[i64],
) -> Result<Vec<TagRow>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {TAG_COLUMNS} FROM tags WHERE session = ?1 AND number = ?2"
    ))?;
    let mut out = Vec::with_capacity(numbers.len());
    for n in numbers {
        if let Some(row) = stmt
            .query_row(params![session, n], tag_from_row)
            .optional()?
        {
            out.push(build_tag(row)?);
        }
    }
    Ok(out)
}

pub struct NewTag<'a> {
    pub number: i64,
    pub kind: TagKind,
    pub identity: &'a str,
    pub message_id: &'a str,
    pub ordinal: i64,
    pub tool_name: Option<&'a str>,
    pub byte_size: i64,
    pub tokens: i64,
    pub input_bytes: i64,
    pub input_tokens: i64,
    pub reasoning_bytes: i64,
    pub created_ms: i64,
}

pub fn insert_tag(conn: &Connection, session: i64, t: &NewTag<'_>) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO tags (session, number, kind, identity, message_id, ordinal, tool_name,
                           byte_size, tokens, input_bytes, input_tokens, reasoning_bytes, created_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    )?
    .execute(params![
        session,
        t.number,
        t.kind.as_str(),
        t.identity,
        t.message_id,
        t.ordinal,
        t.tool_name,
        t.byte_size,
        t.tokens,
        t.input_bytes,
        t.input_tokens,
        t.reasoning_bytes,
        t.created_ms
    ])?;
    Ok(())
}

pub fn mark_dropped(
    conn: &Connection,
    session: i64,
    number: i64,
    mode: DropMode,
    cause: &str,
    now_ms: i64,
) -> Result<()> {
    conn.prepare_cached(
        "UPDATE tags SET status = 'dropped', drop_mode = ?3, drop_cause = ?4, dropped_ms = ?5
         WHERE session = ?1 AND number = ?2 AND status = 'active'",
    )?
    .execute(params![session, number, mode.as_str(), cause, now_ms])?;
    Ok(())
}

/// The lowest tag number inside the newest `count` active tags (the protected
/// window), or `None` when there are no active tags.
pub fn protected_floor(conn: &Connection, session: i64, count: u32) -> Result<Option<i64>> {
    Ok(conn
        .prepare_cached(
            "SELECT min(number) FROM (SELECT number FROM tags WHERE session = ?1 AND status = 'active'
                                      ORDER BY number DESC LIMIT ?2)",
        )?
        .query_row(params![session, count], |r| r.get(0))?)
}

/// The lowest number among the newest `count` tool tags of any status.
pub fn newest_tool_floor(conn: &Connection, session: i64, count: u32) -> Result<Option<i64>> {
    Ok(conn
        .prepare_cached(
            "SELECT min(number) FROM (SELECT number FROM tags WHERE session = ?1 AND kind = 'tool'
                                      ORDER BY number DESC LIMIT ?2)",
        )?
        .query_row(params![session, count], |r| r.get(0))?)
}

pub fn pending_drops(conn: &Connection, session: i64) -> Result<Vec<i64>> {
    let mut stmt =
        conn.prepare_cached("SELECT tag FROM pending_drops WHERE session = ?1 ORDER BY tag")?;
    let rows = stmt.query_map(params![session], |r| r.get(0))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub fn delete_pending(conn: &Connection, session: i64, tag: i64) -> Result<()> {
    conn.prepare_cached("DELETE FROM pending_drops WHERE session = ?1 AND tag = ?2")?
        .execute(params![session, tag])?;
    Ok(())
}

pub fn queue_drop(conn: &Connection, session: i64, tag: i64, now_ms: i64) -> Result<bool> {
    let n = conn
        .prepare_cached(
            "INSERT INTO pending_drops (session, tag, queued_ms) VALUES (?1, ?2, ?3)
             ON CONFLICT DO NOTHING",
        )?
        .execute(params![session, tag, now_ms])?;
    Ok(n > 0)
}

/// Give every message with an id a stable ordinal (assigned on first sight)
/// and record new ones in `messages`. Returns the ordinals and, per message,
/// whether its reasoning is kept. `session.ordinal_counter` moves past the new
/// ordinals; the caller writes it back to the session row.
pub fn register_messages(
    conn: &Connection,
    session: &mut SessionRow,
    messages: &[Message],
) -> Result<(Vec<Option<i64>>, Vec<bool>)> {
    assign_ordinals(
        conn,
        Some(session.id),
        &mut session.ordinal_counter,
        messages,
        true,
    )
}

/// The ordinals [`register_messages`] would give, without writing anything:
/// known messages keep theirs, new ones get the next free numbers in input
/// order. `session` is `None` for a session no tool has seen yet.
pub fn preview_ordinals(
    conn: &Connection,
    session: Option<&SessionRow>,
    messages: &[Message],
) -> Result<Vec<Option<i64>>> {
    let mut counter = session.map_or(0, |s| s.ordinal_counter);
    let (ordinals, _) =
        assign_ordinals(conn, session.map(|s| s.id), &mut counter, messages, false)?;
    Ok(ordinals)
}

fn assign_ordinals(
    conn: &Connection,
    session: Option<i64>,
    counter: &mut i64,
    messages: &[Message],
    write: bool,
) -> Result<(Vec<Option<i64>>, Vec<bool>)> {
    // Load the known window in one range scan, starting from the first visible
    // message we have seen before (probe a few, in case the head is new).
    let mut known = HashMap::new();
    if let Some(session) = session {
        let mut from = None;
        for id in messages.iter().filter_map(Message::id).take(8) {
            if let Some((ordinal, _)) = message_ordinal(conn, session, id)? {
                from = Some(ordinal);
                break;
            }
        }
        if let Some(ordinal) = from {
            known = load_message_ordinals(conn, session, ordinal)?;
        }
    }
    let mut ordinals = Vec::with_capacity(messages.len());
    let mut keep = Vec::with_capacity(messages.len());
    for message in messages {
        let Some(id) = message.id() else {
            ordinals.push(None);
            keep.push(false);
            continue;
        };
        let stored = match (known.get(id), session) {
            (Some(&entry), _) => Some(entry),
            (None, Some(session)) => message_ordinal(conn, session, id)?,
            (None, None) => None,
        };
        let (ordinal, kept) = match stored {
            Some(entry) => entry,
            None => {
                *counter += 1;
                let o = *counter;
                if write && let Some(session) = session {
                    insert_message(
                        conn,
                        session,
                        id,
                        o,
                        message.role().as_str(),
                        message.created_ms(),
                    )?;
                }
                known.insert(id.to_string(), (o, false));
                (o, false)
            }
        };
        ordinals.push(Some(ordinal));
        keep.push(kept);
    }
    Ok((ordinals, keep))
}

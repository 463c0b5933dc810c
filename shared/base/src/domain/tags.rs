//! Tags: every text part, file and tool output gets a stable number `§N§` on
//! first sight; the rows keep its kind, identity, size and drop state.

use rusqlite::{Connection, OptionalExtension, params};

use crate::codec::{Part, PartKind};
use crate::error::{Error, Result};
use crate::tokens;

use super::notation::strip_leading_tags;

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
    /// The call stays with `[dropped §N§]` as its output and its input up
    /// to a cap.
    Skeleton,
    /// An edit superseded by a later edit of the same file: the call stays
    /// with its path and a short hint of the region it changed, and
    /// `[dropped §N§]` as its output. Stored as `drop_mode = 'skeleton'`
    /// with `drop_cause = 'edit'` ([`EDIT_MARKER_CAUSE`]): migration 0001's
    /// CHECK admits only `full` and `skeleton`, and widening it would rebuild
    /// the table (a cascade through `pending_drops`). A release that does
    /// not know markers renders one as a skeleton.
    Marker,
}

/// The `drop_cause` that marks a stored skeleton as an edit marker.
pub const EDIT_MARKER_CAUSE: &str = "edit";

impl DropMode {
    pub fn as_str(self) -> &'static str {
        match self {
            DropMode::Full => "full",
            DropMode::Skeleton => "skeleton",
            DropMode::Marker => "marker",
        }
    }

    fn parse(s: &str) -> Result<DropMode> {
        match s {
            "full" => Ok(DropMode::Full),
            "skeleton" => Ok(DropMode::Skeleton),
            "marker" => Ok(DropMode::Marker),
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

const TAG_COLUMNS: &str = "number, kind, identity, status,
     CASE WHEN drop_mode = 'skeleton' AND drop_cause = 'edit' THEN 'marker' ELSE drop_mode END,
     tool_name, tokens, input_tokens,
     byte_size + input_bytes + reasoning_bytes, caveman_depth, nudge";

/// Tags hosted by messages from `from_ordinal` on: the visible window.
/// `expected` sizes the vector (a pass knows about how many parts it
/// holds): a long session's tags are then not gathered by doubling, which
/// holds two copies at once.
pub fn load_tags_from_ordinal(
    conn: &Connection,
    session: i64,
    from_ordinal: i64,
    expected: usize,
) -> Result<Vec<TagRow>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {TAG_COLUMNS} FROM tags WHERE session = ?1 AND ordinal >= ?2"
    ))?;
    let mut tags = Vec::new();
    for row in stmt.query_map(params![session, from_ordinal], tag_from_row)? {
        if tags.capacity() == 0 {
            // Sized at the first row: a session with none allocates nothing.
            tags.reserve_exact(expected.max(1));
        }
        tags.push(build_tag(row?)?);
    }
    Ok(tags)
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
    let (stored, cause) = match mode {
        DropMode::Marker => ("skeleton", EDIT_MARKER_CAUSE),
        other => (other.as_str(), cause),
    };
    conn.prepare_cached(
        "UPDATE tags SET status = 'dropped', drop_mode = ?3, drop_cause = ?4, dropped_ms = ?5
         WHERE session = ?1 AND number = ?2 AND status = 'active'",
    )?
    .execute(params![session, number, stored, cause, now_ms])?;
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

/// Token estimate for an inline image (a data: URL's length says nothing useful).
const IMAGE_TOKENS: i64 = 1600;

/// The identity of a taggable part, or `None` for parts that never get a tag.
pub fn part_identity(
    message_id: &str,
    part_index: usize,
    part: &Part,
) -> Option<(TagKind, String)> {
    let mut identity = String::new();
    part_identity_into(message_id, part_index, part, &mut identity).map(|kind| (kind, identity))
}

/// [`part_identity`], written into `identity` (cleared first; left empty
/// for a part that never gets a tag), for a caller that reuses one buffer.
pub fn part_identity_into(
    message_id: &str,
    part_index: usize,
    part: &Part,
    identity: &mut String,
) -> Option<TagKind> {
    use std::fmt::Write as _;
    identity.clear();
    let kind = match part.kind {
        PartKind::Text
            if !part.is_ignored() && part.text().is_some_and(|t| !t.trim().is_empty()) =>
        {
            let _ = write!(identity, "{message_id}:p{part_index}");
            TagKind::Message
        }
        PartKind::File if part.file_url().is_some() => {
            let _ = write!(identity, "{message_id}:file{part_index}");
            TagKind::File
        }
        // Tool identity is (call id, owning message): harnesses reuse call ids.
        PartKind::Tool => {
            let call = part.call_id()?;
            identity.push_str(call);
            identity.push('@');
            identity.push_str(message_id);
            TagKind::Tool
        }
        _ => return None,
    };
    Some(kind)
}

/// (bytes, estimated tokens, input bytes, estimated input tokens) of a part.
pub fn measure_part(kind: TagKind, part: &Part) -> (i64, i64, i64, i64) {
    match kind {
        TagKind::Message => {
            let text = strip_leading_tags(part.text().unwrap_or_default());
            (text.len() as i64, tokens::estimate(text) as i64, 0, 0)
        }
        TagKind::File => {
            let url = part.file_url().unwrap_or_default();
            let tokens = if url.starts_with("data:image/") {
                IMAGE_TOKENS
            } else {
                tokens::estimate(url) as i64
            };
            (url.len() as i64, tokens, 0, 0)
        }
        TagKind::Tool => {
            let output = strip_leading_tags(part.tool_output().unwrap_or_default());
            let input = part
                .tool_input()
                .map(|v| serde_json::to_string(v).unwrap_or_default())
                .unwrap_or_default();
            (
                output.len() as i64,
                tokens::estimate(output) as i64,
                input.len() as i64,
                tokens::estimate(&input) as i64,
            )
        }
    }
}

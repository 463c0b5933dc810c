//! Raw content: the original text of every tagged part, stored the first time
//! a tool sees it, so `ctx_expand` can give back what a drop or a fold took
//! off the wire long after the harness moved on. One address space for every
//! harness: rows are keyed by the part identity tags use, and carry the
//! message's ordinal.

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::{Value, json};

use crate::codec::{Message, Part};
use crate::error::Result;

use super::notation::strip_leading_tags;
use super::tags::{TagKind, part_identity};

/// The most of one part mc keeps (the rest is cut, and the cut is recorded).
pub const MAX_PART_BYTES: usize = 256 * 1024;

/// What is kept of a part: the tool input (JSON) and the content.
fn extract(kind: TagKind, part: &Part) -> (Option<String>, String) {
    match kind {
        TagKind::Message => (
            None,
            strip_leading_tags(part.text().unwrap_or_default()).to_string(),
        ),
        TagKind::File => {
            let name = part.str_field("filename").unwrap_or_default();
            let url = part.file_url().unwrap_or_default();
            let url = if url.starts_with("data:") {
                format!("[inline data, {} bytes]", url.len())
            } else {
                url.to_string()
            };
            let text = if name.is_empty() {
                url
            } else {
                format!("{name} {url}")
            };
            (None, text)
        }
        TagKind::Tool => (
            part.tool_input()
                .map(|v| serde_json::to_string(v).unwrap_or_default()),
            strip_leading_tags(part.tool_output().unwrap_or_default()).to_string(),
        ),
    }
}

/// The largest character boundary of `text` at or below `max`.
pub fn floor_boundary(text: &str, max: usize) -> usize {
    (0..=max.min(text.len()))
        .rev()
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0)
}

/// `text` cut to at most `max` bytes on a character boundary, and the bytes cut.
fn capped(mut text: String, max: usize) -> (String, i64) {
    if text.len() <= max {
        return (text, 0);
    }
    let cut = floor_boundary(&text, max);
    let dropped = (text.len() - cut) as i64;
    text.truncate(cut);
    (text, dropped)
}

/// Keep the content of one part (first sight wins: a part already kept is
/// left as it was). Open tool calls are not kept until they have an output.
pub fn record_part(
    conn: &Connection,
    session: i64,
    identity: &str,
    ordinal: i64,
    part_index: usize,
    kind: TagKind,
    part: &Part,
) -> Result<()> {
    if kind == TagKind::Tool && part.tool_output().is_none() {
        return Ok(());
    }
    let (input, content) = extract(kind, part);
    let (input, _) = capped(input.unwrap_or_default(), MAX_PART_BYTES / 4);
    let (content, truncated) = capped(content, MAX_PART_BYTES);
    conn.prepare_cached(
        "INSERT INTO raw_parts (session, identity, ordinal, part_index, kind, tool_name, tool_input,
                                content, truncated_bytes)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, nullif(?7, ''), ?8, ?9)
         ON CONFLICT (session, identity) DO NOTHING",
    )?
    .execute(params![
        session,
        identity,
        ordinal,
        part_index as i64,
        kind.as_str(),
        part.tool_name().filter(|_| kind == TagKind::Tool),
        input,
        content,
        truncated
    ])?;
    Ok(())
}

/// Keep every finished part of messages a tool registered (the historian's
/// path: harnesses whose messages never pass through the transform).
pub fn record_messages(
    conn: &Connection,
    session: i64,
    messages: &[Message],
    ordinals: &[Option<i64>],
) -> Result<()> {
    for (message, ordinal) in messages.iter().zip(ordinals) {
        let (Some(id), Some(ordinal)) = (message.id(), *ordinal) else {
            continue;
        };
        for (index, part) in message.parts.iter().enumerate() {
            if let Some((kind, identity)) = part_identity(id, index, part) {
                record_part(conn, session, &identity, ordinal, index, kind, part)?;
            }
        }
    }
    Ok(())
}

/// A kept part, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct RawPart {
    pub identity: String,
    pub ordinal: i64,
    pub part_index: i64,
    pub kind: String,
    pub tool_name: Option<String>,
    pub tool_input: Option<String>,
    pub content: String,
    pub truncated_bytes: i64,
    /// The message's role (`user`, `assistant`, …), when the message is known.
    pub role: Option<String>,
    /// The part's tag number, when it has one.
    pub tag: Option<i64>,
}

const RAW_COLUMNS: &str = "r.identity, r.ordinal, r.part_index, r.kind, r.tool_name, r.tool_input,
     r.content, r.truncated_bytes, m.role, t.number";

fn raw_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawPart> {
    Ok(RawPart {
        identity: r.get(0)?,
        ordinal: r.get(1)?,
        part_index: r.get(2)?,
        kind: r.get(3)?,
        tool_name: r.get(4)?,
        tool_input: r.get(5)?,
        content: r.get(6)?,
        truncated_bytes: r.get(7)?,
        role: r.get(8)?,
        tag: r.get(9)?,
    })
}

/// Kept parts of the messages `from..=to`, in conversation order.
pub fn parts_in_range(conn: &Connection, session: i64, from: i64, to: i64) -> Result<Vec<RawPart>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {RAW_COLUMNS} FROM raw_parts r
           LEFT JOIN messages m ON m.session = r.session AND m.ordinal = r.ordinal
           LEFT JOIN tags t ON t.session = r.session AND t.identity = r.identity
         WHERE r.session = ?1 AND r.ordinal BETWEEN ?2 AND ?3
         ORDER BY r.ordinal, r.part_index"
    ))?;
    let rows = stmt.query_map(params![session, from, to], raw_from_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// A message's text as mc kept it (its text parts, trimmed, a blank line
/// between them: what `history::trigger::message_text` reads off the message).
pub fn message_text(conn: &Connection, session: i64, ordinal: i64) -> Result<String> {
    Ok(parts_in_range(conn, session, ordinal, ordinal)?
        .iter()
        .filter(|p| p.kind == "message")
        .map(|p| p.content.trim())
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n"))
}

/// The kept part behind tag `number`, if mc kept it.
pub fn part_of_tag(conn: &Connection, session: i64, number: i64) -> Result<Option<RawPart>> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {RAW_COLUMNS} FROM tags t
               JOIN raw_parts r ON r.session = t.session AND r.identity = t.identity
               LEFT JOIN messages m ON m.session = r.session AND m.ordinal = r.ordinal
             WHERE t.session = ?1 AND t.number = ?2"
        ))?
        .query_row(params![session, number], raw_from_row)
        .optional()?)
}

/// The highest ordinal with kept content (0 when none).
pub fn last_ordinal(conn: &Connection, session: i64) -> Result<i64> {
    Ok(conn
        .prepare_cached("SELECT coalesce(max(ordinal), 0) FROM raw_parts WHERE session = ?1")?
        .query_row(params![session], |r| r.get(0))?)
}

/// The messages of session `session` (`session_id` names it) whose ids start
/// with `prefix`, rebuilt from what mc kept of them, oldest first: each
/// message's row and its kept parts at their own indices (a part mc kept
/// nothing of is an empty `other` part, so every kept part keeps the
/// identity its tag has). A text part for which `skip` is true is left out
/// the same way. What a reader that needs the conversation, not its bytes,
/// can fold when mc's record is the only one (the historian, for a
/// session whose calls went through mc's gateway).
pub fn recorded_messages(
    conn: &Connection,
    (session, session_id): (i64, &str),
    prefix: &str,
    skip: impl Fn(&str) -> bool,
) -> Result<Vec<Message>> {
    let mut rows = conn.prepare_cached(
        "SELECT message_id, ordinal, role, created_ms FROM messages
         WHERE session = ?1 AND substr(message_id, 1, length(?2)) = ?2 ORDER BY ordinal",
    )?;
    let rows: Vec<(String, i64, String, Option<i64>)> = rows
        .query_map(params![session, prefix], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut parts_by_ordinal: std::collections::BTreeMap<i64, Vec<RawPart>> =
        std::collections::BTreeMap::new();
    if let (Some(first), Some(last)) = (rows.first(), rows.last()) {
        for part in parts_in_range(conn, session, first.1, last.1)? {
            parts_by_ordinal.entry(part.ordinal).or_default().push(part);
        }
    }
    let mut messages = Vec::with_capacity(rows.len());
    for (id, ordinal, role, created_ms) in rows {
        let kept = parts_by_ordinal.remove(&ordinal).unwrap_or_default();
        let mut parts = Vec::new();
        for raw in kept {
            let Ok(index) = usize::try_from(raw.part_index) else {
                continue;
            };
            while parts.len() < index {
                parts.push(crate::codec::part(json!({"type": "other"})));
            }
            let part_id = format!("{id}/{index}");
            let value = match raw.kind.as_str() {
                "message" if skip(&raw.content) => json!({"type": "other"}),
                "message" => json!({"id": part_id, "type": "text", "text": raw.content}),
                "tool" => {
                    let call = raw.identity.split('@').next().unwrap_or_default();
                    let input = raw
                        .tool_input
                        .as_deref()
                        .and_then(|t| serde_json::from_str::<Value>(t).ok())
                        .unwrap_or_else(|| json!({}));
                    json!({"id": part_id, "type": "tool", "callID": call,
                        "tool": raw.tool_name.as_deref().unwrap_or("unknown"),
                        "state": {"status": "completed", "input": input, "output": raw.content}})
                }
                _ => json!({"id": part_id, "type": "file", "mime": "application/octet-stream",
                    "filename": raw.content, "url": raw.content}),
            };
            if parts.len() == index {
                parts.push(crate::codec::part(value));
            }
        }
        let mut time = serde_json::Map::new();
        if let Some(ms) = created_ms {
            time.insert("created".into(), json!(ms));
        }
        let info = json!({"id": id, "sessionID": session_id, "role": role, "time": time});
        let mut raw = serde_json::Map::new();
        raw.insert("info".into(), info);
        messages.push(Message::new(raw, parts));
    }
    Ok(messages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_cuts_on_a_character_boundary_and_says_how_much() {
        let (kept, cut) = capped("aé".repeat(4), 4);
        assert_eq!(kept, "aéa");
        assert_eq!(cut, 12 - 4);
        assert_eq!(capped("short".into(), 10), ("short".to_string(), 0));
    }
}

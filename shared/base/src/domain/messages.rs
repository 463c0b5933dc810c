//! Messages and their ordinals: every message with an id gets a stable
//! per-session number on first sight, the one address space the transform,
//! the historian, pins and search share.

use rustc_hash::FxHashMap;

use rusqlite::{Connection, OptionalExtension, params};

use crate::codec::{Message, Role};
use crate::error::Result;

use super::sessions::SessionRow;

/// Ordinals of the known messages from `from_ordinal` on.
fn load_message_ordinals(
    conn: &Connection,
    session: i64,
    from_ordinal: i64,
) -> Result<FxHashMap<String, (i64, bool)>> {
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

fn message_ordinal(
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

/// The ordinal of a known message, by id.
pub fn ordinal_of(conn: &Connection, session: i64, message_id: &str) -> Result<Option<i64>> {
    Ok(message_ordinal(conn, session, message_id)?.map(|(ordinal, _)| ordinal))
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
    let mut known = FxHashMap::default();
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

/// The session id of the newest user message that has one, else of any message.
pub fn session_from_messages(messages: &[Message]) -> Option<String> {
    messages
        .iter()
        .rev()
        .filter(|m| m.role() == Role::User)
        .chain(messages.iter().rev())
        .find_map(|m| m.session_id().map(str::to_string))
}

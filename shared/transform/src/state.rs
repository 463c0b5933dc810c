//! The transform's own rows beside the shared domain: Channel 2 reminders.

use std::collections::BTreeMap;

use rusqlite::{Connection, params};

use mc_base::error::Result;

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

//! Session notes: what the agent writes down for itself (`ctx_note`) — a
//! plan, a caveat, a thing to check before finishing. Scoped to one session;
//! found by `query` within the project.
//!
//! Open notes are not rendered into the prompt's head: the agent reads them
//! back on demand (the tool says so), so a note write never becomes a future
//! head change, and a long-running session's notes cannot crowd the head.

use rusqlite::{Connection, params};
use serde::Serialize;

use mc_base::error::{Error, Result};
use mc_base::store::Store;

use super::{Scope, find_scoped_session};

/// The largest note mc accepts.
pub const MAX_NOTE_BYTES: usize = 8 * 1024;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Note {
    pub id: i64,
    pub content: String,
    pub status: String,
    pub created_ms: i64,
    pub updated_ms: i64,
}

pub fn write(store: &mut Store, scope: &Scope, content: &str, now_ms: i64) -> Result<Note> {
    let content = content.trim();
    if content.is_empty() {
        return Err(Error::input("a note needs non-empty content"));
    }
    if content.len() > MAX_NOTE_BYTES {
        return Err(Error::input(format!(
            "note is {} bytes; the limit is {MAX_NOTE_BYTES}",
            content.len()
        )));
    }
    store.write(|tx| {
        let session = find_scoped_session(tx, scope, "a note")?;
        tx.execute(
            "INSERT INTO notes (session, project, content, created_ms, updated_ms)
             VALUES (?1, ?2, ?3, ?4, ?4)",
            params![session.id, scope.project, content, now_ms],
        )?;
        Ok(Note {
            id: tx.last_insert_rowid(),
            content: content.to_string(),
            status: "open".into(),
            created_ms: now_ms,
            updated_ms: now_ms,
        })
    })
}

/// The session's notes: open ones, or all of them.
pub fn list(conn: &Connection, scope: &Scope, all: bool) -> Result<Vec<Note>> {
    let session = find_scoped_session(conn, scope, "listing notes")?;
    let mut stmt = conn.prepare_cached(
        "SELECT id, content, status, created_ms, updated_ms FROM notes
         WHERE session = ?1 AND (?2 OR status = 'open') ORDER BY id",
    )?;
    let rows = stmt.query_map(params![session.id, all], |r| {
        Ok(Note {
            id: r.get(0)?,
            content: r.get(1)?,
            status: r.get(2)?,
            created_ms: r.get(3)?,
            updated_ms: r.get(4)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Close a note of this session (a note of another session is "no such note").
pub fn dismiss(store: &mut Store, scope: &Scope, id: i64, now_ms: i64) -> Result<Note> {
    store.write(|tx| {
        let session = find_scoped_session(tx, scope, "dismissing a note")?;
        let n = tx.execute(
            "UPDATE notes SET status = 'dismissed', updated_ms = ?3
             WHERE id = ?1 AND session = ?2 AND status = 'open'",
            params![id, session.id, now_ms],
        )?;
        let note = list(tx, scope, true)?.into_iter().find(|n| n.id == id);
        match (n, note) {
            (1, Some(note)) => Ok(note),
            (_, Some(_)) => Err(Error::input(format!("note #{id} is already dismissed"))),
            (_, None) => Err(Error::input(format!("no note #{id} in this session"))
                .with_hint("list the session's notes with `mc-search note list`")),
        }
    })
}

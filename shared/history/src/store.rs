//! Rows the prompt's head is rendered from: compartments, memories, the user
//! profile and pins. Writers (the historian, mc-pin, mc-search) and the
//! transform share these functions, so every write that a cached head must
//! notice leaves the marker the head compares against.

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use mc_base::error::{Error, Result};

use super::decay::Compartment;

/// The five memory categories, in the order they render.
pub const CATEGORIES: [&str; 5] = [
    "PROJECT_RULES",
    "ARCHITECTURE",
    "CONSTRAINTS",
    "CONFIG_VALUES",
    "NAMING",
];

fn check_category(category: &str) -> Result<&'static str> {
    CATEGORIES
        .iter()
        .find(|c| **c == category)
        .copied()
        .ok_or_else(|| {
            Error::input(format!(
                "unknown memory category {category:?} (one of {})",
                CATEGORIES.join(", ")
            ))
        })
}

/// A compartment to publish; its sequence is assigned on insert.
#[derive(Debug, Clone, PartialEq)]
pub struct NewCompartment {
    pub start_ordinal: i64,
    pub end_ordinal: i64,
    pub start_message_id: String,
    pub end_message_id: String,
    pub start_ms: Option<i64>,
    pub end_ms: Option<i64>,
    pub title: String,
    pub tiers: [String; 4],
    pub importance: i64,
    pub episode: Option<String>,
}

/// Append compartments after the session's last one; returns their sequences.
pub fn publish_compartments(
    conn: &Connection,
    session: i64,
    compartments: &[NewCompartment],
    now_ms: i64,
) -> Result<Vec<i64>> {
    let next = max_sequence(conn, session)?;
    insert_compartments(conn, session, next, compartments, now_ms)
}

fn max_sequence(conn: &Connection, session: i64) -> Result<i64> {
    Ok(conn.query_row(
        "SELECT coalesce(max(sequence), 0) FROM compartments WHERE session = ?1",
        params![session],
        |r| r.get(0),
    )?)
}

/// Replace every compartment of the session with `compartments` (a
/// recompute: a structural edit, recorded so cached heads rebuild at their
/// next busting pass). Sequences go on from the old ones, never reused.
/// Returns the new sequences.
pub fn replace_compartments(
    conn: &Connection,
    session: i64,
    compartments: &[NewCompartment],
    now_ms: i64,
) -> Result<Vec<i64>> {
    let after = max_sequence(conn, session)?;
    conn.execute(
        "DELETE FROM compartments WHERE session = ?1",
        params![session],
    )?;
    let sequences = insert_compartments(conn, session, after, compartments, now_ms)?;
    record_compartment_edit(conn, session, "recompute", None, now_ms)?;
    Ok(sequences)
}

fn insert_compartments(
    conn: &Connection,
    session: i64,
    mut next: i64,
    compartments: &[NewCompartment],
    now_ms: i64,
) -> Result<Vec<i64>> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO compartments (session, sequence, start_ordinal, end_ordinal, start_message_id,
             end_message_id, start_ms, end_ms, title, p1, p2, p3, p4, importance, episode, created_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
    )?;
    let mut sequences = Vec::with_capacity(compartments.len());
    for c in compartments {
        next += 1;
        stmt.execute(params![
            session,
            next,
            c.start_ordinal,
            c.end_ordinal,
            c.start_message_id,
            c.end_message_id,
            c.start_ms,
            c.end_ms,
            c.title,
            c.tiers[0],
            c.tiers[1],
            c.tiers[2],
            c.tiers[3],
            c.importance.clamp(0, 100),
            c.episode,
            now_ms
        ])?;
        sequences.push(next);
    }
    Ok(sequences)
}

/// A stored compartment: what the renderer needs plus its covered range.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredCompartment {
    pub compartment: Compartment,
    pub end_message_id: String,
}

pub fn load_compartments(conn: &Connection, session: i64) -> Result<Vec<StoredCompartment>> {
    let mut stmt = conn.prepare_cached(
        "SELECT sequence, start_ordinal, end_ordinal, start_ms, end_ms, title, p1, p2, p3, p4,
                importance, end_message_id
         FROM compartments WHERE session = ?1 ORDER BY sequence",
    )?;
    let rows = stmt.query_map(params![session], |r| {
        Ok(StoredCompartment {
            compartment: Compartment {
                sequence: r.get(0)?,
                start_ordinal: r.get(1)?,
                end_ordinal: r.get(2)?,
                start_ms: r.get(3)?,
                end_ms: r.get(4)?,
                title: r.get(5)?,
                tiers: [r.get(6)?, r.get(7)?, r.get(8)?, r.get(9)?],
                importance: r.get(10)?,
            },
            end_message_id: r.get(11)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Delete a compartment (a structural edit: cached heads rebuild).
pub fn delete_compartment(
    conn: &Connection,
    session: i64,
    sequence: i64,
    now_ms: i64,
) -> Result<bool> {
    let n = conn.execute(
        "DELETE FROM compartments WHERE session = ?1 AND sequence = ?2",
        params![session, sequence],
    )?;
    if n > 0 {
        record_compartment_edit(conn, session, "delete", Some(sequence), now_ms)?;
    }
    Ok(n > 0)
}

fn record_compartment_edit(
    conn: &Connection,
    session: i64,
    kind: &str,
    sequence: Option<i64>,
    now_ms: i64,
) -> Result<()> {
    conn.execute(
        "INSERT INTO compartment_edits (session, kind, sequence, created_ms) VALUES (?1, ?2, ?3, ?4)",
        params![session, kind, sequence, now_ms],
    )?;
    Ok(())
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Memory {
    pub id: i64,
    pub category: String,
    pub content: String,
    pub status: String,
    pub importance: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MemoryWrite {
    pub id: i64,
    /// False when an identical live memory already existed (exact dedup).
    pub created: bool,
}

/// The largest memory mc accepts: a memory is one durable fact, not a document.
pub const MAX_MEMORY_BYTES: usize = 4096;

/// What exact dedup compares: lower case, every whitespace run one space.
pub fn normalize_memory(content: &str) -> String {
    content
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// The stored dedup key of `content` (a hash of its normalized form).
pub fn memory_key(content: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(normalize_memory(content).as_bytes());
    digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// Trimmed content, or why it cannot be a memory.
pub fn check_memory_content(content: &str) -> Result<&str> {
    let content = content.trim();
    if content.is_empty() {
        return Err(Error::input("a memory needs non-empty content"));
    }
    if content.len() > MAX_MEMORY_BYTES {
        return Err(Error::input(format!(
            "memory content is {} bytes; the limit is {MAX_MEMORY_BYTES} (store one fact per memory)",
            content.len()
        )));
    }
    Ok(content)
}

const UNKEYED_ROWS: &str = "SELECT id, content FROM memories
     WHERE project = ?1 AND category = ?2 AND content_key IS NULL";

/// Key the rows of a project's category written before keys existed. The
/// probe is a lookup in `memories_by_key` (project, category, key IS NULL),
/// so once they are keyed it costs nothing however many memories there are
/// (a probe by project alone scanned every memory of the project).
fn key_old_rows(conn: &Connection, project: &str, category: &str) -> Result<()> {
    let mut stmt = conn.prepare_cached(UNKEYED_ROWS)?;
    let rows: Vec<(i64, String)> = stmt
        .query_map(params![project, category], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut update = conn.prepare_cached("UPDATE memories SET content_key = ?2 WHERE id = ?1")?;
    for (id, content) in rows {
        update.execute(params![id, memory_key(&content)])?;
    }
    Ok(())
}

/// The live memory of `project`/`category` whose content normalizes like `content`.
pub fn live_duplicate(
    conn: &Connection,
    project: &str,
    category: &str,
    content: &str,
) -> Result<Option<i64>> {
    key_old_rows(conn, project, category)?;
    Ok(conn
        .prepare_cached(
            "SELECT id FROM memories WHERE project = ?1 AND category = ?2 AND content_key = ?3
               AND status IN ('active', 'permanent') ORDER BY id LIMIT 1",
        )?
        .query_row(params![project, category, memory_key(content)], |r| {
            r.get(0)
        })
        .optional()?)
}

/// Add a memory to a project, unless the same text (after normalizing case
/// and whitespace) is already live in that category. Run it in a write
/// transaction: the probe and the insert must see the same rows.
pub fn write_memory(
    conn: &Connection,
    project: &str,
    category: &str,
    content: &str,
    importance: Option<i64>,
    source: &str,
    now_ms: i64,
) -> Result<MemoryWrite> {
    let category = check_category(category)?;
    let content = check_memory_content(content)?;
    if let Some(id) = live_duplicate(conn, project, category, content)? {
        return Ok(MemoryWrite { id, created: false });
    }
    conn.execute(
        "INSERT INTO memories (project, category, content, importance, content_key, source,
                               created_ms, updated_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
        params![
            project,
            category,
            content,
            importance,
            memory_key(content),
            source,
            now_ms
        ],
    )?;
    Ok(MemoryWrite {
        id: conn.last_insert_rowid(),
        created: true,
    })
}

/// The project a memory belongs to, if it exists.
pub fn memory_project(conn: &Connection, id: i64) -> Result<Option<String>> {
    Ok(conn
        .query_row(
            "SELECT project FROM memories WHERE id = ?1",
            params![id],
            |r| r.get(0),
        )
        .optional()?)
}

#[allow(clippy::too_many_arguments)]
fn log_mutation(
    conn: &Connection,
    project: &str,
    kind: &str,
    memory: i64,
    superseded_by: Option<i64>,
    content: Option<&str>,
    reason: Option<&str>,
    now_ms: i64,
) -> Result<()> {
    conn.execute(
        "INSERT INTO memory_mutations (project, kind, memory, superseded_by, content, reason, created_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![project, kind, memory, superseded_by, content, reason, now_ms],
    )?;
    Ok(())
}

/// Rewrite a memory's text (logged, so cached heads show it as an update).
/// The caller has checked the memory belongs to `project`.
pub fn update_memory(
    conn: &Connection,
    project: &str,
    id: i64,
    content: &str,
    now_ms: i64,
) -> Result<()> {
    let content = check_memory_content(content)?;
    conn.execute(
        "UPDATE memories SET content = ?2, content_key = ?3, updated_ms = ?4 WHERE id = ?1",
        params![id, content, memory_key(content), now_ms],
    )?;
    log_mutation(
        conn,
        project,
        "update",
        id,
        None,
        Some(content),
        None,
        now_ms,
    )
}

/// Take a memory out of the live set, saying why (logged as a removal).
pub fn archive_memory(
    conn: &Connection,
    project: &str,
    id: i64,
    reason: Option<&str>,
    now_ms: i64,
) -> Result<()> {
    conn.execute(
        "UPDATE memories SET status = 'archived', archive_reason = ?2, updated_ms = ?3 WHERE id = ?1",
        params![id, reason, now_ms],
    )?;
    log_mutation(conn, project, "archive", id, None, None, reason, now_ms)
}

/// Mark `id` as replaced by `by` (a merge), logged so heads show it.
pub fn supersede_memory(
    conn: &Connection,
    project: &str,
    id: i64,
    by: i64,
    now_ms: i64,
) -> Result<()> {
    conn.execute(
        "UPDATE memories SET status = 'superseded', superseded_by = ?2, updated_ms = ?3 WHERE id = ?1",
        params![id, by, now_ms],
    )?;
    log_mutation(
        conn,
        project,
        "superseded",
        id,
        Some(by),
        None,
        None,
        now_ms,
    )
}

/// Make a memory permanent (kept first in every head) and record its merge sources.
pub fn set_memory_merge_info(
    conn: &Connection,
    id: i64,
    permanent: bool,
    merged_from: &[i64],
) -> Result<()> {
    let merged = serde_json::to_string(merged_from).map_err(|e| Error::Internal(e.to_string()))?;
    conn.execute(
        "UPDATE memories SET merged_from = ?2,
             status = CASE WHEN ?3 THEN 'permanent' ELSE status END WHERE id = ?1",
        params![id, merged, permanent],
    )?;
    Ok(())
}

/// Note that memories were used at `now_ms` (rendered in a head, matched by
/// a query): mc-dream's archive-stale asks only about memories unused for
/// long. Only moves the time forward; never a head change.
pub fn mark_memories_used(
    conn: &Connection,
    project: &str,
    ids: &[i64],
    now_ms: i64,
) -> Result<()> {
    let mut stmt = conn.prepare_cached(
        "UPDATE memories SET last_used_ms = ?3
         WHERE id = ?1 AND project = ?2 AND (last_used_ms IS NULL OR last_used_ms < ?3)",
    )?;
    for id in ids {
        stmt.execute(params![id, project, now_ms])?;
    }
    Ok(())
}

/// Record a memory's importance (0–100) and scope (`project` or `general`),
/// judged on the content whose key is `content_key`. Not a content change:
/// nothing is logged, and heads order by it only at their next HARD fold.
pub fn set_memory_classification(
    conn: &Connection,
    id: i64,
    importance: i64,
    scope: &str,
    content_key: &str,
) -> Result<()> {
    conn.execute(
        "UPDATE memories SET importance = ?2, scope = ?3, classified_key = ?4 WHERE id = ?1",
        params![id, importance.clamp(0, 100), scope, content_key],
    )?;
    Ok(())
}

/// An edit from outside any session (a dashboard, a migration): every cached
/// head of the project rebuilds on its next pass.
pub fn bump_memory_epoch(conn: &Connection, project: &str) -> Result<()> {
    conn.execute(
        "INSERT INTO projects (project, memory_epoch) VALUES (?1, 1)
         ON CONFLICT (project) DO UPDATE SET memory_epoch = memory_epoch + 1",
        params![project],
    )?;
    Ok(())
}

pub fn memory_epoch(conn: &Connection, project: &str) -> Result<i64> {
    Ok(conn
        .prepare_cached("SELECT memory_epoch FROM projects WHERE project = ?1")?
        .query_row(params![project], |r| r.get(0))
        .optional()?
        .unwrap_or(0))
}

/// Live memories of a project in render priority: permanent first, then
/// importance (unknown last), then id.
pub fn live_memories(conn: &Connection, project: &str, now_ms: i64) -> Result<Vec<Memory>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, category, content, status, importance FROM memories
         WHERE project = ?1 AND status IN ('active', 'permanent')
           AND (expires_ms IS NULL OR expires_ms > ?2)
         ORDER BY status = 'permanent' DESC, importance IS NULL, importance DESC, id",
    )?;
    let rows = stmt.query_map(params![project, now_ms], |r| {
        Ok(Memory {
            id: r.get(0)?,
            category: r.get(1)?,
            content: r.get(2)?,
            status: r.get(3)?,
            importance: r.get(4)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

#[derive(Debug, Clone, PartialEq)]
pub struct MemoryMutation {
    pub id: i64,
    pub kind: String,
    pub memory: i64,
    pub superseded_by: Option<i64>,
    pub content: Option<String>,
}

pub fn mutations_since(
    conn: &Connection,
    project: &str,
    after_id: i64,
) -> Result<Vec<MemoryMutation>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, kind, memory, superseded_by, content FROM memory_mutations
         WHERE project = ?1 AND id > ?2 ORDER BY id",
    )?;
    let rows = stmt.query_map(params![project, after_id], |r| {
        Ok(MemoryMutation {
            id: r.get(0)?,
            kind: r.get(1)?,
            memory: r.get(2)?,
            superseded_by: r.get(3)?,
            content: r.get(4)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProfileItem {
    pub id: i64,
    pub content: String,
}

pub fn add_profile_item(conn: &Connection, content: &str, now_ms: i64) -> Result<i64> {
    conn.execute(
        "INSERT INTO user_profile (content, created_ms) VALUES (?1, ?2)",
        params![content.trim(), now_ms],
    )?;
    Ok(conn.last_insert_rowid())
}

pub fn profile(conn: &Connection) -> Result<Vec<ProfileItem>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, content FROM user_profile WHERE status = 'active' ORDER BY id",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(ProfileItem {
            id: r.get(0)?,
            content: r.get(1)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pin {
    pub id: String,
    pub created_at: i64,
    pub role: String,
}

/// Pin a message; pinning it again is a no-op. Returns whether it was new.
pub fn pin(
    conn: &Connection,
    session: i64,
    message_id: &str,
    role: &str,
    created_ms: i64,
) -> Result<bool> {
    let n = conn.execute(
        "INSERT INTO pins (session, message_id, role, created_ms) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT DO NOTHING",
        params![session, message_id, role, created_ms],
    )?;
    Ok(n > 0)
}

pub fn unpin(conn: &Connection, session: i64, message_id: &str) -> Result<bool> {
    let n = conn.execute(
        "DELETE FROM pins WHERE session = ?1 AND message_id = ?2",
        params![session, message_id],
    )?;
    Ok(n > 0)
}

/// A session's pins in chronological order (created time, then id).
pub fn pins(conn: &Connection, session: i64) -> Result<Vec<Pin>> {
    let mut stmt = conn.prepare_cached(
        "SELECT message_id, created_ms, role FROM pins WHERE session = ?1 ORDER BY created_ms, message_id",
    )?;
    let rows = stmt.query_map(params![session], |r| {
        Ok(Pin {
            id: r.get(0)?,
            created_at: r.get(1)?,
            role: r.get(2)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mc_base::store::Store;

    #[test]
    fn rows_written_before_keys_existed_are_keyed_and_deduplicated() {
        let store = Store::open_in_memory().unwrap();
        let conn = store.conn();
        conn.execute(
            "INSERT INTO memories (project, category, content, created_ms, updated_ms)
             VALUES ('git:p', 'NAMING', 'Binaries are named mc-<verb>.', 1, 1)",
            [],
        )
        .unwrap();
        let again = write_memory(
            conn,
            "git:p",
            "NAMING",
            "binaries  are named MC-<verb>.",
            None,
            "agent",
            2,
        )
        .unwrap();
        assert_eq!(
            (again.id, again.created),
            (1, false),
            "the old row was found"
        );
        let other = write_memory(
            conn,
            "git:p",
            "CONSTRAINTS",
            "Binaries are named mc-<verb>.",
            None,
            "agent",
            2,
        )
        .unwrap();
        assert!(other.created, "dedup is per category");
    }

    #[test]
    fn the_probe_for_unkeyed_rows_is_an_index_lookup_not_a_walk_of_the_project() {
        // With every row keyed, a write must not read the project's memories
        // one by one: the probe looks up (project, category, NULL) in
        // memories_by_key.
        let store = Store::open_in_memory().unwrap();
        let plan: Vec<String> = store
            .conn()
            .prepare(&format!("EXPLAIN QUERY PLAN {UNKEYED_ROWS}"))
            .unwrap()
            .query_map(params!["git:p", "NAMING"], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(
            plan,
            [
                "SEARCH memories USING INDEX memories_by_key (project=? AND category=? AND content_key=?)"
            ],
        );
    }
}

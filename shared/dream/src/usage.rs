//! When each memory was last used. A query that matches a memory records it
//! as it answers (`search::tools`); a head that renders one is read here:
//! every session head of the project renders the memories of its m[0]
//! (`heads.memory_ids`) and the live ones newer than its watermark (m[1]) on
//! each pass, so they were used when that session last ran.

use rusqlite::{Connection, params};

use mc_base::error::Result;
use mc_history::store;

/// Move `last_used_ms` forward for every memory a head of `project` renders,
/// to the last time that head's session ran.
pub fn refresh_from_heads(conn: &Connection, project: &str) -> Result<()> {
    let mut stmt = conn.prepare_cached(
        "SELECT h.memory_ids, h.max_memory_id, s.updated_ms FROM heads h
         JOIN sessions s ON s.id = h.session WHERE h.project = ?1",
    )?;
    let heads: Vec<(String, i64, i64)> = stmt
        .query_map(params![project], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (ids, watermark, used_ms) in heads {
        let mut rendered: Vec<i64> = serde_json::from_str(&ids).unwrap_or_default();
        let mut newer = conn.prepare_cached(
            "SELECT id FROM memories WHERE project = ?1 AND id > ?2
               AND status IN ('active', 'permanent')",
        )?;
        let fresh: Vec<i64> = newer
            .query_map(params![project, watermark], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        rendered.extend(fresh);
        store::mark_memories_used(conn, project, &rendered, used_ms)?;
    }
    Ok(())
}

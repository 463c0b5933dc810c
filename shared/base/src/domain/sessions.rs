//! The session row: one per (harness, session id), shared by every tool.

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::{Error, Result};

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
    // The render version is stamped by the session's first pass.
    conn.prepare_cached(
        "INSERT INTO sessions (harness, session_id, is_subagent, project_identity, created_ms, updated_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
    )?
    .execute(params![harness, session_id, subagent, project_identity, now_ms])?;
    find_session(conn, harness, session_id)?
        .ok_or_else(|| Error::Corrupt("session row vanished right after insert".into()))
}

/// Write back every field of the row a tool may change, by name. Call it in
/// the write transaction the row was read in, so nothing a sibling wrote in
/// between is lost. `project_dir` is only ever set once.
/// Give a session the project it did not know yet (a row the gateway's pass
/// created from a request, which names no folder): its identity and folder,
/// each only where the row has none.
pub fn adopt_project(
    conn: &Connection,
    id: i64,
    project_identity: &str,
    project_dir: &str,
) -> Result<()> {
    conn.prepare_cached(
        "UPDATE sessions SET project_identity = coalesce(project_identity, ?2),
                             project_dir = coalesce(project_dir, ?3)
         WHERE id = ?1",
    )?
    .execute(rusqlite::params![id, project_identity, project_dir])?;
    Ok(())
}

pub fn save(conn: &Connection, row: &SessionRow, now_ms: i64) -> Result<()> {
    conn.prepare_cached(
        "UPDATE sessions SET
            reduce_callable = :reduce_callable, tag_counter = :tag_counter,
            ordinal_counter = :ordinal_counter, last_response_ms = :last_response_ms,
            last_execute_ms = :last_execute_ms, last_model_key = :last_model_key,
            heuristics_turn_id = :heuristics_turn_id,
            tool_reclaim_watermark = :tool_reclaim_watermark,
            reasoning_cleared_through = :reasoning_cleared_through,
            deferred_execute_ms = :deferred_execute_ms, today_line = :today_line,
            seen_today_line = :seen_today_line,
            last_emergency_sample = :last_emergency_sample, nudge2_armed = :nudge2_armed,
            nudge1_level = :nudge1_level, nudge1_reducible = :nudge1_reducible,
            project_dir = coalesce(project_dir, :project_dir),
            render_version = :render_version, updated_ms = :now
         WHERE id = :id",
    )?
    .execute(rusqlite::named_params! {
        ":id": row.id,
        ":reduce_callable": row.reduce_callable,
        ":tag_counter": row.tag_counter,
        ":ordinal_counter": row.ordinal_counter,
        ":last_response_ms": row.last_response_ms,
        ":last_execute_ms": row.last_execute_ms,
        ":last_model_key": row.last_model_key,
        ":heuristics_turn_id": row.heuristics_turn_id,
        ":tool_reclaim_watermark": row.tool_reclaim_watermark,
        ":reasoning_cleared_through": row.reasoning_cleared_through,
        ":deferred_execute_ms": row.deferred_execute_ms,
        ":today_line": row.today_line,
        ":seen_today_line": row.seen_today_line,
        ":last_emergency_sample": row.last_emergency_sample,
        ":nudge2_armed": row.nudge2_armed,
        ":nudge1_level": row.nudge1_level,
        ":nudge1_reducible": row.nudge1_reducible,
        ":project_dir": row.project_dir,
        ":render_version": row.render_version,
        ":now": now_ms,
    })?;
    Ok(())
}

/// The `Today's date:` line a harness's system hook showed (the frozen date
/// starts from it when no pass has frozen one yet).
pub fn record_seen_today(conn: &Connection, session: i64, line: Option<&str>) -> Result<()> {
    conn.prepare_cached(
        "UPDATE sessions SET seen_today_line = ?2, today_line = coalesce(today_line, ?2)
         WHERE id = ?1",
    )?
    .execute(params![session, line])?;
    Ok(())
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

/// The session a harness last started in `project_dir` (its SessionStart
/// hook records it): the one an MCP server in that folder serves.
#[derive(Debug, Clone, PartialEq)]
pub struct CurrentSession {
    pub session_id: String,
    pub transcript_path: Option<String>,
    pub updated_ms: i64,
}

pub fn record_current(
    conn: &Connection,
    harness: &str,
    project_dir: &str,
    session_id: &str,
    transcript_path: Option<&str>,
    now_ms: i64,
) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO current_sessions (harness, project_dir, session_id, transcript_path, updated_ms)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (harness, project_dir) DO UPDATE SET session_id = excluded.session_id,
             transcript_path = excluded.transcript_path, updated_ms = excluded.updated_ms",
    )?
    .execute(params![harness, project_dir, session_id, transcript_path, now_ms])?;
    Ok(())
}

pub fn current_session(
    conn: &Connection,
    harness: &str,
    project_dir: &str,
) -> Result<Option<CurrentSession>> {
    Ok(conn
        .prepare_cached(
            "SELECT session_id, transcript_path, updated_ms FROM current_sessions
             WHERE harness = ?1 AND project_dir = ?2",
        )?
        .query_row(params![harness, project_dir], |r| {
            Ok(CurrentSession {
                session_id: r.get(0)?,
                transcript_path: r.get(1)?,
                updated_ms: r.get(2)?,
            })
        })
        .optional()?)
}

//! The dreamer's rows: the projects it knows, each (project, task)'s state,
//! and the run records.

use std::path::PathBuf;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use serde_json::Value;

use mc_base::error::Result;

use super::schedule::Attempts;

/// A project the dreamer knows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KnownProject {
    pub project: String,
    /// The folder it was last seen in (none for a project known only by its
    /// memories).
    pub dir: Option<PathBuf>,
    /// `unknown`, `git`, or `none` (parked: not a git repository).
    pub git_state: String,
    pub git_probed_ms: Option<i64>,
}

/// Learn projects from the sessions (their newest folder) and memories.
/// Run in a write transaction; cheap enough for every tick.
pub fn refresh_projects(conn: &Connection) -> Result<()> {
    conn.execute_batch(
        "INSERT INTO dream_projects (project, dir, updated_ms)
             SELECT project_identity, project_dir, max(updated_ms) FROM sessions
             WHERE project_identity IS NOT NULL AND project_dir IS NOT NULL
             GROUP BY project_identity
         ON CONFLICT (project) DO UPDATE SET dir = excluded.dir, updated_ms = excluded.updated_ms
             WHERE excluded.updated_ms > dream_projects.updated_ms;
         INSERT OR IGNORE INTO dream_projects (project, dir, updated_ms)
             SELECT DISTINCT project, NULL, 0 FROM memories;",
    )?;
    Ok(())
}

/// Record that `project` lives in `dir` (a command named the folder).
pub fn note_project_dir(conn: &Connection, project: &str, dir: &str, now_ms: i64) -> Result<()> {
    conn.execute(
        "INSERT INTO dream_projects (project, dir, updated_ms) VALUES (?1, ?2, ?3)
         ON CONFLICT (project) DO UPDATE SET dir = ?2, updated_ms = max(updated_ms, ?3),
             git_state = CASE WHEN dir IS ?2 THEN git_state ELSE 'unknown' END",
        params![project, dir, now_ms],
    )?;
    Ok(())
}

pub fn projects(conn: &Connection) -> Result<Vec<KnownProject>> {
    let mut stmt = conn.prepare_cached(
        "SELECT project, dir, git_state, git_probed_ms FROM dream_projects ORDER BY project",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(KnownProject {
            project: r.get(0)?,
            dir: r.get::<_, Option<String>>(1)?.map(PathBuf::from),
            git_state: r.get(2)?,
            git_probed_ms: r.get(3)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub fn set_git_state(conn: &Connection, project: &str, state: &str, now_ms: i64) -> Result<()> {
    conn.execute(
        "UPDATE dream_projects SET git_state = ?2, git_probed_ms = ?3 WHERE project = ?1",
        params![project, state, now_ms],
    )?;
    Ok(())
}

/// A (project, task)'s stored state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TaskState {
    pub last_run_ms: Option<i64>,
    pub last_attempt_ms: Option<i64>,
    pub last_result: Option<String>,
    #[serde(skip)]
    pub last_detail: Option<String>,
    pub last_error: Option<String>,
    pub failures: u32,
    pub retry_after_ms: Option<i64>,
    #[serde(skip)]
    pub head: Option<String>,
}

impl TaskState {
    /// What the schedule reads.
    pub fn attempts(&self) -> Attempts {
        let failed = self.last_result.as_deref() == Some("failed");
        Attempts {
            last_settled_ms: if failed {
                self.last_run_ms
            } else {
                self.last_attempt_ms.or(self.last_run_ms)
            },
            retry_after_ms: if failed { self.retry_after_ms } else { None },
        }
    }
}

pub fn task_state(conn: &Connection, project: &str, task: &str) -> Result<TaskState> {
    Ok(conn
        .prepare_cached(
            "SELECT last_run_ms, last_attempt_ms, last_result, last_detail, last_error, failures,
                    retry_after_ms, head
             FROM dream_tasks WHERE project = ?1 AND task = ?2",
        )?
        .query_row(params![project, task], |r| {
            Ok(TaskState {
                last_run_ms: r.get(0)?,
                last_attempt_ms: r.get(1)?,
                last_result: r.get(2)?,
                last_detail: r.get(3)?,
                last_error: r.get(4)?,
                failures: r.get::<_, i64>(5)?.try_into().unwrap_or(u32::MAX),
                retry_after_ms: r.get(6)?,
                head: r.get(7)?,
            })
        })
        .optional()?
        .unwrap_or_default())
}

/// How an attempt ended, as the state row keeps it.
#[derive(Debug, Clone, PartialEq)]
pub enum Ended<'a> {
    /// `ok` or `nothing`: the task succeeded; `last_run_ms` advances.
    Succeeded {
        result: &'a str,
        detail: &'a Value,
        head: Option<&'a str>,
    },
    /// The activity gate: nothing new since the last run (not a run).
    Skipped { why: &'a str },
    /// Back off until `retry_after_ms`.
    Failed { error: &'a str, retry_after_ms: i64 },
}

pub fn record_attempt(
    conn: &Connection,
    project: &str,
    task: &str,
    now_ms: i64,
    ended: &Ended<'_>,
) -> Result<()> {
    conn.execute(
        "INSERT INTO dream_tasks (project, task) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
        params![project, task],
    )?;
    match ended {
        Ended::Succeeded {
            result,
            detail,
            head,
        } => conn.execute(
            "UPDATE dream_tasks SET last_run_ms = ?3, last_attempt_ms = ?3, last_result = ?4,
                 last_detail = ?5, last_error = NULL, failures = 0, retry_after_ms = NULL,
                 head = coalesce(?6, head)
             WHERE project = ?1 AND task = ?2",
            params![project, task, now_ms, result, detail.to_string(), head],
        )?,
        Ended::Skipped { why } => conn.execute(
            "UPDATE dream_tasks SET last_attempt_ms = ?3, last_result = 'skipped',
                 last_detail = ?4, last_error = NULL, failures = 0, retry_after_ms = NULL
             WHERE project = ?1 AND task = ?2",
            params![project, task, now_ms, why],
        )?,
        Ended::Failed {
            error,
            retry_after_ms,
        } => conn.execute(
            "UPDATE dream_tasks SET last_attempt_ms = ?3, last_result = 'failed',
                 last_error = ?4, failures = failures + 1, retry_after_ms = ?5
             WHERE project = ?1 AND task = ?2",
            params![project, task, now_ms, error, retry_after_ms],
        )?,
    };
    Ok(())
}

/// A task's times from a clock that ran ahead: none later than `now_ms`,
/// and a back-off retry no later than `next_ms` (the schedule's next time).
pub fn bring_back(
    conn: &Connection,
    project: &str,
    task: &str,
    now_ms: i64,
    next_ms: i64,
) -> Result<()> {
    conn.execute(
        "UPDATE dream_tasks SET last_run_ms = min(last_run_ms, ?3),
             last_attempt_ms = min(last_attempt_ms, ?3),
             retry_after_ms = min(retry_after_ms, ?4)
         WHERE project = ?1 AND task = ?2",
        params![project, task, now_ms, next_ms],
    )?;
    Ok(())
}

/// Open a run record (its status stays NULL until it finishes: a run that
/// was killed keeps it so).
pub fn start_run(conn: &Connection, project: &str, task: &str, now_ms: i64) -> Result<i64> {
    conn.execute(
        "INSERT INTO dream_runs (project, task, started_ms) VALUES (?1, ?2, ?3)",
        params![project, task, now_ms],
    )?;
    Ok(conn.last_insert_rowid())
}

#[allow(clippy::too_many_arguments)]
pub fn finish_run(
    conn: &Connection,
    run: i64,
    status: &str,
    model: Option<&str>,
    tokens_in: u64,
    tokens_out: u64,
    detail: &str,
    now_ms: i64,
) -> Result<()> {
    conn.execute(
        "UPDATE dream_runs SET finished_ms = ?2, status = ?3, model = ?4, tokens_in = ?5,
             tokens_out = ?6, detail = ?7
         WHERE id = ?1",
        params![
            run,
            now_ms,
            status,
            model,
            i64::try_from(tokens_in).unwrap_or(i64::MAX),
            i64::try_from(tokens_out).unwrap_or(i64::MAX),
            detail
        ],
    )?;
    Ok(())
}

/// What changed in a project since `since_ms` that a model task could act
/// on: a new session, a memory written or changed, or (given both HEADs) a
/// new commit. `None`: nothing — the task is skipped without a model call.
pub fn activity_since(
    conn: &Connection,
    project: &str,
    since_ms: i64,
    head_then: Option<&str>,
    head_now: Option<&str>,
) -> Result<Option<&'static str>> {
    let session: Option<i64> = conn
        .prepare_cached(
            "SELECT 1 FROM sessions WHERE project_identity = ?1 AND created_ms > ?2 LIMIT 1",
        )?
        .query_row(params![project, since_ms], |r| r.get(0))
        .optional()?;
    if session.is_some() {
        return Ok(Some("new sessions"));
    }
    let memory: Option<i64> = conn
        .prepare_cached("SELECT 1 FROM memories WHERE project = ?1 AND updated_ms > ?2 LIMIT 1")?
        .query_row(params![project, since_ms], |r| r.get(0))
        .optional()?;
    if memory.is_some() {
        return Ok(Some("memories changed"));
    }
    if let Some(now) = head_now
        && head_then != Some(now)
    {
        return Ok(Some("new commits"));
    }
    Ok(None)
}

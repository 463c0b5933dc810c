//! What the pages show, read from the store: one query per table and view,
//! aggregated in SQL where the rows are many (the per-call record).

use std::collections::BTreeMap;

use rusqlite::{Connection, OptionalExtension, params};

use mc_base::config::Config;
use mc_base::error::Result;
use mc_history::historian::publish::{self, RunRecord};
use mc_transform_core::head::{HeadRow, load_head};
use mc_transform_core::status::{CallView, recent_calls};

use crate::prices::{self, Cost, Tokens};

/// Calls a session page draws (the newest).
pub const TIMELINE_CALLS: usize = 240;
/// Sessions a page of the list shows.
pub const SESSION_ROWS: usize = 200;

/// One session as the list shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionLine {
    pub id: i64,
    pub harness: String,
    pub session_id: String,
    pub project: Option<String>,
    pub project_dir: Option<String>,
    pub subagent: bool,
    pub model: Option<String>,
    pub last_ms: i64,
    pub usage_percent: f64,
    /// Calls recorded (with usage or not yet).
    pub calls: i64,
    /// Tokens of the calls whose usage the provider reported.
    pub tokens: Tokens,
    pub cost: Cost,
}

impl SessionLine {
    /// What the filter matches against.
    fn haystack(&self) -> String {
        format!(
            "{} {} {} {} {}",
            self.harness,
            self.session_id,
            self.project.as_deref().unwrap_or_default(),
            self.project_dir.as_deref().unwrap_or_default(),
            self.model.as_deref().unwrap_or_default()
        )
        .to_lowercase()
    }
}

fn tokens_of(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<Tokens> {
    Ok(Tokens {
        calls: r.get(at)?,
        input: r.get::<_, Option<i64>>(at + 1)?.unwrap_or(0),
        cache_read: r.get::<_, Option<i64>>(at + 2)?.unwrap_or(0),
        cache_write: r.get::<_, Option<i64>>(at + 3)?.unwrap_or(0),
        output: r.get::<_, Option<i64>>(at + 4)?.unwrap_or(0),
    })
}

/// Per session: the token sums of the calls with usage, priced per model,
/// and how many calls were recorded in all. (`GROUP BY session, model`
/// walks the `calls_usage_by_session` index in order.)
fn by_session(conn: &Connection, config: &Config) -> Result<BTreeMap<i64, Spent>> {
    let mut stmt = conn.prepare_cached(
        "SELECT session, model, count(cache_read), sum(input), sum(cache_read),
                sum(cache_write), sum(output), count(*)
         FROM calls GROUP BY session, model",
    )?;
    let mut out: BTreeMap<i64, Spent> = BTreeMap::new();
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let entry = out.entry(r.get(0)?).or_default();
        spent_add(entry, r, 1, config)?;
    }
    Ok(out)
}

/// Tokens and cost of the calls with usage, and the count of every call.
type Spent = (Tokens, Cost, i64);

/// Add a row of (model, calls with usage, input, cache read, cache write,
/// output, calls) from column `at` on.
fn spent_add(
    entry: &mut Spent,
    r: &rusqlite::Row<'_>,
    at: usize,
    config: &Config,
) -> rusqlite::Result<()> {
    let tokens = tokens_of(r, at + 1)?;
    if tokens.calls > 0 {
        let model: Option<String> = r.get(at)?;
        entry.0.add(&tokens);
        entry.1.add(&Cost::of(
            &tokens,
            prices::of(model.as_deref(), &config.dashboard),
        ));
    }
    entry.2 += r.get::<_, i64>(at + 6)?;
    Ok(())
}

/// The same per day (UTC), folded here from the `calls_by_time` index in
/// time order (SQLite would sort every row to group by the day): one day's
/// models at a time, a model's name read without a copy unless it is new
/// that day.
fn by_day(conn: &Connection, config: &Config) -> Result<BTreeMap<i64, (Tokens, Cost)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT at_ms, model, 1, input, cache_read, cache_write, output
         FROM calls WHERE cache_read IS NOT NULL ORDER BY at_ms",
    )?;
    let mut out: BTreeMap<i64, (Tokens, Cost)> = BTreeMap::new();
    let price_day = |out: &mut BTreeMap<i64, (Tokens, Cost)>,
                     day: i64,
                     models: &mut Vec<(Option<String>, Tokens)>| {
        for (model, tokens) in models.drain(..) {
            let entry = out.entry(day).or_default();
            entry.0.add(&tokens);
            entry.1.add(&Cost::of(
                &tokens,
                prices::of(model.as_deref(), &config.dashboard),
            ));
        }
    };
    let mut day = None;
    let mut models: Vec<(Option<String>, Tokens)> = Vec::new();
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let this = r.get::<_, i64>(0)?.div_euclid(DAY_MS);
        if day != Some(this) {
            if let Some(done) = day {
                price_day(&mut out, done, &mut models);
            }
            day = Some(this);
        }
        let model = match r.get_ref(1)? {
            rusqlite::types::ValueRef::Text(t) => std::str::from_utf8(t).ok(),
            _ => None,
        };
        let tokens = tokens_of(r, 2)?;
        match models.iter_mut().find(|(m, _)| m.as_deref() == model) {
            Some((_, sum)) => sum.add(&tokens),
            None => models.push((model.map(str::to_string), tokens)),
        }
    }
    if let Some(done) = day {
        price_day(&mut out, done, &mut models);
    }
    Ok(out)
}

const SESSION_COLUMNS: &str = "s.id, s.harness, s.session_id, s.project_identity,
    s.project_dir, s.is_subagent, s.last_model_key, s.updated_ms, s.last_usage_percent,
    (SELECT at_ms FROM calls c WHERE c.session = s.id ORDER BY c.id DESC LIMIT 1),
    (SELECT 100.0 * (coalesce(input, 0) + cache_read + coalesce(cache_write, 0))
            / max(context_window, 1)
     FROM calls c WHERE c.session = s.id AND c.cache_read IS NOT NULL
     ORDER BY c.id DESC LIMIT 1)";

/// A session row of [`SESSION_COLUMNS`], its spend left at zero. Its
/// context is the newest call whose usage the provider reported (through
/// the gateway, the newest call itself), else the last pass's measure.
fn line_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<SessionLine> {
    Ok(SessionLine {
        id: r.get(0)?,
        harness: r.get(1)?,
        session_id: r.get(2)?,
        project: r.get(3)?,
        project_dir: r.get(4)?,
        subagent: r.get(5)?,
        model: r.get(6)?,
        last_ms: r.get::<_, Option<i64>>(9)?.unwrap_or(r.get(7)?),
        usage_percent: r.get::<_, Option<f64>>(10)?.unwrap_or(r.get(8)?),
        calls: 0,
        tokens: Tokens::default(),
        cost: Cost::default(),
    })
}

/// Sessions, newest activity first, those matching every word of `filter`.
pub fn sessions(conn: &Connection, config: &Config, filter: &str) -> Result<Vec<SessionLine>> {
    let spend = by_session(conn, config)?;
    let mut stmt = conn.prepare_cached(&format!("SELECT {SESSION_COLUMNS} FROM sessions s"))?;
    let words: Vec<String> = filter.split_whitespace().map(str::to_lowercase).collect();
    let mut out = Vec::new();
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let mut line = line_of(r)?;
        (line.tokens, line.cost, line.calls) = spend.get(&line.id).copied().unwrap_or_default();
        if !words.is_empty() {
            let hay = line.haystack();
            if !words.iter().all(|w| hay.contains(w.as_str())) {
                continue;
            }
        }
        out.push(line);
    }
    out.sort_by(|a, b| b.last_ms.cmp(&a.last_ms).then(a.id.cmp(&b.id)));
    Ok(out)
}

/// A dropped tag, as the session page lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct Dropped {
    pub number: i64,
    pub kind: String,
    pub tool: Option<String>,
    pub tokens: i64,
    pub mode: Option<String>,
    pub cause: Option<String>,
    pub at_ms: Option<i64>,
}

/// Everything one session's page shows.
pub struct SessionPage {
    pub line: SessionLine,
    pub calls: Vec<CallView>,
    pub head: Option<HeadRow>,
    pub compartments: i64,
    pub pins: i64,
    pub dropped: Vec<Dropped>,
    pub dropped_total: i64,
    pub runs: Vec<RunRecord>,
}

pub fn session(conn: &Connection, config: &Config, id: i64) -> Result<Option<SessionPage>> {
    let Some(line) = sessions_by_id(conn, config, id)? else {
        return Ok(None);
    };
    let calls = recent_calls(conn, id, config.transform.cache_ttl, TIMELINE_CALLS)?;
    let head = load_head(conn, id)?;
    let compartments = conn.query_row(
        "SELECT count(*) FROM compartments WHERE session = ?1",
        params![id],
        |r| r.get(0),
    )?;
    let pins = conn.query_row(
        "SELECT count(*) FROM pins WHERE session = ?1",
        params![id],
        |r| r.get(0),
    )?;
    let mut stmt = conn.prepare_cached(
        "SELECT number, kind, tool_name, tokens + input_tokens, drop_mode, drop_cause, dropped_ms
         FROM tags WHERE session = ?1 AND status = 'dropped' ORDER BY number DESC LIMIT 100",
    )?;
    let dropped = stmt
        .query_map(params![id], |r| {
            Ok(Dropped {
                number: r.get(0)?,
                kind: r.get(1)?,
                tool: r.get(2)?,
                tokens: r.get(3)?,
                mode: r.get(4)?,
                cause: r.get(5)?,
                at_ms: r.get(6)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let dropped_total = conn.query_row(
        "SELECT count(*) FROM tags WHERE session = ?1 AND status = 'dropped'",
        params![id],
        |r| r.get(0),
    )?;
    let runs = publish::recent_runs(conn, id, 50)?;
    Ok(Some(SessionPage {
        line,
        calls,
        head,
        compartments,
        pins,
        dropped,
        dropped_total,
        runs,
    }))
}

fn sessions_by_id(conn: &Connection, config: &Config, id: i64) -> Result<Option<SessionLine>> {
    let row = conn
        .query_row(
            &format!("SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.id = ?1"),
            params![id],
            line_of,
        )
        .optional()?;
    let Some(mut line) = row else {
        return Ok(None);
    };
    let mut stmt = conn.prepare_cached(
        "SELECT model, count(cache_read), sum(input), sum(cache_read), sum(cache_write),
                sum(output), count(*)
         FROM calls WHERE session = ?1 GROUP BY model",
    )?;
    let mut rows = stmt.query(params![id])?;
    let mut spent = Spent::default();
    while let Some(r) = rows.next()? {
        spent_add(&mut spent, r, 0, config)?;
    }
    (line.tokens, line.cost, line.calls) = spent;
    Ok(Some(line))
}

/// Spend per day (UTC), per project and per session.
pub struct Spend {
    pub days: Vec<(i64, Tokens, Cost)>,
    pub projects: Vec<(String, Tokens, Cost)>,
    /// Every session with calls, the costliest first.
    pub sessions: Vec<SessionLine>,
    pub total: (Tokens, Cost),
}

pub const DAY_MS: i64 = 86_400_000;

pub fn spend(conn: &Connection, config: &Config) -> Result<Spend> {
    let days = by_day(conn, config)?
        .into_iter()
        .rev()
        .map(|(day, (t, c))| (day * DAY_MS, t, c))
        .collect::<Vec<_>>();
    let mut sessions = sessions(conn, config, "")?;
    sessions.retain(|l| l.tokens.calls > 0);
    sessions.sort_by(|a, b| {
        b.cost
            .dollars
            .total_cmp(&a.cost.dollars)
            .then(a.id.cmp(&b.id))
    });
    let mut projects: BTreeMap<String, (Tokens, Cost)> = BTreeMap::new();
    for l in &sessions {
        let entry = projects
            .entry(l.project.clone().unwrap_or_else(|| "(no project)".into()))
            .or_default();
        entry.0.add(&l.tokens);
        entry.1.add(&l.cost);
    }
    let mut total = (Tokens::default(), Cost::default());
    for (_, t, c) in &days {
        total.0.add(t);
        total.1.add(c);
    }
    let mut projects: Vec<_> = projects.into_iter().map(|(p, (t, c))| (p, t, c)).collect();
    projects.sort_by(|a, b| b.2.dollars.total_cmp(&a.2.dollars).then(a.0.cmp(&b.0)));
    Ok(Spend {
        days,
        projects,
        sessions,
        total,
    })
}

/// The projects that have memories, with how many are live.
pub fn memory_projects(conn: &Connection) -> Result<Vec<(String, i64, i64)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT project, sum(status IN ('active', 'permanent')), count(*)
         FROM memories GROUP BY project ORDER BY project",
    )?;
    Ok(stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?)
}

/// One entry of a project's memory mutation log.
#[derive(Debug, Clone, PartialEq)]
pub struct Mutation {
    pub id: i64,
    pub kind: String,
    pub memory: i64,
    pub superseded_by: Option<i64>,
    pub content: Option<String>,
    pub at_ms: i64,
}

pub fn mutations(conn: &Connection, project: &str, limit: usize) -> Result<Vec<Mutation>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, kind, memory, superseded_by, content, created_ms FROM memory_mutations
         WHERE project = ?1 ORDER BY id DESC LIMIT ?2",
    )?;
    Ok(stmt
        .query_map(params![project, limit as i64], |r| {
            Ok(Mutation {
                id: r.get(0)?,
                kind: r.get(1)?,
                memory: r.get(2)?,
                superseded_by: r.get(3)?,
                content: r.get(4)?,
                at_ms: r.get(5)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?)
}

/// A dreamer task's state.
#[derive(Debug, Clone, PartialEq)]
pub struct DreamTask {
    pub project: String,
    pub task: String,
    pub last_run_ms: Option<i64>,
    pub last_attempt_ms: Option<i64>,
    pub last_result: Option<String>,
    pub last_error: Option<String>,
    pub failures: i64,
}

/// A dreamer run.
#[derive(Debug, Clone, PartialEq)]
pub struct DreamRun {
    pub project: String,
    pub task: String,
    pub started_ms: i64,
    pub finished_ms: Option<i64>,
    pub status: Option<String>,
    pub model: Option<String>,
    pub tokens_in: i64,
    pub tokens_out: i64,
    pub detail: Option<String>,
}

pub fn dream(conn: &Connection, runs: usize) -> Result<(Vec<DreamTask>, Vec<DreamRun>)> {
    let mut stmt = conn.prepare_cached(
        "SELECT project, task, last_run_ms, last_attempt_ms, last_result, last_error, failures
         FROM dream_tasks ORDER BY project, task",
    )?;
    let tasks = stmt
        .query_map([], |r| {
            Ok(DreamTask {
                project: r.get(0)?,
                task: r.get(1)?,
                last_run_ms: r.get(2)?,
                last_attempt_ms: r.get(3)?,
                last_result: r.get(4)?,
                last_error: r.get(5)?,
                failures: r.get(6)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut stmt = conn.prepare_cached(
        "SELECT project, task, started_ms, finished_ms, status, model, tokens_in, tokens_out,
                detail
         FROM dream_runs ORDER BY id DESC LIMIT ?1",
    )?;
    let runs = stmt
        .query_map(params![runs as i64], |r| {
            Ok(DreamRun {
                project: r.get(0)?,
                task: r.get(1)?,
                started_ms: r.get(2)?,
                finished_ms: r.get(3)?,
                status: r.get(4)?,
                model: r.get(5)?,
                tokens_in: r.get(6)?,
                tokens_out: r.get(7)?,
                detail: r.get(8)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok((tasks, runs))
}

//! The historian's rows: the per-session lease, the run records, and the one
//! transaction that publishes a chunk's compartments and facts.

use std::collections::HashSet;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::store::{self, NewCompartment};
use mc_base::error::Result;

use super::failure::{FailureRecord, Refusal};
use super::parse::RawFact;

/// Who holds a session's lease, and until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lease {
    pub holder: String,
    pub expires_ms: i64,
}

/// Take the session's lease for `ttl_ms`, unless someone else holds an
/// unexpired one (returned as `Err`). A lease whose holder died expires.
/// Run inside a write transaction.
pub fn acquire_lease(
    conn: &Connection,
    session: i64,
    holder: &str,
    now_ms: i64,
    ttl_ms: i64,
) -> Result<std::result::Result<(), Lease>> {
    let current: Option<Lease> = conn
        .query_row(
            "SELECT holder, expires_ms FROM historian_leases WHERE session = ?1",
            params![session],
            |r| {
                Ok(Lease {
                    holder: r.get(0)?,
                    expires_ms: r.get(1)?,
                })
            },
        )
        .optional()?;
    if let Some(lease) = current
        && lease.holder != holder
        && lease.expires_ms > now_ms
        && holder_alive(&lease.holder)
    {
        return Ok(Err(lease));
    }
    conn.execute(
        "INSERT INTO historian_leases (session, holder, acquired_ms, expires_ms) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (session) DO UPDATE SET holder = ?2, acquired_ms = ?3, expires_ms = ?4",
        params![session, holder, now_ms, now_ms.saturating_add(ttl_ms)],
    )?;
    Ok(Ok(()))
}

/// The lease holder name of a historian process: its pid, and a nonce that
/// tells two runs of one pid apart.
pub fn process_holder(pid: u32, nonce: u128) -> String {
    format!("mc-historian pid {pid} at {nonce}")
}

/// Whether the holder of a lease may still be running. A holder named by
/// [`process_holder`] whose process is gone (Linux: no `/proc/<pid>`) is dead,
/// so a crashed or killed run does not block the session until its lease
/// expires. Anything else is taken to be alive.
fn holder_alive(holder: &str) -> bool {
    let pid = holder
        .strip_prefix("mc-historian pid ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|pid| pid.parse::<u32>().ok());
    match pid {
        Some(pid) if std::path::Path::new("/proc/self").exists() => {
            std::path::Path::new(&format!("/proc/{pid}")).exists()
        }
        _ => true,
    }
}

/// Extend a lease we hold; false when it is no longer ours.
pub fn renew_lease(
    conn: &Connection,
    session: i64,
    holder: &str,
    now_ms: i64,
    ttl_ms: i64,
) -> Result<bool> {
    let n = conn.execute(
        "UPDATE historian_leases SET expires_ms = ?3 WHERE session = ?1 AND holder = ?2",
        params![session, holder, now_ms.saturating_add(ttl_ms)],
    )?;
    Ok(n > 0)
}

pub(crate) fn holds_lease(conn: &Connection, session: i64, holder: &str) -> Result<bool> {
    Ok(conn
        .query_row(
            "SELECT 1 FROM historian_leases WHERE session = ?1 AND holder = ?2",
            params![session, holder],
            |_| Ok(()),
        )
        .optional()?
        .is_some())
}

pub fn release_lease(conn: &Connection, session: i64, holder: &str) -> Result<()> {
    conn.execute(
        "DELETE FROM historian_leases WHERE session = ?1 AND holder = ?2",
        params![session, holder],
    )?;
    Ok(())
}

/// Open a run record (its status stays NULL until it finishes; a run that
/// crashed keeps it so).
pub fn start_run(conn: &Connection, session: i64, now_ms: i64) -> Result<i64> {
    conn.execute(
        "INSERT INTO historian_runs (session, started_ms) VALUES (?1, ?2)",
        params![session, now_ms],
    )?;
    Ok(conn.last_insert_rowid())
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome<'a> {
    pub status: &'a str,
    pub model: Option<&'a str>,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub compartments: usize,
    pub facts: usize,
    pub failure: Option<&'a FailureRecord>,
}

pub fn finish_run(
    conn: &Connection,
    run: i64,
    outcome: &RunOutcome<'_>,
    now_ms: i64,
) -> Result<()> {
    conn.execute(
        "UPDATE historian_runs SET finished_ms = ?2, status = ?3, model = ?4, tokens_in = ?5,
                tokens_out = ?6, compartments = ?7, facts = ?8, error = ?9
         WHERE id = ?1",
        params![
            run,
            now_ms,
            outcome.status,
            outcome.model,
            i64::try_from(outcome.tokens_in).unwrap_or(i64::MAX),
            i64::try_from(outcome.tokens_out).unwrap_or(i64::MAX),
            outcome.compartments as i64,
            outcome.facts as i64,
            outcome.failure.map(FailureRecord::to_column)
        ],
    )?;
    Ok(())
}

/// A run as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunRecord {
    pub id: i64,
    pub started_ms: i64,
    pub finished_ms: Option<i64>,
    /// published | nothing_to_do | failed; `None` while running (or if it crashed).
    pub status: Option<String>,
    pub model: Option<String>,
    pub tokens_in: i64,
    pub tokens_out: i64,
    pub compartments: i64,
    pub facts: i64,
    /// What went wrong, if anything (null otherwise).
    pub error: Option<String>,
    /// What kind of failure (see [`RunFailure::class`](super::failure::RunFailure::class)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_class: Option<String>,
    /// What the user can do about it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub error_hints: Vec<String>,
}

const RUN_COLUMNS: &str =
    "id, started_ms, finished_ms, status, model, tokens_in, tokens_out, compartments, facts, error";

fn run_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunRecord> {
    let failure = r
        .get::<_, Option<String>>(9)?
        .map(FailureRecord::from_column);
    let (error, error_class, error_hints) = match failure {
        Some(f) => (Some(f.error), f.error_class, f.error_hints),
        None => (None, None, Vec::new()),
    };
    Ok(RunRecord {
        id: r.get(0)?,
        started_ms: r.get(1)?,
        finished_ms: r.get(2)?,
        status: r.get(3)?,
        model: r.get(4)?,
        tokens_in: r.get(5)?,
        tokens_out: r.get(6)?,
        compartments: r.get(7)?,
        facts: r.get(8)?,
        error,
        error_class,
        error_hints,
    })
}

/// The session's newest run.
pub fn last_run(conn: &Connection, session: i64) -> Result<Option<RunRecord>> {
    Ok(conn
        .query_row(
            &format!(
                "SELECT {RUN_COLUMNS} FROM historian_runs WHERE session = ?1 ORDER BY id DESC LIMIT 1"
            ),
            params![session],
            run_from_row,
        )
        .optional()?)
}

/// The session's newest `limit` runs, newest first.
pub fn recent_runs(conn: &Connection, session: i64, limit: usize) -> Result<Vec<RunRecord>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {RUN_COLUMNS} FROM historian_runs WHERE session = ?1 ORDER BY id DESC LIMIT ?2"
    ))?;
    let runs = stmt
        .query_map(
            params![session, i64::try_from(limit).unwrap_or(i64::MAX)],
            run_from_row,
        )?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(runs)
}

/// The session's newest run that recorded an error (a failed run, or a
/// published one whose later chunk failed).
pub fn last_failure(conn: &Connection, session: i64) -> Result<Option<RunRecord>> {
    Ok(conn
        .query_row(
            &format!(
                "SELECT {RUN_COLUMNS} FROM historian_runs WHERE session = ?1 AND error IS NOT NULL
                 ORDER BY id DESC LIMIT 1"
            ),
            params![session],
            run_from_row,
        )
        .optional()?)
}

/// Failed runs since the last run that published.
pub fn failures_since_success(conn: &Connection, session: i64) -> Result<i64> {
    Ok(conn.query_row(
        "SELECT count(*) FROM historian_runs WHERE session = ?1 AND status = 'failed'
           AND id > coalesce((SELECT max(id) FROM historian_runs
                              WHERE session = ?1 AND status = 'published'), 0)",
        params![session],
        |r| r.get(0),
    )?)
}

/// The newest ordinal any compartment of the session covers (0: none).
pub fn covered_through(conn: &Connection, session: i64) -> Result<i64> {
    Ok(conn
        .prepare_cached(
            "SELECT coalesce(max(end_ordinal), 0) FROM compartments WHERE session = ?1",
        )?
        .query_row(params![session], |r| r.get(0))?)
}

/// A fact as it landed in project memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PromotedFact {
    pub category: String,
    pub content: String,
    pub memory_id: i64,
    /// False when the project already had it (normalised exact match).
    pub created: bool,
}

/// The dedup key of a memory: case, whitespace and a final full stop do not count.
pub fn normalise(content: &str) -> String {
    let squashed = content
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase();
    squashed.trim_end_matches('.').trim_end().to_string()
}

/// Promote facts into `project`'s memory: a fact whose normalised text is
/// already live in that project and category is not written again.
fn promote_facts(
    conn: &Connection,
    project: &str,
    facts: &[RawFact],
    now_ms: i64,
) -> Result<Vec<PromotedFact>> {
    let mut known: std::collections::HashMap<(String, String), i64> =
        store::live_memories(conn, project, now_ms)?
            .into_iter()
            .map(|m| ((m.category, normalise(&m.content)), m.id))
            .collect();
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for fact in facts {
        let content = fact
            .content
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let key = (fact.category.clone(), normalise(&content));
        if key.1.is_empty() || !seen.insert(key.clone()) {
            continue;
        }
        if let Some(&id) = known.get(&key) {
            out.push(PromotedFact {
                category: fact.category.clone(),
                content,
                memory_id: id,
                created: false,
            });
            continue;
        }
        let write = store::write_memory(
            conn,
            project,
            &fact.category,
            &content,
            None,
            "historian",
            now_ms,
        )?;
        known.insert(key, write.id);
        out.push(PromotedFact {
            category: fact.category.clone(),
            content,
            memory_id: write.id,
            created: write.created,
        });
    }
    Ok(out)
}

/// What one publish wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub sequences: Vec<i64>,
    pub facts: Vec<PromotedFact>,
}

/// One chunk to publish.
#[derive(Debug, Clone, Copy)]
pub struct Publication<'a> {
    pub session: i64,
    /// The lease holder publishing.
    pub holder: &'a str,
    /// Where the stored compartments ended when the chunk was planned.
    pub covered_before: i64,
    pub compartments: &'a [NewCompartment],
    pub facts: &'a [RawFact],
    /// The session's project (facts go to its memory); `None`: no facts are kept.
    pub project: Option<&'a str>,
    pub now_ms: i64,
}

/// Publish a chunk in one transaction (`conn` is inside it): check the lease
/// and that nobody published since the chunk was planned, append the
/// compartments, promote the facts into the project's memory.
pub fn publish(
    conn: &Connection,
    p: &Publication<'_>,
) -> Result<std::result::Result<Published, Refusal>> {
    if !holds_lease(conn, p.session, p.holder)? {
        return Ok(Err(Refusal::LeaseLost));
    }
    let found = covered_through(conn, p.session)?;
    if found != p.covered_before {
        return Ok(Err(Refusal::Moved {
            expected: p.covered_before,
            found,
        }));
    }
    let sequences = store::publish_compartments(conn, p.session, p.compartments, p.now_ms)?;
    let facts = match p.project {
        Some(project) => promote_facts(conn, project, p.facts, p.now_ms)?,
        None => Vec::new(),
    };
    Ok(Ok(Published { sequences, facts }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mc_base::domain::sessions;
    use mc_base::store::Store;

    fn session(store: &mut Store, id: &str) -> i64 {
        store
            .write(|tx| {
                Ok(sessions::create_session(tx, "opencode", id, false, Some("git:p"), 0)?.id)
            })
            .unwrap()
    }

    #[test]
    fn leases_exclude_until_they_expire() {
        let mut store = Store::open_in_memory().unwrap();
        let s = session(&mut store, "s");
        let conn = store.conn();
        assert_eq!(acquire_lease(conn, s, "a", 1_000, 500).unwrap(), Ok(()));
        assert_eq!(
            acquire_lease(conn, s, "b", 1_200, 500).unwrap(),
            Err(Lease {
                holder: "a".into(),
                expires_ms: 1_500
            })
        );
        // The holder may take it again (renew); a dead holder's lease expires.
        assert_eq!(acquire_lease(conn, s, "a", 1_300, 500).unwrap(), Ok(()));
        assert!(renew_lease(conn, s, "a", 1_400, 500).unwrap());
        assert!(!renew_lease(conn, s, "b", 1_400, 500).unwrap());
        assert_eq!(acquire_lease(conn, s, "b", 1_900, 500).unwrap(), Ok(()));
        assert!(!holds_lease(conn, s, "a").unwrap());
        assert!(holds_lease(conn, s, "b").unwrap());
        release_lease(conn, s, "a").unwrap();
        assert!(
            holds_lease(conn, s, "b").unwrap(),
            "only the holder releases"
        );
        release_lease(conn, s, "b").unwrap();
        assert!(!holds_lease(conn, s, "b").unwrap());
    }

    #[test]
    fn a_dead_processes_lease_is_taken_over_at_once() {
        let mut store = Store::open_in_memory().unwrap();
        let s = session(&mut store, "s");
        let conn = store.conn();
        let me = process_holder(std::process::id(), 1);
        assert!(holder_alive(&me));
        assert!(holder_alive("someone else"), "unknown holders are alive");
        assert_eq!(acquire_lease(conn, s, &me, 0, 1_000_000).unwrap(), Ok(()));
        assert!(acquire_lease(conn, s, "b", 1, 500).unwrap().is_err());
        if std::path::Path::new("/proc/self").exists() {
            // No process has pid 4294967295: its lease is stale.
            let dead = process_holder(u32::MAX, 7);
            assert!(!holder_alive(&dead));
            release_lease(conn, s, &me).unwrap();
            assert_eq!(acquire_lease(conn, s, &dead, 0, 1_000_000).unwrap(), Ok(()));
            assert_eq!(acquire_lease(conn, s, "b", 1, 500).unwrap(), Ok(()));
        }
    }

    #[test]
    fn run_records_and_the_last_failure() {
        let mut store = Store::open_in_memory().unwrap();
        let s = session(&mut store, "s");
        let conn = store.conn();
        let outcome = |status, failure| RunOutcome {
            status,
            model: Some("a/b"),
            tokens_in: 10,
            tokens_out: 5,
            compartments: 0,
            facts: 0,
            failure,
        };
        let failed = |error: &str| FailureRecord {
            error: error.into(),
            error_class: Some("answer_rejected".into()),
            error_hints: vec!["try again".into()],
        };
        let (boom, bang) = (failed("boom"), failed("bang"));
        let r1 = start_run(conn, s, 1).unwrap();
        finish_run(conn, r1, &outcome("failed", Some(&boom)), 2).unwrap();
        let r2 = start_run(conn, s, 3).unwrap();
        finish_run(conn, r2, &outcome("failed", Some(&bang)), 4).unwrap();
        assert_eq!(failures_since_success(conn, s).unwrap(), 2);
        let r3 = start_run(conn, s, 5).unwrap();
        finish_run(conn, r3, &outcome("published", None), 6).unwrap();
        assert_eq!(failures_since_success(conn, s).unwrap(), 0);
        let failure = last_failure(conn, s).unwrap().unwrap();
        assert_eq!((failure.id, failure.error.as_deref()), (r2, Some("bang")));
        // The class and hints come back as recorded.
        assert_eq!(failure.error_class.as_deref(), Some("answer_rejected"));
        assert_eq!(failure.error_hints, ["try again"]);
        // A run an older mc recorded holds the bare message.
        conn.execute(
            "UPDATE historian_runs SET error = 'plain words' WHERE id = ?1",
            params![r2],
        )
        .unwrap();
        let old = last_failure(conn, s).unwrap().unwrap();
        assert_eq!(old.error.as_deref(), Some("plain words"));
        assert_eq!((old.error_class, old.error_hints.len()), (None, 0));
        assert_eq!(
            last_run(conn, s).unwrap().unwrap().status.as_deref(),
            Some("published")
        );
        let r4 = start_run(conn, s, 7).unwrap();
        assert_eq!(last_run(conn, s).unwrap().unwrap().status, None, "running");
        assert_eq!(r4, last_run(conn, s).unwrap().unwrap().id);
    }

    #[test]
    fn facts_dedup_on_normalised_text_within_one_project() {
        let mut store = Store::open_in_memory().unwrap();
        let fact = |c: &str, t: &str| RawFact {
            category: c.into(),
            content: t.into(),
        };
        let conn = store.conn();
        let first = promote_facts(
            conn,
            "git:a",
            &[
                fact("CONSTRAINTS", "Tests never touch the real home directory."),
                fact("CONSTRAINTS", "tests never   touch the REAL home directory"),
                fact("NAMING", "Tests never touch the real home directory."),
            ],
            1,
        )
        .unwrap();
        assert_eq!(
            first.iter().map(|f| f.created).collect::<Vec<_>>(),
            [true, true],
            "a repeat inside one answer is dropped; another category is another memory"
        );
        let again = promote_facts(
            conn,
            "git:a",
            &[fact(
                "CONSTRAINTS",
                "  Tests never touch the real home directory ",
            )],
            2,
        )
        .unwrap();
        assert!(!again[0].created);
        assert_eq!(again[0].memory_id, first[0].memory_id);
        // Another project gets its own memory; nothing leaks across.
        let other = promote_facts(
            conn,
            "git:b",
            &[fact(
                "CONSTRAINTS",
                "Tests never touch the real home directory.",
            )],
            3,
        )
        .unwrap();
        assert!(other[0].created);
        assert_eq!(store::live_memories(conn, "git:a", 9).unwrap().len(), 2);
        assert_eq!(store::live_memories(conn, "git:b", 9).unwrap().len(), 1);
        drop(store.write(|_| Ok(())));
    }

    #[test]
    fn normalise_ignores_case_space_and_a_final_stop() {
        assert_eq!(
            normalise("  Use SQLite   for\nMemory. "),
            "use sqlite for memory"
        );
        assert_eq!(normalise("a.b."), "a.b");
    }
}

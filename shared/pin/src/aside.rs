//! Claims kept beside the database while another process holds its write
//! lock longer than a hook may wait.
//!
//! A `SessionStart` hook reads the pins without the write lock (WAL lets
//! readers in); only the claim ([`claim`]) needs it. When the lock is held
//! past the hook's wait, the pins are printed anyway and the claim is kept
//! in a small file beside the database (`<db>.restore-claims`) until a later
//! restorer (or this one, once the lock frees) moves it into the database.
//!
//! Every restorer of a database claims under one mutex, a lock file created
//! exclusively beside it (`<db>.restore-claims.lock`), held from its look at
//! the claims (the database's and the file's) until its own claim is in one
//! of them: so of restorers racing for one compaction, with the database
//! locked or not, one prints. A lock file older than [`STALE_LOCK`] (its
//! holder died inside those moments) is removed.
//!
//! [`claim`]: super::claim

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::{Connection, params};
use serde::{Deserialize, Serialize};

use mc_base::error::{Error, Result};

use super::claim::{self, CLAIM_TIMEOUT_MS};

/// A mutex file older than this was left by a restorer that died holding it
/// (a live one holds it for the hook's database wait at most).
pub const STALE_LOCK: Duration = Duration::from_secs(30);

/// A claim kept in the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    pub harness: String,
    pub session_id: String,
    pub compaction: String,
    /// `sending` while its restorer prints, then `done`.
    pub state: String,
    pub claimed_ms: i64,
    /// The session's row and the cursor to record, when known.
    pub session: Option<i64>,
    pub cursor: String,
}

impl Row {
    fn as_claim_row(&self, id: i64) -> claim::Row {
        claim::Row {
            id,
            compaction: self.compaction.clone(),
            state: if self.state == "done" {
                claim::State::Done
            } else {
                claim::State::Sending
            },
            claimed_ms: self.claimed_ms,
        }
    }
}

/// The file and its mutex beside a database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aside {
    file: PathBuf,
    lock: PathBuf,
}

/// The mutex, held until dropped.
#[derive(Debug)]
pub struct Guard {
    lock: PathBuf,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.lock);
    }
}

impl Aside {
    /// Beside the database at `db`; none for an in-memory one.
    pub fn beside(db: &Path) -> Option<Aside> {
        if db.as_os_str() == ":memory:" || db.as_os_str().is_empty() {
            return None;
        }
        let mut file = db.as_os_str().to_owned();
        file.push(".restore-claims");
        let mut lock = file.clone();
        lock.push(".lock");
        Some(Aside {
            file: file.into(),
            lock: lock.into(),
        })
    }

    /// Take the mutex, waiting at most `wait` (the hook's own wait) for
    /// another restorer to leave it; `None` when it does not.
    pub fn lock(&self, wait: Duration) -> Result<Option<Guard>> {
        let deadline = Instant::now() + wait;
        loop {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&self.lock)
            {
                Ok(_) => {
                    return Ok(Some(Guard {
                        lock: self.lock.clone(),
                    }));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let stale = std::fs::metadata(&self.lock)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.elapsed().ok())
                        .is_some_and(|age| age > STALE_LOCK);
                    if stale {
                        let _ = std::fs::remove_file(&self.lock);
                        continue;
                    }
                    if Instant::now() >= deadline {
                        return Ok(None);
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => {
                    return Err(Error::Io(std::io::Error::new(
                        e.kind(),
                        format!("cannot create {}: {e}", self.lock.display()),
                    )));
                }
            }
        }
    }

    /// The kept claims (hold the mutex). A file that does not parse is read
    /// as empty: it only ever holds what its writers could not put in the
    /// database, and the database's claims still stand.
    pub fn rows(&self, _guard: &Guard) -> Result<Vec<Row>> {
        match std::fs::read(&self.file) {
            Ok(bytes) => Ok(serde_json::from_slice(&bytes).unwrap_or_default()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(e.into()),
        }
    }

    /// Replace the kept claims (hold the mutex): written beside, then renamed.
    pub fn store(&self, _guard: &Guard, rows: &[Row]) -> Result<()> {
        if rows.is_empty() {
            return match std::fs::remove_file(&self.file) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
                _ => Ok(()),
            };
        }
        let mut tmp = self.file.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(&serde_json::to_vec(rows).map_err(|e| Error::Io(e.into()))?)?;
        file.sync_all()?;
        std::fs::rename(&tmp, &self.file)?;
        Ok(())
    }
}

/// What the kept claims say about `compaction` of a session (as
/// [`claim::find`] says it of the database's).
pub fn find(
    rows: &[Row],
    harness: &str,
    session_id: &str,
    compaction: &str,
    now_ms: i64,
    same: impl Fn(&claim::Row) -> bool,
) -> Option<claim::Outcome> {
    let matching: Vec<claim::Row> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.harness == harness && r.session_id == session_id)
        .map(|(i, r)| r.as_claim_row(i as i64))
        .filter(|r| r.compaction == compaction || same(r))
        .collect();
    if let Some(done) = matching.iter().find(|r| r.state == claim::State::Done) {
        return Some(claim::Outcome::Done(done.compaction.clone()));
    }
    matching
        .iter()
        .any(|r| now_ms.saturating_sub(r.claimed_ms) < CLAIM_TIMEOUT_MS)
        .then_some(claim::Outcome::InProgress)
}

/// Move the finished claims into the database (inside a write transaction):
/// a `done` claim row and its session's cursor. Answers the rows to keep
/// aside: live `sending` ones (their restorers are printing); stale ones go.
pub fn settle(conn: &Connection, rows: &[Row], now_ms: i64) -> Result<Vec<Row>> {
    let mut keep = Vec::new();
    for row in rows {
        if row.state == "done" {
            conn.execute(
                "INSERT INTO restore_claims (harness, session_id, compaction, state, claimed_ms, done_ms)
                 VALUES (?1, ?2, ?3, 'done', ?4, ?5)
                 ON CONFLICT (harness, session_id, compaction)
                 DO UPDATE SET state = 'done', done_ms = excluded.done_ms",
                params![row.harness, row.session_id, row.compaction, row.claimed_ms, now_ms],
            )?;
            if let Some(session) = row.session {
                super::local::set_cursor(conn, session, &row.cursor, now_ms)?;
            }
        } else if now_ms.saturating_sub(row.claimed_ms) < CLAIM_TIMEOUT_MS {
            keep.push(row.clone());
        }
    }
    Ok(keep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mc_base::store::{Store, StoreOptions};

    fn row(compaction: &str, state: &str, at: i64) -> Row {
        Row {
            harness: "claude-code".into(),
            session_id: "s".into(),
            compaction: compaction.into(),
            state: state.into(),
            claimed_ms: at,
            session: None,
            cursor: compaction.into(),
        }
    }

    #[test]
    fn the_mutex_is_one_holder_at_a_time_and_kept_claims_settle_into_the_database() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ctx.db");
        let mut store = Store::open(&db, &StoreOptions::default()).unwrap();
        let aside = Aside::beside(store.path()).unwrap();
        assert_eq!(Aside::beside(Path::new(":memory:")), None);
        let guard = aside.lock(Duration::ZERO).unwrap().unwrap();
        // A second holder is refused while the first holds it (after the wait).
        assert!(
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&aside.lock)
                .is_err()
        );
        aside
            .store(
                &guard,
                &[
                    row("b1", "done", 10),
                    row("b2", "sending", 20),
                    row("b0", "sending", 0),
                ],
            )
            .unwrap();
        let rows = aside.rows(&guard).unwrap();
        assert_eq!(
            find(&rows, "claude-code", "s", "b1", 30, |_| false),
            Some(claim::Outcome::Done("b1".into()))
        );
        assert_eq!(
            find(&rows, "claude-code", "s", "b2", 30, |_| false),
            Some(claim::Outcome::InProgress)
        );
        assert_eq!(find(&rows, "codex", "s", "b1", 30, |_| false), None);
        let now = CLAIM_TIMEOUT_MS + 10;
        let kept = store.write(|tx| settle(tx, &rows, now)).unwrap();
        assert_eq!(kept, [row("b2", "sending", 20)], "the stale b0 goes");
        let found = claim::find(store.conn(), "claude-code", "s", "b1", now, |_| false).unwrap();
        assert_eq!(found, claim::Found::Done("b1".into()));
        aside.store(&guard, &kept).unwrap();
        aside.store(&guard, &[]).unwrap();
        assert!(!aside.file.exists());
        drop(guard);
        assert!(!aside.lock.exists());
        assert!(aside.lock(Duration::ZERO).unwrap().is_some());
    }
}

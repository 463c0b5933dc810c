//! The SQLite store: one database file shared by every mc binary.
//!
//! WAL, a busy timeout, foreign keys on, and migrations keyed on
//! `PRAGMA user_version`. A database written by a newer mc is refused
//! (the schema fence) instead of being silently misread.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};

use crate::error::{Error, Result};

/// Shipped migrations, applied in order. Never edit one that has shipped: add a new one.
pub const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_transform.sql"),
    include_str!("migrations/0002_history.sql"),
    include_str!("migrations/0003_pins_and_historian.sql"),
    include_str!("migrations/0004_system_date_and_reminders.sql"),
    include_str!("migrations/0005_session_project_and_render_version.sql"),
    include_str!("migrations/0006_restore_claims.sql"),
    include_str!("migrations/0007_learned_limits.sql"),
    include_str!("migrations/0008_memory_notes_and_raw_content.sql"),
    include_str!("migrations/0009_message_index.sql"),
    include_str!("migrations/0010_dream.sql"),
    include_str!("migrations/0011_search_commits_and_embeddings.sql"),
    include_str!("migrations/0012_todo_state.sql"),
    include_str!("migrations/0013_calls.sql"),
    include_str!("migrations/0014_recall_hints.sql"),
    include_str!("migrations/0015_vector_index.sql"),
];

/// The newest schema version this build understands (the fence).
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Prepared statements a connection keeps (`prepare_cached`).
const STATEMENT_CACHE: usize = 128;

/// Default busy timeout: long enough to ride out a sibling process's write.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_millis(5000);

/// `$XDG_DATA_HOME/mc/context.db`, else `~/.local/share/mc/context.db`.
/// Relative XDG values are ignored, as the XDG spec asks.
pub fn default_db_path(xdg_data_home: Option<&Path>, home: Option<&Path>) -> Option<PathBuf> {
    let base = match xdg_data_home.filter(|p| p.is_absolute()) {
        Some(dir) => dir.to_path_buf(),
        None => home?.join(".local").join("share"),
    };
    Some(base.join("mc").join("context.db"))
}

#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub busy_timeout: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
        }
    }
}

/// Switch the database to WAL (a persistent setting, so usually already done).
/// Changing the journal mode needs the database to itself and SQLite does not
/// wait for that with the busy handler, so when sibling processes open a new
/// database at the same moment, retry until the busy timeout runs out.
fn enable_wal(conn: &Connection, path: &Path, timeout: Duration) -> Result<()> {
    let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
    if mode == "wal" || mode == "memory" {
        return Ok(());
    }
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0)) {
            Ok(mode) if mode == "wal" => return Ok(()),
            Ok(mode) => {
                return Err(Error::Corrupt(format!(
                    "database {} refused WAL mode (answered {mode})",
                    path.display()
                )));
            }
            Err(e) if is_busy(&e) && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

pub struct Store {
    conn: Connection,
    path: PathBuf,
}

impl Store {
    /// Open (creating it and its folder if needed) and migrate the database at `path`.
    pub fn open(path: &Path, options: &StoreOptions) -> Result<Store> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| {
                Error::Io(std::io::Error::new(
                    e.kind(),
                    format!(
                        "cannot create folder {} for the database: {e}",
                        parent.display()
                    ),
                ))
            })?;
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(path, flags).map_err(|cause| Error::Open {
            path: path.to_path_buf(),
            cause,
        })?;
        Self::setup(conn, path.to_path_buf(), options)
    }

    /// A private in-memory database, for tests.
    pub fn open_in_memory() -> Result<Store> {
        let conn = Connection::open_in_memory()?;
        Self::setup(conn, PathBuf::from(":memory:"), &StoreOptions::default())
    }

    fn setup(conn: Connection, path: PathBuf, options: &StoreOptions) -> Result<Store> {
        conn.busy_timeout(options.busy_timeout)?;
        // Each mc process is short-lived: checkpointing the WAL on every close
        // would fsync on every pass. SQLite's auto-checkpoint (every ~1000
        // pages) keeps the WAL bounded instead.
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            true,
        )?;
        enable_wal(&conn, &path, options.busy_timeout)?;
        conn.execute_batch("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;")?;
        // A pass runs a few dozen distinct statements; rusqlite keeps 16 by
        // default, so a resident process would parse most of them again on
        // every request.
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        let mut store = Store { conn, path };
        store.migrate()?;
        Ok(store)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Change how long a statement waits for a sibling's lock from now on
    /// (a hook that already waited once records its failure without a second wait).
    pub fn set_busy_timeout(&self, timeout: Duration) -> Result<()> {
        self.conn.busy_timeout(timeout)?;
        Ok(())
    }

    /// For a store kept open across requests (a resident process): the
    /// schema fence again, as an open would check it. A database a newer mc
    /// has migrated since is refused from now on; an older one is migrated.
    pub fn check_schema(&mut self) -> Result<()> {
        self.migrate()
    }

    fn schema_version(&self) -> Result<i64> {
        Ok(self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))?)
    }

    fn migrate(&mut self) -> Result<()> {
        let found = self.schema_version()?;
        if found == SCHEMA_VERSION {
            return Ok(());
        }
        if found > SCHEMA_VERSION {
            return Err(Error::SchemaTooNew {
                path: self.path.clone(),
                found,
                supported: SCHEMA_VERSION,
            });
        }
        for (index, sql) in MIGRATIONS.iter().enumerate() {
            let version = index as i64 + 1;
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            // Re-read inside the write lock: a sibling process may have migrated meanwhile.
            let current: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
            if current >= version {
                continue;
            }
            tx.execute_batch(sql)?;
            tx.pragma_update(None, "user_version", version)?;
            tx.commit()?;
        }
        Ok(())
    }

    /// Read-only access (each statement its own implicit transaction).
    pub fn conn(&self) -> &Connection {
        &self.conn
    }

    /// Run `f` in one `BEGIN IMMEDIATE` transaction: the write lock is taken up
    /// front, so a read-then-write never loses a race to a sibling process.
    /// Commits when `f` returns Ok, rolls back otherwise.
    pub fn write<T>(&mut self, f: impl FnOnce(&Transaction<'_>) -> Result<T>) -> Result<T> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let value = f(&tx)?;
        tx.commit()?;
        Ok(value)
    }

    /// As [`Store::write`], but `f` decides: its changes are committed when
    /// it answers `(value, true)` and rolled back on `(value, false)`.
    pub fn write_or_roll_back<T>(
        &mut self,
        f: impl FnOnce(&Transaction<'_>) -> Result<(T, bool)>,
    ) -> Result<T> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let (value, keep) = f(&tx)?;
        if keep {
            tx.commit()?;
        } else {
            tx.rollback()?;
        }
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fence_equals_newest_migration() {
        let store = Store::open_in_memory().unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        assert_eq!(SCHEMA_VERSION, MIGRATIONS.len() as i64);
        // The newest migration file is the one the fence names.
        let newest =
            std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/src/store/migrations"))
                .unwrap()
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.ends_with(".sql"))
                .map(|n| n[..4].parse::<i64>().unwrap())
                .max()
                .unwrap();
        assert_eq!(
            newest, SCHEMA_VERSION,
            "a migration file is not listed in MIGRATIONS"
        );
    }

    #[test]
    fn newer_database_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctx.db");
        drop(Store::open(&path, &StoreOptions::default()).unwrap());
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        drop(conn);
        let err = Store::open(&path, &StoreOptions::default()).err().unwrap();
        match &err {
            Error::SchemaTooNew {
                found, supported, ..
            } => {
                assert_eq!(*found, SCHEMA_VERSION + 1);
                assert_eq!(*supported, SCHEMA_VERSION);
            }
            other => panic!("expected SchemaTooNew, got {other}"),
        }
        assert!(err.hints()[0].contains("upgrade mc"), "{:?}", err.hints());
    }

    /// A database of the previous release keeps its Channel 2 reminder.
    #[test]
    fn migration_4_carries_a_placed_reminder_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctx.db");
        let conn = Connection::open(&path).unwrap();
        for sql in &MIGRATIONS[..3] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 3).unwrap();
        conn.execute_batch(
            "INSERT INTO sessions (harness, session_id, created_ms, updated_ms, nudge2_after, nudge2_text)
             VALUES ('opencode', 's1', 1, 2, 'msg_9', 'reminder'), ('opencode', 's2', 1, 2, NULL, NULL);",
        )
        .unwrap();
        drop(conn);
        let store = Store::open(&path, &StoreOptions::default()).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        let rows: Vec<(String, String, String, i64)> = store
            .conn()
            .prepare(
                "SELECT s.session_id, r.after_message_id, r.text, r.placed_ms
                 FROM channel2_reminders r JOIN sessions s ON s.id = r.session",
            )
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(rows, [("s1".into(), "msg_9".into(), "reminder".into(), 2)]);
    }

    #[test]
    fn opens_in_wal_with_foreign_keys_and_creates_folders() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("deep/er/ctx.db");
        let store = Store::open(&path, &StoreOptions::default()).unwrap();
        let mode: String = store
            .conn()
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let fk: i64 = store
            .conn()
            .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
            .unwrap();
        assert_eq!(fk, 1);
        // Reopening an up-to-date database applies nothing and keeps the version.
        drop(store);
        let again = Store::open(&path, &StoreOptions::default()).unwrap();
        assert_eq!(again.schema_version().unwrap(), SCHEMA_VERSION);
    }

    #[test]
    fn siblings_opening_a_new_database_at_once_all_succeed() {
        // Switching a fresh file to WAL needs it exclusively; SQLite's busy
        // handler does not cover that, so the open retries instead.
        for round in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join(format!("ctx-{round}.db"));
            let barrier = std::sync::Barrier::new(8);
            std::thread::scope(|scope| {
                for _ in 0..8 {
                    scope.spawn(|| {
                        barrier.wait();
                        Store::open(&path, &StoreOptions::default())
                            .map(|s| s.schema_version().unwrap())
                            .unwrap()
                    });
                }
            });
        }
    }

    #[test]
    fn default_path_follows_xdg() {
        assert_eq!(
            default_db_path(Some(Path::new("/x/data")), Some(Path::new("/home/u"))),
            Some(PathBuf::from("/x/data/mc/context.db"))
        );
        // Relative XDG values are ignored.
        assert_eq!(
            default_db_path(Some(Path::new("rel")), Some(Path::new("/home/u"))),
            Some(PathBuf::from("/home/u/.local/share/mc/context.db"))
        );
        assert_eq!(default_db_path(None, None), None);
    }

    #[test]
    fn write_or_roll_back_keeps_only_what_the_closure_keeps() {
        let mut store = Store::open_in_memory().unwrap();
        for (session, keep) in [("dropped", false), ("kept", true)] {
            let value = store
                .write_or_roll_back(|tx| {
                    tx.execute(
                        "INSERT INTO sessions (harness, session_id, created_ms, updated_ms)
                         VALUES ('h', ?1, 0, 0)",
                        [session],
                    )?;
                    Ok((session, keep))
                })
                .unwrap();
            assert_eq!(value, session);
        }
        let ids: Vec<String> = store
            .conn()
            .prepare("SELECT session_id FROM sessions")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(ids, ["kept"]);
    }

    #[test]
    fn write_rolls_back_on_error() {
        let mut store = Store::open_in_memory().unwrap();
        let result: Result<()> = store.write(|tx| {
            tx.execute(
                "INSERT INTO sessions (harness, session_id, created_ms, updated_ms) VALUES ('h','s',0,0)",
                [],
            )?;
            Err(Error::input("stop"))
        });
        assert!(result.is_err());
        let n: i64 = store
            .conn()
            .query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 0);
    }
}

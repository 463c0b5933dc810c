//! Every full-text (FTS5) index mc keeps, what each indexes, and the two
//! things done to all of them at once: [`check`] (is each one whole and in
//! step with its rows?) and [`rebuild`] (build each one again from the rows
//! it indexes, whatever state it is in: segments gone, structure record
//! gone, table gone, rows missing).
//!
//! The indexed rows are the truth; an index only saves scanning them. The
//! DDL of each index and its triggers is not written here a second time: a
//! rebuild reads it from a database the migrations just built in memory, so
//! the migrations stay its one definition.

use rusqlite::{Connection, OptionalExtension, Transaction};
use serde::Serialize;

use mc_base::error::{Error, Result};
use mc_base::store::Store;

/// The repair every damaged index names.
pub const REBUILD_COMMAND: &str = "mc-search index --rebuild";

/// One full-text index.
#[derive(Debug, Clone, Copy)]
pub struct Fts {
    /// The FTS5 table.
    pub name: &'static str,
    /// The table whose rows it indexes.
    pub source: &'static str,
    /// The triggers that keep it in step with `source` (their DDL comes
    /// from the migrations).
    pub triggers: &'static [&'static str],
    /// The keys of the source rows the index should hold.
    expected: &'static str,
    /// The keys the index holds.
    held: &'static str,
    /// Fills a new, empty index from its rows; `None` for the message index,
    /// which goes through its queue (catch-up indexes it in batches).
    fill: Option<&'static str>,
}

/// Every full-text index, in the order they are checked and rebuilt.
pub const INDEXES: [Fts; 5] = [
    Fts {
        name: "messages_fts",
        source: "raw_parts",
        triggers: &["raw_parts_queue", "raw_parts_unindex"],
        expected: "SELECT id FROM raw_parts EXCEPT SELECT raw_part FROM message_index_queue",
        held: "SELECT rowid FROM messages_fts",
        fill: None,
    },
    Fts {
        name: "memories_fts",
        source: "memories",
        triggers: &[
            "memories_fts_insert",
            "memories_fts_update",
            "memories_fts_delete",
        ],
        expected: "SELECT id FROM memories",
        held: "SELECT rowid FROM memories_fts",
        fill: Some(
            "INSERT INTO memories_fts (rowid, content, memory_id) SELECT id, content, id FROM memories",
        ),
    },
    Fts {
        name: "notes_fts",
        source: "notes",
        triggers: &["notes_fts_insert", "notes_fts_delete"],
        expected: "SELECT id FROM notes",
        held: "SELECT rowid FROM notes_fts",
        fill: Some("INSERT INTO notes_fts (rowid, content) SELECT id, content FROM notes"),
    },
    Fts {
        name: "compartments_fts",
        source: "compartments",
        triggers: &[
            "compartments_fts_insert",
            "compartments_fts_delete",
            "compartments_fts_update",
        ],
        expected: "SELECT session, sequence FROM compartments",
        held: "SELECT session, sequence FROM compartments_fts",
        fill: Some(
            "INSERT INTO compartments_fts (title, body, session, sequence)
             SELECT title, p1 || char(10) || p2 || char(10) || p3 || char(10) || p4, session, sequence
             FROM compartments",
        ),
    },
    Fts {
        name: "commits_fts",
        source: "git_commits",
        triggers: &[
            "git_commits_fts_insert",
            "git_commits_fts_update",
            "git_commits_fts_delete",
        ],
        expected: "SELECT id FROM git_commits",
        held: "SELECT rowid FROM commits_fts",
        fill: Some(
            "INSERT INTO commits_fts (rowid, subject, body, paths, hash)
             SELECT id, subject, body, paths, hash || ' ' || short_hash FROM git_commits",
        ),
    },
];

/// The state of one index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FtsCheck {
    pub name: &'static str,
    /// Rows it should hold (for messages: the kept parts already indexed).
    pub rows: i64,
    /// Rows it holds (0 when it cannot be read).
    pub indexed: i64,
    /// Rows it should hold and does not.
    pub missing: i64,
    /// Rows it holds of rows that are gone (or, for messages, still queued).
    pub stray: i64,
    pub healthy: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

fn count(conn: &Connection, sql: &str) -> rusqlite::Result<i64> {
    conn.query_row(&format!("SELECT count(*) FROM ({sql})"), [], |r| r.get(0))
}

fn exists(conn: &Connection, kind: &str, name: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM sqlite_master WHERE type = ?1 AND name = ?2")?
        .query_row([kind, name], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Check one index: its table and triggers exist, FTS5's own integrity
/// check passes, and it holds exactly the rows it should.
pub fn check_one(conn: &Connection, fts: &Fts) -> Result<FtsCheck> {
    let rows = count(conn, fts.expected)?;
    let mut problems: Vec<String> = Vec::new();
    let mut indexed = 0;
    let (mut missing, mut stray) = (0, 0);
    if !exists(conn, "table", fts.name)? {
        problems.push("the table is missing".into());
        missing = rows;
    } else {
        let integrity = format!("INSERT INTO {0} ({0}) VALUES ('integrity-check')", fts.name);
        if let Err(e) = conn.execute(&integrity, []) {
            problems.push(e.to_string());
        }
        let counts = count(conn, fts.held).and_then(|held| {
            Ok((
                held,
                count(conn, &format!("{} EXCEPT {}", fts.expected, fts.held))?,
                count(conn, &format!("{} EXCEPT {}", fts.held, fts.expected))?,
            ))
        });
        match counts {
            Ok((held, m, s)) => {
                (indexed, missing, stray) = (held, m, s);
                if m > 0 {
                    problems.push(format!("{m} row(s) of {} not indexed", fts.source));
                }
                if s > 0 {
                    problems.push(format!("{s} index row(s) of no {} row", fts.source));
                }
            }
            Err(e) if problems.is_empty() => problems.push(e.to_string()),
            Err(_) => {}
        }
    }
    for trigger in fts.triggers {
        if !exists(conn, "trigger", trigger)? {
            problems.push(format!("trigger {trigger} is missing"));
        }
    }
    Ok(FtsCheck {
        name: fts.name,
        rows,
        indexed,
        missing,
        stray,
        healthy: problems.is_empty(),
        problem: (!problems.is_empty()).then(|| problems.join("; ")),
    })
}

/// Check every index.
pub fn check(conn: &Connection) -> Result<Vec<FtsCheck>> {
    INDEXES.iter().map(|fts| check_one(conn, fts)).collect()
}

/// The DDL of `name` (a table or trigger) as the migrations define it.
fn canonical_sql(fresh: &Connection, kind: &str, name: &str) -> Result<String> {
    fresh
        .query_row(
            "SELECT sql FROM sqlite_master WHERE type = ?1 AND name = ?2",
            [kind, name],
            |r| r.get(0),
        )
        .optional()?
        .ok_or_else(|| Error::Internal(format!("the migrations define no {kind} {name}")))
}

/// What one index's rebuild did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rebuilt {
    pub name: &'static str,
    /// Rows indexed again (for messages: parts queued for the catch-up).
    pub rows: i64,
}

/// Drop every index and its triggers, whatever state they are in, and
/// create them again as the migrations define them, filled from their rows
/// (the message index: every kept part queued again). One transaction: on
/// any failure nothing changed.
pub fn reset_all(store: &mut Store) -> Result<Vec<Rebuilt>> {
    let fresh = Store::open_in_memory()?;
    store.write(|tx| {
        INDEXES
            .iter()
            .map(|fts| reset_one(tx, fresh.conn(), fts))
            .collect()
    })
}

fn reset_one(tx: &Transaction<'_>, fresh: &Connection, fts: &Fts) -> Result<Rebuilt> {
    for trigger in fts.triggers {
        tx.execute_batch(&format!("DROP TRIGGER IF EXISTS {trigger}"))?;
    }
    drop_table(tx, fts.name)?;
    tx.execute_batch(&canonical_sql(fresh, "table", fts.name)?)?;
    for trigger in fts.triggers {
        tx.execute_batch(&canonical_sql(fresh, "trigger", trigger)?)?;
    }
    let rows = match fts.fill {
        Some(fill) => tx.execute(fill, [])? as i64,
        None => {
            tx.execute("DELETE FROM message_index_queue", [])?;
            tx.execute(
                "INSERT INTO message_index_queue (raw_part) SELECT id FROM raw_parts",
                [],
            )? as i64
        }
    };
    Ok(Rebuilt {
        name: fts.name,
        rows,
    })
}

/// Drop an FTS5 table however damaged it is: FTS5 drops its shadow tables
/// without reading them (a shadow table gone included, as the tests show).
fn drop_table(tx: &Transaction<'_>, name: &str) -> Result<()> {
    tx.execute_batch(&format!("DROP TABLE IF EXISTS {name}"))?;
    Ok(())
}

/// What [`rebuild`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RebuildReport {
    pub rebuilt: Vec<Rebuilt>,
    /// The message index's catch-up after it.
    pub messages: super::index::IndexReport,
}

/// The repair for any damaged index (`mc-search index --rebuild`, and
/// `mc-doctor --fix`): [`reset_all`], then index every queued part (a batch
/// per transaction: interrupted, the rest stays queued and the next
/// `mc-search index` or search goes on). `progress(done, total)` after each batch.
pub fn rebuild(store: &mut Store, progress: &mut dyn FnMut(u64, u64)) -> Result<RebuildReport> {
    let rebuilt = reset_all(store)?;
    let messages = super::index::catch_up(store, None, progress)?;
    Ok(RebuildReport { rebuilt, messages })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store with a row in every indexed table (each indexed by its trigger).
    fn filled() -> Store {
        let mut store = Store::open_in_memory().unwrap();
        store
            .write(|tx| {
                tx.execute_batch(
                    "INSERT INTO sessions (id, harness, session_id, created_ms, updated_ms)
                         VALUES (1, 'opencode', 'ses_a', 1, 1);
                     INSERT INTO memories (project, category, content, created_ms, updated_ms)
                         VALUES ('p', 'NAMING', 'lease retry policy', 1, 1),
                                ('p', 'NAMING', 'journal checkpoint', 1, 1);
                     INSERT INTO notes (session, project, content, created_ms, updated_ms)
                         VALUES (1, 'p', 'lease note', 1, 1);
                     INSERT INTO compartments (session, sequence, start_ordinal, end_ordinal,
                         start_message_id, end_message_id, title, p1, p2, p3, p4, created_ms)
                         VALUES (1, 1, 1, 2, 'm1', 'm2', 'Lease work', 'a', 'b', 'c', 'd', 1);
                     INSERT INTO raw_parts (session, identity, ordinal, part_index, kind, content)
                         VALUES (1, 'm1:0', 1, 0, 'message', 'the lease is retried');",
                )?;
                Ok(())
            })
            .unwrap();
        super::super::index::catch_up(&mut store, None, &mut |_, _| {}).unwrap();
        store
    }

    fn schema(conn: &Connection) -> Vec<(String, String)> {
        conn.prepare("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    fn all_healthy(conn: &Connection) -> bool {
        check(conn).unwrap().iter().all(|c| c.healthy)
    }

    fn hits(conn: &Connection, table: &str) -> i64 {
        conn.query_row(
            &format!("SELECT count(*) FROM {table} WHERE {table} MATCH 'lease'"),
            [],
            |r| r.get(0),
        )
        .unwrap()
    }

    /// Every FTS5 table the migrations create is in [`INDEXES`], and every
    /// trigger that writes one is among its triggers: a new index in a new
    /// migration fails here until it is registered (and so rebuilt).
    #[test]
    fn the_error_kind_knows_every_index_by_name() {
        let names: Vec<&str> = INDEXES.iter().map(|i| i.name).collect();
        assert_eq!(names, mc_base::error::FTS_INDEXES);
    }

    #[test]
    fn the_registry_is_every_fts_table_and_trigger_of_the_migrations() {
        let store = Store::open_in_memory().unwrap();
        let conn = store.conn();
        let tables: Vec<String> = conn
            .prepare(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE '%USING fts5%'
                 ORDER BY name",
            )
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let mut registered: Vec<&str> = INDEXES.iter().map(|i| i.name).collect();
        registered.sort_unstable();
        assert_eq!(tables, registered);
        for fts in &INDEXES {
            let writers: Vec<String> = conn
                .prepare(
                    "SELECT name FROM sqlite_master WHERE type = 'trigger' AND sql LIKE ?1
                     ORDER BY name",
                )
                .unwrap()
                .query_map([format!("%{}%", fts.name)], |r| r.get(0))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            for trigger in &writers {
                assert!(fts.triggers.contains(&trigger.as_str()), "{trigger}");
            }
        }
    }

    #[test]
    fn a_rebuild_makes_the_schema_the_migrations_make_and_every_row_found() {
        let mut store = filled();
        let fresh = Store::open_in_memory().unwrap();
        let before = schema(store.conn());
        assert_eq!(before, schema(fresh.conn()));
        assert!(all_healthy(store.conn()));
        // Every shape of damage at once, on every index.
        store
            .conn()
            .execute_batch(
                "DELETE FROM messages_fts_data WHERE id > 10;
                 DELETE FROM memories_fts_data;
                 DROP TABLE notes_fts;
                 DELETE FROM compartments_fts;
                 DROP TRIGGER git_commits_fts_insert;
                 DROP TABLE commits_fts_config;",
            )
            .unwrap();
        let damaged = check(store.conn()).unwrap();
        let sick: Vec<&str> = damaged
            .iter()
            .filter(|c| !c.healthy)
            .map(|c| c.name)
            .collect();
        assert_eq!(sick, INDEXES.iter().map(|i| i.name).collect::<Vec<_>>());
        let compartments = damaged
            .iter()
            .find(|c| c.name == "compartments_fts")
            .unwrap();
        assert_eq!((compartments.rows, compartments.missing), (1, 1));

        let report = rebuild(&mut store, &mut |_, _| {}).unwrap();
        assert_eq!(report.messages.pending, 0);
        let rows: Vec<(&str, i64)> = report.rebuilt.iter().map(|r| (r.name, r.rows)).collect();
        assert_eq!(
            rows,
            [
                ("messages_fts", 1),
                ("memories_fts", 2),
                ("notes_fts", 1),
                ("compartments_fts", 1),
                ("commits_fts", 0)
            ]
        );
        assert!(all_healthy(store.conn()), "{:#?}", check(store.conn()));
        assert_eq!(
            schema(store.conn()),
            before,
            "the migrations' DDL, as it was"
        );
        for table in [
            "messages_fts",
            "memories_fts",
            "notes_fts",
            "compartments_fts",
        ] {
            assert_eq!(hits(store.conn(), table), 1, "{table}");
        }
        // The triggers work again, and a second rebuild changes nothing.
        store
            .conn()
            .execute_batch(
                "INSERT INTO git_commits (project, hash, short_hash, subject, body, paths,
                     committed_ms) VALUES ('p', 'abc', 'abc', 'lease', '', '', 1)",
            )
            .unwrap();
        assert_eq!(hits(store.conn(), "commits_fts"), 1);
        rebuild(&mut store, &mut |_, _| {}).unwrap();
        assert!(all_healthy(store.conn()));
        assert_eq!(schema(store.conn()), before);
        assert_eq!(hits(store.conn(), "commits_fts"), 1);
    }

    #[test]
    fn a_failed_rebuild_changes_nothing() {
        let mut store = filled();
        // The last index's table gone: its triggers cannot be made again,
        // and the whole rebuild rolls back.
        store
            .conn()
            .execute_batch("DROP TABLE memories_fts; DROP TABLE git_commits")
            .unwrap();
        assert!(reset_all(&mut store).is_err());
        let gone: Option<String> = store
            .conn()
            .query_row(
                "SELECT name FROM sqlite_master WHERE name = 'memories_fts'",
                [],
                |r| r.get(0),
            )
            .optional()
            .unwrap();
        assert_eq!(gone, None, "rolled back: still as it was");
        assert_eq!(hits(store.conn(), "messages_fts"), 1);
    }
}

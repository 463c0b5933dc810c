//! The search indexes check: every full-text index whole and in step with
//! the rows it indexes, else a FAIL whose repair (`--fix`) is the same
//! rebuild as `mc-search index --rebuild`.

use rusqlite::{Connection, OpenFlags};

use super::{Check, Env, Repair};
use mc_base::error::{Error, Result};
use mc_base::store::{SCHEMA_VERSION, Store, StoreOptions};
use mc_search_core::fts;

/// One check of every index (nothing when there is no database, or one of
/// another schema: the database check says so).
pub fn search_indexes(env: &Env) -> Vec<Check> {
    let path = &env.db;
    let shown = env.tilde(path);
    if !path.exists() {
        return Vec::new();
    }
    let Ok(conn) = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    ) else {
        return Vec::new();
    };
    let _ = conn.busy_timeout(std::time::Duration::from_secs(5));
    match conn.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0)) {
        Ok(SCHEMA_VERSION) => {}
        _ => return Vec::new(),
    }
    let fail = |what: String| {
        Check::fail(
            "db.indexes",
            format!("database {shown}: search indexes: {what}"),
            fts::REBUILD_COMMAND,
        )
        .with_repair(Repair::RebuildIndexes)
    };
    let checks = match fts::check(&conn) {
        Ok(checks) => checks,
        Err(e) => return vec![fail(format!("cannot check them: {e}"))],
    };
    let damaged: Vec<String> = checks
        .iter()
        .filter_map(|c| c.problem.as_ref().map(|p| format!("{}: {p}", c.name)))
        .collect();
    if damaged.is_empty() {
        let names: Vec<&str> = checks.iter().map(|c| c.name).collect();
        vec![Check::pass(
            "db.indexes",
            format!(
                "database {shown}: search indexes whole ({})",
                names.join(", ")
            ),
        )]
    } else {
        vec![fail(damaged.join("; "))]
    }
}

/// `--fix`: [`fts::rebuild`], as `mc-search index --rebuild` runs it.
pub fn rebuild(env: &Env) -> Result<String> {
    if !env.db.exists() {
        return Err(Error::Config(format!(
            "database {}: not created yet",
            env.tilde(&env.db)
        )));
    }
    let mut store = Store::open(&env.db, &StoreOptions::default())?;
    let report = fts::rebuild(&mut store, &mut |_, _| {})?;
    Ok(format!(
        "database {}: search indexes rebuilt ({}; {} message parts indexed)",
        env.tilde(&env.db),
        report
            .rebuilt
            .iter()
            .map(|r| r.name)
            .collect::<Vec<_>>()
            .join(", "),
        report.messages.indexed
    ))
}

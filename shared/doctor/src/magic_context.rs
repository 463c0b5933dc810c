//! `migrate --from-magic-context`: import what maps from Magic Context's
//! database (opened read-only, never written): project memories (its nine
//! categories folded onto mc's five, its user-preference memories and user
//! memories into mc's user profile), and compartments of sessions mc has
//! seen too, appended where their boundary messages are known to mc.
//! Everything else is reported as skipped with the reason; a second run
//! finds everything already there and imports nothing twice.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use serde::Serialize;

use mc_base::error::{Error, Result};
use mc_base::store::Store;
use mc_history::store::{self as history, NewCompartment};
use mc_search_core::memory;

/// Magic Context's database under a data folder (`$XDG_DATA_HOME`, else
/// `~/.local/share`).
pub fn default_path(data_home: &Path) -> PathBuf {
    data_home
        .join("cortexkit")
        .join("magic-context")
        .join("context.db")
}

/// Its memory category → mc's; `None` for the user-preference category,
/// which goes to the user profile.
pub fn map_category(category: &str) -> Option<Option<&'static str>> {
    Some(match category {
        "ARCHITECTURE_DECISIONS" => Some("ARCHITECTURE"),
        "CONSTRAINTS" => Some("CONSTRAINTS"),
        "CONFIG_DEFAULTS" => Some("CONFIG_VALUES"),
        "ENVIRONMENT" => Some("CONFIG_VALUES"),
        "NAMING" => Some("NAMING"),
        "USER_DIRECTIVES" => Some("PROJECT_RULES"),
        "WORKFLOW_RULES" => Some("PROJECT_RULES"),
        "KNOWN_ISSUES" => Some("CONSTRAINTS"),
        "USER_PREFERENCES" => None,
        _ => return None,
    })
}

/// Fields of Magic Context's rows that have no place in mc.
pub const UNMAPPED: &[&str] = &[
    "memories.seen_count, retrieval_count, last_retrieved_at (mc keeps its own use counts)",
    "memories.verification_status, verified_at (mc-dream verifies again)",
    "memories.superseded_by_memory_id, merged_from (merge history)",
    "memories.metadata_json, source_type",
    "memory_embeddings (another model's vectors: `mc-search index --embeddings` makes mc's own)",
    "session_facts, compression_depth, recomp_* (historian working state)",
    "notes (session notes are tied to Magic Context's sessions)",
    "tags, pending_ops, source_contents, session_meta (transform state, rebuilt by mc's passes)",
    "git_commits (mc-dream indexes the repository itself)",
    "pins: Magic Context keeps none in its database (OpenCode session metadata holds them)",
];

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ImportReport {
    pub source: PathBuf,
    pub memories_imported: usize,
    pub memories_existing: usize,
    pub profile_imported: usize,
    pub compartments_imported: usize,
    /// `what: why`, one per skipped row (or group of rows).
    pub skipped: Vec<String>,
    pub unmapped_fields: Vec<String>,
}

/// Open Magic Context's database read-only (a WAL database whose `-shm` is
/// missing is read as immutable).
pub fn open_source(path: &Path) -> Result<Connection> {
    if !path.is_file() {
        return Err(
            Error::Input(format!("no Magic Context database at {}", path.display()))
                .with_hint("name it with --from-magic-context PATH"),
        );
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|cause| Error::Open {
        path: path.to_path_buf(),
        cause,
    })?;
    if conn
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| {
            r.get::<_, i64>(0)
        })
        .is_err()
    {
        let uri = format!("file:{}?immutable=1", path.display());
        return Connection::open_with_flags(uri, flags | OpenFlags::SQLITE_OPEN_URI).map_err(
            |cause| Error::Open {
                path: path.to_path_buf(),
                cause,
            },
        );
    }
    Ok(conn)
}

fn has_table(conn: &Connection, name: &str) -> bool {
    conn.query_row(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
        [name],
        |_| Ok(()),
    )
    .optional()
    .ok()
    .flatten()
    .is_some()
}

struct SourceMemory {
    id: i64,
    project: String,
    category: String,
    content: String,
    status: String,
    expires_at: Option<i64>,
}

/// Import from `source` into `store`.
pub fn import(source_path: &Path, store: &mut Store, now_ms: i64) -> Result<ImportReport> {
    let source = open_source(source_path)?;
    let mut report = ImportReport {
        source: source_path.to_path_buf(),
        unmapped_fields: UNMAPPED.iter().map(|s| s.to_string()).collect(),
        ..ImportReport::default()
    };
    if has_table(&source, "memories") {
        import_memories(&source, store, now_ms, &mut report)?;
    } else {
        report.skipped.push("memories: no memories table".into());
    }
    if has_table(&source, "user_memories") {
        let rows: Vec<(i64, String)> = source
            .prepare("SELECT id, content FROM user_memories WHERE status = 'active' ORDER BY id")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        for (id, content) in rows {
            add_profile(
                store,
                &format!("user memory #{id}"),
                &content,
                now_ms,
                &mut report,
            )?;
        }
    }
    if has_table(&source, "compartments") {
        import_compartments(&source, store, now_ms, &mut report)?;
    }
    Ok(report)
}

fn add_profile(
    store: &mut Store,
    what: &str,
    content: &str,
    now_ms: i64,
    report: &mut ImportReport,
) -> Result<()> {
    let exists = memory::profile_list(store.conn(), false)?
        .iter()
        .any(|p| p.content == content.trim());
    if exists {
        report.memories_existing += 1;
        return Ok(());
    }
    match memory::profile_add(store, content, now_ms) {
        Ok(outcome) if outcome.result == memory::Written::Created => report.profile_imported += 1,
        Ok(_) => report.memories_existing += 1,
        Err(e) => report.skipped.push(format!("{what}: {e}")),
    }
    Ok(())
}

fn import_memories(
    source: &Connection,
    store: &mut Store,
    now_ms: i64,
    report: &mut ImportReport,
) -> Result<()> {
    let rows: Vec<SourceMemory> = source
        .prepare(
            "SELECT id, project_path, category, content, coalesce(status, 'active'), expires_at
             FROM memories ORDER BY id",
        )?
        .query_map([], |r| {
            Ok(SourceMemory {
                id: r.get(0)?,
                project: r.get(1)?,
                category: r.get(2)?,
                content: r.get(3)?,
                status: r.get(4)?,
                expires_at: r.get(5)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    for m in rows {
        let what = format!("memory #{} ({})", m.id, m.category);
        if m.status == "archived" {
            report
                .skipped
                .push(format!("{what}: archived in Magic Context"));
            continue;
        }
        if m.expires_at.is_some_and(|at| at <= now_ms) {
            report.skipped.push(format!("{what}: expired"));
            continue;
        }
        let Some(target) = map_category(&m.category) else {
            report
                .skipped
                .push(format!("{what}: unknown category {:?}", m.category));
            continue;
        };
        let Some(target) = target else {
            add_profile(store, &what, &m.content, now_ms, report)?;
            continue;
        };
        if !m.project.starts_with("git:") {
            report.skipped.push(format!(
                "{what}: its project is a folder identity ({}), which mc cannot match (mc hashes folders differently); only git projects map",
                m.project
            ));
            continue;
        }
        match memory::write(store, &m.project, target, &m.content, "import", now_ms) {
            Ok(outcome) if outcome.result == memory::Written::Created => {
                report.memories_imported += 1
            }
            Ok(_) => report.memories_existing += 1,
            Err(e) => report.skipped.push(format!("{what}: {e}")),
        }
    }
    Ok(())
}

struct SourceCompartment {
    session_id: String,
    harness: String,
    sequence: i64,
    start_id: String,
    end_id: String,
    title: String,
    content: String,
}

fn import_compartments(
    source: &Connection,
    store: &mut Store,
    now_ms: i64,
    report: &mut ImportReport,
) -> Result<()> {
    let rows: Vec<SourceCompartment> = source
        .prepare(
            "SELECT session_id, coalesce(harness, 'opencode'), sequence,
                    coalesce(start_message_id, ''), coalesce(end_message_id, ''), title, content
             FROM compartments ORDER BY session_id, sequence",
        )?
        .query_map([], |r| {
            Ok(SourceCompartment {
                session_id: r.get(0)?,
                harness: r.get(1)?,
                sequence: r.get(2)?,
                start_id: r.get(3)?,
                end_id: r.get(4)?,
                title: r.get(5)?,
                content: r.get(6)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    for c in rows {
        let what = format!(
            "compartment {} of {} session {}",
            c.sequence, c.harness, c.session_id
        );
        if c.harness != "opencode" && c.harness != "pi" {
            report.skipped.push(format!(
                "{what}: harness {:?} is not one mc supports",
                c.harness
            ));
            continue;
        }
        let session: Option<i64> = store
            .conn()
            .query_row(
                "SELECT id FROM sessions WHERE harness = ?1 AND session_id = ?2",
                params![c.harness, c.session_id],
                |r| r.get(0),
            )
            .optional()?;
        let Some(session) = session else {
            report
                .skipped
                .push(format!("{what}: mc has not seen this session (open it once with mc running, then migrate again)"));
            continue;
        };
        let ordinal = |id: &str| -> Result<Option<(i64, Option<i64>)>> {
            Ok(store
                .conn()
                .query_row(
                    "SELECT ordinal, created_ms FROM messages WHERE session = ?1 AND message_id = ?2",
                    params![session, id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?)
        };
        let (Some((start, start_ms)), Some((end, end_ms))) =
            (ordinal(&c.start_id)?, ordinal(&c.end_id)?)
        else {
            report
                .skipped
                .push(format!("{what}: its boundary messages are not known to mc"));
            continue;
        };
        let covered: i64 = store.conn().query_row(
            "SELECT coalesce(max(end_ordinal), -1) FROM compartments WHERE session = ?1",
            params![session],
            |r| r.get(0),
        )?;
        if start <= covered || end < start {
            report.skipped.push(format!(
                "{what}: mc's compartments already cover it (imported before, or folded by mc's historian)"
            ));
            continue;
        }
        let gist = c
            .content
            .split(['\n', '.'])
            .map(str::trim)
            .find(|s| !s.is_empty())
            .unwrap_or(&c.title)
            .to_string();
        let new = NewCompartment {
            start_ordinal: start,
            end_ordinal: end,
            start_message_id: c.start_id.clone(),
            end_message_id: c.end_id.clone(),
            start_ms,
            end_ms,
            title: c.title.clone(),
            tiers: [c.content.clone(), c.content.clone(), gist, c.title.clone()],
            importance: 50,
            episode: None,
        };
        store.write(|tx| history::publish_compartments(tx, session, &[new], now_ms).map(|_| ()))?;
        report.compartments_imported += 1;
    }
    Ok(())
}

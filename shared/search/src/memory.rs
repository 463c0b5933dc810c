//! Project memory as the agent and the user edit it: write (with exact dedup),
//! update, archive, merge, list, show, and the user profile. Every change goes
//! through `history::store`, which logs the non-additive ones, so a cached
//! head shows them as a `<memory-updates>` delta on the next pass that busts
//! anyway and never busts the cache by itself.

use std::collections::BTreeSet;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use mc_base::error::{Error, Result};
use mc_base::store::Store;
use mc_history::store::{self, CATEGORIES};

/// A memory with everything a reader may ask about it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryRecord {
    pub id: i64,
    pub category: String,
    pub content: String,
    pub status: String,
    pub importance: Option<i64>,
    pub source: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub archive_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<i64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub merged_from: Vec<i64>,
    pub created_ms: i64,
    pub updated_ms: i64,
}

/// Whether a write made a memory or found the live one it duplicates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Written {
    Created,
    Existing,
}

/// The answer to a write: the new memory, or the live one it duplicates.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WriteOutcome {
    pub result: Written,
    pub id: i64,
    pub category: String,
}

/// Who writes: `agent` (ctx_memory), `user` (the CLI), `historian`, `dream`,
/// `team` (imported from the repository).
pub fn write(
    store: &mut Store,
    project: &str,
    category: &str,
    content: &str,
    source: &str,
    now_ms: i64,
) -> Result<WriteOutcome> {
    store.write(|tx| write_in(tx, project, category, content, source, now_ms))
}

/// [`write`] inside the caller's write transaction.
pub fn write_in(
    conn: &Connection,
    project: &str,
    category: &str,
    content: &str,
    source: &str,
    now_ms: i64,
) -> Result<WriteOutcome> {
    let category = canonical_category(category)?;
    let w = store::write_memory(conn, project, category, content, None, source, now_ms)?;
    Ok(WriteOutcome {
        result: if w.created {
            Written::Created
        } else {
            Written::Existing
        },
        id: w.id,
        category: category.to_string(),
    })
}

/// A category as stored, accepting any case and `-` for `_`.
pub fn canonical_category(category: &str) -> Result<&'static str> {
    let wanted = category.trim().to_ascii_uppercase().replace('-', "_");
    CATEGORIES
        .iter()
        .find(|c| **c == wanted)
        .copied()
        .ok_or_else(|| {
            Error::input(format!(
                "unknown memory category {category:?} (one of {})",
                CATEGORIES.join(", ")
            ))
        })
}

/// The memory `id` of `project`, or the same "no such memory" whether it does
/// not exist or belongs to another project (ids of other projects leak nothing).
fn owned(conn: &Connection, project: &str, id: i64) -> Result<MemoryRecord> {
    load(conn, id)?
        .filter(|(p, _)| p == project)
        .map(|(_, m)| m)
        .ok_or_else(|| {
            Error::input(format!("no memory #{id} in this project"))
                .with_hint("list the project's memories with `mc-search memory list`")
        })
}

fn live(record: &MemoryRecord) -> bool {
    record.status == "active" || record.status == "permanent"
}

fn must_be_live(record: &MemoryRecord) -> Result<()> {
    if live(record) {
        return Ok(());
    }
    Err(Error::input(format!(
        "memory #{} is {} and cannot change",
        record.id, record.status
    ))
    .with_hint(match record.superseded_by {
        Some(by) => format!("it was merged into #{by}; change that one"),
        None => "write a new memory instead".to_string(),
    }))
}

pub fn update(
    store: &mut Store,
    project: &str,
    id: i64,
    content: &str,
    now_ms: i64,
) -> Result<MemoryRecord> {
    store.write(|tx| update_in(tx, project, id, content, now_ms))
}

/// [`update`] inside the caller's write transaction.
pub fn update_in(
    conn: &Connection,
    project: &str,
    id: i64,
    content: &str,
    now_ms: i64,
) -> Result<MemoryRecord> {
    let record = owned(conn, project, id)?;
    must_be_live(&record)?;
    let content = store::check_memory_content(content)?;
    if let Some(other) = store::live_duplicate(conn, project, &record.category, content)?
        && other != id
    {
        return Err(Error::input(format!(
            "memory #{other} already says this in {}",
            record.category
        ))
        .with_hint(format!(
            "merge the two (`memory merge --ids {id},{other}`) or archive #{id}"
        )));
    }
    if record.content != content {
        store::update_memory(conn, project, id, content, now_ms)?;
    }
    owned(conn, project, id)
}

pub fn archive(
    store: &mut Store,
    project: &str,
    id: i64,
    reason: Option<&str>,
    now_ms: i64,
) -> Result<MemoryRecord> {
    store.write(|tx| archive_in(tx, project, id, reason, now_ms))
}

/// [`archive`] inside the caller's write transaction.
pub fn archive_in(
    conn: &Connection,
    project: &str,
    id: i64,
    reason: Option<&str>,
    now_ms: i64,
) -> Result<MemoryRecord> {
    let reason = reason.map(str::trim).filter(|r| !r.is_empty());
    let record = owned(conn, project, id)?;
    must_be_live(&record)?;
    store::archive_memory(conn, project, id, reason, now_ms)?;
    owned(conn, project, id)
}

/// Fold `ids` (two or more live memories of the project) into one memory
/// saying `content`; the others become `superseded` by it. When `content`
/// is what one of them already says, that one is kept as the result.
pub fn merge(
    store: &mut Store,
    project: &str,
    ids: &[i64],
    content: &str,
    category: Option<&str>,
    now_ms: i64,
) -> Result<MemoryRecord> {
    store.write(|tx| merge_in(tx, project, ids, content, category, now_ms))
}

/// [`merge`] inside the caller's write transaction.
pub fn merge_in(
    conn: &Connection,
    project: &str,
    ids: &[i64],
    content: &str,
    category: Option<&str>,
    now_ms: i64,
) -> Result<MemoryRecord> {
    let unique: BTreeSet<i64> = ids.iter().copied().collect();
    if unique.len() < 2 {
        return Err(Error::input(
            "a merge needs at least two different memory ids",
        ));
    }
    let explicit = category.map(canonical_category).transpose()?;
    let mut sources = Vec::with_capacity(unique.len());
    for &id in &unique {
        let record = owned(conn, project, id)?;
        must_be_live(&record)?;
        sources.push(record);
    }
    let category = match explicit {
        Some(c) => c.to_string(),
        None => {
            let categories: BTreeSet<&str> = sources.iter().map(|m| m.category.as_str()).collect();
            match categories.into_iter().collect::<Vec<_>>().as_slice() {
                [one] => (*one).to_string(),
                several => {
                    return Err(Error::input(format!(
                        "the memories are in different categories ({}); say which one the merged memory goes in",
                        several.join(", ")
                    )));
                }
            }
        }
    };
    let content = store::check_memory_content(content)?;
    let canonical = match store::live_duplicate(conn, project, &category, content)? {
        Some(existing) if unique.contains(&existing) => existing,
        Some(existing) => {
            return Err(Error::input(format!(
                "memory #{existing} already says this; include it in the merge"
            )));
        }
        None => store::write_memory(conn, project, &category, content, None, "merge", now_ms)?.id,
    };
    let mut merged_from: BTreeSet<i64> = BTreeSet::new();
    for source in &sources {
        merged_from.extend(source.merged_from.iter().copied());
        if source.id != canonical {
            merged_from.insert(source.id);
            store::supersede_memory(conn, project, source.id, canonical, now_ms)?;
        }
    }
    let permanent = sources.iter().any(|m| m.status == "permanent");
    let merged_from: Vec<i64> = merged_from.into_iter().collect();
    store::set_memory_merge_info(conn, canonical, permanent, &merged_from)?;
    owned(conn, project, canonical)
}

/// What `list` shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    pub category: Option<String>,
    /// `live` (active and permanent; the default), `all`, or one status.
    pub status: Option<String>,
    /// Words every listed memory contains (case-insensitive).
    pub text: Option<String>,
    pub limit: Option<usize>,
}

const STATUSES: [&str; 4] = ["active", "permanent", "archived", "superseded"];

pub fn list(conn: &Connection, project: &str, filter: &Filter) -> Result<Vec<MemoryRecord>> {
    let category = filter
        .category
        .as_deref()
        .map(canonical_category)
        .transpose()?;
    let statuses: Vec<&str> = match filter.status.as_deref().map(str::trim) {
        None | Some("") | Some("live") => vec!["active", "permanent"],
        Some("all") => STATUSES.to_vec(),
        Some(s) => match STATUSES.iter().find(|x| **x == s) {
            Some(x) => vec![*x],
            None => {
                return Err(Error::input(format!(
                    "unknown memory status {s:?} (live, all, {})",
                    STATUSES.join(", ")
                )));
            }
        },
    };
    let words: Vec<String> = filter
        .text
        .as_deref()
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_lowercase)
        .collect();
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {RECORD_COLUMNS} FROM memories WHERE project = ?1 ORDER BY id"
    ))?;
    let rows = stmt.query_map(params![project], record_from_row)?;
    let mut out = Vec::new();
    for row in rows {
        let (_, m) = row?;
        if !statuses.contains(&m.status.as_str())
            || category.is_some_and(|c| c != m.category)
            || !words.iter().all(|w| m.content.to_lowercase().contains(w))
        {
            continue;
        }
        out.push(m);
        if filter.limit.is_some_and(|l| out.len() >= l) {
            break;
        }
    }
    Ok(out)
}

pub fn show(conn: &Connection, project: &str, id: i64) -> Result<MemoryRecord> {
    owned(conn, project, id)
}

const RECORD_COLUMNS: &str = "project, id, category, content, status, importance, source,
     archive_reason, superseded_by, merged_from, created_ms, updated_ms";

fn record_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(String, MemoryRecord)> {
    let merged: Option<String> = r.get(9)?;
    Ok((
        r.get::<_, String>(0)?,
        MemoryRecord {
            id: r.get(1)?,
            category: r.get(2)?,
            content: r.get(3)?,
            status: r.get(4)?,
            importance: r.get(5)?,
            source: r.get(6)?,
            archive_reason: r.get(7)?,
            superseded_by: r.get(8)?,
            merged_from: merged
                .and_then(|m| serde_json::from_str(&m).ok())
                .unwrap_or_default(),
            created_ms: r.get(10)?,
            updated_ms: r.get(11)?,
        },
    ))
}

fn load(conn: &Connection, id: i64) -> Result<Option<(String, MemoryRecord)>> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {RECORD_COLUMNS} FROM memories WHERE id = ?1"
        ))?
        .query_row(params![id], record_from_row)
        .optional()?)
}

/// One line of the user profile (what the user is like, across projects).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProfileRecord {
    pub id: i64,
    pub content: String,
    pub status: String,
}

/// The largest profile line mc accepts.
pub const MAX_PROFILE_BYTES: usize = 1024;

/// Add a profile line (a duplicate of a live line answers that line). It
/// reaches heads in m[1] on their next busting pass, like a new memory.
pub fn profile_add(store: &mut Store, content: &str, now_ms: i64) -> Result<WriteOutcome> {
    let content = content.trim();
    if content.is_empty() {
        return Err(Error::input("a profile line needs non-empty content"));
    }
    if content.len() > MAX_PROFILE_BYTES {
        return Err(Error::input(format!(
            "profile line is {} bytes; the limit is {MAX_PROFILE_BYTES}",
            content.len()
        )));
    }
    let key = store::normalize_memory(content);
    store.write(|tx| {
        for item in store::profile(tx)? {
            if store::normalize_memory(&item.content) == key {
                return Ok(WriteOutcome {
                    result: Written::Existing,
                    id: item.id,
                    category: "PROFILE".into(),
                });
            }
        }
        Ok(WriteOutcome {
            result: Written::Created,
            id: store::add_profile_item(tx, content, now_ms)?,
            category: "PROFILE".into(),
        })
    })
}

pub fn profile_list(conn: &Connection, all: bool) -> Result<Vec<ProfileRecord>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, content, status FROM user_profile WHERE ?1 OR status = 'active' ORDER BY id",
    )?;
    let rows = stmt.query_map(params![all], |r| {
        Ok(ProfileRecord {
            id: r.get(0)?,
            content: r.get(1)?,
            status: r.get(2)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Archive a profile line: heads drop it at their next HARD fold.
pub fn profile_archive(store: &mut Store, id: i64) -> Result<ProfileRecord> {
    store.write(|tx| {
        let n = tx.execute(
            "UPDATE user_profile SET status = 'archived' WHERE id = ?1 AND status = 'active'",
            params![id],
        )?;
        if n == 0 {
            return Err(Error::input(format!("no active profile line #{id}"))
                .with_hint("list them with `mc-search profile list`"));
        }
        profile_list(tx, true)?
            .into_iter()
            .find(|p| p.id == id)
            .ok_or_else(|| Error::Corrupt(format!("profile line #{id} vanished")))
    })
}

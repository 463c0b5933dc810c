//! Team memory through git: the project's memories as files in the
//! repository, reviewed in pull requests like code.
//!
//! `export` writes the live memories of the project to
//! `<repo>/.mc/memory/<CATEGORY>.md`, one entry per memory:
//!
//! ```text
//! ## 3f9a2c1b7e
//!
//! Never log API keys.
//! ```
//!
//! The id after `##` is the memory's team id: assigned once (a hash of the
//! project, the memory's local id and its creation time), kept in the
//! database, and the same on every machine that imports the file. Entries
//! keep their place in the file; new ones go at the end, oldest first — so
//! a diff shows exactly what changed. A text line starting with `##` is
//! written as `\##`.
//!
//! `import` reads the files back, in one transaction: an entry with an id
//! the project has never seen becomes a memory (a person may add one under
//! any unused id of letters, digits, `-` and `_`); an entry whose text
//! changed updates its memory; an entry that moved to another category's
//! file moves; a memory whose entry was removed is archived — but only when
//! its file exists (a missing file is not a deletion) and the memory did not
//! change here since the last sync. When both sides changed one memory, the
//! file wins (it is what the team reviewed). Three-way, with the content key
//! both sides agreed on at the last export or import (`team_key`), so
//! nothing duplicates and a memory archived here is not brought back by the
//! unchanged entry still in the file.
//!
//! Never written and never taken: private memories (`mc-dream private`),
//! and any text that looks like a secret (`secrets`: known token shapes,
//! secret-named assignments, high-entropy tokens).
//!
//! Only inside the repository (`repo_fs`): a symbolic link anywhere on the
//! way — `.mc`, `.mc/memory`, a file — fails the command with an input
//! error naming it; nothing is read through it and no write replaces it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use rusqlite::{Connection, params};
use serde::Serialize;
use serde_json::json;
use sha2::{Digest, Sha256};

use mc_base::error::{Error, Result};
use mc_base::repo_fs::{Dir, Refusal};
use mc_base::store::Store;
use mc_history::store::{self, CATEGORIES};
use mc_search_core::memory;

use super::secrets::secret_reason;
use super::{Done, FailureClass, LiveMemory, Outcome, Run, TaskFailure, live_memories};

/// The folder, relative to the repository's top.
pub const FOLDER: &str = ".mc/memory";
/// A larger file is refused.
const MAX_FILE_BYTES: u64 = 1 << 20;

pub fn folder(root: &Path) -> PathBuf {
    root.join(FOLDER)
}

fn file_name(category: &str) -> String {
    format!("{category}.md")
}

/// A refused path as an input error: it names the path and what to do.
fn refused(refusal: Refusal) -> Error {
    let hint = if refusal.is_escape() {
        "team memory is read and written only inside the repository: make the path a real \
         folder or file there (not a link), then run the command again"
    } else {
        "fix the file, then run the command again"
    };
    Error::input(refusal.to_string()).with_hint(hint)
}

/// `<root>/.mc/memory`, opened with no link followed on the way; `None`
/// when it does not exist.
fn open_folder(root: &Path, create: bool) -> Result<Option<Dir>> {
    Dir::open(root, Path::new(FOLDER), create).map_err(refused)
}

/// One entry of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: String,
    pub content: String,
}

/// Letters, digits, `-` and `_`, 1 to 64 of them.
pub fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The entries of one file. `Err` says which line is wrong.
pub fn parse_file(text: &str) -> std::result::Result<Vec<Entry>, String> {
    let mut entries: Vec<Entry> = Vec::new();
    let mut current: Option<(String, Vec<String>, usize)> = None;
    let finish = |entries: &mut Vec<Entry>, current: Option<(String, Vec<String>, usize)>| {
        if let Some((id, lines, line_no)) = current {
            let content = lines.join("\n").trim().to_string();
            if content.is_empty() {
                return Err(format!(
                    "line {line_no}: entry {id} has no text (delete the entry to archive its memory)"
                ));
            }
            entries.push(Entry { id, content });
        }
        Ok(())
    };
    for (n, line) in text.lines().enumerate() {
        if let Some(heading) = line.strip_prefix("## ") {
            finish(&mut entries, current.take())?;
            let id = heading.trim();
            if !valid_id(id) {
                return Err(format!(
                    "line {}: {line:?} does not name an entry id (letters, digits, - and _)",
                    n + 1
                ));
            }
            current = Some((id.to_string(), Vec::new(), n + 1));
        } else if line.trim_end() == "##" {
            return Err(format!("line {}: an entry heading without an id", n + 1));
        } else if let Some((_, lines, _)) = current.as_mut() {
            lines.push(unescape(line));
        }
    }
    finish(&mut entries, current)?;
    let mut seen = BTreeSet::new();
    for e in &entries {
        if !seen.insert(e.id.as_str()) {
            return Err(format!("entry id {} appears twice", e.id));
        }
    }
    Ok(entries)
}

fn escape_line(line: &str) -> String {
    if line.trim_start_matches('\\').starts_with("##") {
        format!("\\{line}")
    } else {
        line.to_string()
    }
}

fn unescape(line: &str) -> String {
    match line.strip_prefix('\\') {
        Some(rest) if rest.trim_start_matches('\\').starts_with("##") => rest.to_string(),
        _ => line.to_string(),
    }
}

/// The text of one category's file.
pub fn render_file(category: &str, entries: &[(&str, &str)]) -> String {
    let mut out = format!(
        "# {category}\n\n<!-- Team memory of mc (written by `mc-dream export`). One memory per \
         entry: a `## id` line, then its text.\n     Edit or delete entries, or add one under a \
         new `## id` of your own (letters, digits, - and _);\n     `mc-dream import` applies the \
         change. Never put secrets here. -->\n"
    );
    for (id, content) in entries {
        out.push_str(&format!("\n## {id}\n\n"));
        for line in content.lines() {
            out.push_str(&escape_line(line));
            out.push('\n');
        }
    }
    out
}

/// The team id of a memory: stable, the same whoever computes it, and not
/// one of `taken`.
pub fn team_id(project: &str, id: i64, created_ms: i64, taken: &BTreeSet<String>) -> String {
    let digest = Sha256::digest(format!("{project}\n{id}\n{created_ms}").as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    for len in 10..=hex.len() {
        let candidate = hex.get(..len).unwrap_or(&hex).to_string();
        if !taken.contains(&candidate) {
            return candidate;
        }
    }
    format!("{hex}-{id}")
}

/// The files of a repository: per category, its entries, or `None` when the
/// file does not exist.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Folder {
    pub files: BTreeMap<&'static str, Option<Vec<Entry>>>,
    /// The text of each file that exists, as read.
    texts: BTreeMap<&'static str, String>,
}

impl Folder {
    fn entries(&self) -> impl Iterator<Item = (&'static str, &Entry)> {
        self.files
            .iter()
            .filter_map(|(c, e)| e.as_ref().map(|e| (*c, e)))
            .flat_map(|(c, entries)| entries.iter().map(move |e| (c, e)))
    }
}

/// Read `<root>/.mc/memory/*.md`. A malformed file, or one id in two
/// files, fails the whole read (an input error naming the file).
pub fn read_folder(root: &Path) -> Result<Folder> {
    let dir = open_folder(root, false)?;
    let at = folder(root);
    let mut folder = Folder::default();
    let mut ids: BTreeMap<String, &'static str> = BTreeMap::new();
    for category in CATEGORIES {
        let name = file_name(category);
        let path = at.join(&name);
        let read = match &dir {
            Some(dir) => dir.read(&name, MAX_FILE_BYTES).map_err(refused)?,
            None => None,
        };
        let Some(bytes) = read else {
            folder.files.insert(category, None);
            continue;
        };
        let text = String::from_utf8(bytes).map_err(|_| {
            Error::input(format!("{} is not valid UTF-8", path.display()))
                .with_hint("fix the file, then run the command again")
        })?;
        let entries = parse_file(&text).map_err(|problem| {
            Error::input(format!("{}: {problem}", path.display()))
                .with_hint("fix the file, then run the command again")
        })?;
        for e in &entries {
            if let Some(other) = ids.insert(e.id.clone(), category) {
                return Err(Error::input(format!(
                    "entry id {} is in both {other}.md and {category}.md",
                    e.id
                ))
                .with_hint("keep one of the two entries"));
            }
        }
        folder.files.insert(category, Some(entries));
        folder.texts.insert(category, text);
    }
    Ok(folder)
}

/// A memory that carries a team id.
#[derive(Debug, Clone)]
struct TeamRow {
    id: i64,
    category: String,
    content: String,
    live: bool,
    private: bool,
    team_key: Option<String>,
}

fn team_rows(conn: &Connection, project: &str) -> Result<BTreeMap<String, TeamRow>> {
    let mut stmt = conn.prepare_cached(
        "SELECT team_id, id, category, content, status IN ('active', 'permanent'), private, team_key
         FROM memories WHERE project = ?1 AND team_id IS NOT NULL ORDER BY id",
    )?;
    let rows = stmt.query_map(params![project], |r| {
        Ok((
            r.get::<_, String>(0)?,
            TeamRow {
                id: r.get(1)?,
                category: r.get(2)?,
                content: r.get(3)?,
                live: r.get(4)?,
                private: r.get::<_, i64>(5)? != 0,
                team_key: r.get(6)?,
            },
        ))
    })?;
    let mut out: BTreeMap<String, TeamRow> = BTreeMap::new();
    for row in rows {
        let (team_id, row) = row?;
        // Should two rows share an id, the live one counts.
        if out.get(&team_id).is_none_or(|old| !old.live) {
            out.insert(team_id, row);
        }
    }
    Ok(out)
}

fn set_team(conn: &Connection, id: i64, team_id: Option<&str>, key: Option<&str>) -> Result<()> {
    conn.execute(
        "UPDATE memories SET team_id = ?2, team_key = ?3 WHERE id = ?1",
        params![id, team_id, key],
    )?;
    Ok(())
}

/// A refused entry or memory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Refused {
    pub id: String,
    pub category: String,
    pub reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ImportReport {
    pub created: usize,
    pub updated: usize,
    pub moved: usize,
    pub archived: usize,
    /// Entries that matched a live memory nobody had given a team id.
    pub adopted: usize,
    pub unchanged: usize,
    /// Changed here since the last sync, unchanged in the file: the next
    /// export writes them.
    pub kept_local: usize,
    /// Changed on both sides: the file's text won.
    pub conflicts: Vec<String>,
    pub refused: Vec<Refused>,
}

/// Apply the folder to the project's memories (run in a write transaction).
pub fn import_in(
    conn: &Connection,
    project: &str,
    folder: &Folder,
    now_ms: i64,
) -> Result<ImportReport> {
    let mut report = ImportReport::default();
    let rows = team_rows(conn, project)?;
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for (category, entry) in folder.entries() {
        seen.insert(entry.id.as_str());
        let refuse = |reason: String| Refused {
            id: entry.id.clone(),
            category: category.to_string(),
            reason,
        };
        if let Some(reason) = secret_reason(&entry.content) {
            report
                .refused
                .push(refuse(format!("it looks like it holds {reason}")));
            continue;
        }
        if let Err(e) = store::check_memory_content(&entry.content) {
            report.refused.push(refuse(e.to_string()));
            continue;
        }
        let key = store::memory_key(&entry.content);
        match rows.get(&entry.id) {
            Some(row) if row.private => {}
            Some(row) if row.live && row.category != category => {
                let reason = format!("moved to {category} in {FOLDER}");
                memory::archive_in(conn, project, row.id, Some(&reason), now_ms)?;
                set_team(conn, row.id, None, None)?;
                create(conn, project, category, entry, &key, now_ms)?;
                report.moved += 1;
            }
            Some(row) if row.live => {
                let here = store::memory_key(&row.content);
                if here == key {
                    if row.team_key.as_deref() != Some(key.as_str()) {
                        set_team(conn, row.id, Some(&entry.id), Some(&key))?;
                    }
                    report.unchanged += 1;
                } else if row.team_key.as_deref() == Some(key.as_str()) {
                    report.kept_local += 1;
                } else {
                    if row.team_key.as_deref() != Some(here.as_str()) {
                        report.conflicts.push(entry.id.clone());
                    }
                    if let Some(other) =
                        store::live_duplicate(conn, project, category, &entry.content)?
                        && other != row.id
                    {
                        report
                            .refused
                            .push(refuse(format!("it says what memory #{other} says")));
                        continue;
                    }
                    memory::update_in(conn, project, row.id, &entry.content, now_ms)?;
                    set_team(conn, row.id, Some(&entry.id), Some(&key))?;
                    report.updated += 1;
                }
            }
            Some(row) => {
                // Archived or merged here. Unchanged in the file: it stays so
                // (the next export drops the entry). Edited there since: the
                // team's text comes back as a memory.
                if row.team_key.as_deref() != Some(key.as_str()) {
                    set_team(conn, row.id, None, None)?;
                    let made = create(conn, project, category, entry, &key, now_ms)?;
                    report.count(made);
                }
            }
            None => {
                let made = create(conn, project, category, entry, &key, now_ms)?;
                report.count(made);
            }
        }
    }
    // Entries removed from a file that exists: archive their memories,
    // unless they changed here since the last sync.
    for (team_id, row) in &rows {
        let file_exists = folder
            .files
            .get(row.category.as_str())
            .is_some_and(Option::is_some);
        if !row.live || row.private || seen.contains(team_id.as_str()) || !file_exists {
            continue;
        }
        if row.team_key.as_deref() == Some(store::memory_key(&row.content).as_str()) {
            let reason = format!("removed from {FOLDER}/{}.md", row.category);
            memory::archive_in(conn, project, row.id, Some(&reason), now_ms)?;
            report.archived += 1;
        } else {
            report.kept_local += 1;
        }
    }
    Ok(report)
}

/// What [`create`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Made {
    Created,
    /// A live memory already said it and had no team id: it took the entry's.
    Adopted,
    /// A live memory with another team id already says it.
    Duplicate,
}

impl ImportReport {
    fn count(&mut self, made: Made) {
        match made {
            Made::Created => self.created += 1,
            Made::Adopted => self.adopted += 1,
            Made::Duplicate => self.unchanged += 1,
        }
    }
}

/// A new memory from an entry (or the live one it duplicates, adopted).
fn create(
    conn: &Connection,
    project: &str,
    category: &str,
    entry: &Entry,
    key: &str,
    now_ms: i64,
) -> Result<Made> {
    let written = memory::write_in(conn, project, category, &entry.content, "team", now_ms)?;
    if written.result == memory::Written::Created {
        set_team(conn, written.id, Some(&entry.id), Some(key))?;
        return Ok(Made::Created);
    }
    let has_id: Option<String> = conn.query_row(
        "SELECT team_id FROM memories WHERE id = ?1",
        params![written.id],
        |r| r.get(0),
    )?;
    if has_id.is_none() {
        set_team(conn, written.id, Some(&entry.id), Some(key))?;
        Ok(Made::Adopted)
    } else {
        Ok(Made::Duplicate)
    }
}

/// What export writes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExportedFile {
    pub category: &'static str,
    pub path: String,
    pub entries: usize,
    pub changed: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExportReport {
    pub folder: String,
    pub files: Vec<ExportedFile>,
    pub exported: usize,
    /// Private memories left out.
    pub private: usize,
    /// Memories left out because they look like they hold a secret.
    pub refused: Vec<Refused>,
}

struct ExportPlan {
    files: Vec<(ExportedFile, String)>,
    /// (memory id, team id, content key) to record.
    assigned: Vec<(i64, String, String)>,
    report: ExportReport,
}

/// The differences between the files and what the database last agreed
/// with them: edits nobody imported yet, which a plain export would lose.
fn pending(conn: &Connection, project: &str, folder: &Folder) -> Result<Vec<String>> {
    let rows = team_rows(conn, project)?;
    let mut out = Vec::new();
    for (category, entry) in folder.entries() {
        // What import refuses (a secret, an invalid text) export drops: the
        // import already said so, and it must not block every export.
        if secret_reason(&entry.content).is_some()
            || store::check_memory_content(&entry.content).is_err()
        {
            continue;
        }
        match rows.get(&entry.id) {
            None => out.push(format!("{category}.md has a new entry {}", entry.id)),
            Some(row) if row.category != category && row.live => {
                out.push(format!("entry {} moved to {category}.md", entry.id));
            }
            Some(row)
                if row.team_key.as_deref() != Some(store::memory_key(&entry.content).as_str()) =>
            {
                out.push(format!("entry {} in {category}.md was edited", entry.id));
            }
            Some(_) => {}
        }
    }
    let listed: BTreeSet<&str> = folder.entries().map(|(_, e)| e.id.as_str()).collect();
    for (team_id, row) in &rows {
        let file_exists = folder
            .files
            .get(row.category.as_str())
            .is_some_and(Option::is_some);
        if row.live
            && !row.private
            && file_exists
            && !listed.contains(team_id.as_str())
            && row.team_key.as_deref() == Some(store::memory_key(&row.content).as_str())
        {
            out.push(format!(
                "entry {team_id} was removed from {}.md",
                row.category
            ));
        }
    }
    Ok(out)
}

fn plan_export(
    conn: &Connection,
    project: &str,
    root: &Path,
    folder: &Folder,
) -> Result<ExportPlan> {
    let memories = live_memories(conn, project)?;
    let mut taken: BTreeSet<String> = conn
        .prepare_cached("SELECT team_id FROM memories WHERE project = ?1 AND team_id IS NOT NULL")?
        .query_map(params![project], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut report = ExportReport {
        folder: folder_display(root),
        files: Vec::new(),
        exported: 0,
        private: 0,
        refused: Vec::new(),
    };
    let mut chosen: Vec<(&LiveMemory, String)> = Vec::new();
    let mut fresh: Vec<&LiveMemory> = Vec::new();
    for m in &memories {
        if m.private {
            report.private += 1;
            continue;
        }
        if let Some(reason) = secret_reason(&m.content) {
            report.refused.push(Refused {
                id: m.team_id.clone().unwrap_or_else(|| format!("#{}", m.id)),
                category: m.category.clone(),
                reason: format!("it looks like it holds {reason}"),
            });
            continue;
        }
        match &m.team_id {
            Some(id) => chosen.push((m, id.clone())),
            None => fresh.push(m),
        }
    }
    fresh.sort_by_key(|m| (m.created_ms, m.id));
    let mut assigned = Vec::new();
    for m in fresh {
        let id = team_id(project, m.id, m.created_ms, &taken);
        taken.insert(id.clone());
        chosen.push((m, id));
    }
    for (m, id) in &chosen {
        assigned.push((m.id, id.clone(), store::memory_key(&m.content)));
    }
    let mut files = Vec::new();
    for category in CATEGORIES {
        let mut mine: Vec<&(&LiveMemory, String)> = chosen
            .iter()
            .filter(|(m, _)| m.category == category)
            .collect();
        let existing = folder.files.get(category).cloned().flatten();
        if mine.is_empty() && existing.is_none() {
            continue;
        }
        // Entries keep their place; new ones follow, oldest first.
        let place: BTreeMap<&str, usize> = existing
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, e)| (e.id.as_str(), i))
            .collect();
        mine.sort_by_key(|(m, id)| {
            (
                place.get(id.as_str()).copied().unwrap_or(usize::MAX),
                m.created_ms,
                m.id,
            )
        });
        let entries: Vec<(&str, &str)> = mine
            .iter()
            .map(|(m, id)| (id.as_str(), m.content.as_str()))
            .collect();
        let text = render_file(category, &entries);
        report.exported += entries.len();
        let file = ExportedFile {
            category,
            path: format!("{FOLDER}/{category}.md"),
            entries: entries.len(),
            changed: folder.texts.get(category) != Some(&text),
        };
        report.files.push(file.clone());
        files.push((file, text));
    }
    Ok(ExportPlan {
        files,
        assigned,
        report,
    })
}

fn folder_display(root: &Path) -> String {
    folder(root).display().to_string()
}

/// Write the planned files (each through a temporary file and a rename,
/// never through a link).
fn write_files(root: &Path, plan: &ExportPlan) -> Result<()> {
    let Some(dir) = open_folder(root, true)? else {
        return Err(Error::input(format!(
            "cannot create {}",
            folder_display(root)
        )));
    };
    for (file, text) in &plan.files {
        if file.changed {
            dir.write(&file_name(file.category), text.as_bytes())
                .map_err(refused)?;
        }
    }
    Ok(())
}

fn record_export(conn: &Connection, plan: &ExportPlan) -> Result<()> {
    for (id, team_id, key) in &plan.assigned {
        set_team(conn, *id, Some(team_id), Some(key))?;
    }
    Ok(())
}

/// `mc-dream export`: refuses (an input error listing them) when the files
/// hold changes nobody imported, unless `force`.
pub fn export(store: &mut Store, project: &str, root: &Path, force: bool) -> Result<ExportReport> {
    let folder = read_folder(root)?;
    if !force {
        let pending = pending(store.conn(), project, &folder)?;
        if !pending.is_empty() {
            return Err(Error::input(format!(
                "{} has changes that were not imported: {}",
                folder_display(root),
                pending.join("; ")
            ))
            .with_hint(
                "run `mc-dream import` first, or `mc-dream export --force` to overwrite them",
            ));
        }
    }
    let plan = plan_export(store.conn(), project, root, &folder)?;
    write_files(root, &plan)?;
    store.write(|tx| record_export(tx, &plan))?;
    Ok(plan.report)
}

/// `mc-dream import`.
pub fn import(store: &mut Store, project: &str, root: &Path, now_ms: i64) -> Result<ImportReport> {
    if open_folder(root, false)?.is_none() {
        return Err(
            Error::input(format!("{} does not exist", folder_display(root)))
                .with_hint("`mc-dream export` starts team memory in a repository"),
        );
    }
    let folder = read_folder(root)?;
    store.write(|tx| import_in(tx, project, &folder, now_ms))
}

/// A problem with the files, as a task failure (the next sync reads them
/// again).
fn files_failure(error: Error) -> TaskFailure {
    let mut failure = TaskFailure::new(FailureClass::Files, error.to_string());
    for hint in error.hints() {
        failure = failure.hint(hint);
    }
    failure
}

/// The sync task: import, then export over the files, in a repository that
/// has `.mc/memory/`.
pub fn sync(run: &mut Run<'_, '_>) -> std::result::Result<Done, TaskFailure> {
    let project = run.project.clone();
    let Some(root) = run.root.clone() else {
        return Err(TaskFailure::new(
            FailureClass::Files,
            "no folder for this project",
        ));
    };
    let opened = open_folder(&root, false).map_err(files_failure)?;
    if opened.is_none() {
        return Ok(Done::nothing(json!({
            "note": format!("no {FOLDER} folder: team memory is off here (`mc-dream export` starts it)")
        })));
    }
    let now = run.now();
    let files = read_folder(&root).map_err(files_failure)?;
    let imported = run.apply(|tx| import_in(tx, &project, &files, now))?;
    let folder_now = read_folder(&root).map_err(files_failure)?;
    let plan = plan_export(run.store.conn(), &project, &root, &folder_now)?;
    write_files(&root, &plan).map_err(files_failure)?;
    run.apply(|tx| record_export(tx, &plan))?;
    let changed = imported.created + imported.updated + imported.moved + imported.archived > 0
        || plan.files.iter().any(|(f, _)| f.changed);
    Ok(Done {
        result: Outcome::of_change(changed),
        detail: json!({"imported": imported, "exported": plan.report}),
        head: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_round_trip_and_escape_headings() {
        let text = render_file(
            "CONSTRAINTS",
            &[
                ("a1", "Never log API keys."),
                ("b-2", "Line one\n## not a heading\n\\## odd"),
            ],
        );
        assert!(
            text.starts_with("# CONSTRAINTS\n\n<!-- Team memory of mc"),
            "{text}"
        );
        assert!(
            text.contains("\n## b-2\n\nLine one\n\\## not a heading\n\\\\## odd\n"),
            "{text}"
        );
        let entries = parse_file(&text).unwrap();
        assert_eq!(
            entries,
            [
                Entry {
                    id: "a1".into(),
                    content: "Never log API keys.".into()
                },
                Entry {
                    id: "b-2".into(),
                    content: "Line one\n## not a heading\n\\## odd".into()
                },
            ]
        );
        assert_eq!(
            render_file(
                "CONSTRAINTS",
                &[
                    ("a1", "Never log API keys."),
                    ("b-2", "Line one\n## not a heading\n\\## odd")
                ]
            ),
            text
        );
    }

    #[test]
    fn malformed_files_say_which_line() {
        assert_eq!(
            parse_file("# X\n\n## has space\n\ntext\n").unwrap_err(),
            "line 3: \"## has space\" does not name an entry id (letters, digits, - and _)"
        );
        assert_eq!(
            parse_file("## a\n\n## b\ntext\n").unwrap_err(),
            "line 1: entry a has no text (delete the entry to archive its memory)"
        );
        assert_eq!(
            parse_file("## a\nx\n## a\ny\n").unwrap_err(),
            "entry id a appears twice"
        );
        assert_eq!(parse_file("# only a title\n").unwrap(), []);
    }

    #[test]
    fn team_ids_are_stable_and_avoid_taken_ones() {
        let none = BTreeSet::new();
        let a = team_id("git:abc", 7, 1000, &none);
        assert_eq!(a.len(), 10);
        assert_eq!(team_id("git:abc", 7, 1000, &none), a);
        assert_ne!(team_id("git:abc", 8, 1000, &none), a);
        let taken: BTreeSet<String> = [a.clone()].into();
        let b = team_id("git:abc", 7, 1000, &taken);
        assert_eq!(b.len(), 11);
        assert!(b.starts_with(&a));
    }
}

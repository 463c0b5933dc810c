//! `setup`: write each harness's pieces (and the historian's model into
//! mc's user config) — idempotent, comments kept, a backup of every file it
//! changes and a diff of every change — and `setup --uninstall`, which takes
//! back exactly what setup wrote, from the record setup keeps
//! (`$XDG_DATA_HOME/mc/doctor-setup.json`). Also `--fix`'s repairs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::harness::{self, Action, HarnessId, Piece};
use super::{Env, Repair, edit};
use mc_base::error::{Error, Result};

/// The historian's model, as setup writes it into mc's user config.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Historian {
    /// `PROVIDER/MODEL`.
    pub model: String,
    /// `anthropic`, `openai` or `command` (default: the provider's name when
    /// it is `anthropic` or `openai`; `command` with `command`).
    pub kind: Option<String>,
    pub base_url: Option<String>,
    /// The variable holding the key (default `ANTHROPIC_API_KEY` / `OPENAI_API_KEY`).
    pub key_env: Option<String>,
    /// For `command`: the program and its arguments (`claude -p`).
    pub command: Option<Vec<String>>,
}

/// What one setup run is asked to do.
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub harnesses: Vec<HarnessId>,
    pub historian: Option<Historian>,
    /// Compute and show, write nothing.
    pub dry_run: bool,
}

/// One file's change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileChange {
    pub path: PathBuf,
    /// The backup of the old file (none for a new file or a dry run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backup: Option<PathBuf>,
    pub kind: ChangeKind,
    pub diff: String,
}

/// What a [`FileChange`] does to its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Created,
    Changed,
    Removed,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Created => "created",
            ChangeKind::Changed => "changed",
            ChangeKind::Removed => "removed",
        }
    }
}

impl std::fmt::Display for ChangeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a setup, uninstall or fix did (or, dry, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Outcome {
    pub changes: Vec<FileChange>,
    /// One line per thing worth saying (already in place, not available, …).
    pub notes: Vec<String>,
}

/// How a recorded piece was written, so how it is taken back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A whole file.
    File,
    /// A JSON value at `keys`.
    JsonSet,
    /// An element of the JSON array at `keys`.
    JsonItem,
    /// A TOML value at `keys`.
    TomlSet,
}

/// One piece setup wrote, with what it needs to take it back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// `opencode`, `claude-code`, `codex`, `pi`, or `config` (mc's own config).
    pub owner: String,
    pub piece: String,
    pub path: PathBuf,
    pub kind: EntryKind,
    #[serde(default)]
    pub keys: Vec<String>,
    /// What setup wrote (the value, or the array element).
    #[serde(default)]
    pub value: Value,
    /// The value before setup wrote (`json_set`, `toml_set`); absent when there was none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<Value>,
    /// Elements setup replaced (an out-of-date hook), put back on uninstall.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replaced: Vec<Value>,
    /// How many of `keys`' parents existed before (so uninstall removes only
    /// the containers setup created).
    #[serde(default)]
    pub existed: usize,
    /// The file did not exist before setup.
    #[serde(default)]
    pub created_file: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Manifest {
    entries: Vec<Entry>,
    /// Each file setup changed: its text before the first change and after
    /// the latest, so an uninstall of everything setup wrote there gives back
    /// the very bytes, when nobody edited the file since.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    files: Vec<FileRecord>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct FileRecord {
    path: PathBuf,
    /// `None`: setup created it.
    before: Option<String>,
    after: Option<String>,
}

impl Manifest {
    /// Remember what `files` changes (before they are written).
    fn record(&mut self, files: &Files) {
        for (path, (old, new)) in &files.files {
            if old == new {
                continue;
            }
            match self.files.iter_mut().find(|r| &r.path == path) {
                Some(record) => record.after = new.clone(),
                None => self.files.push(FileRecord {
                    path: path.clone(),
                    before: old.clone(),
                    after: new.clone(),
                }),
            }
        }
    }
}

/// The local embeddings model the config names, when it is one that is
/// not ready yet (what setup offers to fetch).
pub fn embeddings_to_fetch(env: &Env) -> Option<std::sync::Arc<mc_search_core::embed::LocalModel>> {
    let config = mc_base::config::load(&env.layers).config;
    let provider = mc_search_core::embed::Provider::from_config(
        &config,
        &|v| env.vars.get(v).cloned(),
        env.models_dir.as_deref(),
    )
    .ok()??;
    match &provider.backend {
        mc_search_core::embed::Backend::Local(m)
            if m.state() != mc_search_core::embed::local::State::Ready =>
        {
            Some(m.clone())
        }
        _ => None,
    }
}

/// Fetch `model`'s files (from `base_url` when given, else its own
/// address): the one step of setup that uses the network, so the binary
/// asks first. The note to show.
pub fn fetch_embeddings(
    model: &mc_search_core::embed::LocalModel,
    base_url: Option<String>,
    sleep: &dyn Fn(std::time::Duration),
) -> Result<String> {
    use mc_search_core::embed::fetch;
    let mut options = fetch::FetchOptions::for_spec(model.spec);
    if let Some(url) = base_url {
        options.base_url = url;
    }
    let done =
        fetch::fetch(&model.dir, model.spec, &options, &mut |_, _, _| {}, sleep).map_err(|e| {
            Error::Io(std::io::Error::other(format!(
                "fetching the local embedding model {}: {e}",
                model.spec.name
            )))
            .with_hint("run it again: what came is kept and resumed")
        })?;
    Ok(format!(
        "embeddings: the local model {} is in {} ({} file(s) downloaded, {:.1} MB); \
         `mc-search index --embeddings` (or mc-dream's embed task) embeds what search holds",
        model.spec.name,
        model.dir.display(),
        done.downloaded.len(),
        done.bytes as f64 / 1e6
    ))
}

/// Setup's record of what it wrote.
pub fn manifest_path(env: &Env) -> PathBuf {
    env.data_home().join("mc").join("doctor-setup.json")
}

fn load_manifest(env: &Env) -> Result<Manifest> {
    let path = manifest_path(env);
    match harness::read(&path).map_err(Error::Input)? {
        None => Ok(Manifest::default()),
        Some(text) => serde_json::from_str(&text).map_err(|e| {
            Error::Corrupt(format!(
                "setup's record {} is not readable: {e}",
                path.display()
            ))
            .with_hint("move it aside; uninstall then has nothing to take back")
        }),
    }
}

fn save_manifest(env: &Env, manifest: &Manifest) -> Result<()> {
    let path = manifest_path(env);
    if manifest.entries.is_empty() {
        let _ = std::fs::remove_file(&path);
        return Ok(());
    }
    let text = serde_json::to_string_pretty(manifest)
        .map_err(|e| Error::Internal(format!("encoding setup's record: {e}")))?;
    write_file(&path, &(text + "\n"))
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io(path, e))?;
    }
    std::fs::write(path, text).map_err(|e| io(path, e))
}

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::Io(std::io::Error::new(
        e.kind(),
        format!("{}: {e}", path.display()),
    ))
}

/// The files being edited: original and current text (`None`: absent).
#[derive(Default)]
struct Files {
    files: BTreeMap<PathBuf, (Option<String>, Option<String>)>,
}

impl Files {
    fn current(&mut self, path: &Path) -> Result<Option<String>> {
        if let Some((_, now)) = self.files.get(path) {
            return Ok(now.clone());
        }
        let text = harness::read(path).map_err(Error::Input)?;
        self.files
            .insert(path.to_path_buf(), (text.clone(), text.clone()));
        Ok(text)
    }

    fn set(&mut self, path: &Path, text: Option<String>) {
        if let Some(entry) = self.files.get_mut(path) {
            entry.1 = text;
        }
    }

    /// Write every changed file (after a backup of the old one), or only
    /// describe the changes when `dry`.
    fn commit(self, env: &Env, dry: bool) -> Result<Vec<FileChange>> {
        let stamp = jiff::Timestamp::from_millisecond(env.now_ms)
            .map(|t| t.strftime("%Y%m%d-%H%M%S").to_string())
            .unwrap_or_else(|_| env.now_ms.to_string());
        let mut changes = Vec::new();
        for (path, (old, new)) in self.files {
            if old == new {
                continue;
            }
            let shown = env.tilde(&path);
            let diff = edit::diff(
                &shown,
                old.as_deref().unwrap_or(""),
                new.as_deref().unwrap_or(""),
            );
            let kind = match (&old, &new) {
                (None, _) => ChangeKind::Created,
                (_, None) => ChangeKind::Removed,
                _ => ChangeKind::Changed,
            };
            let mut backup = None;
            if !dry {
                if old.is_some() {
                    let mut name = path.file_name().unwrap_or_default().to_os_string();
                    name.push(format!(".mc-backup-{stamp}"));
                    let to = path.with_file_name(name);
                    std::fs::copy(&path, &to).map_err(|e| io(&to, e))?;
                    backup = Some(to);
                }
                match &new {
                    Some(text) => write_file(&path, text)?,
                    None => std::fs::remove_file(&path).map_err(|e| io(&path, e))?,
                }
            }
            changes.push(FileChange {
                path,
                backup,
                kind,
                diff,
            });
        }
        Ok(changes)
    }
}

/// How many of `keys` (from the first) exist as objects in `root`.
fn existing_depth(root: &Value, keys: &[String]) -> usize {
    let mut value = root;
    let mut depth = 0;
    for key in keys {
        match value.get(key.as_str()) {
            Some(next) if next.is_object() => {
                value = next;
                depth += 1;
            }
            _ => break,
        }
    }
    depth
}

/// Write `piece` into `files`; the record of what was written, or `None`
/// when it was already in place.
fn install_piece(files: &mut Files, owner: &str, piece: &Piece) -> Result<Option<Entry>> {
    let what = piece.path.display().to_string();
    let current = files.current(&piece.path)?;
    let created_file = current.is_none();
    let text = current.clone().unwrap_or_default();
    let mut entry = Entry {
        owner: owner.to_string(),
        piece: piece.id.to_string(),
        path: piece.path.clone(),
        kind: EntryKind::File,
        keys: Vec::new(),
        value: Value::Null,
        previous: None,
        replaced: Vec::new(),
        existed: 0,
        created_file,
    };
    match &piece.action {
        Action::File(Err(_)) => return Ok(None),
        Action::File(Ok(content)) => {
            if current.as_deref() == Some(*content) {
                return Ok(None);
            }
            files.set(&piece.path, Some((*content).to_string()));
            entry.kind = EntryKind::File;
        }
        Action::JsonSet { keys, value } => {
            let root = edit::json_value(&text, &what)?;
            let previous = edit::get(&root, keys).cloned();
            if previous.as_ref() == Some(value) {
                return Ok(None);
            }
            let parents = keys.get(..keys.len().saturating_sub(1)).unwrap_or_default();
            entry.existed = existing_depth(&root, parents);
            files.set(
                &piece.path,
                Some(edit::json_set(&text, keys, value, &what)?),
            );
            entry.kind = EntryKind::JsonSet;
            entry.keys = keys.clone();
            entry.value = value.clone();
            entry.previous = previous;
        }
        Action::JsonItem { keys, item } => {
            let root = edit::json_value(&text, &what)?;
            let elements = edit::get(&root, keys)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if elements.iter().any(|e| e == item) {
                return Ok(None);
            }
            let replaced: Vec<Value> = elements
                .iter()
                .filter(|e| harness::same_item(e, item))
                .cloned()
                .collect();
            let parents = keys.get(..keys.len().saturating_sub(1)).unwrap_or_default();
            entry.existed = existing_depth(&root, parents);
            let mut new = text.clone();
            if !replaced.is_empty() {
                new = edit::json_pull(
                    &new,
                    keys,
                    &|e| harness::same_item(e, item),
                    usize::MAX,
                    &what,
                )?;
            }
            new = edit::json_push(&new, keys, item, &what)?;
            files.set(&piece.path, Some(new));
            entry.kind = EntryKind::JsonItem;
            entry.keys = keys.clone();
            entry.value = item.clone();
            entry.replaced = replaced;
        }
        Action::TomlSet { keys, value } => {
            let previous = edit::toml_get(&text, keys, &what)?;
            if previous.as_ref() == Some(value) {
                return Ok(None);
            }
            let doc = toml_parents(&text, keys, &what)?;
            entry.existed = doc;
            files.set(
                &piece.path,
                Some(edit::toml_set(&text, keys, value, &what)?),
            );
            entry.kind = EntryKind::TomlSet;
            entry.keys = keys.clone();
            entry.value = value.clone();
            entry.previous = previous;
        }
    }
    Ok(Some(entry))
}

/// How many of `keys`' parents exist as tables in the TOML `text`.
fn toml_parents(text: &str, keys: &[String], what: &str) -> Result<usize> {
    let parents = keys.get(..keys.len().saturating_sub(1)).unwrap_or_default();
    let mut depth = 0;
    for n in 1..=parents.len() {
        match edit::toml_get(text, parents.get(..n).unwrap_or_default(), what)? {
            Some(Value::Object(_)) => depth = n,
            _ => break,
        }
    }
    Ok(depth)
}

/// Take back one recorded piece in `files`.
fn undo(files: &mut Files, entry: &Entry) -> Result<()> {
    let what = entry.path.display().to_string();
    let Some(text) = files.current(&entry.path)? else {
        return Ok(());
    };
    let new = match entry.kind {
        EntryKind::File => None,
        EntryKind::JsonSet => {
            let root = edit::json_value(&text, &what)?;
            if edit::get(&root, &entry.keys) != Some(&entry.value) {
                // Changed since: the user's now, left alone.
                Some(text)
            } else {
                Some(match &entry.previous {
                    Some(previous) => edit::json_set(&text, &entry.keys, previous, &what)?,
                    None => edit::json_remove(&text, &entry.keys, entry.existed, &what)?,
                })
            }
        }
        EntryKind::JsonItem => {
            let mut new = edit::json_pull(
                &text,
                &entry.keys,
                &|e| e == &entry.value,
                entry.existed,
                &what,
            )?;
            for item in &entry.replaced {
                new = edit::json_push(&new, &entry.keys, item, &what)?;
            }
            Some(new)
        }
        EntryKind::TomlSet => {
            let now = edit::toml_get(&text, &entry.keys, &what)?;
            if now.as_ref() != Some(&entry.value) {
                Some(text)
            } else {
                Some(match &entry.previous {
                    Some(previous) => edit::toml_set(&text, &entry.keys, previous, &what)?,
                    None => edit::toml_remove(&text, &entry.keys, entry.existed, &what)?,
                })
            }
        }
    };
    // A file setup created and left holding nothing goes too.
    let new = match new {
        Some(t) if entry.created_file && is_empty_document(&t, entry.kind) => None,
        other => other,
    };
    files.set(&entry.path, new);
    Ok(())
}

fn is_empty_document(text: &str, kind: EntryKind) -> bool {
    if kind == EntryKind::TomlSet {
        return text.trim().is_empty();
    }
    matches!(edit::json_value(text, ""), Ok(Value::Object(m)) if m.is_empty())
}

/// The pieces that write the historian's model into mc's user config.
pub fn historian_pieces(env: &Env, historian: &Historian) -> Result<Vec<Piece>> {
    let Some((name, _model)) = historian.model.split_once('/') else {
        return Err(Error::Input(format!(
            "--historian-model {:?} is not PROVIDER/MODEL",
            historian.model
        ))
        .with_hint("for example anthropic/claude-haiku-4-5, openai/gpt-4.1-mini, or NAME/MODEL with --historian-command"));
    };
    let path = env.user_config();
    let mut pieces = Vec::new();
    let existing = harness::read(&path)
        .map_err(Error::Input)?
        .map(|t| edit::json_value(&t, &path.display().to_string()))
        .transpose()?;
    let defined = existing
        .as_ref()
        .and_then(|v| v.get("providers")?.get(name))
        .is_some();
    let kind = match (&historian.kind, &historian.command) {
        (Some(kind), _) => Some(kind.clone()),
        (None, Some(_)) => Some("command".to_string()),
        (None, None) if name == "anthropic" || name == "openai" => Some(name.to_string()),
        (None, None) => None,
    };
    if let Some(kind) =
        kind.filter(|_| !defined || historian.kind.is_some() || historian.command.is_some())
    {
        let mut provider = serde_json::Map::new();
        provider.insert("kind".into(), json!(kind));
        match kind.as_str() {
            "anthropic" | "openai" => {
                let var = historian.key_env.clone().unwrap_or_else(|| {
                    if kind == "anthropic" {
                        "ANTHROPIC_API_KEY"
                    } else {
                        "OPENAI_API_KEY"
                    }
                    .into()
                });
                provider.insert("api_key_env".into(), json!(var));
                if let Some(url) = &historian.base_url {
                    provider.insert("base_url".into(), json!(url));
                }
            }
            "command" => {
                let Some(command) = historian.command.as_ref().filter(|c| !c.is_empty()) else {
                    return Err(Error::Input(
                        "a command provider needs --historian-command".into(),
                    ));
                };
                provider.insert("command".into(), json!(command));
            }
            other => {
                return Err(Error::Input(format!(
                    "unknown provider kind {other:?} (anthropic, openai or command)"
                )));
            }
        }
        pieces.push(Piece {
            id: "provider",
            label: format!("the provider {name}"),
            path: path.clone(),
            action: Action::JsonSet {
                keys: vec!["providers".into(), name.to_string()],
                value: Value::Object(provider),
            },
        });
    } else if !defined {
        return Err(Error::Input(format!(
            "no provider {name:?} in your config, and its kind is unknown"
        ))
        .with_hint("add --historian-kind anthropic|openai (with --historian-base-url, --historian-key-env) or --historian-command 'PROGRAM ARGS'"));
    }
    pieces.push(Piece {
        id: "historian.model",
        label: "the historian's model".into(),
        path,
        action: Action::JsonSet {
            keys: vec!["historian".into(), "model".into()],
            value: json!(historian.model),
        },
    });
    Ok(pieces)
}

/// Wire the requested harnesses (and the historian), or describe it when dry.
pub fn setup(env: &Env, request: &Request) -> Result<Outcome> {
    let mut files = Files::default();
    let mut manifest = load_manifest(env)?;
    let mut outcome = Outcome::default();
    let mut todo: Vec<(String, Piece)> = Vec::new();
    for id in &request.harnesses {
        let integration = harness::integration(env, *id);
        for piece in integration.pieces {
            if let Action::File(Err(why)) = &piece.action {
                outcome.notes.push(format!(
                    "{}: {} not installed: {why}",
                    id.title(),
                    piece.label
                ));
                continue;
            }
            todo.push((id.as_str().to_string(), piece));
        }
        // Before the base URL changes: where Claude Code went until now.
        if *id == HarnessId::ClaudeCode {
            let settings = harness::claude_dir(env).join("settings.json");
            if let Some(piece) = super::claude_gateway::upstream_piece(env, &settings)? {
                todo.push((id.as_str().to_string(), piece));
            }
        }
        // Before mc's provider is selected: the one Codex used until now.
        if *id == HarnessId::Codex {
            let config_toml = harness::codex_dir(env).join("config.toml");
            if let Some(piece) = super::codex_gateway::upstream_piece(env, &config_toml)? {
                todo.push((id.as_str().to_string(), piece));
            }
        }
    }
    if let Some(historian) = &request.historian {
        for piece in historian_pieces(env, historian)? {
            todo.push(("config".to_string(), piece));
        }
    }
    let mut hooks_added = false;
    for (owner, piece) in &todo {
        match install_piece(&mut files, owner, piece)? {
            None => outcome.notes.push(format!(
                "{}: {} already in place ({})",
                title(owner),
                piece.label,
                env.tilde(&piece.path)
            )),
            Some(entry) => {
                if owner == HarnessId::Codex.as_str() && entry.kind == EntryKind::JsonItem {
                    hooks_added = true;
                }
                let known = manifest.entries.iter().any(|e| {
                    e.owner == entry.owner && e.piece == entry.piece && e.path == entry.path
                });
                if !known {
                    manifest.entries.push(entry);
                }
            }
        }
    }
    if hooks_added {
        // Codex skips an untrusted hook without a word.
        outcome.notes.push(
            "Codex: trust the new hooks (`/hooks` in Codex) — it runs a hook only once trusted"
                .into(),
        );
    }
    manifest.record(&files);
    outcome.changes = files.commit(env, request.dry_run)?;
    if !request.dry_run {
        save_manifest(env, &manifest)?;
    }
    Ok(outcome)
}

fn title(owner: &str) -> &str {
    match HarnessId::parse(owner) {
        Some(id) => id.title(),
        None => "mc's config",
    }
}

/// Take back what setup wrote for `harnesses` (every harness and mc's config
/// when empty), newest first.
pub fn uninstall(env: &Env, harnesses: &[HarnessId], dry_run: bool) -> Result<Outcome> {
    let mut manifest = load_manifest(env)?;
    let mut files = Files::default();
    let mut outcome = Outcome::default();
    let wanted =
        |e: &Entry| harnesses.is_empty() || harnesses.iter().any(|h| h.as_str() == e.owner);
    // A file whose every piece goes, untouched since setup: its old bytes.
    let mut exact: Vec<(PathBuf, Option<String>)> = Vec::new();
    for record in &manifest.files {
        let all_go = manifest
            .entries
            .iter()
            .filter(|e| e.path == record.path)
            .all(&wanted);
        if all_go && files.current(&record.path)? == record.after {
            exact.push((record.path.clone(), record.before.clone()));
        }
    }
    for entry in manifest.entries.iter().rev().filter(|e| wanted(e)) {
        undo(&mut files, entry)?;
    }
    for (path, before) in exact {
        files.set(&path, before);
    }
    if manifest.entries.iter().all(|e| !wanted(e)) {
        outcome
            .notes
            .push("nothing to take back: setup has not written anything here".into());
    }
    outcome.changes = files.commit(env, dry_run)?;
    if !dry_run {
        manifest.entries.retain(|e| !wanted(e));
        let entries = &manifest.entries;
        manifest
            .files
            .retain(|r| entries.iter().any(|e| e.path == r.path));
        save_manifest(env, &manifest)?;
    }
    Ok(outcome)
}

/// `mc-dream cron --install`, or its line (`mc-dream cron`) when dry.
pub fn install_cron(env: &Env, dry_run: bool) -> Result<String> {
    let Some(program) = env.which("mc-dream") else {
        return Err(Error::Input("mc-dream is not on PATH".into())
            .with_hint("install it first: cargo install --path mc-dream"));
    };
    let mut command = std::process::Command::new(program);
    command.arg("cron");
    if !dry_run {
        command.arg("--install");
    }
    let out = super::checks::run_limited(&mut command, std::time::Duration::from_secs(30))
        .ok_or_else(|| Error::Internal("mc-dream cron did not finish within 30 s".into()))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        return Err(Error::Input(format!(
            "mc-dream cron failed: {}",
            text.trim()
        )));
    }
    Ok(text.trim().to_string())
}

/// What `--fix` did: one line per repair, and the file changes.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Fixed {
    pub repaired: Vec<String>,
    pub failed: Vec<String>,
    pub changes: Vec<FileChange>,
}

/// Run each distinct repair the checks offer.
pub fn fix(env: &Env, checks: &[super::Check]) -> Fixed {
    let mut repairs: Vec<&Repair> = Vec::new();
    for check in checks {
        if let Some(repair) = &check.repair
            && check.status != super::Status::Pass
            && !repairs.contains(&repair)
        {
            repairs.push(repair);
        }
    }
    let mut fixed = Fixed::default();
    for repair in repairs {
        match repair {
            Repair::Harness { harness } => {
                let request = Request {
                    harnesses: vec![*harness],
                    ..Request::default()
                };
                match setup(env, &request) {
                    Ok(outcome) => {
                        fixed.repaired.push(format!(
                            "{}: re-wired ({} file(s) changed)",
                            harness.title(),
                            outcome.changes.len()
                        ));
                        fixed.changes.extend(outcome.changes);
                    }
                    Err(e) => fixed.failed.push(format!("{}: {e}", harness.title())),
                }
            }
            Repair::Migrate => match super::migrate::schema(env) {
                Ok(report) => fixed.repaired.push(report),
                Err(e) => fixed.failed.push(format!("database: {e}")),
            },
            Repair::Cron => match install_cron(env, false) {
                Ok(_) => fixed
                    .repaired
                    .push("cron: the mc-dream tick line added".into()),
                Err(e) => fixed.failed.push(format!("cron: {e}")),
            },
            Repair::RebuildIndexes => match super::indexes::rebuild(env) {
                Ok(report) => fixed.repaired.push(report),
                Err(e) => fixed.failed.push(format!("search indexes: {e}")),
            },
        }
    }
    fixed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_keep_the_strings_setups_record_and_output_hold() {
        for (kind, text) in [
            (EntryKind::File, "file"),
            (EntryKind::JsonSet, "json_set"),
            (EntryKind::JsonItem, "json_item"),
            (EntryKind::TomlSet, "toml_set"),
        ] {
            assert_eq!(serde_json::json!(kind), serde_json::json!(text));
            assert_eq!(
                serde_json::from_value::<EntryKind>(serde_json::json!(text)).unwrap(),
                kind
            );
        }
        // A record from a newer or damaged mc is refused whole, naming the kind.
        let refused = serde_json::from_str::<EntryKind>("\"yaml_set\"").unwrap_err();
        assert!(refused.to_string().contains("yaml_set"), "{refused}");
        for (kind, text) in [
            (ChangeKind::Created, "created"),
            (ChangeKind::Changed, "changed"),
            (ChangeKind::Removed, "removed"),
        ] {
            assert_eq!(serde_json::json!(kind), serde_json::json!(text));
            assert_eq!(kind.to_string(), text);
        }
    }
}

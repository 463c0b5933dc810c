//! verify: re-check memories that point at the code against the code.
//!
//! What a memory points at:
//! - **paths**: words with a `/` or a known source extension (`x.rs`,
//!   `Cargo.toml`, `src/store/mod.rs`), relative to the project's top
//!   folder, never outside it;
//! - **symbols and config keys**: code spans in backticks that look like an
//!   identifier with some shape (`project_identity`, `Store::open`,
//!   `HistorianConfig`, `transform.cache_ttl`), found with `git grep`
//!   (whole words, the first three files).
//!
//! A memory is checked when it points at something and the hash of what it
//! points at (each path's bytes or its absence, each symbol's files) differs
//! from the hash it was last verified against: unchanged files cost nothing.
//! A memory whose only pointers are symbols found nowhere is left alone
//! (nothing to check it against). Files that may hold secrets (`.env*`,
//! keys, credentials) are never read, and lines that look like secrets are
//! withheld from what is sent. The model answers each memory exactly once:
//!
//! ```text
//! <verify>
//! <memory id="12" verdict="verified"/>
//! <memory id="13" verdict="update">the corrected memory</memory>
//! <memory id="14" verdict="archive">why it is no longer true</memory>
//! </verify>
//! ```
//!
//! `update` goes through `search::memory::update_in` (logged; one that would
//! duplicate another live memory archives this one instead), `archive`
//! through `archive_in`; every answered memory records the hash it was
//! checked against.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path};

use rusqlite::params;
use serde_json::json;
use sha2::{Digest, Sha256};

use mc_base::identity::git;
use mc_base::repo_fs::{self, Refusal};
use mc_history::store;
use mc_search_core::memory;

use super::manifest::{self, escape};
use super::{Done, FailureClass, LiveMemory, Outcome, Run, TaskFailure, live_memories, secrets};

/// The most files shown for one memory.
const MAX_FILES: usize = 3;
/// The most bytes of one file shown.
const MAX_EXCERPT: usize = 4_000;
/// Larger files are hashed but not shown.
const MAX_READ: u64 = 1 << 20;

const EXTENSIONS: &[&str] = &[
    "rs", "toml", "md", "json", "jsonc", "js", "mjs", "ts", "tsx", "py", "go", "java", "kt", "c",
    "h", "cc", "cpp", "hpp", "sql", "sh", "yml", "yaml", "lock", "txt", "html", "css", "rb", "php",
    "swift", "cs", "ex", "exs", "zig", "lua", "nix", "cfg", "ini", "conf",
];

/// Path-like words of a memory (not checked for existence).
pub fn path_words(content: &str) -> Vec<String> {
    let mut out = BTreeSet::new();
    for raw in content.split(|c: char| c.is_whitespace() || "`'\"(),;<>[]{}".contains(c)) {
        let word = raw
            .trim_end_matches(['.', ':', '!', '?'])
            .trim_start_matches("./");
        if word.is_empty() || word.contains("://") || word.starts_with('-') || word.starts_with('~')
        {
            continue;
        }
        let path = Path::new(word);
        if path.is_absolute()
            || path
                .components()
                .any(|c| !matches!(c, Component::Normal(_)))
        {
            continue;
        }
        let extension = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()));
        let slashed = word.contains('/') && word.split('/').all(|part| !part.is_empty());
        if extension || slashed {
            out.insert(word.to_string());
        }
    }
    out.into_iter().collect()
}

/// Code spans of a memory that name a symbol or config key.
pub fn symbols(content: &str) -> Vec<String> {
    let mut out = BTreeSet::new();
    for (i, span) in content.split('`').enumerate() {
        if i % 2 == 0 {
            continue;
        }
        let span = span.trim().trim_end_matches("()");
        let identifier = |part: &str| {
            part.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        let parts: Vec<&str> = span.split("::").flat_map(|p| p.split('.')).collect();
        if span.len() < 4 || parts.is_empty() || !parts.iter().all(|p| identifier(p)) {
            continue;
        }
        let shaped = span.contains('_')
            || span.contains("::")
            || span.contains('.')
            || span.chars().skip(1).any(|c| c.is_ascii_uppercase());
        if shaped {
            out.insert(span.to_string());
        }
    }
    out.into_iter().collect()
}

/// Whether mc refuses to read `path` (it may hold secrets).
pub fn withheld(path: &str) -> bool {
    let name = Path::new(path)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_ascii_lowercase();
    name.starts_with(".env")
        || name.starts_with("id_rsa")
        || name.starts_with("id_ed25519")
        || name.starts_with("credentials")
        || name.starts_with("secrets.")
        || [".netrc", ".npmrc", ".pypirc", ".pgpass"].contains(&name.as_str())
        || [".pem", ".key", ".p12", ".pfx", ".keystore", ".jks"]
            .iter()
            .any(|e| name.ends_with(e))
}

/// The files each symbol appears in (whole word, sorted, the first
/// [`MAX_FILES`]), from one `git grep` over the work tree.
pub fn locate(root: &Path, symbols: &BTreeSet<String>) -> BTreeMap<String, Vec<String>> {
    let mut found: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    if symbols.is_empty() {
        return BTreeMap::new();
    }
    let mut command = git(root);
    command.args(["grep", "-z", "-I", "-F", "-w", "-o", "--full-name"]);
    for s in symbols {
        command.arg("-e").arg(s);
    }
    command.args(["--", "."]);
    let Ok(out) = command.output() else {
        return BTreeMap::new();
    };
    let text = String::from_utf8_lossy(&out.stdout);
    for line in text.lines() {
        let Some((path, matched)) = line.split_once('\0') else {
            continue;
        };
        if symbols.contains(matched) {
            found
                .entry(matched.to_string())
                .or_default()
                .insert(path.to_string());
        }
    }
    found
        .into_iter()
        .map(|(s, files)| (s, files.into_iter().take(MAX_FILES).collect()))
        .collect()
}

/// A file as verify sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileView {
    Missing,
    Withheld,
    /// A symbolic link on the way: not followed (it could point outside
    /// the repository).
    Link,
    TooLarge,
    Text(String),
}

fn read(root: &Path, rel: &str) -> (FileView, Vec<u8>) {
    if withheld(rel) {
        return (FileView::Withheld, b"withheld".to_vec());
    }
    // Read only inside the repository: no link followed (`repo_fs`).
    let bytes = match repo_fs::read(root, Path::new(rel), MAX_READ) {
        Ok(Some(bytes)) => bytes,
        Ok(None) | Err(Refusal::NotDir(_) | Refusal::NotFile(_)) => {
            return (FileView::Missing, b"missing".to_vec());
        }
        Err(Refusal::Symlink(_) | Refusal::Outside(_)) => {
            return (FileView::Link, b"link".to_vec());
        }
        Err(Refusal::TooLarge(_, _, size)) => {
            return (FileView::TooLarge, size.to_le_bytes().to_vec());
        }
        Err(Refusal::Io(..)) => return (FileView::Missing, b"unreadable".to_vec()),
    };
    (
        FileView::Text(String::from_utf8_lossy(&bytes).into_owned()),
        bytes,
    )
}

/// What a memory is checked against.
#[derive(Debug, Clone)]
pub struct Evidence {
    pub files: Vec<(String, FileView)>,
    /// Of everything the memory points at.
    pub hash: String,
}

/// The evidence for `m`, or `None` when it points at nothing checkable.
pub fn evidence(
    root: &Path,
    m: &LiveMemory,
    located: &BTreeMap<String, Vec<String>>,
) -> Option<Evidence> {
    let paths = path_words(&m.content);
    let syms = symbols(&m.content);
    let mut hasher = Sha256::new();
    let mut files: Vec<(String, FileView)> = Vec::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut any_path = false;
    for p in &paths {
        let (view, bytes) = read(root, p);
        if view == FileView::Missing && !p.contains('/') {
            // A bare name like `config.json` that is not at the top is not a pointer.
            continue;
        }
        any_path = true;
        hasher.update(p.as_bytes());
        hasher.update([0]);
        hasher.update(&bytes);
        hasher.update([0]);
        if seen.insert(p.clone()) {
            files.push((p.clone(), view));
        }
    }
    let mut any_symbol = false;
    for s in &syms {
        let Some(where_) = located.get(s) else {
            continue;
        };
        any_symbol = true;
        hasher.update(s.as_bytes());
        hasher.update([0]);
        for f in where_ {
            let (view, bytes) = read(root, f);
            hasher.update(f.as_bytes());
            hasher.update([0]);
            hasher.update(&bytes);
            hasher.update([0]);
            if seen.insert(f.clone()) {
                files.push((f.clone(), view));
            }
        }
    }
    if !any_path && !any_symbol {
        return None;
    }
    files.truncate(MAX_FILES);
    let hash = hasher
        .finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect();
    Some(Evidence { files, hash })
}

/// A file's excerpt: whole when short, else the lines around the memory's
/// symbols (or its start), secret-looking lines withheld.
fn excerpt(text: &str, symbols: &[String]) -> String {
    let text = secrets::redact_lines(text);
    if text.len() <= MAX_EXCERPT {
        return text;
    }
    let lines: Vec<&str> = text.lines().collect();
    let mut keep: BTreeSet<usize> = BTreeSet::new();
    for (i, line) in lines.iter().enumerate() {
        if symbols.iter().any(|s| line.contains(s.as_str())) && keep.len() < 120 {
            keep.extend(i.saturating_sub(10)..(i + 11).min(lines.len()));
        }
    }
    if keep.is_empty() {
        keep.extend(0..lines.len().min(80));
    }
    let mut out = String::new();
    let mut last: Option<usize> = None;
    for i in keep {
        if last.is_some_and(|l| l + 1 != i) {
            out.push_str("…\n");
        }
        if let Some(line) = lines.get(i) {
            out.push_str(&format!("{}: {line}\n", i + 1));
        }
        last = Some(i);
        if out.len() > MAX_EXCERPT {
            out.push_str("… (cut)\n");
            break;
        }
    }
    out
}

/// One memory with its evidence, as sent.
pub struct Check<'m> {
    pub memory: &'m LiveMemory,
    pub evidence: Evidence,
}

fn block(check: &Check<'_>) -> String {
    let m = check.memory;
    let syms = symbols(&m.content);
    let mut out = format!(
        "<check>\n<memory id=\"{}\" category=\"{}\">{}</memory>\n",
        m.id,
        m.category,
        escape(&m.content)
    );
    for (path, view) in &check.evidence.files {
        match view {
            FileView::Missing => out.push_str(&format!(
                "<file path=\"{}\" missing=\"true\"/>\n",
                escape(path)
            )),
            FileView::Withheld => out.push_str(&format!(
                "<file path=\"{}\" withheld=\"may hold secrets\"/>\n",
                escape(path)
            )),
            FileView::Link => out.push_str(&format!(
                "<file path=\"{}\" link=\"not followed\"/>\n",
                escape(path)
            )),
            FileView::TooLarge => out.push_str(&format!(
                "<file path=\"{}\" too_large=\"true\"/>\n",
                escape(path)
            )),
            FileView::Text(text) => out.push_str(&format!(
                "<file path=\"{}\">\n{}\n</file>\n",
                escape(path),
                escape(&excerpt(text, &syms))
            )),
        }
    }
    out.push_str("</check>\n");
    out
}

pub fn prompt(checks: &[&Check<'_>]) -> String {
    let mut out = String::from(
        "Task: verify. Each check below holds a memory that names files or code of this project, \
         and the current text of those files (a file marked missing no longer exists at that \
         path). For each memory answer:\n- verified: the code agrees with it, or does not \
         contradict it;\n- update: it is still useful but a detail is wrong or outdated: write \
         the corrected memory;\n- archive: the code shows it is no longer true and it cannot be \
         corrected: say why.\nWhen unsure, answer verified.\n\n",
    );
    for c in checks {
        out.push_str(&block(c));
    }
    out.push_str(
        "\nAnswer every memory exactly once with this manifest:\n<verify>\n<memory id=\"ID\" \
         verdict=\"verified\"/>\n<memory id=\"ID\" verdict=\"update\">corrected memory</memory>\n\
         <memory id=\"ID\" verdict=\"archive\">reason</memory>\n</verify>\n",
    );
    out
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Verified,
    Update(String),
    Archive(String),
}

pub fn parse(answer: &str, sent: &[i64]) -> Result<BTreeMap<i64, Verdict>, String> {
    let elements = manifest::parse(answer, "verify", &["memory"])?;
    manifest::per_memory(elements, sent, &["id", "verdict"], |id, el| {
        Ok(match el.required("verdict")?.trim() {
            "verified" => Verdict::Verified,
            "update" => {
                let text = el.text()?;
                store::check_memory_content(text).map_err(|e| e.to_string())?;
                if let Some(reason) = secrets::secret_reason(text) {
                    return Err(format!("memory #{id}'s update would hold {reason}"));
                }
                Verdict::Update(text.to_string())
            }
            "archive" => Verdict::Archive(
                el.text
                    .as_deref()
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .unwrap_or("no longer true")
                    .to_string(),
            ),
            other => {
                return Err(format!(
                    "memory #{id}'s verdict {other:?} is not verified, update or archive"
                ));
            }
        })
    })
}

pub fn run(run: &mut Run<'_, '_>) -> Result<Done, TaskFailure> {
    let project = run.project.clone();
    let Some(root) = run.root.clone() else {
        return Err(TaskFailure::new(
            FailureClass::Files,
            "no folder for this project",
        ));
    };
    let memories = live_memories(run.store.conn(), &project)?;
    let wanted: BTreeSet<String> = memories.iter().flat_map(|m| symbols(&m.content)).collect();
    let located = locate(&root, &wanted);
    let mut checks: Vec<Check<'_>> = Vec::new();
    let mut pointing = 0;
    for m in &memories {
        let Some(evidence) = evidence(&root, m, &located) else {
            continue;
        };
        pointing += 1;
        if m.verified_hash.as_deref() != Some(evidence.hash.as_str()) {
            checks.push(Check {
                memory: m,
                evidence,
            });
        }
    }
    let head = super::gitlog::head(&root);
    if checks.is_empty() {
        return Ok(Done {
            result: Outcome::Nothing,
            detail: json!({"memories": memories.len(), "pointing_at_code": pointing, "changed": 0}),
            head,
        });
    }
    let all: Vec<&Check<'_>> = checks.iter().collect();
    // An update rewrites the memory: its answer may be as long as the memory.
    let sent = run.fill(
        &all,
        block,
        |c| u64::from(mc_base::tokens::estimate(&c.memory.content)) + 20,
        prompt,
    );
    if sent.is_empty() {
        return Err(TaskFailure::new(
            FailureClass::Budget,
            "not one memory with its files fits dream.task_token_budget",
        )
        .hint("raise dream.task_token_budget in the user config"));
    }
    let ids: Vec<i64> = sent.iter().map(|c| c.memory.id).collect();
    let hashes: BTreeMap<i64, String> = sent
        .iter()
        .map(|c| (c.memory.id, c.evidence.hash.clone()))
        .collect();
    let answer = run.ask(&prompt(&sent))?;
    let verdicts = parse(&answer, &ids).map_err(TaskFailure::rejected)?;
    let now = run.now();
    let (mut verified, mut updated, mut archived) = (0, Vec::new(), Vec::new());
    run.apply(|tx| {
        for (id, verdict) in &verdicts {
            match verdict {
                Verdict::Verified => verified += 1,
                Verdict::Update(text) => {
                    let category: String = tx.query_row(
                        "SELECT category FROM memories WHERE id = ?1",
                        params![id],
                        |r| r.get(0),
                    )?;
                    match store::live_duplicate(tx, &project, &category, text)? {
                        Some(other) if other != *id => {
                            let reason = format!("verify: now says what #{other} says");
                            memory::archive_in(tx, &project, *id, Some(&reason), now)?;
                            archived.push(*id);
                        }
                        _ => {
                            memory::update_in(tx, &project, *id, text, now)?;
                            updated.push(*id);
                        }
                    }
                }
                Verdict::Archive(reason) => {
                    memory::archive_in(tx, &project, *id, Some(&format!("verify: {reason}")), now)?;
                    archived.push(*id);
                }
            }
            let hash = hashes.get(id).map(String::as_str).unwrap_or_default();
            tx.execute(
                "UPDATE memories SET verified_ms = ?2, verified_hash = ?3 WHERE id = ?1",
                params![id, now, hash],
            )?;
        }
        Ok(())
    })?;
    let changed = !updated.is_empty() || !archived.is_empty();
    Ok(Done {
        result: Outcome::of_change(changed),
        detail: json!({
            "memories": memories.len(),
            "pointing_at_code": pointing,
            "changed": checks.len(),
            "sent": sent.len(),
            "verified": verified,
            "updated": updated,
            "archived": archived,
        }),
        head,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_are_paths_and_shaped_code_spans() {
        assert_eq!(
            path_words(
                "Migrations live in shared/src/store/migrations/ and Cargo.toml, see ./src/lib.rs: and https://x.io/a.rs or /etc/passwd or ../up.rs."
            ),
            ["Cargo.toml", "src/lib.rs"]
        );
        assert_eq!(
            path_words("Use snake_case/kebab-case names."),
            ["snake_case/kebab-case"]
        );
        assert_eq!(
            symbols(
                "Call `Store::open` or `project_identity()`; `transform.cache_ttl` is 5m; `cargo` and `x` and `a b` are not."
            ),
            ["Store::open", "project_identity", "transform.cache_ttl"]
        );
        assert_eq!(symbols("`HistorianConfig` `Tokens`"), ["HistorianConfig"]);
    }

    /// A file a memory names is read only inside the repository: through a
    /// link (out, or up through `..`) it is not read, only marked a link.
    #[cfg(unix)]
    #[test]
    fn named_files_are_not_read_through_links() {
        use std::os::unix::fs::symlink;
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(repo.join("src")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(repo.join("src/lib.rs"), "pub fn open() {}").unwrap();
        std::fs::write(outside.join("notes.md"), "outside text").unwrap();
        symlink(&outside, repo.join("docs")).unwrap();
        symlink("../outside/notes.md", repo.join("src/notes.md")).unwrap();
        assert_eq!(
            read(&repo, "src/lib.rs").0,
            FileView::Text("pub fn open() {}".into())
        );
        assert_eq!(read(&repo, "docs/notes.md").0, FileView::Link);
        assert_eq!(read(&repo, "src/notes.md").0, FileView::Link);
        assert_eq!(read(&repo, "src/gone.rs").0, FileView::Missing);
    }

    #[test]
    fn secret_files_are_never_read() {
        for p in [
            ".env",
            "config/.env.local",
            "id_rsa",
            "deploy/server.pem",
            "credentials.json",
            ".npmrc",
        ] {
            assert!(withheld(p), "{p}");
        }
        for p in ["src/env.rs", "Cargo.toml", "keys.rs"] {
            assert!(!withheld(p), "{p}");
        }
    }
}

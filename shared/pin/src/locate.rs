//! Finding a session's transcript, and the current session of a folder, where
//! the harness keeps them, so a user can pin from inside the session
//! (`!mc-pin pin --last user` in Claude Code) without naming either.
//!
//! - Claude Code: `<config>/projects/<folder>/<session>.jsonl`, `<config>`
//!   being `$CLAUDE_CONFIG_DIR` or `~/.claude`, `<folder>` the working
//!   directory with every character but ASCII letters and digits replaced by
//!   `-` (a name longer than 200 characters is cut there and given a hash,
//!   so its folder is found by its first 200 characters).
//! - Codex: `<home>/sessions/YYYY/MM/DD/rollout-<time>-<session>.jsonl`,
//!   `<home>` being `$CODEX_HOME` or `~/.codex`; the rollout's first line
//!   names its working directory.
//!
//! The folders come in as values (the binary reads the environment).

use std::path::{Path, PathBuf};

use super::Harness;

/// Where the harnesses keep their sessions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Homes {
    /// `$CLAUDE_CONFIG_DIR`, else `~/.claude`.
    pub claude: Option<PathBuf>,
    /// `$CODEX_HOME`, else `~/.codex`.
    pub codex: Option<PathBuf>,
}

/// The longest project folder name Claude Code writes whole.
const CLAUDE_NAME_MAX: usize = 200;

/// Claude Code's name for the transcript folder of `cwd`.
pub fn claude_folder_name(cwd: &str) -> String {
    cwd.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// The project folders of `cwd` under `<config>/projects`.
fn claude_project_dirs(config: &Path, cwd: &Path) -> Vec<PathBuf> {
    let projects = config.join("projects");
    let mut names = vec![claude_folder_name(&cwd.display().to_string())];
    if let Ok(real) = std::fs::canonicalize(cwd) {
        let name = claude_folder_name(&real.display().to_string());
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let mut dirs = Vec::new();
    for name in names {
        if name.chars().count() <= CLAUDE_NAME_MAX {
            let dir = projects.join(&name);
            if dir.is_dir() && !dirs.contains(&dir) {
                dirs.push(dir);
            }
            continue;
        }
        let prefix: String = name.chars().take(CLAUDE_NAME_MAX).collect::<String>() + "-";
        for entry in std::fs::read_dir(&projects).into_iter().flatten().flatten() {
            let dir = entry.path();
            let matches = entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix));
            if matches && dir.is_dir() && !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
    }
    dirs
}

/// A session id as it may appear in a file name: no path separators, no dots.
fn plain(session: &str) -> bool {
    !session.is_empty()
        && session
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The transcript of a Claude Code session: in `cwd`'s folder when given,
/// else in any project folder.
pub fn claude_transcript(config: &Path, session: &str, cwd: Option<&Path>) -> Option<PathBuf> {
    if !plain(session) {
        return None;
    }
    let file = format!("{session}.jsonl");
    let mut dirs = cwd
        .map(|c| claude_project_dirs(config, c))
        .unwrap_or_default();
    for entry in std::fs::read_dir(config.join("projects"))
        .into_iter()
        .flatten()
        .flatten()
    {
        if !dirs.contains(&entry.path()) {
            dirs.push(entry.path());
        }
    }
    dirs.into_iter()
        .map(|d| d.join(&file))
        .find(|p| p.is_file())
}

/// The newest file (by modification time, then name) among `files`.
fn newest(files: impl Iterator<Item = PathBuf>) -> Option<PathBuf> {
    files
        .filter_map(|p| {
            let modified = std::fs::metadata(&p).and_then(|m| m.modified()).ok()?;
            Some((modified, p))
        })
        .max()
        .map(|(_, p)| p)
}

/// The most recently written Claude Code session of `cwd`: (id, transcript).
pub fn claude_newest(config: &Path, cwd: &Path) -> Option<(String, PathBuf)> {
    let files = claude_project_dirs(config, cwd)
        .into_iter()
        .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl") && p.is_file());
    let path = newest(files)?;
    let id = path.file_stem()?.to_str()?.to_string();
    Some((id, path))
}

/// Every rollout file under `<home>/sessions` (three levels of dated folders).
fn codex_rollouts(home: &Path) -> impl Iterator<Item = PathBuf> {
    let level = |dir: PathBuf| {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
    };
    level(home.join("sessions"))
        .filter(|p| p.is_dir())
        .flat_map(level)
        .filter(|p| p.is_dir())
        .flat_map(level)
        .filter(|p| p.is_dir())
        .flat_map(level)
        .filter(|p| {
            p.is_file()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("rollout-") && n.ends_with(".jsonl"))
        })
}

/// The rollout of a Codex session.
pub fn codex_rollout(home: &Path, session: &str) -> Option<PathBuf> {
    if !plain(session) {
        return None;
    }
    let suffix = format!("-{session}.jsonl");
    codex_rollouts(home).find(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(&suffix))
    })
}

/// The working directory a rollout's first line names.
fn rollout_cwd(path: &Path) -> Option<String> {
    use std::io::{BufRead, BufReader, Read};
    let file = std::fs::File::open(path).ok()?;
    let mut line = String::new();
    // The first line holds the instructions too: read at most 4 MiB of it.
    BufReader::new(file.take(4 << 20))
        .read_line(&mut line)
        .ok()?;
    let value: serde_json::Value = serde_json::from_str(&line).ok()?;
    value
        .pointer("/payload/cwd")
        .and_then(|c| c.as_str())
        .map(str::to_string)
}

/// The most recently written Codex session whose working directory is `cwd`.
pub fn codex_newest(home: &Path, cwd: &Path) -> Option<(String, PathBuf)> {
    let wanted: Vec<String> = [Some(cwd.to_path_buf()), std::fs::canonicalize(cwd).ok()]
        .into_iter()
        .flatten()
        .map(|p| p.display().to_string())
        .collect();
    let path = newest(
        codex_rollouts(home).filter(|p| rollout_cwd(p).is_some_and(|c| wanted.contains(&c))),
    )?;
    Some((rollout_session(&path)?, path))
}

/// The most recently written Codex session, wherever it ran.
pub fn codex_newest_anywhere(home: &Path) -> Option<(String, PathBuf)> {
    let path = newest(codex_rollouts(home))?;
    Some((rollout_session(&path)?, path))
}

/// The session a rollout file is named by: `rollout-<time>-<uuid>.jsonl`,
/// the uuid the last five dash-separated groups.
fn rollout_session(path: &Path) -> Option<String> {
    let name = path.file_stem()?.to_str()?;
    let groups: Vec<&str> = name.rsplitn(6, '-').collect();
    Some(
        groups
            .get(..5)?
            .iter()
            .rev()
            .copied()
            .collect::<Vec<_>>()
            .join("-"),
    )
}

/// The transcript of `session` for `harness`, where the harness keeps it.
pub fn transcript(
    homes: &Homes,
    harness: Harness,
    session: &str,
    cwd: Option<&Path>,
) -> Option<PathBuf> {
    match harness {
        Harness::ClaudeCode => claude_transcript(homes.claude.as_deref()?, session, cwd),
        Harness::Codex => codex_rollout(homes.codex.as_deref()?, session),
        // Pi's extension names the session file itself.
        Harness::OpenCode | Harness::Pi => None,
    }
}

/// The most recently written session of `harness` in `cwd`: (id, transcript).
pub fn newest_session(homes: &Homes, harness: Harness, cwd: &Path) -> Option<(String, PathBuf)> {
    match harness {
        Harness::ClaudeCode => claude_newest(homes.claude.as_deref()?, cwd),
        Harness::Codex => codex_newest(homes.codex.as_deref()?, cwd),
        Harness::OpenCode | Harness::Pi => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_names_its_folders_after_the_working_directory() {
        assert_eq!(claude_folder_name("/home/dev/shop"), "-home-dev-shop");
        assert_eq!(claude_folder_name("/home/dév/my repo"), "-home-d-v-my-repo");
    }

    #[test]
    fn transcripts_are_found_by_session_and_by_folder() {
        let home = tempfile::tempdir().unwrap();
        let cwd = tempfile::tempdir().unwrap();
        let config = home.path().join(".claude");
        let folder = config
            .join("projects")
            .join(claude_folder_name(&cwd.path().display().to_string()));
        std::fs::create_dir_all(&folder).unwrap();
        let old = folder.join("11111111-aaaa-4bbb-8ccc-000000000001.jsonl");
        let new = folder.join("11111111-aaaa-4bbb-8ccc-000000000002.jsonl");
        std::fs::write(&old, "{}\n").unwrap();
        std::fs::write(&new, "{}\n").unwrap();
        let past = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        std::fs::File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(past)
            .unwrap();
        let homes = Homes {
            claude: Some(config.clone()),
            codex: Some(home.path().join(".codex")),
        };
        assert_eq!(
            transcript(
                &homes,
                Harness::ClaudeCode,
                "11111111-aaaa-4bbb-8ccc-000000000001",
                None
            ),
            Some(old.clone())
        );
        assert_eq!(
            newest_session(&homes, Harness::ClaudeCode, cwd.path()),
            Some(("11111111-aaaa-4bbb-8ccc-000000000002".into(), new))
        );
        assert_eq!(transcript(&homes, Harness::ClaudeCode, "../x", None), None);

        let day = home.path().join(".codex/sessions/2026/12/01");
        std::fs::create_dir_all(&day).unwrap();
        let id = "01a22fec-152e-7b93-ab35-a37faec58297";
        let rollout = day.join(format!("rollout-2026-12-01T04-45-30-{id}.jsonl"));
        let meta = serde_json::json!({"type": "session_meta", "payload": {"id": id,
                                      "cwd": cwd.path().display().to_string()}});
        std::fs::write(&rollout, format!("{meta}\n")).unwrap();
        assert_eq!(
            transcript(&homes, Harness::Codex, id, None),
            Some(rollout.clone())
        );
        assert_eq!(
            newest_session(&homes, Harness::Codex, cwd.path()),
            Some((id.to_string(), rollout))
        );
        assert_eq!(newest_session(&homes, Harness::Codex, home.path()), None);
    }
}

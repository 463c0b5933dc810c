//! Project identity: the key that scopes memories to a project.
//!
//! Inside a git work tree with at least one commit the identity is
//! `git:<sha of the root commit>`, so every clone and worktree of a repository,
//! wherever it lives on disk, maps to the same project. Anywhere else it is
//! `dir:<first 12 hex digits of the SHA-256 of the canonical path>`.
//!
//! Known limits of the git form: a shallow clone reports its shallow boundary as
//! the root (so it differs from a full clone until it is unshallowed), and a
//! repository git refuses to open (for example one owned by another user, see
//! `safe.directory`) falls back to the `dir:` form.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

/// Environment variables that would make `git -C <dir>` read some other
/// repository or a rewritten history instead of the one `dir` is in. They leak
/// in when mc runs from a git hook or a tool that exports them.
const GIT_ENV_TO_CLEAR: [&str; 7] = [
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_GRAFT_FILE",
];

/// The project identity of `dir`: `git:<root commit>` or `dir:<path hash>`.
///
/// Never fails: if git is missing, fails, or finds no commit, the `dir:` form is
/// returned. When a history has several root commits (merged unrelated
/// histories) the lexicographically smallest sha is used, so the answer does
/// not depend on the order git lists them in.
pub fn project_identity(dir: &Path) -> String {
    match git_root_commit(dir) {
        Some(sha) => format!("git:{sha}"),
        None => dir_identity(dir),
    }
}

/// The smallest root commit of `HEAD` in the repository containing `dir`.
fn git_root_commit(dir: &Path) -> Option<String> {
    let out = git_command(dir).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let stdout = String::from_utf8(out.stdout).ok()?;
    stdout
        .lines()
        .map(str::trim)
        .filter(|l| is_object_id(l))
        .min()
        .map(str::to_owned)
}

/// `git -C <dir> rev-list --max-parents=0 HEAD`, isolated from the caller's
/// terminal and from variables that would redirect it (see `GIT_ENV_TO_CLEAR`).
fn git_command(dir: &Path) -> Command {
    let mut cmd = git(dir);
    cmd.args(["rev-list", "--max-parents=0", "HEAD"]);
    cmd
}

/// `git -C <dir>` with no stdin, stdout piped, stderr dropped, and none of
/// the variables that would make it read another repository. Replace refs
/// are ignored (`GIT_NO_REPLACE_OBJECTS`) because they are local to a clone
/// and can graft a different history on.
pub fn git(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("-C")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for var in GIT_ENV_TO_CLEAR {
        cmd.env_remove(var);
    }
    cmd.env("GIT_NO_REPLACE_OBJECTS", "1");
    cmd
}

/// A full SHA-1 or SHA-256 object name in lower-case hex.
pub fn is_object_id(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// `dir:` and the first 12 hex digits of the SHA-256 of the canonical path, or of
/// the path as given when it cannot be canonicalized (e.g. it does not exist).
fn dir_identity(dir: &Path) -> String {
    let canonical = dir.canonicalize();
    let path = canonical.as_deref().unwrap_or(dir);
    let digest = Sha256::digest(path_bytes(path));
    let mut out = String::from("dir:");
    for b in digest.iter().take(6) {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// The bytes of a path: its raw bytes on Unix, UTF-8 (lossy) elsewhere.
#[cfg(unix)]
fn path_bytes(path: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    path.as_os_str().as_bytes().to_vec()
}

#[cfg(not(unix))]
fn path_bytes(path: &Path) -> Vec<u8> {
    path.to_string_lossy().into_owned().into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::fs;

    /// Runs git in `dir` isolated from the user's configuration and environment,
    /// with fixed dates so commits are reproducible; returns stdout.
    fn git(dir: &Path, args: &[&str]) -> String {
        let mut cmd = Command::new("git");
        cmd.arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args([
                "-c",
                "init.defaultBranch=main",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_DATE", "2025-01-01T00:00:00Z")
            .env("GIT_COMMITTER_DATE", "2025-01-01T00:00:00Z");
        for var in GIT_ENV_TO_CLEAR {
            cmd.env_remove(var);
        }
        let out = cmd.output().expect("run git");
        assert!(
            out.status.success(),
            "git {args:?} failed in {}",
            dir.display()
        );
        String::from_utf8(out.stdout).expect("utf-8 from git")
    }

    fn git_available() -> bool {
        Command::new("git")
            .arg("--version")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// A repository in `dir` with one empty root commit.
    fn repo_with_root(dir: &Path) {
        git(dir, &["init", "-q"]);
        git(dir, &["commit", "-q", "--allow-empty", "-m", "root"]);
    }

    fn roots(dir: &Path) -> Vec<String> {
        git(dir, &["rev-list", "--max-parents=0", "HEAD"])
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn assert_dir_form(id: &str) {
        let hex = id
            .strip_prefix("dir:")
            .unwrap_or_else(|| panic!("not a dir identity: {id}"));
        assert_eq!(hex.len(), 12, "{id}");
        assert!(
            hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
            "{id}"
        );
    }

    fn inside_git_work_tree(dir: &Path) -> bool {
        Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["rev-parse", "--is-inside-work-tree"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    #[test]
    fn plain_directory_gets_a_stable_dir_identity() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(
            !git_available() || !inside_git_work_tree(tmp.path()),
            "the temporary directory is inside a git work tree; point TMPDIR elsewhere"
        );
        let sub = tmp.path().join("project");
        fs::create_dir(&sub).unwrap();
        fs::create_dir(sub.join("nested")).unwrap();

        let id = project_identity(&sub);
        assert_dir_form(&id);
        assert_eq!(project_identity(&sub), id, "stable across calls");
        assert_eq!(
            project_identity(&sub.join("nested").join("..")),
            id,
            "spelled with .."
        );
        assert_eq!(project_identity(&sub.join(".")), id, "spelled with .");
        assert_ne!(
            project_identity(&sub.join("nested")),
            id,
            "another directory"
        );

        let digest = Sha256::digest(path_bytes(&sub.canonicalize().unwrap()));
        let want: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(id, format!("dir:{want}"));
    }

    #[test]
    fn missing_path_hashes_the_path_as_given() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("does-not-exist");
        let id = project_identity(&missing);
        assert_dir_form(&id);
        let digest = Sha256::digest(path_bytes(&missing));
        let want: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(id, format!("dir:{want}"));
        assert_eq!(project_identity(&missing), id);
    }

    #[test]
    fn git_repository_is_identified_by_its_root_commit() {
        if !git_available() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        fs::create_dir(&repo).unwrap();
        repo_with_root(&repo);
        git(&repo, &["commit", "-q", "--allow-empty", "-m", "second"]);

        let root = roots(&repo);
        assert_eq!(root.len(), 1);
        let id = project_identity(&repo);
        assert_eq!(id, format!("git:{}", root[0]));
        assert!(is_object_id(&root[0]));

        let deep = repo.join("src").join("deep");
        fs::create_dir_all(&deep).unwrap();
        assert_eq!(project_identity(&deep), id, "from a subdirectory");

        // Another repository built the same way has the same root commit: the
        // identity follows the history, not the location.
        let twin = tmp.path().join("twin");
        fs::create_dir(&twin).unwrap();
        repo_with_root(&twin);
        assert_eq!(project_identity(&twin), id);
    }

    #[test]
    fn several_roots_pick_the_smallest_sha() {
        if !git_available() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path();
        repo_with_root(repo);
        git(repo, &["checkout", "-q", "--orphan", "other"]);
        git(
            repo,
            &["commit", "-q", "--allow-empty", "-m", "another root"],
        );
        git(repo, &["checkout", "-q", "main"]);
        git(
            repo,
            &[
                "merge",
                "-q",
                "--allow-unrelated-histories",
                "-m",
                "merge",
                "other",
            ],
        );

        let mut root = roots(repo);
        assert_eq!(root.len(), 2);
        root.sort();
        assert_eq!(project_identity(repo), format!("git:{}", root[0]));
    }

    #[test]
    fn repository_without_commits_gets_the_dir_form() {
        if !git_available() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        git(tmp.path(), &["init", "-q"]);
        let id = project_identity(tmp.path());
        assert_dir_form(&id);
        assert_eq!(id, dir_identity(tmp.path()));
    }

    #[test]
    fn git_runs_detached_from_redirecting_environment() {
        let cmd = git_command(Path::new("some/dir"));
        let envs: Vec<(&OsStr, Option<&OsStr>)> = cmd.get_envs().collect();
        for var in GIT_ENV_TO_CLEAR {
            assert!(
                envs.contains(&(OsStr::new(var), None)),
                "{var} is not cleared"
            );
        }
        assert!(envs.contains(&(OsStr::new("GIT_NO_REPLACE_OBJECTS"), Some(OsStr::new("1")))));
        let args: Vec<&OsStr> = cmd.get_args().collect();
        assert_eq!(
            args,
            ["-C", "some/dir", "rev-list", "--max-parents=0", "HEAD"]
        );
    }

    #[test]
    fn object_ids_are_validated() {
        assert!(is_object_id(&"a".repeat(40)));
        assert!(is_object_id(&"0".repeat(64)));
        assert!(!is_object_id(&"A".repeat(40)));
        assert!(!is_object_id("deadbeef"));
        assert!(!is_object_id(&"g".repeat(40)));
    }
}

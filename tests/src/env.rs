//! [`TestEnv`]: the sealed environment every process test runs mc's binaries in.
//!
//! A process a test starts sees none of the developer's environment: the
//! variables are cleared and only [`ALLOWED`] come through (what finding
//! programs needs, never `HOME`, `XDG_*`, `MC_*`, proxies or API keys). `HOME`
//! and the four XDG base folders point into a temp folder that goes away with
//! the `TestEnv`, and `MC_NOW_MS` fixes the clock of commands whose input
//! carries no time. So a personal `~/.config/mc/config.jsonc`, a stray
//! `MC_DB` or an `HTTPS_PROXY` cannot change what a test sees.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::{bin_path, pipe, pipe_within};

/// The variables a sealed process inherits from the test process, when set:
/// `PATH` (tests run `sh`, `python3`, `mkfifo`, `script`, OpenCode finds
/// `node` and `rg`), `TMPDIR` (where temporary files go on this machine) and
/// `LLVM_PROFILE_FILE` (coverage runs collect the children's profiles).
pub const ALLOWED: &[&str] = &["PATH", "TMPDIR", "LLVM_PROFILE_FILE"];

/// Clear `command`'s environment but for [`ALLOWED`].
pub fn seal(command: &mut Command) -> &mut Command {
    command.env_clear();
    for name in ALLOWED {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command
}

/// [`seal`], then `home` as `HOME` with the four XDG folders under it
/// (`.config`, `.local/share`, `.cache`, `.local/state`): the layout every
/// real-harness runner gives the harness and what it starts.
pub fn seal_at_home<'a>(command: &'a mut Command, home: &Path) -> &'a mut Command {
    seal(command)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
}

/// A temp folder with a home, XDG folders, a database path and a fixed clock,
/// and the commands that run in it.
///
/// Layout under [`TestEnv::root`] (also every command's working directory):
/// `home/` (`HOME`), `home/.config` (`XDG_CONFIG_HOME`), `home/.local/share`
/// (`XDG_DATA_HOME`), `home/.cache` (`XDG_CACHE_HOME`), `home/.local/state`
/// (`XDG_STATE_HOME`), and `ctx.db`, the database [`TestEnv::db_command`] names.
pub struct TestEnv {
    dir: tempfile::TempDir,
    vars: Vec<(OsString, OsString)>,
}

impl Default for TestEnv {
    fn default() -> Self {
        TestEnv::new()
    }
}

impl TestEnv {
    /// The fixed clock every command sees through `MC_NOW_MS` (2026-12-01
    /// 04:40 UTC). Only commands whose input carries no time read it: an
    /// envelope's `now_ms` (which most fixtures set) wins.
    pub const NOW_MS: i64 = 1_796_100_000_000;

    pub fn new() -> TestEnv {
        let env = TestEnv {
            dir: tempfile::tempdir().expect("a temp folder"),
            vars: Vec::new(),
        };
        for dir in [
            env.home(),
            env.config_home(),
            env.data_home(),
            env.cache_home(),
            env.state_home(),
        ] {
            std::fs::create_dir_all(&dir)
                .unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        }
        env
    }

    /// Set `name` for every command (after the defaults, so it may replace one).
    pub fn with_var(mut self, name: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> TestEnv {
        self.vars
            .push((name.as_ref().to_os_string(), value.as_ref().to_os_string()));
        self
    }

    /// Commands read `now_ms` as this clock instead of [`TestEnv::NOW_MS`].
    pub fn with_now(self, now_ms: i64) -> TestEnv {
        self.with_var("MC_NOW_MS", now_ms.to_string())
    }

    /// The temp folder: every command's working directory.
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// `name` inside [`TestEnv::root`].
    pub fn path(&self, name: impl AsRef<Path>) -> PathBuf {
        self.root().join(name)
    }

    pub fn home(&self) -> PathBuf {
        self.path("home")
    }

    pub fn config_home(&self) -> PathBuf {
        self.home().join(".config")
    }

    pub fn data_home(&self) -> PathBuf {
        self.home().join(".local").join("share")
    }

    pub fn cache_home(&self) -> PathBuf {
        self.home().join(".cache")
    }

    pub fn state_home(&self) -> PathBuf {
        self.home().join(".local").join("state")
    }

    /// The database [`TestEnv::db_command`] passes as `--db`.
    pub fn db(&self) -> PathBuf {
        self.path("ctx.db")
    }

    /// Where mc reads the user config: `$XDG_CONFIG_HOME/mc/config.jsonc`.
    pub fn user_config_path(&self) -> PathBuf {
        self.config_home().join("mc").join("config.jsonc")
    }

    /// Write the user config (JSONC text).
    pub fn user_config(&self, text: &str) {
        write(&self.user_config_path(), text);
    }

    /// Write the project config of the folder `project` (`<project>/.mc/config.jsonc`).
    pub fn project_config(&self, project: &Path, text: &str) {
        write(&project.join(".mc").join("config.jsonc"), text);
    }

    /// Any program (found on the allowed `PATH`) in this environment.
    /// `git -C dir …` sealed like every process here, with a fixed author
    /// and author/committer `date` (RFC 3339) and no signing; fails the test
    /// when git does, and gives its stdout.
    pub fn git_at(&self, dir: &Path, date: &str, args: &[&str]) -> String {
        let out = self
            .program("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=Ada", "-c", "user.email=ada@example.com"])
            .args([
                "-c",
                "commit.gpgsign=false",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .env("GIT_AUTHOR_DATE", date)
            .env("GIT_COMMITTER_DATE", date)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn program(&self, program: impl AsRef<OsStr>) -> Command {
        let mut command = Command::new(program);
        seal(&mut command)
            .env("HOME", self.home())
            .env("XDG_CONFIG_HOME", self.config_home())
            .env("XDG_DATA_HOME", self.data_home())
            .env("XDG_CACHE_HOME", self.cache_home())
            .env("XDG_STATE_HOME", self.state_home())
            .env("MC_NOW_MS", TestEnv::NOW_MS.to_string())
            .current_dir(self.root());
        for (name, value) in &self.vars {
            command.env(name, value);
        }
        command
    }

    /// The workspace binary `bin` (e.g. `"mc-transform"`) with `args`.
    pub fn command(&self, bin: &str, args: &[&str]) -> Command {
        let mut command = self.program(bin_path(bin));
        command.args(args);
        command
    }

    /// [`TestEnv::command`] with `--db` [`TestEnv::db`] before `args`.
    pub fn db_command(&self, bin: &str, args: &[&str]) -> Command {
        let mut command = self.program(bin_path(bin));
        command.arg("--db").arg(self.db()).args(args);
        command
    }

    /// Run `bin args` with `stdin` through [`pipe`] (no deadlock on large input).
    pub fn run(&self, bin: &str, args: &[&str], stdin: &str) -> Output {
        run(&mut self.command(bin, args), stdin.as_bytes())
    }

    /// Run `bin --db <db> args` with `stdin` through [`pipe`].
    pub fn run_db(&self, bin: &str, args: &[&str], stdin: &str) -> Output {
        run(&mut self.db_command(bin, args), stdin.as_bytes())
    }

    /// [`TestEnv::run_db`] with a liveness guard: a process still running
    /// after `limit` is killed and the test fails (it would otherwise hang).
    pub fn run_db_within(&self, bin: &str, args: &[&str], stdin: &str, limit: Duration) -> Output {
        pipe_within(&mut self.db_command(bin, args), stdin.as_bytes(), limit)
            .unwrap_or_else(|e| panic!("running {bin}: {e}"))
            .unwrap_or_else(|| panic!("{bin} {args:?} was still running after {limit:?}"))
    }

    /// Hold an exclusive lock on the database at `path` from another process,
    /// as a sibling mc process in a long write would, for 30 s; the lock goes
    /// when the holder drops. (In WAL mode readers still get in.)
    pub fn lock_database(&self, path: &Path) -> LockHolder {
        // python3's sqlite3 module is on every machine the tests run on.
        lock_database_with(self.program("python3"), path)
    }
}

/// [`TestEnv::lock_database`] with a `python3` command of the caller's
/// (a test that runs a harness outside the sealed environment).
pub fn lock_database_with(mut python: Command, path: &Path) -> LockHolder {
    let mut child = python
        .arg("-c")
        .arg(
            "import sqlite3,sys,time\n\
             c=sqlite3.connect(sys.argv[1],isolation_level=None)\n\
             c.execute('BEGIN EXCLUSIVE')\n\
             print('locked',flush=True)\n\
             time.sleep(30)",
        )
        .arg(path)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "locked");
    LockHolder(child)
}

/// The process [`TestEnv::lock_database`] started; killed when dropped.
pub struct LockHolder(std::process::Child);

impl LockHolder {
    /// Still running (and so still holding what it holds).
    pub fn holding(&mut self) -> bool {
        self.0.try_wait().expect("the holder's status").is_none()
    }
}

impl Drop for LockHolder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run(command: &mut Command, stdin: &[u8]) -> Output {
    pipe(command, stdin).unwrap_or_else(|e| panic!("running {command:?}: {e}"))
}

fn write(path: &Path, text: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .unwrap_or_else(|e| panic!("creating {}: {e}", parent.display()));
    }
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_sealed_process_sees_only_the_allowlist_and_its_own_folders() {
        let env = TestEnv::new().with_var("MC_TEST_EXTRA", "1");
        let out = pipe(env.program("sh").args(["-c", "env"]), b"").unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        let mut names: Vec<&str> = text
            .lines()
            .filter_map(|line| line.split_once('=').map(|(name, _)| name))
            // The shell sets these itself.
            .filter(|name| !["PWD", "SHLVL", "_", "OLDPWD"].contains(name))
            .collect();
        names.sort_unstable();
        let mut expected: Vec<&str> = ALLOWED
            .iter()
            .copied()
            .filter(|name| std::env::var_os(name).is_some())
            .chain([
                "HOME",
                "MC_NOW_MS",
                "MC_TEST_EXTRA",
                "XDG_CACHE_HOME",
                "XDG_CONFIG_HOME",
                "XDG_DATA_HOME",
                "XDG_STATE_HOME",
            ])
            .collect();
        expected.sort_unstable();
        assert_eq!(names, expected, "{text}");
        let home = format!("HOME={}", env.home().display());
        assert!(text.lines().any(|line| line == home), "{text}");
        assert!(
            text.lines()
                .any(|line| line == format!("MC_NOW_MS={}", TestEnv::NOW_MS)),
            "{text}"
        );
        for dir in [env.config_home(), env.data_home(), env.state_home()] {
            assert!(dir.is_dir(), "{}", dir.display());
        }
    }

    #[test]
    fn later_variables_replace_the_defaults() {
        let env = TestEnv::new().with_now(7);
        let command = env.program("true");
        let now: Vec<_> = command
            .get_envs()
            .filter(|(name, _)| *name == "MC_NOW_MS")
            .collect();
        // `Command` keeps the last value set for a name.
        assert_eq!(now, [(OsStr::new("MC_NOW_MS"), Some(OsStr::new("7")))]);
    }
}

//! mc-doctor: checks (PASS/WARN/FAIL with the fix), `setup` (wiring each
//! harness, idempotent and undoable), `--fix`, `migrate` (schema, old config
//! keys, an import from Magic Context) and the redacted `--issue` report.
//!
//! Everything the doctor knows about the process (home, PATH, variables,
//! the database and config paths, the clock) comes in as an [`Env`] the
//! binary builds; this module reads and writes files and runs programs
//! (`--version`, probes), but never looks at the environment itself.

// The I/O rule, enforced: no printing here (and `shared/clippy.toml` refuses the
// environment, stdin/stdout and ureq's environment-reading defaults).
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]
// Nothing reachable from outside input may panic: no expect, no indexing or
// slicing that can go out of range; the few proven invariants carry an
// `allow` with the reason on the smallest item.
#![cfg_attr(
    not(test),
    deny(clippy::expect_used, clippy::indexing_slicing, clippy::string_slice)
)]

pub mod checks;
pub mod claude_gateway;
pub mod codex_gateway;
pub mod edit;
pub mod harness;
pub mod indexes;
pub mod issue;
pub mod magic_context;
pub mod migrate;
pub mod redact;
pub mod setup;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Serialize;

use mc_base::config::Layer;

/// What the doctor knows about the process it runs for.
#[derive(Debug, Clone, Default)]
pub struct Env {
    pub home: PathBuf,
    /// `XDG_CONFIG_HOME` when set and absolute.
    pub xdg_config_home: Option<PathBuf>,
    /// `XDG_DATA_HOME` when set and absolute.
    pub xdg_data_home: Option<PathBuf>,
    /// Where local embedding models are kept (`$XDG_CACHE_HOME/mc/models`).
    pub models_dir: Option<PathBuf>,
    /// `PATH`.
    pub path: OsString,
    /// The process's variables (harness folders such as `CLAUDE_CONFIG_DIR`,
    /// the key variables providers name). Only read, never printed.
    pub vars: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    /// The doctor's own version (every mc binary must report the same).
    pub version: String,
    /// The database file.
    pub db: PathBuf,
    /// The config layers, lowest first.
    pub layers: Vec<Layer>,
    pub now_ms: i64,
}

impl Env {
    /// `$XDG_CONFIG_HOME`, else `~/.config`.
    pub fn config_home(&self) -> PathBuf {
        self.xdg_config_home
            .clone()
            .unwrap_or_else(|| self.home.join(".config"))
    }

    /// `$XDG_DATA_HOME`, else `~/.local/share`.
    pub fn data_home(&self) -> PathBuf {
        self.xdg_data_home
            .clone()
            .unwrap_or_else(|| self.home.join(".local").join("share"))
    }

    /// mc's user config file.
    pub fn user_config(&self) -> PathBuf {
        self.config_home().join("mc").join("config.jsonc")
    }

    /// A variable's value, when set and not empty.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    pub fn var_path(&self, name: &str) -> Option<PathBuf> {
        self.var(name).map(PathBuf::from)
    }

    /// The first executable `name` on `PATH`.
    pub fn which(&self, name: &str) -> Option<PathBuf> {
        std::env::split_paths(&self.path)
            .filter(|dir| !dir.as_os_str().is_empty())
            .map(|dir| dir.join(name))
            .find(|candidate| is_executable(candidate))
    }

    /// `path` with the home folder written `~`.
    pub fn tilde(&self, path: &Path) -> String {
        match path.strip_prefix(&self.home) {
            Ok(rest) if !self.home.as_os_str().is_empty() => {
                format!("~/{}", rest.display())
            }
            _ => path.display().to_string(),
        }
    }
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(path: &Path) -> bool {
    path.is_file()
}

/// A check's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Warn,
    Fail,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        }
    }
}

/// What `--fix` can do about a check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Repair {
    /// Write the harness's missing or stale pieces, as setup would.
    Harness { harness: harness::HarnessId },
    /// Back the database up, then run its pending migrations.
    Migrate,
    /// Add the `mc-dream tick` line to the crontab (`mc-dream cron --install`).
    Cron,
    /// Build every search index again from its rows (`mc-search index --rebuild`).
    RebuildIndexes,
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Stable name (`binary.mc-pin`, `db.integrity`, `opencode.plugin`, …).
    pub id: String,
    pub status: Status,
    /// What was found, one line.
    pub what: String,
    /// What to do about it, when there is something to do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// What `--fix` would do, when it can.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repair: Option<Repair>,
}

impl Check {
    pub fn pass(id: impl Into<String>, what: impl Into<String>) -> Check {
        Check {
            id: id.into(),
            status: Status::Pass,
            what: what.into(),
            fix: None,
            repair: None,
        }
    }

    pub fn warn(id: impl Into<String>, what: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            status: Status::Warn,
            fix: Some(fix.into()),
            ..Check::pass(id, what)
        }
    }

    pub fn fail(id: impl Into<String>, what: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            status: Status::Fail,
            fix: Some(fix.into()),
            ..Check::pass(id, what)
        }
    }

    pub fn with_repair(mut self, repair: Repair) -> Check {
        self.repair = Some(repair);
        self
    }
}

/// Counts of each verdict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub pass: usize,
    pub warn: usize,
    pub fail: usize,
}

pub fn summary(checks: &[Check]) -> Summary {
    let mut s = Summary::default();
    for check in checks {
        match check.status {
            Status::Pass => s.pass += 1,
            Status::Warn => s.warn += 1,
            Status::Fail => s.fail += 1,
        }
    }
    s
}

/// The human form: one line per check (verdict, what, and `→ fix`), then
/// the summary line. `color`: ANSI colours on the verdicts (terminals only).
pub fn render(checks: &[Check], color: bool) -> String {
    let mut out = String::new();
    for check in checks {
        let tag = check.status.as_str();
        let tag = if color {
            let code = match check.status {
                Status::Pass => "32",
                Status::Warn => "33",
                Status::Fail => "31",
            };
            format!("\x1b[{code}m{tag}\x1b[0m")
        } else {
            tag.to_string()
        };
        out.push_str(&format!("{tag}  {}", check.what));
        if let Some(fix) = &check.fix {
            out.push_str(&format!(" → {fix}"));
            if check.repair.is_some() {
                out.push_str(" (mc-doctor --fix does this)");
            }
        }
        out.push('\n');
    }
    let s = summary(checks);
    out.push_str(&format!(
        "Summary: PASS {} / WARN {} / FAIL {}\n",
        s.pass, s.warn, s.fail
    ));
    out
}

/// Human byte sizes: `512 B`, `1.5 KiB`, `12.0 MiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = "KiB";
    for next in UNITS.iter().skip(1) {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = next;
    }
    format!("{value:.1} {unit}")
}

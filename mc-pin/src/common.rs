//! What the subcommands share: warnings, stdin, the store, the harness homes,
//! the folder as hooks name it, and the error line.

use std::path::Path;

use mc_base::config::Config;
use mc_base::store::Store;
use mc_cli::Failure;
use mc_pin_core as pin;

use crate::args::{Args, NAME};

/// Where Claude Code and Codex keep their sessions.
pub(crate) fn homes() -> pin::locate::Homes {
    let homes = mc_cli::session::HarnessHomes::from_env();
    pin::locate::Homes {
        claude: homes.claude,
        codex: homes.codex,
    }
}

/// The folder as hooks and MCP servers both name it.
pub(crate) fn canonical(dir: &Path) -> String {
    std::fs::canonicalize(dir)
        .unwrap_or_else(|_| dir.to_path_buf())
        .display()
        .to_string()
}

/// The error and its causes on one line; a cause that only repeats the text
/// before it (a wrapped I/O error says the same thing twice) is left out.
pub(crate) fn describe(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.ends_with(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

pub(crate) fn warn(warnings: &[String]) {
    mc_cli::warn(NAME, warnings);
}

pub(crate) fn read_stdin(what: &str) -> Result<String, Failure> {
    mc_cli::read_stdin(&format!(
        "expected {what} as JSON on stdin (see mc-pin --help)"
    ))
}

pub(crate) fn open_store(args: &Args, config: &Config) -> anyhow::Result<Store> {
    mc_cli::open_store(args.global.db.as_deref(), config)
}

//! The arguments (clap): the checks' flags and the subcommands.

use std::path::PathBuf;

use clap::{Args as ClapArgs, Parser, Subcommand};

pub(crate) const NAME: &str = "mc-doctor";

pub(crate) const ABOUT: &str = "Is mc installed, wired into your harnesses, and working?

With no command: the checks — mc's binaries on PATH (one version), the
config layers, the database (opens, integrity, schema, size), the providers
(probed), each detected harness (OpenCode, Claude Code, Codex, Pi: mc's
plugin, hooks and MCP server in place and current, auto-compaction off),
the cron line of mc-dream, and recent failures. One line each, PASS, WARN
or FAIL with the fix, then a summary. Exit 0 when nothing FAILs, 1 when
something does, 2 for bad usage.

`setup` wires the harnesses (a wizard on a terminal; --harness … --yes for
scripts), `--fix` repairs what the checks found where that is safe,
`migrate` upgrades the database and config and imports from Magic Context,
`--issue` writes a redacted report for a bug.";

#[derive(Parser, Debug)]
#[command(name = "mc-doctor", version, about = ABOUT)]
pub(crate) struct Args {
    /// SQLite database [default: $MC_DB, else $XDG_DATA_HOME/mc/context.db]
    #[arg(long, global = true, value_name = "PATH")]
    pub(crate) db: Option<PathBuf>,
    /// Extra config file, above user and project config [default: $MC_CONFIG]
    #[arg(long, global = true, value_name = "PATH")]
    pub(crate) config: Option<PathBuf>,
    /// One JSON document on stdout instead of lines
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// Repair what the checks found where it is safe, then check again
    #[arg(long)]
    pub(crate) fix: bool,
    /// Write a redacted Markdown report for an issue [default file:
    /// ./mc-issue-YYYYMMDD-HHMMSS.md]; nothing is sent anywhere
    #[arg(long, value_name = "FILE", num_args = 0..=1)]
    pub(crate) issue: Option<Option<PathBuf>>,
    /// Do not call the providers (no network)
    #[arg(long)]
    pub(crate) no_probe: bool,
    /// How long a provider probe may take
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    pub(crate) probe_timeout_ms: u64,
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Wire mc into harnesses: a wizard on a terminal, or flags for scripts.
    ///
    /// Every edit is idempotent (a second run changes nothing), keeps the
    /// comments of JSONC and TOML files, backs the old file up beside it
    /// (NAME.mc-backup-TIMESTAMP) and prints a diff. `--uninstall` takes back
    /// exactly what setup wrote (from its record in $XDG_DATA_HOME/mc/).
    Setup(SetupArgs),
    /// Upgrade the database schema (after a backup), rename deprecated config
    /// keys, and import from Magic Context.
    Migrate(MigrateArgs),
    /// Serve a local web page of what mc does: sessions, each call against
    /// the window with the cause of every cache bust, project memory (edit,
    /// archive, merge), the dreamer, spend, the checks and the issue report.
    ///
    /// Loopback only; the first line of stdout is the address with this
    /// run's token (`listening on http://127.0.0.1:PORT/?token=…`). On a
    /// terminal it opens the browser. `--export FILE` writes one
    /// self-contained, redacted HTML file instead of serving.
    Dashboard(DashboardArgs),
}

#[derive(ClapArgs, Debug)]
pub(crate) struct DashboardArgs {
    /// The loopback port to listen on (0 picks a free one)
    #[arg(long, value_name = "PORT", default_value_t = 0)]
    pub(crate) port: u16,
    /// Do not open the browser
    #[arg(long)]
    pub(crate) no_open: bool,
    /// Write the static export (one HTML file, redacted like --issue) and exit
    #[arg(long, value_name = "FILE")]
    pub(crate) export: Option<PathBuf>,
}

#[derive(ClapArgs, Debug, Default)]
pub(crate) struct SetupArgs {
    /// Harnesses to wire: opencode, claude-code, codex, pi (comma-separated)
    /// [default: every detected one]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub(crate) harness: Vec<String>,
    /// The historian's model, PROVIDER/MODEL (written into mc's user config)
    #[arg(long, value_name = "PROVIDER/MODEL")]
    pub(crate) historian_model: Option<String>,
    /// The provider's kind when setup defines it: anthropic, openai or command
    #[arg(long, value_name = "KIND")]
    pub(crate) historian_kind: Option<String>,
    /// The provider's base URL (anthropic, openai) [default: the kind's]
    #[arg(long, value_name = "URL")]
    pub(crate) historian_base_url: Option<String>,
    /// The variable holding the provider's key [default: ANTHROPIC_API_KEY / OPENAI_API_KEY]
    #[arg(long, value_name = "VAR")]
    pub(crate) historian_key_env: Option<String>,
    /// A program that answers the prompt on stdin, e.g. 'claude -p' (kind command)
    #[arg(long, value_name = "COMMAND")]
    pub(crate) historian_command: Option<String>,
    /// Also add mc-dream's cron line (mc-dream cron --install)
    #[arg(long)]
    pub(crate) cron: bool,
    /// Also fetch the local embedding model embeddings.model names (once,
    /// into $XDG_CACHE_HOME/mc/models, checksums checked)
    #[arg(long)]
    pub(crate) embeddings: bool,
    /// Do it without asking (what scripts and tests pass)
    #[arg(long, short = 'y')]
    pub(crate) yes: bool,
    /// Show the diff of every change, write nothing
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Take back what setup wrote (for --harness, else everything)
    #[arg(long)]
    pub(crate) uninstall: bool,
}

#[derive(ClapArgs, Debug)]
pub(crate) struct MigrateArgs {
    /// Show what would change, write nothing
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Import from Magic Context's database [default path:
    /// $XDG_DATA_HOME/cortexkit/magic-context/context.db], read-only
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "")]
    pub(crate) from_magic_context: Option<PathBuf>,
}

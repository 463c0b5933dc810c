//! The arguments (clap): the global flags, the subcommands and the input
//! source they share.

use std::path::PathBuf;

use clap::{Args as ClapArgs, Parser, Subcommand};

use mc_cli::GlobalArgs;

pub(crate) const NAME: &str = "mc-historian";

pub(crate) const ABOUT: &str = "Folds old conversation of a coding session into compartments and facts.

A compartment summarises a finished piece of work at four levels of detail (p1 verbose
… p4 one line) with an importance and an episode type; mc-transform renders it by a decay
curve instead of the raw messages. Facts become project memory.

Input: the mc-transform envelope (JSON) on stdin, or --transcript FILE (a Claude Code
session JSONL, a Codex rollout or a Pi session file), or --opencode-url URL --session ID (a running OpenCode server).
Models and providers come from the user config (historian.model, providers). Without
one, the model the session's harness already uses: an OpenCode session's server
(--opencode-url, else OPENCODE_URL) folds in a hidden child session; a Claude Code,
Codex or Pi session runs claude -p, codex exec or pi -p when it is on PATH. `check`
says which model a run would use and why.";

#[derive(Parser, Debug)]
#[command(name = "mc-historian", version, about = ABOUT)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) global: GlobalArgs,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Fold the eligible history above the last compartment: call the model,
    /// validate, repair once, publish in one transaction.
    ///
    /// Answers {"status": published | nothing_to_do | failed, "compartments",
    /// "facts_promoted", "tokens", "model", …}. A failed run exits 1 and is
    /// recorded with its cause (mc-transform status shows it).
    Run(Source),
    /// Fold everything above the last compartment but the newest N raw
    /// messages, now, whatever the pressure (a wrap-up before a break or a
    /// hand-over).
    ///
    /// Folds in chunks of historian.chunk_tokens, one after the other under
    /// the session's lease, each published as it is accepted; the kept tail
    /// grows back to the start of the turn it would cut, and a tool call
    /// still running is never folded. The harness sees the result at its
    /// next pass that busts the cache anyway (never a bust of its own).
    /// Answers as `run` does, with "job": "wrapup" and "keep".
    Wrapup(WrapupArgs),
    /// Rebuild the session's compartments from its raw history: the range
    /// they cover is folded again, and the new compartments replace the old
    /// ones whole, in one transaction, only once they reach as far.
    ///
    /// Adds no facts: project memory stays as it is. Useful after a
    /// historian model change or when compartments came out poor. The
    /// harness sees the new ones at its next pass that busts the cache
    /// anyway. Answers as `run` does, with "job": "recomp" and "replaced"
    /// (how many old compartments went); when the answers fall short of the
    /// old range, nothing changes and the run fails with recomp_incomplete.
    Recomp(Source),
    /// Say whether a run is due and why (the transform's own rule); no model call.
    Check(Source),
    /// Print the exact request a run would send first; no call, nothing written.
    Prompt(Source),
    /// A harness hook (Claude Code or Codex `Stop`, `PostCompact`, …): read
    /// the hook input on stdin, and when `check` says a run is due for its
    /// transcript, start `mc-historian run` in the background and return at
    /// once. Prints nothing and always exits 0 (a `Stop` hook's exit 2 would
    /// keep the agent working): problems are warnings on stderr.
    Hook(HookArgs),
}

#[derive(ClapArgs, Debug)]
pub(crate) struct WrapupArgs {
    /// How many of the newest raw messages stay unfolded (tool calls count;
    /// at least one always stays)
    #[arg(long, value_name = "N", default_value_t = mc_history::historian::wrapup::DEFAULT_KEEP)]
    pub(crate) keep: usize,
    #[command(flatten)]
    pub(crate) source: Source,
}

#[derive(ClapArgs, Debug)]
pub(crate) struct HookArgs {
    /// claude-code or codex [default: from the transcript]
    #[arg(long, value_name = "H")]
    pub(crate) harness: Option<String>,
    /// The model's context window in tokens [default: Codex's figure in its
    /// rollout; 200000 for Claude Code]
    #[arg(long, value_name = "TOKENS")]
    pub(crate) context_limit: Option<u64>,
    /// Wait for the run instead of starting it in the background (tests, scripts)
    #[arg(long)]
    pub(crate) wait: bool,
}

/// Where the session comes from. Without flags: the envelope on stdin.
#[derive(ClapArgs, Debug)]
pub(crate) struct Source {
    /// A session transcript: a Claude Code session JSONL, a Codex rollout or
    /// a Pi session file (told apart by its first line)
    #[arg(long, value_name = "FILE", conflicts_with = "opencode_url")]
    pub(crate) transcript: Option<PathBuf>,
    /// The harness the transcript comes from: claude-code, codex or pi
    /// [default: from the transcript]; a rollout is read as Codex's whatever
    /// this says
    #[arg(long, value_name = "H", requires = "transcript")]
    pub(crate) harness: Option<String>,
    /// A running OpenCode server to fetch the session's messages from
    #[arg(long, value_name = "URL", requires = "session")]
    pub(crate) opencode_url: Option<String>,
    /// Session id (with --opencode-url; overrides the transcript's own)
    #[arg(long, value_name = "ID")]
    pub(crate) session: Option<String>,
    /// The project the session works in [default: the envelope's project_dir,
    /// the transcript's cwd, else the working directory]
    #[arg(long, value_name = "DIR")]
    pub(crate) project_dir: Option<PathBuf>,
    /// The model's context window in tokens, for pressure (the envelope's
    /// model.context_limit)
    #[arg(long, value_name = "TOKENS")]
    pub(crate) context_limit: Option<u64>,
    /// The clock, in milliseconds since the epoch (the envelope's now_ms)
    #[arg(long, value_name = "MS")]
    pub(crate) now_ms: Option<i64>,
}

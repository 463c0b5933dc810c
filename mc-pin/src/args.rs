//! The arguments (clap): the global flags, the subcommands and their flags.

use std::path::PathBuf;

use clap::{Args as ClapArgs, Parser, Subcommand};

use mc_cli::GlobalArgs;

pub(crate) const NAME: &str = "mc-pin";

pub(crate) const ABOUT: &str = "Pinned messages survive every compaction.

`pin`, `unpin` and `list` answer the session's full pin list as
{\"pins\": [{\"id\", \"created_at\", \"role\"}]}. For OpenCode with a server
(--opencode-url or OPENCODE_URL) the list lives in the session metadata,
shared with OpenChamber, and is mirrored into mc's database, which the
transform reads to keep pinned messages out of every drop. Without a server,
and for Claude Code and Codex, mc's database is the only store.

`restore` reads one event on stdin: after an OpenCode `session.compacted` it
sends the pinned messages back through prompt_async. As a Claude Code or Codex
SessionStart hook (every source) it prints, after a compaction, the pinned
messages the harness did not keep and mc's record of the session (compartments,
project memory), and at startup or resume that record once per context, as
additionalContext. Any other event does nothing.

Run from inside a Claude Code or Codex session without --session, `pin`,
`unpin` and `list` find the harness, the session and its transcript by
themselves (`pin` waits up to 3 s for a transcript the harness has not
written yet: Claude Code writes it in the background).";

#[derive(Parser, Debug)]
#[command(name = "mc-pin", version, about = ABOUT)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) global: GlobalArgs,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Pin a message so it survives every compaction (pinning it again is a no-op).
    ///
    /// Without --session, reads the same fields as JSON on stdin:
    /// {"harness", "session_id", "message_id" | "last", "role", "created_at",
    /// "transcript", "opencode_url", "directory"}.
    Pin(TargetArgs),
    /// Unpin a message (unpinning one that is not pinned is a no-op).
    Unpin(TargetArgs),
    /// The session's pins, oldest first.
    List(TargetArgs),
    /// Read one event on stdin and restore the pins if it is a compaction.
    ///
    /// An OpenCode `session.compacted` event (bare, or as {"directory", "payload"}
    /// from /global/event): the compaction claimed in mc's database (of restorers
    /// racing for it, one sends), one prompt_async with the pinned messages, then
    /// the cursor in the session metadata. A Claude Code or Codex SessionStart hook
    /// input: {"hookSpecificOutput": {"hookEventName": "SessionStart",
    /// "additionalContext": …}} on stdout (at most 10,000 characters) when there
    /// is something to add: after a compaction the pins the harness did not keep
    /// and mc's record, else that record once per context. Anything else: no
    /// work, no request, exit 0.
    Restore(RestoreArgs),
}

#[derive(ClapArgs, Debug)]
pub(crate) struct TargetArgs {
    /// Harness of the session: opencode, claude-code, codex or pi [default: the one
    /// running this command (CLAUDECODE, CODEX_SESSION_ID), else opencode]
    #[arg(long)]
    pub(crate) harness: Option<String>,
    /// Session id [default: stdin's JSON; inside Claude Code or Codex, the
    /// session the harness names in the environment, else the folder's newest]
    #[arg(long, value_name = "ID")]
    pub(crate) session: Option<String>,
    /// The message: an OpenCode message id, a Claude Code transcript line uuid, a Codex item
    /// id, a Pi entry id
    #[arg(long, value_name = "ID", conflicts_with = "last")]
    pub(crate) message: Option<String>,
    /// Pin the newest message of this role that has text
    #[arg(long, value_name = "ROLE", value_parser = ["user", "assistant"])]
    pub(crate) last: Option<String>,
    /// The message's role, when no server or transcript can tell it
    #[arg(long, value_parser = ["user", "assistant"])]
    pub(crate) role: Option<String>,
    /// The message's creation time in epoch milliseconds, when no server or transcript can tell it
    #[arg(long, value_name = "MS")]
    pub(crate) created_at: Option<i64>,
    /// The session's transcript (Claude Code JSONL, Codex rollout, Pi session
    /// file) [default: where Claude Code or Codex keeps it]
    #[arg(long, value_name = "FILE")]
    pub(crate) transcript: Option<PathBuf>,
    /// The OpenCode server [default: $OPENCODE_URL]
    #[arg(long, value_name = "URL")]
    pub(crate) opencode_url: Option<String>,
    /// The folder of the OpenCode instance (sent as ?directory=)
    #[arg(long, value_name = "DIR")]
    pub(crate) directory: Option<String>,
    /// Print what would change and the request(s) it would send; change nothing
    #[arg(long)]
    pub(crate) dry_run: bool,
}

#[derive(ClapArgs, Debug)]
pub(crate) struct RestoreArgs {
    /// The harness the event comes from [default: from the event]; claude-code
    /// or codex also means the hook never exits 2
    #[arg(long)]
    pub(crate) harness: Option<String>,
    /// The OpenCode server [default: $OPENCODE_URL]
    #[arg(long, value_name = "URL")]
    pub(crate) opencode_url: Option<String>,
    /// The folder of the OpenCode instance [default: from the event]
    #[arg(long, value_name = "DIR")]
    pub(crate) directory: Option<String>,
    /// Read the pinned texts from this transcript instead of the hook's transcript_path
    #[arg(long, value_name = "FILE")]
    pub(crate) transcript: Option<PathBuf>,
    /// Print the request(s) or hook output it would produce; send nothing, advance no cursor
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// OpenCode: let the restoration start a model turn (as OpenChamber does)
    /// instead of waiting for the next one
    #[arg(long)]
    pub(crate) reply: bool,
    /// A SessionStart hook: print the pins only, not mc's record of the
    /// session (compartments, project memory)
    #[arg(long)]
    pub(crate) pins_only: bool,
}

//! The arguments (clap): the global flags, the session they act for, and
//! the subcommands.

use std::path::PathBuf;

use clap::{Args as ClapArgs, Parser, Subcommand};

use mc_cli::GlobalArgs;

pub(crate) const NAME: &str = "mc-search";

pub(crate) const ABOUT: &str = "Project memory, session notes, expand and search: the agent's tools
(ctx_memory, ctx_note, ctx_expand, ctx_search, ctx_reduce) on the command line
and over MCP.

Memories belong to a project (the git root commit of --project-dir, default
the working directory) and are never visible from another one. A memory
written here reaches the agent's prompt on the next pass that rebuilds it
anyway: writing never costs a prompt-cache miss.

Every command prints one JSON document. Without any of its field flags, a
command reads the same fields as a JSON object on stdin when stdin is not a
terminal: {\"harness\", \"session_id\", \"project_dir\", and the command's own
fields, e.g. \"category\", \"content\"}. Exit codes: 0 ok, 1 runtime failure,
2 bad input (an unknown id, a bad category, empty content).";

#[derive(Parser, Debug)]
#[command(name = "mc-search", version, about = ABOUT)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) global: GlobalArgs,

    #[command(flatten)]
    pub(crate) at: Where,

    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Which project and session a command is about.
#[derive(ClapArgs, Debug, Clone, Default)]
pub(crate) struct Where {
    /// Harness of the session: opencode, claude-code, codex or pi [default: opencode]
    #[arg(long, global = true)]
    pub(crate) harness: Option<String>,
    /// Session id (notes, expand, reduce)
    #[arg(long, global = true, value_name = "ID")]
    pub(crate) session: Option<String>,
    /// The project's folder [default: the working directory]
    #[arg(long, global = true, value_name = "DIR")]
    pub(crate) project_dir: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Project memory: durable facts, per project.
    #[command(subcommand)]
    Memory(MemoryCommand),
    /// Session notes the agent keeps for itself.
    #[command(subcommand)]
    Note(NoteCommand),
    /// The original content of a dropped tag (§12§), a compartment (c3) or messages (10-20).
    Expand {
        /// What to expand: §12§ or 12, c3, 10-20
        target: Option<String>,
        /// Most tokens to return [default: 15000]
        #[arg(long)]
        budget: Option<u64>,
    },
    /// Search memories, notes, compartments, messages and commits of the project.
    Query {
        /// The words to look for
        text: Option<String>,
        /// Only these sources: memory, note, compartment, message, commit (repeatable)
        #[arg(long = "source", value_name = "SOURCE")]
        sources: Vec<String>,
        /// Most hits [default: 10]
        #[arg(long)]
        limit: Option<u64>,
        /// Only from this day on (YYYY-MM-DD) or epoch milliseconds
        #[arg(long)]
        since: Option<String>,
        /// Only before this day (YYYY-MM-DD) or epoch milliseconds
        #[arg(long)]
        until: Option<String>,
        /// Only sessions of --harness (with --session: only that session)
        #[arg(long)]
        only_harness: bool,
    },
    /// Index the raw messages kept since the last index (search does a bounded
    /// step of this itself); --session for one session only. Progress on stderr
    /// when it is a terminal.
    Index {
        /// Report the state of every search index instead: parts kept,
        /// indexed, waiting, healthy, and each index (exit 1 when one is not)
        #[arg(long, conflicts_with = "rebuild")]
        check: bool,
        /// Throw every search index away (messages, memories, notes,
        /// compartments, commits) and build it again from the rows it indexes:
        /// the repair for a damaged index
        #[arg(long)]
        rebuild: bool,
        /// Index the git commits of the project's repository instead (HEAD, no
        /// merges, the last year, the newest 2000; what mc-dream's git-index
        /// task does)
        #[arg(long, conflicts_with_all = ["check", "rebuild"])]
        commits: bool,
        /// Embed every searchable text that has no vector yet with the
        /// configured embeddings.model (batches of embeddings.batch_size,
        /// each stored as it comes: run it again to resume)
        #[arg(long, conflicts_with_all = ["check", "rebuild", "commits"])]
        embeddings: bool,
    },
    /// Queue tags to drop (as ctx_reduce): --drop 3-5,12
    Reduce {
        #[arg(long, value_name = "TAGS")]
        drop: Option<String>,
    },
    /// The user profile: what the user is like, in every project's prompt.
    #[command(subcommand)]
    Profile(ProfileCommand),
    /// Run one agent tool: {"tool", "arguments", "harness", "session_id",
    /// "project_dir"} on stdin → {"text", "is_error", "data"} (what a harness
    /// plugin calls; the text is what the model reads).
    Call,
    /// The agent tools as a harness registers them: {"tools": [{"name",
    /// "description", "input_schema"}]} (a JSON Schema each).
    Tools,
    /// Serve the agent tools over MCP (JSON-RPC on stdin/stdout) until stdin closes.
    ///
    /// The session is --session when given; else the one the harness names in
    /// the server's environment (Claude Code: CLAUDE_CODE_SESSION_ID, with
    /// --harness claude-code); else, per call, the session the harness's
    /// SessionStart hook last recorded for this folder (see `session-start`).
    Mcp,
    /// A SessionStart hook: record the hook's session as the current one of its
    /// folder (what `mcp` serves when the harness does not name its session).
    /// Reads the hook input on stdin; prints {}.
    SessionStart,
}

#[derive(Subcommand, Debug)]
pub(crate) enum MemoryCommand {
    /// Write a memory (a duplicate answers "existing" with the live one's id).
    Write {
        #[arg(long)]
        category: Option<String>,
        #[arg(long)]
        content: Option<String>,
    },
    /// Change a memory's text.
    Update {
        #[arg(long)]
        id: Option<i64>,
        #[arg(long)]
        content: Option<String>,
    },
    /// Take a memory out of the prompt, saying why.
    Archive {
        #[arg(long)]
        id: Option<i64>,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Fold several memories into one; the others become superseded.
    Merge {
        /// The memories to merge: 3,7,9
        #[arg(long, value_delimiter = ',')]
        ids: Vec<i64>,
        #[arg(long)]
        content: Option<String>,
        /// Category of the result [default: the sources' category]
        #[arg(long)]
        category: Option<String>,
    },
    /// The project's memories.
    List {
        #[arg(long)]
        category: Option<String>,
        /// live (default), all, active, permanent, archived or superseded
        #[arg(long)]
        status: Option<String>,
        /// Only memories containing these words
        #[arg(long)]
        text: Option<String>,
        #[arg(long)]
        limit: Option<u64>,
    },
    /// One memory, with its history fields.
    Show {
        #[arg(long)]
        id: Option<i64>,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum NoteCommand {
    Write {
        #[arg(long)]
        content: Option<String>,
    },
    List {
        /// Include dismissed notes
        #[arg(long)]
        all: bool,
    },
    Dismiss {
        #[arg(long)]
        id: Option<i64>,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum ProfileCommand {
    /// Add a line (a duplicate answers "existing").
    Add {
        #[arg(long)]
        content: Option<String>,
    },
    /// The active lines (--all: archived too).
    List {
        #[arg(long)]
        all: bool,
    },
    /// Archive a line.
    Archive {
        #[arg(long)]
        id: Option<i64>,
    },
}

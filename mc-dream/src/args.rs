//! The arguments (clap): the global flags and the subcommands.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use mc_cli::GlobalArgs;

pub(crate) const NAME: &str = "mc-dream";

pub(crate) const ABOUT: &str =
    "Keeps project memory true, from cron: consolidates duplicates, verifies
memories against the code, classifies them, archives stale ones, indexes git
commits for search, and shares memory with a team through files in the repo.

`tick` (every 15 minutes from the crontab line `mc-dream cron` prints) runs
every task that is due for every project mc knows; each task's schedule is a
cron expression under dream.schedule in the user config, its model
dream.model. Every command prints one JSON document. Exit codes: 0 ok, 1 a
runtime failure (or a `run` whose task failed), 2 bad input.";

#[derive(Parser, Debug)]
#[command(name = "mc-dream", version, about = ABOUT)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) global: GlobalArgs,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Run every due task of every known project, then exit (for cron).
    Tick,
    /// Run one task now for one project, whatever its schedule says:
    /// consolidate, verify, classify, archive-stale, git-index, sync or embed.
    Run {
        task: String,
        /// The project's folder [default: the working directory]
        #[arg(long, value_name = "DIR")]
        project: Option<PathBuf>,
    },
    /// Per project and task: schedule, last run and result, next due, lease.
    Status {
        /// Only the project of this folder
        #[arg(long, value_name = "DIR")]
        project: Option<PathBuf>,
    },
    /// Print the crontab line for this install; --install adds it to the
    /// user's crontab (once), --uninstall removes it.
    Cron {
        #[arg(long, conflicts_with = "uninstall")]
        install: bool,
        #[arg(long)]
        uninstall: bool,
    },
    /// Write the project's memories to <repo>/.mc/memory/<CATEGORY>.md.
    Export {
        #[arg(long, value_name = "DIR")]
        project: Option<PathBuf>,
        /// Overwrite changes in the files that were not imported
        #[arg(long)]
        force: bool,
    },
    /// Read <repo>/.mc/memory/*.md into the project's memories.
    Import {
        #[arg(long, value_name = "DIR")]
        project: Option<PathBuf>,
    },
    /// Mark a memory private (never exported) or, with --off, shareable.
    Private {
        #[arg(long)]
        id: i64,
        #[arg(long)]
        off: bool,
        #[arg(long, value_name = "DIR")]
        project: Option<PathBuf>,
    },
}

//! mc-search: project memory, notes, expand and search, and the MCP server
//! that serves them to an agent. Thin: arguments, env, stdin, the core, stdout.
//! This file parses the arguments and dispatches.

mod args;
mod cmd;
mod common;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Args, Command, NAME};
use crate::cmd::index::{index, index_commits, index_embeddings};
use crate::cmd::mcp::serve_mcp;
use crate::cmd::profile::profile;
use crate::cmd::session_start::session_start;
use crate::cmd::tool::run;
use crate::cmd::tools::list_tools;

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match &args.command {
        Command::Mcp => serve_mcp(&args),
        Command::SessionStart => session_start(&args),
        Command::Profile(p) => profile(&args, p),
        Command::Index { commits: true, .. } => index_commits(&args),
        Command::Index {
            embeddings: true, ..
        } => index_embeddings(&args),
        Command::Index { check, rebuild, .. } => index(&args, *check, *rebuild),
        Command::Tools => list_tools(&args),
        _ => run(&args),
    };
    mc_cli::finish(NAME, result)
}

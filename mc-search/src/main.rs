//! mc-search: project memory, notes, expand and search, and the MCP server
//! that serves them to an agent. Thin: arguments, env, stdin, the core, stdout.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main()
}

//! mc-pin: pinned messages survive every compaction. Thin: arguments, env,
//! stdin, the core, stdout.

mod cli;
mod paths;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main()
}

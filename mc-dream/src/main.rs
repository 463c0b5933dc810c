//! mc-dream: maintenance of project memory, run from cron. Thin: arguments,
//! env, mc-core, stdout.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main()
}

//! mc-transform: the per-call transform. Thin: arguments, stdin, mc-core, stdout.

mod cli;
mod serve;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main()
}

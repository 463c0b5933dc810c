//! mc-historian: folds old conversation into compartments and facts. Thin:
//! arguments, input, mc-core, stdout.

mod cli;
mod progress;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main()
}

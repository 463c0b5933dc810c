//! mc-doctor: checks, setup, fixes, migrate and the issue report. Thin:
//! arguments, the environment, the terminal; the work is in
//! `mc_doctor_core`.

mod cli;
mod outcome;
mod wizard;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main()
}

//! mc-doctor: checks, setup, fixes, migrate and the issue report. Thin:
//! arguments, the environment, the terminal; the work is in
//! `mc_doctor_core`. This file parses the arguments and dispatches.

mod args;
mod cmd;
mod common;
mod outcome;
mod wizard;

use std::process::ExitCode;

use clap::Parser;

use mc_cli::finish;

use crate::args::{Args, Command, NAME};
use crate::cmd::check::run;
use crate::cmd::migrate::run_migrate;
use crate::cmd::setup::run_setup;
use crate::common::environment;

fn main() -> ExitCode {
    let args = Args::parse();
    let result = environment(&args).and_then(|env| match &args.command {
        Some(Command::Setup(setup_args)) => run_setup(&args, setup_args, &env),
        Some(Command::Migrate(m)) => run_migrate(&args, m, &env),
        Some(Command::Dashboard(d)) => cmd::dashboard::run(&args, d, &env),
        None => run(&args, &env),
    });
    finish(NAME, result)
}

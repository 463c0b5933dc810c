//! mc-dream: maintenance of project memory, run from cron. Thin: arguments,
//! env, mc-core, stdout. This file parses the arguments and dispatches.

mod args;
mod cmd;
mod common;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Args, Command, NAME};
use crate::cmd::cron::cron;
use crate::cmd::export::export;
use crate::cmd::import::import;
use crate::cmd::private::private;
use crate::cmd::run::run;
use crate::cmd::status::status;
use crate::cmd::tick::tick;

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match &args.command {
        Command::Tick => tick(&args),
        Command::Run { task, project } => run(&args, task, project.as_deref()),
        Command::Status { project } => status(&args, project.as_deref()),
        Command::Cron { install, uninstall } => cron(&args, *install, *uninstall),
        Command::Export { project, force } => export(&args, project.as_deref(), *force),
        Command::Import { project } => import(&args, project.as_deref()),
        Command::Private { id, off, project } => private(&args, *id, !*off, project.as_deref()),
    };
    mc_cli::finish(NAME, result)
}

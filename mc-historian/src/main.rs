//! mc-historian: folds old conversation into compartments and facts. Thin:
//! arguments, input, mc-core, stdout. This file parses the arguments and
//! dispatches.

mod args;
mod cmd;
mod input;
mod model;
mod progress;

use std::process::ExitCode;

use clap::Parser;
use mc_history::historian::Job;

use crate::args::{Args, Command, NAME};
use crate::cmd::check::check;
use crate::cmd::hook::run_hook;
use crate::cmd::prompt::prompt;
use crate::cmd::run::run;

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match &args.command {
        Command::Run(source) => run(&args, source, Job::Fold),
        Command::Wrapup(wrapup) => run(&args, &wrapup.source, Job::Wrapup { keep: wrapup.keep }),
        Command::Recomp(source) => run(&args, source, Job::Recomp),
        Command::Check(source) => check(&args, source),
        Command::Prompt(source) => prompt(&args, source),
        Command::Hook(hook) => Ok(run_hook(&args, hook)),
    };
    mc_cli::finish(NAME, result)
}

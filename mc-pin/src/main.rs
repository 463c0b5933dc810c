//! mc-pin: pinned messages survive every compaction. Thin: arguments, env,
//! stdin, the core, stdout. This file parses the arguments and dispatches.

mod args;
mod cmd;
mod common;
mod paths;

use std::process::ExitCode;

use clap::Parser;

use mc_pin_core::Action;

use crate::args::{Args, Command, NAME};
use crate::cmd::pins::run_pins;
use crate::cmd::restore::run_restore;
use crate::common::describe;

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match &args.command {
        Command::Pin(target) => run_pins(&args, Action::Pin, target),
        Command::Unpin(target) => run_pins(&args, Action::Unpin, target),
        Command::List(target) => run_pins(&args, Action::List, target),
        Command::Restore(restore) => run_restore(&args, restore),
    };
    mc_cli::finish_with(NAME, result, describe)
}

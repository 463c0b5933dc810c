//! mc-transform: the per-call transform. Thin: arguments, stdin, the core, stdout.

mod args;
mod cmd;
mod common;

use std::process::ExitCode;

use clap::Parser;

use mc_cli::{Stores, write_json};

use crate::args::{Args, Command};
use crate::cmd::{overflow, pass, recount, reduce, status, system};
use crate::common::{Ctx, NAME, read_json};

// A resident process builds and frees a session's worth of small JSON
// values on every call; glibc's allocator spends more time consolidating
// them than the pass spends working.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = Args::parse();
    let mut stores = Stores::default();
    let mut ctx = Ctx {
        global: &args.global,
        stores: &mut stores,
    };
    let result = match &args.command {
        None | Some(Command::Pass) => {
            let answer = pass::one_shot_pass(&mut ctx);
            let written = answer.and_then(|answer| Ok(answer.write(args.global.pretty)?));
            return mc_cli::finish(NAME, written);
        }
        Some(Command::Reduce {
            session,
            drop,
            harness,
        }) => reduce::reduce_request(session.as_deref(), drop.as_deref(), harness)
            .and_then(|request| reduce::reduce(&mut ctx, &request)),
        Some(Command::Status {
            session,
            harness,
            calls,
        }) => status::status(&mut ctx, harness, session, *calls),
        Some(Command::Recount) => read_json().and_then(|value| recount::recount(&mut ctx, value)),
        Some(Command::System) => read_json().and_then(|value| system::system(&mut ctx, value)),
        Some(Command::Overflow) => {
            read_json().and_then(|value| overflow::overflow(&mut ctx, value))
        }
        Some(Command::Claude { args: claude }) => {
            return match cmd::claude::run(&args.global, claude) {
                Ok(code) => code,
                Err(failure) => mc_cli::finish::<()>(NAME, Err(failure)),
            };
        }
        Some(Command::Gateway {
            listen,
            ensure: true,
        }) => {
            return match cmd::ensure::ensure(&args.global, listen.as_deref()) {
                Ok(code) => code,
                Err(failure) => mc_cli::finish::<()>(NAME, Err(failure)),
            };
        }
        Some(Command::Codex { args: codex }) => {
            return match cmd::codex::run(&args.global, codex) {
                Ok(code) => code,
                Err(failure) => mc_cli::finish::<()>(NAME, Err(failure)),
            };
        }
        Some(Command::Gateway {
            listen,
            ensure: false,
        }) => {
            return mc_cli::finish(NAME, cmd::gateway::run(&args.global, listen.as_deref()));
        }
        Some(Command::Serve {
            max_request_bytes,
            sessions,
        }) => {
            return mc_cli::finish(
                NAME,
                cmd::serve::run(&args.global, *max_request_bytes, *sessions),
            );
        }
    };
    let written = result.and_then(|value| Ok(write_json(&value, args.global.pretty)?));
    mc_cli::finish(NAME, written)
}

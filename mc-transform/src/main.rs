//! mc-transform: the per-call transform. Thin: arguments, stdin, the core, stdout.

mod cli;
mod commands;
mod gateway;
mod launch;
mod serve;

use std::process::ExitCode;

// A resident process builds and frees a session's worth of small JSON
// values on every call; glibc's allocator spends more time consolidating
// them than the pass spends working.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    cli::main()
}

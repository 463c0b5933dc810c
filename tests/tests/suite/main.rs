//! Every cross-binary and property test in one test binary (each binary costs
//! a link of mc-core and its dependencies). The real-OpenCode suite stays a
//! binary of its own (`tests/tests/opencode.rs`) so it can run alone.
//!
//! Process tests run the workspace's binaries in a [`mc_tests::TestEnv`];
//! `cargo build --workspace --bins` first (scripts/test does).

mod cli;
mod concurrency;
mod defer_replay;
mod historian;
mod pin;

//! Every cross-binary and property test in one test binary (each binary costs
//! a link of mc-core and its dependencies). The real-OpenCode suite stays a
//! binary of its own (`tests/tests/opencode.rs`) so it can run alone.
//!
//! Process tests run the workspace's binaries in a [`mc_tests::TestEnv`];
//! `cargo build --workspace --bins` first (scripts/test does).

/// `insta::assert_snapshot!` into `tests/snapshots/NAME.snap`: a fixed place,
/// so a snapshot keeps its file when its test moves between modules.
macro_rules! snapshot {
    ($name:expr, $description:expr, $text:expr) => {
        insta::with_settings!({
            snapshot_path => concat!(env!("CARGO_MANIFEST_DIR"), "/snapshots"),
            prepend_module_to_snapshot => false,
            omit_expression => true,
            description => $description,
        }, {
            insta::assert_snapshot!($name, $text);
        })
    };
}

mod arguments;
mod cli;
mod concurrency;
mod defer_replay;
mod dream;
mod historian;
mod index_repair;
mod mcp;
mod pin;
mod search;
mod serve;

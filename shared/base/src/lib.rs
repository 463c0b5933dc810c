//! mc-base: what every core crate builds on — errors, JSON, tokens, the
//! harness codecs, the shared domain, the store and its migrations, config,
//! paths and project identity.
//!
//! The crate never reads stdin, writes stdout, looks at the environment or the
//! terminal. Binaries resolve paths, clocks and configuration and pass them in as
//! values, so everything here can be driven by tests with a fixed clock and a
//! temporary database.

// The I/O rule, enforced: no printing here (and `shared/clippy.toml` refuses the
// environment, stdin/stdout and ureq's environment-reading defaults).
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]
// Nothing reachable from outside input may panic: no expect, no indexing or
// slicing that can go out of range; the few proven invariants carry an
// `allow` with the reason on the smallest item.
#![cfg_attr(
    not(test),
    deny(clippy::expect_used, clippy::indexing_slicing, clippy::string_slice)
)]

pub mod codec;
pub mod config;
pub mod domain;
pub mod error;
pub mod identity;
pub mod json;
#[cfg(test)]
mod layering;
pub mod lines;
pub mod paths;
pub mod process;
pub mod repo_fs;
pub mod store;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod tokens;
pub mod xml;

pub use error::{Error, Result};

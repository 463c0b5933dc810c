//! What the prompt's head is made of: compartments rendered by a decay curve,
//! memories, the user profile, pins; and when a historian run is due.

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

pub mod decay;
pub mod head;
pub mod historian;
pub mod store;
pub mod trigger;

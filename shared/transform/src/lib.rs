//! The per-call transform: tag, schedule, mutate only on passes
//! that bust the cache anyway, replay everything stored on every pass.

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

pub mod calls;
pub mod causes;
pub mod caveman;
pub mod emergency;
pub mod fallback;
pub mod gateway;
pub mod head;
pub mod incremental;
pub mod nudge;
pub mod overflow;
pub mod pass;
pub mod reasoning;
pub mod recall;
pub mod recount;
pub mod reduce;
pub mod render;
pub mod report;
pub mod responses_pass;
pub mod scheduler;
pub mod smart_drops;
pub mod state;
pub mod status;
pub mod system;
pub mod temporal;
pub mod todo;

pub use mc_base::domain::envelope::Envelope;
pub use overflow::{OverflowAnswer, OverflowRequest};
pub use pass::{Resident, record_passthrough, run_pass, run_pass_on};
pub use reduce::{ReduceRequest, ReduceResult, reduce};
pub use report::{Bust, Decision, PassOutput, PassReport};
pub use status::{StatusReport, status};
pub use system::{SystemOutput, SystemRequest, system_hook};

#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

#[cfg(test)]
pub(crate) mod tests;

#[cfg(test)]
mod tests_head;

#[cfg(test)]
mod tests_drops;

#[cfg(test)]
mod tests_recall;

#[cfg(test)]
mod historian_tests;

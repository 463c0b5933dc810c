//! The per-call transform: tag, schedule, mutate only on passes
//! that bust the cache anyway, replay everything stored on every pass.

pub mod caveman;
pub mod emergency;
pub mod head;
pub mod incremental;
pub mod nudge;
pub mod overflow;
pub mod pass;
pub mod recount;
pub mod reduce;
pub mod render;
pub mod report;
pub mod scheduler;
pub mod state;
pub mod status;
pub mod system;
pub mod temporal;

pub use crate::domain::envelope::Envelope;
pub use overflow::{OverflowAnswer, OverflowRequest};
pub use pass::{Resident, record_passthrough, run_pass, run_pass_on};
pub use reduce::{ReduceRequest, ReduceResult, reduce};
pub use report::{Bust, Decision, PassOutput, PassReport};
pub use status::{StatusReport, status};
pub use system::{SystemOutput, SystemRequest, system_hook};

#[cfg(test)]
pub(crate) mod tests;

#[cfg(test)]
mod tests_head;

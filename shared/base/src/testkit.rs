//! Test support other crates' tests build on (the `testkit` feature): the
//! Pi samples of `testdata/`, so no other crate reads this crate's folder.

/// A Pi context (every role Pi sends), as the codec's tests read it.
pub const PI_CONTEXT: &str = include_str!("../testdata/pi/context.json");
/// A Pi session file (a compaction, a branch).
pub const PI_SESSION: &str = include_str!("../testdata/pi/session.jsonl");

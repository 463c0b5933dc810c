//! Why a historian run failed, typed from the model client and the validator
//! to the run report and the run record (`mc-transform status` shows it).
//!
//! A failure shows as three fields: `error` (what went wrong, one line),
//! `error_class` (what kind of failure, for a program to act on) and
//! `error_hints` (what the user can do). The run record keeps all three in
//! its `error` column as one JSON object; a record written before failures
//! were typed holds the bare message, read back with no class.

use serde::{Deserialize, Serialize};

use mc_base::error::{Error, ErrorKind};
use mc_llm::{self as llm, LlmError};

/// Why a publish was refused (nothing was written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    LeaseLost,
    /// The stored compartments moved since the chunk was planned.
    Moved {
        expected: i64,
        found: i64,
    },
    /// A recompute's answers did not reach the end of the range it rebuilds
    /// (the old compartments stay).
    Incomplete {
        through: i64,
        reached: i64,
    },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::LeaseLost => f.write_str(
                "the session's historian lease was taken over (this run outlived it); nothing published",
            ),
            Refusal::Moved { expected, found } => write!(
                f,
                "the session's compartments changed during the run (they ended at {expected}, \
                 now at {found}); nothing published"
            ),
            Refusal::Incomplete { through, reached } => write!(
                f,
                "the recomputed compartments end at message {reached}, short of {through} \
                 where the old ones ended; the old compartments stay"
            ),
        }
    }
}

/// Why a run, or one chunk of it, failed. Nothing of a failed chunk is written.
#[derive(Debug, Clone, PartialEq)]
pub enum RunFailure {
    /// The model chain gave no answer (its retries and fallbacks spent).
    Model(LlmError),
    /// The answer was rejected, and so was the repaired one.
    Rejected { problem: String, again: String },
    /// The answer was rejected, and the repair call failed.
    RepairFailed {
        problem: String,
        failure: Box<RunFailure>,
    },
    /// Publishing was refused: the lease was lost, or the compartments moved.
    Refused(Refusal),
    /// The store failed mid-run.
    Store {
        kind: ErrorKind,
        message: String,
        hints: Vec<String>,
    },
    /// Chunk `index` (from 1) failed after earlier chunks were published.
    Chunk {
        index: usize,
        failure: Box<RunFailure>,
    },
}

impl RunFailure {
    /// A store error, as the run records it.
    pub fn store(error: &Error) -> RunFailure {
        RunFailure::Store {
            kind: error.kind(),
            message: error.to_string(),
            hints: error.hints(),
        }
    }

    /// What kind of failure, as `error_class` says it: `provider_timeout`,
    /// `provider_status`, `provider_unreachable`, `provider_unavailable`,
    /// `provider_command`, `provider_harness` (the harness that ran the
    /// call reported a failure of its own), `provider_protocol`,
    /// `provider_config` (the model
    /// chain), `answer_rejected`, `lease_lost`, `compartments_moved`, `recomp_incomplete`,
    /// `store_unavailable`, `store_corrupt`, `store_internal`.
    pub fn class(&self) -> &'static str {
        match self {
            RunFailure::Model(error) => provider_class(error),
            RunFailure::Rejected { .. } => "answer_rejected",
            RunFailure::RepairFailed { failure, .. } | RunFailure::Chunk { failure, .. } => {
                failure.class()
            }
            RunFailure::Refused(Refusal::LeaseLost) => "lease_lost",
            RunFailure::Refused(Refusal::Moved { .. }) => "compartments_moved",
            RunFailure::Refused(Refusal::Incomplete { .. }) => "recomp_incomplete",
            RunFailure::Store { kind, .. } => match kind {
                ErrorKind::Unavailable => "store_unavailable",
                ErrorKind::Corrupt => "store_corrupt",
                _ => "store_internal",
            },
        }
    }

    /// What the user can do about it, one line each.
    pub fn hints(&self) -> Vec<String> {
        match self {
            RunFailure::Model(error) => error.hints.clone(),
            RunFailure::Rejected { .. } => vec![
                "the next run asks again; if answers keep being rejected, try a stronger \
                 historian.model"
                    .into(),
            ],
            RunFailure::RepairFailed { failure, .. } | RunFailure::Chunk { failure, .. } => {
                failure.hints()
            }
            RunFailure::Refused(Refusal::Incomplete { .. }) => vec![
                "run mc-historian recomp again; a larger historian.chunk_tokens gives the \
                 model more to see at once"
                    .into(),
            ],
            RunFailure::Refused(_) => Vec::new(),
            RunFailure::Store { hints, .. } => hints.clone(),
        }
    }

    /// The failure as the report shows it and the run record keeps it.
    pub fn record(&self) -> FailureRecord {
        FailureRecord {
            error: self.to_string(),
            error_class: Some(self.class().to_string()),
            error_hints: self.hints(),
        }
    }
}

fn provider_class(error: &LlmError) -> &'static str {
    match error.kind {
        llm::CallFailure::Config => "provider_config",
        llm::CallFailure::Unavailable => "provider_unavailable",
        llm::CallFailure::Status(_) => "provider_status",
        llm::CallFailure::Transport => "provider_unreachable",
        llm::CallFailure::Timeout => "provider_timeout",
        llm::CallFailure::Command => "provider_command",
        llm::CallFailure::Harness => "provider_harness",
        llm::CallFailure::Protocol => "provider_protocol",
    }
}

impl std::fmt::Display for RunFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunFailure::Model(error) => write!(f, "{error}"),
            RunFailure::Rejected { problem, again } => write!(
                f,
                "answer rejected: {problem}; the repaired answer was rejected too: {again}"
            ),
            RunFailure::RepairFailed { problem, failure } => write!(
                f,
                "answer rejected: {problem}; the repair call failed: {failure}"
            ),
            RunFailure::Refused(refusal) => write!(f, "{refusal}"),
            RunFailure::Store { message, .. } => f.write_str(message),
            RunFailure::Chunk { index, failure } => write!(f, "chunk {index}: {failure}"),
        }
    }
}

/// Shown as `error`, `error_class` and `error_hints`.
impl Serialize for RunFailure {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.record().serialize(serializer)
    }
}

/// A failure as the run report shows it and the run record keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureRecord {
    /// What went wrong.
    pub error: String,
    /// What kind of failure ([`RunFailure::class`]); `None` when an older mc
    /// recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_class: Option<String>,
    /// What the user can do about it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub error_hints: Vec<String>,
}

impl FailureRecord {
    /// The text of the run record's `error` column.
    pub fn to_column(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| self.error.clone())
    }

    /// Read the `error` column back: the JSON object, or the bare message an
    /// older mc wrote.
    pub fn from_column(text: String) -> FailureRecord {
        if text.trim_start().starts_with('{')
            && let Ok(record) = serde_json::from_str::<FailureRecord>(&text)
        {
            return record;
        }
        FailureRecord {
            error: text,
            error_class: None,
            error_hints: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeout() -> LlmError {
        LlmError::new(
            llm::ModelRef::parse("a/m").as_ref(),
            llm::CallFailure::Timeout,
            "no answer within 400 ms",
        )
        .with_hint("raise historian.timeout_ms")
    }

    #[test]
    fn classes_and_hints_follow_the_cause() {
        let model = RunFailure::Model(timeout());
        assert_eq!(model.class(), "provider_timeout");
        assert_eq!(model.to_string(), "a/m: no answer within 400 ms");
        assert_eq!(model.hints(), ["raise historian.timeout_ms"]);
        let repair = RunFailure::RepairFailed {
            problem: "no <history>".into(),
            failure: Box::new(model.clone()),
        };
        assert_eq!(repair.class(), "provider_timeout");
        assert_eq!(
            repair.to_string(),
            "answer rejected: no <history>; the repair call failed: a/m: no answer within 400 ms"
        );
        let chunk = RunFailure::Chunk {
            index: 2,
            failure: Box::new(RunFailure::Refused(Refusal::LeaseLost)),
        };
        assert_eq!(chunk.class(), "lease_lost");
        assert!(
            chunk
                .to_string()
                .starts_with("chunk 2: the session's historian lease")
        );
        let rejected = RunFailure::Rejected {
            problem: "a".into(),
            again: "b".into(),
        };
        assert_eq!(rejected.class(), "answer_rejected");
        assert!(rejected.hints()[0].contains("historian.model"));
        let busy = Error::Sqlite(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            Some("database is locked".into()),
        ));
        let store = RunFailure::store(&busy);
        assert_eq!(store.class(), "store_unavailable");
        assert_eq!(store.to_string(), "database error: database is locked");
        assert!(store.hints()[0].contains("sqlite.busy_timeout_ms"));
    }

    #[test]
    fn records_round_trip_and_old_bare_messages_read_back() {
        let record = RunFailure::Model(timeout()).record();
        let json = serde_json::to_value(&record).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "error": "a/m: no answer within 400 ms",
                "error_class": "provider_timeout",
                "error_hints": ["raise historian.timeout_ms"],
            })
        );
        assert_eq!(FailureRecord::from_column(record.to_column()), record);
        let old = FailureRecord::from_column("boom: {\"x\": 1}".into());
        assert_eq!(old.error, "boom: {\"x\": 1}");
        assert_eq!(old.error_class, None);
        // A report shows the failure as the same three fields.
        let shown = serde_json::to_value(RunFailure::Model(timeout())).unwrap();
        assert_eq!(shown, json);
    }
}

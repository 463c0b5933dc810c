//! The pass's output document (README, mc-transform): the messages and the report.

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::{Map, Value};

use mc_base::codec::Message;
use mc_base::codec::opencode::encode_all;

use mc_history::trigger::DueReason;

use super::render::ForNextPass;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Defer,
    Execute,
    Passthrough,
    /// A blocking fold is due and the adapter said it can wait: nothing was
    /// written, the messages are the input's; run the historian, then the pass.
    Wait,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Defer => "defer",
            Decision::Execute => "execute",
            Decision::Passthrough => "passthrough",
            Decision::Wait => "wait",
        }
    }
}

/// How much of the previously sent prompt this pass changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Bust {
    /// Every byte sent before is sent again: the provider cache survives.
    None,
    /// Mutations were first applied to earlier messages (drops, clearing).
    Soft,
    /// The head of the prompt was rebuilt.
    Hard,
}

impl Bust {
    pub fn as_str(self) -> &'static str {
        match self {
            Bust::None => "none",
            Bust::Soft => "soft",
            Bust::Hard => "hard",
        }
    }
}

/// The `pass` object of the output: what happened and why.
#[derive(Debug, Clone, Serialize)]
pub struct PassReport {
    pub decision: Decision,
    /// Why the scheduler decided as it did (threshold, ttl_expired, mid_turn, ...).
    pub reason: &'static str,
    pub bust: Bust,
    pub usage_percent: f64,
    /// Tags present in this pass's messages.
    pub tags: u64,
    /// Tags first dropped on this pass.
    pub dropped: Vec<i64>,
    /// m[0] was rebuilt on this pass...
    pub materialized: bool,
    /// ...for this reason (first_render, model_change, ttl_idle, pressure_backstop, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub materialize_reason: Option<&'static str>,
    /// A historian run would fold old history now (same rule as `mc-historian check`).
    pub historian_due: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub historian_reason: Option<DueReason>,
    /// Usage is so high the adapter should wait for the fold before sending.
    pub blocking: bool,
    pub warnings: Vec<String>,
    /// On a pass that busts anyway: the id of the newest message of the run
    /// of oldest messages the head covers and this pass took off the wire.
    /// The adapter may have the harness stop sending that message and every
    /// earlier one (OpenCode: mc's compaction boundary after it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fold_boundary: Option<String>,
    /// How this pass decided a new prompt's recall hint, when it gave one
    /// or its search was slow or failed (`hint`, `slow`, `failed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recall: Option<&'static str>,
}

impl PassReport {
    pub fn passthrough(warning: String) -> PassReport {
        PassReport {
            decision: Decision::Passthrough,
            reason: "error",
            bust: Bust::None,
            usage_percent: 0.0,
            tags: 0,
            dropped: Vec::new(),
            materialized: false,
            materialize_reason: None,
            historian_due: false,
            historian_reason: None,
            blocking: false,
            warnings: vec![warning],
            fold_boundary: None,
            recall: None,
        }
    }

    /// The answer of a pass that stops for a blocking fold (`decision: wait`).
    pub fn wait(usage_percent: f64, historian_reason: Option<DueReason>) -> PassReport {
        PassReport {
            decision: Decision::Wait,
            reason: "blocking_fold",
            usage_percent: (usage_percent * 10.0).round() / 10.0,
            historian_due: true,
            historian_reason,
            blocking: true,
            warnings: Vec::new(),
            ..PassReport::passthrough(String::new())
        }
    }
}

#[derive(Debug)]
pub struct PassOutput {
    /// The output messages (with `Resident::replay`, an index for a message
    /// of the previous output, byte for byte); empty when `unencoded`.
    pub messages: Vec<Value>,
    /// The output messages still decoded, with `Resident::unencoded`: what
    /// [`PassOutput::into_value`] encodes and [`PassOutput::write_document`]
    /// writes without a tree.
    pub unencoded: Option<Vec<Message>>,
    /// What the next pass may replay, with `Resident::replay` (never part
    /// of the document).
    pub for_next: Option<ForNextPass>,
    pub system: Option<Value>,
    pub pass: PassReport,
    /// The pass's row of the per-call record (`calls`), when it wrote one:
    /// where the gateway puts the usage of the call's own answer.
    pub call: Option<i64>,
}

impl PassOutput {
    /// The output document, `{"messages", "system"?, "pass"}`.
    pub fn into_value(self) -> Value {
        let mut map = Map::new();
        let messages = match self.unencoded {
            Some(messages) => encode_all(messages),
            None => self.messages,
        };
        map.insert("messages".into(), Value::Array(messages));
        if let Some(system) = self.system {
            map.insert("system".into(), system);
        }
        // Plain fields with string keys always serialise (a non-finite
        // float becomes null); null only guards the impossible.
        map.insert(
            "pass".into(),
            serde_json::to_value(&self.pass).unwrap_or(Value::Null),
        );
        Value::Object(map)
    }

    /// Write the output document compactly: the bytes of
    /// [`PassOutput::into_value`]'s value, with no tree built for messages
    /// still decoded (each `info` goes out as the text it was kept as).
    pub fn write_document(&self, out: impl std::io::Write) -> serde_json::Result<()> {
        serde_json::to_writer(out, &Document(self))
    }
}

/// [`PassOutput::write_document`]'s document: the keys of `into_value`, in its order.
struct Document<'a>(&'a PassOutput);

impl Serialize for Document<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let output = self.0;
        let mut map = serializer.serialize_map(None)?;
        match &output.unencoded {
            Some(messages) => {
                map.serialize_entry("messages", &Seq(messages.iter().map(Message::to_writer)))?
            }
            None => map.serialize_entry("messages", &output.messages)?,
        }
        if let Some(system) = &output.system {
            map.serialize_entry("system", system)?;
        }
        // As `into_value`: through a value (a non-finite float is null).
        let pass = serde_json::to_value(&output.pass).unwrap_or(Value::Null);
        map.serialize_entry("pass", &pass)?;
        map.end()
    }
}

/// A sequence serialised from an iterator that can be cloned.
struct Seq<I>(I);

impl<I: Iterator<Item = T> + Clone, T: Serialize> Serialize for Seq<I> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.clone())
    }
}

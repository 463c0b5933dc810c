//! Codecs: each harness's message JSON in, one internal model, the same JSON out.
//!
//! The internal model is a thin typed view over the harness's own objects:
//! every message and part keeps its original JSON map, so a field the codec
//! does not understand is carried through unchanged and in its place. The
//! transform only reads through accessors and edits through setters.

pub mod anthropic;
pub mod claude;
pub mod codex;
pub mod jsonl;
pub mod opencode;
pub mod pi;
pub mod responses;

pub use opencode::{Message, Part, PartKind, Role};

/// The wire shape of an envelope's messages, kept to write the pass's output
/// back in the shape the harness sent.
#[derive(Debug, Clone)]
pub enum Wire {
    /// OpenCode's `{info, parts}`: the internal model itself.
    OpenCode,
    /// Pi's agent messages ([`pi`]).
    Pi(pi::Layout),
}

/// An envelope's messages, decoded.
#[derive(Debug)]
pub struct Decoded {
    pub messages: Vec<Message>,
    pub wire: Wire,
    /// The message mc's compaction boundary follows, when the input had one
    /// (OpenCode: the harness no longer sends it or anything before it). The
    /// boundary's own messages are mc's bookkeeping, never in `messages`.
    pub boundary: Option<String>,
}

impl Decoded {
    /// OpenCode messages already decoded one by one (`opencode::decode_all`
    /// of the envelope's values), with mc's boundary taken out.
    pub fn opencode(mut messages: Vec<Message>) -> Decoded {
        let boundary = opencode::take_boundary(&mut messages);
        Decoded {
            messages,
            wire: Wire::OpenCode,
            boundary,
        }
    }
}

impl Wire {
    /// Decode an envelope's messages by its `harness` (`session_id` names the
    /// session for harnesses whose messages do not), mc's compaction boundary
    /// taken out (only OpenCode's input can carry one; Pi's encoder writes
    /// back by position, so nothing is taken from it).
    pub fn decode(
        harness: &str,
        session_id: Option<&str>,
        values: Vec<serde_json::Value>,
    ) -> crate::error::Result<Decoded> {
        match harness {
            PI => pi::decode(values, session_id).map(|(messages, layout)| Decoded {
                messages,
                wire: Wire::Pi(layout),
                boundary: None,
            }),
            _ => opencode::decode_all(values).map(Decoded::opencode),
        }
    }

    pub fn encode(self, messages: Vec<Message>) -> Vec<serde_json::Value> {
        match self {
            Wire::OpenCode => opencode::encode_all(messages),
            Wire::Pi(layout) => pi::encode(messages, layout),
        }
    }
}

/// The harness name of Pi in envelopes, sessions and commands.
pub const PI: &str = "pi";

/// One message of a transcript converted to OpenCode's shape (Claude Code's
/// [`claude::to_grouped_messages`], Codex's [`codex::to_grouped_messages`]),
/// with the transcript lines it was made of.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupedMessage {
    /// `info.id`: the id of the first line (a Claude Code line uuid, a Codex item id).
    pub id: String,
    /// The ids of every line folded into this message (tool result lines included).
    pub uuids: Vec<String>,
    /// `"user"` or `"assistant"`.
    pub role: &'static str,
    pub created_ms: Option<i64>,
    /// `{info, parts}`.
    pub message: serde_json::Value,
}

/// A transcript's tool result written into the OpenCode-shaped tool part it
/// answers: `completed` with its output, or `error` with it, and the end time.
pub(crate) fn close_tool_state(
    state: &mut serde_json::Map<String, serde_json::Value>,
    text: String,
    failed: bool,
    end_ms: Option<i64>,
) {
    use serde_json::{Value, json};
    if failed {
        state.insert("status".into(), json!("error"));
        state.insert("error".into(), json!(text));
    } else {
        state.insert("status".into(), json!("completed"));
        state.insert("output".into(), json!(text));
    }
    if let (Some(ts), Some(time)) = (end_ms, state.get_mut("time").and_then(Value::as_object_mut)) {
        time.insert("end".into(), json!(ts));
    }
}

/// A part from its JSON (an empty `Other` part if it is not an object).
pub(crate) fn part(raw: serde_json::Value) -> Part {
    // An empty object has no `type`: an `Other` part.
    Part::decode(raw).unwrap_or_else(|_| Part::from_map(serde_json::Map::new()))
}

/// The block index a part was made from (`<message id>/<k>`), if any.
pub(crate) fn block_index(part: &Part) -> Option<usize> {
    part.str_field("id")?.rsplit_once('/')?.1.parse().ok()
}

/// Set `key` of an object (anything else is left alone).
pub(crate) fn set(value: &mut serde_json::Value, key: &str, new: serde_json::Value) {
    if let Some(map) = value.as_object_mut() {
        map.insert(key.into(), new);
    }
}

//! Replay: turn the input messages plus stored state into the output bytes.
//!
//! A pure function. It never looks at what an earlier pass emitted, only at
//! the input and the stored tag states and watermarks, so the same state and
//! input always give the same bytes (ARCHITECTURE.md, invariants 1–3).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::codec::{Message, Part, PartKind, Role};

use super::caveman;
use crate::domain::notation::{placeholder, prefixed, strip_leading_tags};
use crate::domain::tags::{DropMode, TagKind, TagRow};

/// The version of every rule that turns input and stored state into bytes:
/// placeholders, skeletons, prefixes, caveman, temporal markers, reminders and
/// the head's format. Bump it with any change to them: each session's next
/// pass then busts once, declared (`materialize_reason: render_version`),
/// instead of changing cached bytes under a report that says `bust: none`.
/// `render_fingerprint_is_pinned_to_the_version` fails until it is bumped.
pub const RENDER_VERSION: i64 = 1;

/// Tool inputs whose JSON is longer than this are clamped in a skeleton.
const SKELETON_INPUT_LIMIT: usize = 500;
/// Characters of a string input value a skeleton keeps.
const SKELETON_KEEP_CHARS: usize = 5;

/// Per message, per part: the index into the tag list of the part's tag.
pub type Bindings = Vec<Vec<Option<usize>>>;

/// The synthetic head: m[0] and m[1] as two user messages.
pub struct Head<'a> {
    pub session_id: &'a str,
    pub m0: &'a str,
    pub m1: &'a str,
}

pub struct RenderState<'a> {
    pub tags: &'a [TagRow],
    /// Per message, per part: the index into `tags` of the part's tag.
    pub bindings: &'a [Vec<Option<usize>>],
    /// Show `§N§` prefixes (the agent can call ctx_reduce).
    pub prefixes: bool,
    /// Reasoning of messages whose age tag is at or below this is cleared...
    pub reasoning_cleared_through: i64,
    /// ...unless the message keeps it (it was pinned when the watermark passed).
    pub keep_reasoning: &'a [bool],
    /// Per message, its stable ordinal (messages without an id have none).
    pub ordinals: &'a [Option<i64>],
    /// Messages up to this ordinal are covered by the head and leave the wire.
    pub covered_through: i64,
    /// Per message, a temporal marker for its first text part.
    pub markers: &'a [Option<String>],
    pub head: Option<Head<'a>>,
    /// Channel 2: synthetic reminders, each after the message with its id.
    pub nudge2: &'a BTreeMap<String, String>,
}

/// The newest tag of each message, carried forward to untagged messages so
/// every message has an age.
pub fn age_tags(tags: &[TagRow], bindings: &[Vec<Option<usize>>]) -> Vec<i64> {
    let mut last = 0;
    bindings
        .iter()
        .map(|parts| {
            let newest = parts
                .iter()
                .flatten()
                .filter_map(|&i| tags.get(i))
                .map(|tag| tag.number)
                .max();
            if let Some(n) = newest {
                last = last.max(n);
            }
            last
        })
        .collect()
}

fn synthetic_user(session_id: &str, text: &str) -> Message {
    let info = serde_json::json!({"role": "user", "sessionID": session_id, "syntheticHead": true});
    synthetic_message(info, text)
}

fn reminder(session_id: &str, text: &str) -> Message {
    synthetic_message(
        serde_json::json!({"role": "user", "sessionID": session_id}),
        text,
    )
}

/// `{"info": info, "parts": [{"type": "text", "text": text, "synthetic": true}]}`,
/// built as `Message::decode` would build it.
fn synthetic_message(info: Value, text: &str) -> Message {
    let mut raw = Map::new();
    raw.insert("info".into(), info);
    let mut part = Map::new();
    part.insert("type".into(), Value::from("text"));
    part.insert("text".into(), Value::from(text));
    part.insert("synthetic".into(), Value::Bool(true));
    Message::new(
        raw,
        vec![Part {
            kind: PartKind::Text,
            raw: part,
        }],
    )
}

pub fn render(messages: Vec<Message>, state: &RenderState<'_>) -> Vec<Message> {
    let ages = age_tags(state.tags, state.bindings);
    let mut out = Vec::with_capacity(messages.len() + 3);
    if let Some(head) = &state.head {
        out.push(synthetic_user(head.session_id, head.m0));
        out.push(synthetic_user(head.session_id, head.m1));
    }
    for (index, mut message) in messages.into_iter().enumerate() {
        // The per-message slices are as long as `messages`; a missing entry
        // reads as "no ordinal, no tags, no marker".
        let ordinal = state.ordinals.get(index).copied().flatten();
        if ordinal.is_some_and(|o| o <= state.covered_through) {
            continue; // covered by the head's compartments
        }
        let binding = state.bindings.get(index).map_or(&[][..], Vec::as_slice);
        let has_dropped = binding
            .iter()
            .flatten()
            .filter_map(|&i| state.tags.get(i))
            .any(|tag| tag.dropped.is_some());
        let age = ages.get(index).copied().unwrap_or(0);
        let clear_reasoning = has_dropped
            || (age > 0
                && age <= state.reasoning_cleared_through
                && !state.keep_reasoning.get(index).copied().unwrap_or(false));
        let mut marker = state.markers.get(index).and_then(Option::as_deref);
        let old_parts = std::mem::take(&mut message.parts);
        let mut removed_any = false;
        let mut parts = Vec::with_capacity(old_parts.len());
        for (part_index, mut part) in old_parts.into_iter().enumerate() {
            if part.kind == PartKind::Reasoning && clear_reasoning {
                removed_any = true;
                continue;
            }
            let tag = binding
                .get(part_index)
                .copied()
                .flatten()
                .and_then(|i| state.tags.get(i));
            if let Some(tag) = tag {
                match (tag.dropped, tag.kind) {
                    (Some(DropMode::Full), TagKind::Tool) => {
                        removed_any = true;
                        continue;
                    }
                    (Some(DropMode::Skeleton), TagKind::Tool) => skeleton(&mut part, tag.number),
                    (Some(_), TagKind::Message) => {
                        part.set_text(placeholder(tag.number));
                        marker = None;
                    }
                    (Some(_), TagKind::File) => part = file_placeholder(part, tag.number),
                    (None, TagKind::Tool) => {
                        if let Some(output) = part.tool_output() {
                            let mut output = if state.prefixes {
                                prefixed(tag.number, output)
                            } else {
                                output.to_string()
                            };
                            if let Some(nudge) = &tag.nudge {
                                output.push_str(nudge);
                            }
                            part.set_tool_output(output);
                        }
                    }
                    (None, TagKind::Message) => {
                        let pristine = part.text().unwrap_or_default();
                        let mut body = match caveman::Level::from_depth(tag.caveman_depth) {
                            Some(level) => caveman::compress(strip_leading_tags(pristine), level),
                            None => strip_leading_tags(pristine).to_string(),
                        };
                        if let Some(m) = marker.take() {
                            body.insert_str(0, m);
                        }
                        part.set_text(if state.prefixes {
                            prefixed(tag.number, &body)
                        } else {
                            body
                        });
                    }
                    (None, TagKind::File) => {}
                }
            } else if part.kind == PartKind::Text
                && !part.is_ignored()
                && let Some(m) = marker.take()
            {
                let text = format!("{m}{}", part.text().unwrap_or_default());
                part.set_text(text);
            }
            parts.push(part);
        }
        message.parts = parts;
        // A step wrapper emptied by drops goes too; a user message always stays
        // (as a placeholder shell) so turn boundaries survive.
        if removed_any
            && message.role() != Role::User
            && !message.parts.iter().any(Part::is_meaningful)
        {
            continue;
        }
        let after = message
            .id()
            .and_then(|id| state.nudge2.get(id))
            .map(|text| reminder(message.session_id().unwrap_or_default(), text));
        out.push(message);
        out.extend(after);
    }
    out
}

fn skeleton(part: &mut Part, number: i64) {
    part.set_tool_output(placeholder(number));
    if let Some(input) = part.tool_input_mut() {
        let long = serde_json::to_string(input).map_or(0, |s| s.len()) > SKELETON_INPUT_LIMIT;
        if long && let Value::Object(map) = input {
            for value in map.values_mut() {
                clamp_value(value);
            }
        }
    }
}

fn clamp_value(value: &mut Value) {
    let clamped = match value {
        Value::String(s) if s.chars().count() > SKELETON_KEEP_CHARS => {
            let head: String = s.chars().take(SKELETON_KEEP_CHARS).collect();
            format!("{head}...[truncated]")
        }
        Value::Array(items) => format!("[{} items]", items.len()),
        Value::Object(_) => "[object]".to_string(),
        _ => return,
    };
    *value = Value::String(clamped);
}

/// A dropped file becomes a text part carrying the placeholder; its ids stay.
fn file_placeholder(part: Part, number: i64) -> Part {
    let mut raw = Map::new();
    for key in ["id", "sessionID", "messageID"] {
        if let Some(v) = part.raw.get(key) {
            raw.insert(key.into(), v.clone());
        }
    }
    raw.insert("type".into(), Value::String("text".into()));
    raw.insert("text".into(), Value::String(placeholder(number)));
    Part {
        kind: PartKind::Text,
        raw,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn skeleton_clamps_only_long_inputs() {
        let mut short = Part::decode(json!({"type": "tool", "state": {"status": "completed",
            "input": {"filePath": "src/lib.rs"}, "output": "x"}}))
        .unwrap();
        skeleton(&mut short, 4);
        assert_eq!(short.tool_output(), Some("[dropped §4§]"));
        assert_eq!(short.tool_input(), Some(&json!({"filePath": "src/lib.rs"})));

        let body = "y".repeat(600);
        let mut long = Part::decode(json!({"type": "tool", "state": {"status": "completed",
            "input": {"filePath": "src/lib.rs", "content": body, "n": 3, "list": [1, 2], "o": {"a": 1}},
            "output": "x"}})).unwrap();
        skeleton(&mut long, 5);
        assert_eq!(
            long.tool_input(),
            Some(
                &json!({"filePath": "src/l...[truncated]", "content": "yyyyy...[truncated]",
                         "n": 3, "list": "[2 items]", "o": "[object]"})
            )
        );
        // Idempotent: clamping a clamped input changes nothing.
        let before = long.tool_input().cloned();
        skeleton(&mut long, 5);
        assert_eq!(long.tool_input().cloned(), before);
    }
}

//! Replay: turn the input messages plus stored state into the output bytes.
//!
//! A pure function. It never looks at what an earlier pass emitted, only at
//! the input and the stored tag states and watermarks, so the same state and
//! input always give the same bytes (DESIGN §4.3 invariants 1–3).

use serde_json::{Map, Value};

use crate::codec::{Message, Part, PartKind, Role};

use super::notation::{placeholder, prefixed};
use super::state::{DropMode, TagKind, TagRow};

/// Tool inputs whose JSON is longer than this are clamped in a skeleton.
const SKELETON_INPUT_LIMIT: usize = 500;
/// Characters of a string input value a skeleton keeps.
const SKELETON_KEEP_CHARS: usize = 5;

/// Per message, per part: the index into the tag list of the part's tag.
pub type Bindings = Vec<Vec<Option<usize>>>;

pub struct RenderState<'a> {
    pub tags: &'a [TagRow],
    /// Per message, per part: the index into `tags` of the part's tag.
    pub bindings: &'a [Vec<Option<usize>>],
    /// Show `§N§` prefixes (the agent can call ctx_reduce).
    pub prefixes: bool,
    /// Reasoning of messages whose age tag is at or below this is cleared.
    pub reasoning_cleared_through: i64,
}

/// The newest tag of each message, carried forward to untagged messages so
/// every message has an age.
pub fn age_tags(tags: &[TagRow], bindings: &[Vec<Option<usize>>]) -> Vec<i64> {
    let mut last = 0;
    bindings
        .iter()
        .map(|parts| {
            let newest = parts.iter().flatten().map(|&i| tags[i].number).max();
            if let Some(n) = newest {
                last = last.max(n);
            }
            last
        })
        .collect()
}

pub fn render(messages: Vec<Message>, state: &RenderState<'_>) -> Vec<Message> {
    let ages = age_tags(state.tags, state.bindings);
    let mut out = Vec::with_capacity(messages.len());
    for (index, mut message) in messages.into_iter().enumerate() {
        let binding = &state.bindings[index];
        let has_dropped = binding
            .iter()
            .flatten()
            .any(|&i| state.tags[i].dropped.is_some());
        let clear_reasoning =
            has_dropped || (ages[index] > 0 && ages[index] <= state.reasoning_cleared_through);
        let old_parts = std::mem::take(&mut message.parts);
        let mut removed_any = false;
        let mut parts = Vec::with_capacity(old_parts.len());
        for (part_index, mut part) in old_parts.into_iter().enumerate() {
            if part.kind == PartKind::Reasoning && clear_reasoning {
                removed_any = true;
                continue;
            }
            let Some(tag) = binding
                .get(part_index)
                .copied()
                .flatten()
                .map(|i| &state.tags[i])
            else {
                parts.push(part);
                continue;
            };
            match (tag.dropped, tag.kind) {
                (Some(DropMode::Full), TagKind::Tool) => {
                    removed_any = true;
                    continue;
                }
                (Some(DropMode::Skeleton), TagKind::Tool) => skeleton(&mut part, tag.number),
                (Some(_), TagKind::Message) => part.set_text(placeholder(tag.number)),
                (Some(_), TagKind::File) => part = file_placeholder(part, tag.number),
                (None, TagKind::Message) if state.prefixes => {
                    let text = prefixed(tag.number, part.text().unwrap_or_default());
                    part.set_text(text);
                }
                (None, TagKind::Tool) if state.prefixes => {
                    if let Some(output) = part.tool_output() {
                        let output = prefixed(tag.number, output);
                        part.set_tool_output(output);
                    }
                }
                (None, _) => {}
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
        out.push(message);
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

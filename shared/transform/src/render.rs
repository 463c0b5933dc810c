//! Replay: turn the input messages plus stored state into the output bytes.
//!
//! A pure function. It never looks at what an earlier pass emitted, only at
//! the input and the stored tag states and watermarks, so the same state and
//! input always give the same bytes (ARCHITECTURE.md, invariants 1–3).

use std::collections::{BTreeMap, VecDeque};

use rustc_hash::{FxHashMap, FxHashSet};
use serde_json::{Map, Value};

use mc_base::codec::{Message, Part, PartKind, Role};

use super::{caveman, recall, smart_drops};
use mc_base::domain::notation::{placeholder, prefixed, strip_leading_tags};
use mc_base::domain::tags::{DropMode, TagKind, TagRow};

/// The version of every rule that turns input and stored state into bytes:
/// placeholders, skeletons, prefixes, caveman, temporal markers, reminders,
/// the head's format, the system prompt's guidance. Bump it with any change
/// to them: each session's next pass then busts once, declared
/// (`materialize_reason: render_version`),
/// instead of changing cached bytes under a report that says `bust: none`.
/// `render_fingerprint_is_pinned_to_the_version` fails until it is bumped.
pub const RENDER_VERSION: i64 = 3;

/// A dropped call keeps its real arguments up to this many bytes of JSON
/// (models copied placeholder arguments into new calls); longer ones are
/// cut, longest text first, each cut marked `…[N bytes cut]`.
pub const ARGUMENTS_CAP: usize = 1024;
/// A text is never cut below this many bytes.
const CUT_FLOOR: usize = 32;
/// Room for the cut marker, `…[N bytes cut]`.
const CUT_MARK_ROOM: usize = 24;

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
    /// The synthetic todo call frozen on the last busting pass (`todo`),
    /// right after the head.
    pub todo: Option<&'a Message>,
    /// Recall hints, each appended to the prompt with its id (`recall`).
    pub hints: &'a BTreeMap<String, String>,
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
pub(crate) fn synthetic_message(info: Value, text: &str) -> Message {
    let mut raw = Map::new();
    raw.insert("info".into(), info);
    let mut part = Map::new();
    part.insert("type".into(), Value::from("text"));
    part.insert("text".into(), Value::from(text));
    part.insert("synthetic".into(), Value::Bool(true));
    Message::new(raw, vec![Part::from_map(part)])
}

/// The output messages: the head, the frozen todo call, then each input
/// message rendered (and its reminder). Written into the input's own
/// vector: a message's slot is free once it is taken out to render, and
/// what does not fit yet (the head, a reminder) waits in a queue for the
/// next free slot, so a long input is not held twice while the output is
/// built (the one-shot pass's memory on many small messages, issue 26).
pub fn render(mut messages: Vec<Message>, state: &RenderState<'_>) -> Vec<Message> {
    let ages = age_tags(state.tags, state.bindings);
    let mut waiting: VecDeque<Message> = head_messages(state).collect();
    waiting.extend(state.todo.cloned());
    let mut tags = Vec::new();
    // Slots `written..=index` are free once message `index` is taken out.
    let mut written = 0;
    for index in 0..messages.len() {
        let Some(slot) = messages.get_mut(index) else {
            break;
        };
        let message = std::mem::replace(slot, Message::new(Map::new(), Vec::new()));
        let input = MessageInput::of(&message, index, &ages, state, tags);
        let (rendered, reminder) = render_message(message, &input);
        tags = input.into_buffer();
        waiting.extend(rendered);
        waiting.extend(reminder);
        while written <= index {
            let Some(next) = waiting.pop_front() else {
                break;
            };
            if let Some(free) = messages.get_mut(written) {
                *free = next;
            }
            written += 1;
        }
    }
    messages.truncate(written);
    messages.reserve_exact(waiting.len());
    messages.extend(waiting);
    messages
}

/// One output message of [`render_replaying`].
// A pass's slots are one vector, built once and consumed at once: boxing
// each fresh message would cost an allocation per message for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Slot {
    /// Rendered on this pass.
    Fresh(Message),
    /// The message at this index of the previous pass's output, byte for byte.
    Again(usize),
}

/// How one input message rendered: the fingerprint of its
/// [`MessageInput`] and the run of output messages it became (none when
/// covered or emptied by drops; itself, then its reminder if any).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rendering {
    pub key: u128,
    pub first: usize,
    pub count: usize,
}

/// [`Rendering`]s by message id (`info.id`); ids seen twice are left out.
pub type Renderings = FxHashMap<Box<str>, Rendering>;

/// What a resident process knows of the previous pass's render.
#[derive(Debug, Default)]
pub struct Replay {
    /// How the previous pass rendered its input messages.
    pub previous: Renderings,
    /// How many messages the previous output has.
    pub previous_len: usize,
    /// The ids of this input's messages that are not the previous input's
    /// messages unchanged (a delta's new and changed messages).
    pub changed: FxHashSet<Box<str>>,
}

/// What [`render_replaying`] leaves for the next pass.
#[derive(Debug, Default)]
pub struct ForNextPass {
    /// How this pass rendered each input message with an id.
    pub renderings: Renderings,
    /// The input messages not rendered again, untouched (decoded input a
    /// resident process may keep instead of decoding it once more).
    pub unused: Vec<Message>,
}

/// [`render`] for a resident process that kept the previous pass's
/// renderings (`replay`). A message that is one of the previous input's,
/// unchanged, with the same render input again, is not rendered: its
/// slots name the previous output's messages. Equal bytes follow because a
/// message's output is a function of the message and its
/// [`MessageInput`] alone. A message is known to be the previous input's
/// when its id is not among `replay.changed` and no other message of
/// either input carries it.
pub fn render_replaying(
    messages: Vec<Message>,
    state: &RenderState<'_>,
    replay: &Replay,
) -> (Vec<Slot>, ForNextPass) {
    let ages = age_tags(state.tags, state.bindings);
    let mut slots = Vec::with_capacity(messages.len() + 3);
    slots.extend(head_messages(state).map(Slot::Fresh));
    slots.extend(state.todo.cloned().map(Slot::Fresh));
    // An id the input carries twice names no one message: neither copy
    // replays, and neither is kept.
    let mut seen = FxHashMap::with_capacity_and_hasher(messages.len(), Default::default());
    for id in messages.iter().filter_map(Message::id) {
        *seen.entry(id).or_insert(0u32) += 1;
    }
    let repeated: FxHashSet<Box<str>> = seen
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(id, _)| Box::from(id))
        .collect();
    let mut renderings = Renderings::with_capacity_and_hasher(messages.len(), Default::default());
    let mut unused = Vec::new();
    let mut tags = Vec::new();
    let mut bytes = Vec::new();
    for (index, message) in messages.into_iter().enumerate() {
        let input = MessageInput::of(&message, index, &ages, state, tags);
        let key = input.key(&mut bytes);
        let first = slots.len();
        let id = message
            .id()
            .filter(|id| !repeated.contains(*id))
            .map(Box::<str>::from);
        let before = id
            .as_deref()
            .filter(|id| !replay.changed.contains(*id))
            .and_then(|id| replay.previous.get(id))
            .filter(|r| r.key == key && r.first + r.count <= replay.previous_len);
        let count = match before {
            Some(before) => {
                slots.extend((before.first..before.first + before.count).map(Slot::Again));
                unused.push(message);
                before.count
            }
            None => {
                let (rendered, reminder) = render_message(message, &input);
                let count = usize::from(rendered.is_some()) + usize::from(reminder.is_some());
                slots.extend(rendered.into_iter().chain(reminder).map(Slot::Fresh));
                count
            }
        };
        tags = input.into_buffer();
        if let Some(id) = id {
            renderings.insert(id, Rendering { key, first, count });
        }
    }
    (slots, ForNextPass { renderings, unused })
}

fn head_messages(state: &RenderState<'_>) -> impl Iterator<Item = Message> {
    state
        .head
        .as_ref()
        .map(|head| {
            [
                synthetic_user(head.session_id, head.m0),
                synthetic_user(head.session_id, head.m1),
            ]
        })
        .into_iter()
        .flatten()
}

/// A tag as the render reads it: nothing else of the row reaches the bytes.
#[derive(Debug, Clone, Copy)]
struct TagView<'s> {
    number: i64,
    kind: TagKind,
    dropped: Option<DropMode>,
    caveman_depth: u8,
    nudge: Option<&'s str>,
}

/// Everything one message's render reads besides the message itself.
/// [`render_message`] sees only this and the message, so a message and an
/// equal input (equal [`MessageInput::key`]) render to the same bytes.
struct MessageInput<'s> {
    /// Covered by the head's compartments: off the wire.
    covered: bool,
    prefixes: bool,
    clear_reasoning: bool,
    /// The temporal marker for its first text part.
    marker: Option<&'s str>,
    /// Per part the binding names, its tag.
    tags: Vec<Option<TagView<'s>>>,
    /// The Channel 2 reminder that follows it.
    reminder: Option<&'s str>,
    /// The recall hint appended to its typed text.
    hint: Option<&'s str>,
}

impl<'s> MessageInput<'s> {
    /// The render input of `message`, the `index`th input message; `tags`
    /// is a buffer to reuse.
    fn of(
        message: &Message,
        index: usize,
        ages: &[i64],
        state: &RenderState<'s>,
        mut tags: Vec<Option<TagView<'s>>>,
    ) -> MessageInput<'s> {
        tags.clear();
        // The per-message slices are as long as the messages; a missing
        // entry reads as "no ordinal, no tags, no marker".
        let ordinal = state.ordinals.get(index).copied().flatten();
        if ordinal.is_some_and(|o| o <= state.covered_through) {
            return MessageInput {
                covered: true,
                prefixes: false,
                clear_reasoning: false,
                marker: None,
                tags,
                reminder: None,
                hint: None,
            };
        }
        let binding = state.bindings.get(index).map_or(&[][..], Vec::as_slice);
        tags.extend(binding.iter().map(|at| {
            at.and_then(|i| state.tags.get(i)).map(|tag| TagView {
                number: tag.number,
                kind: tag.kind,
                dropped: tag.dropped,
                caveman_depth: tag.caveman_depth,
                nudge: tag.nudge.as_deref(),
            })
        }));
        let has_dropped = tags.iter().flatten().any(|tag| tag.dropped.is_some());
        let age = ages.get(index).copied().unwrap_or(0);
        let clear_reasoning = has_dropped
            || (age > 0
                && age <= state.reasoning_cleared_through
                && !state.keep_reasoning.get(index).copied().unwrap_or(false));
        MessageInput {
            covered: false,
            prefixes: state.prefixes,
            clear_reasoning,
            marker: state.markers.get(index).and_then(Option::as_deref),
            tags,
            reminder: message
                .id()
                .and_then(|id| state.nudge2.get(id))
                .map(String::as_str),
            hint: message
                .id()
                .and_then(|id| state.hints.get(id))
                .map(String::as_str),
        }
    }

    fn into_buffer(self) -> Vec<Option<TagView<'s>>> {
        self.tags
    }

    /// A fingerprint of the input: XXH3-128 over an injective encoding of
    /// every field (a tag byte per optional value, lengths before text).
    fn key(&self, bytes: &mut Vec<u8>) -> u128 {
        fn text(bytes: &mut Vec<u8>, text: Option<&str>) {
            match text {
                None => bytes.push(0),
                Some(t) => {
                    bytes.push(1);
                    bytes.extend_from_slice(&(t.len() as u64).to_le_bytes());
                    bytes.extend_from_slice(t.as_bytes());
                }
            }
        }
        bytes.clear();
        if self.covered {
            bytes.push(0);
        } else {
            bytes.push(1);
            bytes.push(u8::from(self.prefixes));
            bytes.push(u8::from(self.clear_reasoning));
            text(bytes, self.marker);
            bytes.extend_from_slice(&(self.tags.len() as u64).to_le_bytes());
            for tag in &self.tags {
                match tag {
                    None => bytes.push(0),
                    Some(tag) => {
                        bytes.push(1);
                        bytes.extend_from_slice(&tag.number.to_le_bytes());
                        bytes.push(match tag.kind {
                            TagKind::Message => 0,
                            TagKind::File => 1,
                            TagKind::Tool => 2,
                        });
                        bytes.push(match tag.dropped {
                            None => 0,
                            Some(DropMode::Full) => 1,
                            Some(DropMode::Skeleton) => 2,
                            Some(DropMode::Marker) => 3,
                        });
                        bytes.push(tag.caveman_depth);
                        text(bytes, tag.nudge);
                    }
                }
            }
            text(bytes, self.reminder);
            text(bytes, self.hint);
        }
        xxhash_rust::xxh3::xxh3_128(bytes)
    }
}

/// One message's output: itself as rendered (none when covered or emptied
/// by drops), and the reminder that follows it.
fn render_message(
    mut message: Message,
    input: &MessageInput<'_>,
) -> (Option<Message>, Option<Message>) {
    if input.covered {
        return (None, None);
    }
    let mut marker = input.marker;
    let hint_at = input.hint.and_then(|_| recall::hint_part(&message));
    let old_parts = std::mem::take(&mut message.parts);
    let mut removed_any = false;
    let mut parts = Vec::with_capacity(old_parts.len());
    for (part_index, mut part) in old_parts.into_iter().enumerate() {
        if part.kind == PartKind::Reasoning && input.clear_reasoning {
            removed_any = true;
            continue;
        }
        let tag = input.tags.get(part_index).copied().flatten();
        if let Some(tag) = tag {
            match (tag.dropped, tag.kind) {
                (Some(DropMode::Full), TagKind::Tool) => {
                    removed_any = true;
                    continue;
                }
                (Some(DropMode::Skeleton), TagKind::Tool) => skeleton(&mut part, tag.number),
                (Some(DropMode::Marker), TagKind::Tool) => edit_marker(&mut part, tag.number),
                (Some(_), TagKind::Message) => {
                    part.set_text(placeholder(tag.number));
                    marker = None;
                }
                (Some(_), TagKind::File) => part = file_placeholder(part, tag.number),
                (None, TagKind::Tool) => {
                    if let Some(output) = part.tool_output() {
                        let mut output = if input.prefixes {
                            prefixed(tag.number, output)
                        } else {
                            output.to_string()
                        };
                        if let Some(nudge) = tag.nudge {
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
                    part.set_text(if input.prefixes {
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
        // The hint follows the typed text, unless a drop replaced it.
        if let Some(hint) = input.hint
            && hint_at == Some(part_index)
            && tag.is_none_or(|t| t.dropped.is_none())
        {
            let text = format!("{}{hint}", part.text().unwrap_or_default());
            part.set_text(text);
        }
        parts.push(part);
    }
    message.parts = parts;
    // A step wrapper emptied by drops goes too; a user message always stays
    // (as a placeholder shell) so turn boundaries survive.
    if removed_any && message.role() != Role::User && !message.parts.iter().any(Part::is_meaningful)
    {
        return (None, None);
    }
    let reminder = input
        .reminder
        .map(|text| reminder(message.session_id().unwrap_or_default(), text));
    (Some(message), reminder)
}

fn skeleton(part: &mut Part, number: i64) {
    part.set_tool_output(placeholder(number));
    if let Some(input) = part.tool_input_mut() {
        cap_arguments(input);
    }
}

/// An edit superseded by a later one: its path and a hint of the region
/// (`smart_drops::marker_input`), the placeholder as its output.
fn edit_marker(part: &mut Part, number: i64) {
    part.set_tool_output(placeholder(number));
    let tool = part.tool_name().unwrap_or_default().to_string();
    if let Some(input) = part.tool_input_mut() {
        *input = smart_drops::marker_input(&tool, input);
        cap_arguments(input);
    }
}

fn json_len(value: &Value) -> usize {
    serde_json::to_string(value).map_or(0, |s| s.len())
}

/// The byte length of the longest text in `value`.
fn longest_text(value: &Value) -> usize {
    match value {
        Value::String(s) => s.len(),
        Value::Array(items) => items.iter().map(longest_text).max().unwrap_or(0),
        Value::Object(map) => map.values().map(longest_text).max().unwrap_or(0),
        _ => 0,
    }
}

/// Cut the first text of `len` bytes (in document order) to `keep` bytes
/// (at a character boundary) and mark the cut. Whether one was found.
fn cut_first(value: &mut Value, len: usize, keep: usize) -> bool {
    match value {
        Value::String(s) if s.len() == len => {
            let mut at = keep.min(s.len());
            while !s.is_char_boundary(at) {
                at -= 1;
            }
            let cut = s.len() - at;
            *s = format!("{}…[{cut} bytes cut]", s.get(..at).unwrap_or_default());
            true
        }
        Value::Array(items) => items.iter_mut().any(|v| cut_first(v, len, keep)),
        Value::Object(map) => map.values_mut().any(|v| cut_first(v, len, keep)),
        _ => false,
    }
}

/// Keep a dropped call's arguments whole up to [`ARGUMENTS_CAP`] bytes of
/// JSON; past it, cut the longest texts first, and if many small values
/// still exceed it, name nested lists and objects by their size. A pure
/// function of the arguments.
fn cap_arguments(input: &mut Value) {
    loop {
        let size = json_len(input);
        if size <= ARGUMENTS_CAP {
            return;
        }
        let longest = longest_text(input);
        if longest <= CUT_FLOOR + CUT_MARK_ROOM {
            break;
        }
        let keep = longest
            .saturating_sub(size - ARGUMENTS_CAP + CUT_MARK_ROOM)
            .max(CUT_FLOOR);
        if !cut_first(input, longest, keep) {
            break;
        }
    }
    if let Value::Object(map) = input {
        for value in map.values_mut() {
            let named = match value {
                Value::Array(items) => format!("[{} items]", items.len()),
                Value::Object(_) => "[object]".to_string(),
                _ => continue,
            };
            *value = Value::String(named);
        }
    }
}

/// A dropped file becomes a text part carrying the placeholder; its ids stay.
fn file_placeholder(part: Part, number: i64) -> Part {
    let mut raw = Map::new();
    for key in ["id", "sessionID", "messageID"] {
        if let Some(v) = part.get(key) {
            raw.insert(key.into(), v.clone());
        }
    }
    raw.insert("type".into(), Value::String("text".into()));
    raw.insert("text".into(), Value::String(placeholder(number)));
    Part::from_map(raw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The owned parts of a [`RenderState`], to vary one at a time.
    #[derive(Clone)]
    struct World {
        tags: Vec<TagRow>,
        bindings: Bindings,
        prefixes: bool,
        reasoning_cleared_through: i64,
        keep_reasoning: Vec<bool>,
        ordinals: Vec<Option<i64>>,
        covered_through: i64,
        markers: Vec<Option<String>>,
        nudge2: BTreeMap<String, String>,
        hints: BTreeMap<String, String>,
    }

    impl World {
        fn state(&self) -> RenderState<'_> {
            RenderState {
                tags: &self.tags,
                bindings: &self.bindings,
                prefixes: self.prefixes,
                reasoning_cleared_through: self.reasoning_cleared_through,
                keep_reasoning: &self.keep_reasoning,
                ordinals: &self.ordinals,
                covered_through: self.covered_through,
                markers: &self.markers,
                head: Some(Head {
                    session_id: "s",
                    m0: "m0",
                    m1: "m1",
                }),
                nudge2: &self.nudge2,
                todo: None,
                hints: &self.hints,
            }
        }
    }

    fn tag(number: i64, kind: TagKind) -> TagRow {
        TagRow {
            number,
            kind,
            identity: format!("i{number}"),
            dropped: None,
            tool_name: None,
            tokens: 10,
            input_tokens: 0,
            bytes: 40,
            caveman_depth: 0,
            nudge: None,
        }
    }

    /// Four messages: a user text, a tool step with reasoning, an answer, a
    /// user text; one tag per tagged part, numbered in order.
    fn session() -> (Vec<Message>, World) {
        let messages = vec![
            json!({"info": {"id": "m1", "sessionID": "s", "role": "user"},
                   "parts": [{"type": "text", "text": "please read the file"}]}),
            json!({"info": {"id": "m2", "sessionID": "s", "role": "assistant"},
                   "parts": [{"type": "reasoning", "text": "why"},
                             {"type": "tool", "callID": "c1", "tool": "read",
                              "state": {"status": "completed", "input": {"filePath": "a.rs"}, "output": "fn a() {}"}}]}),
            json!({"info": {"id": "m3", "sessionID": "s", "role": "assistant"},
                   "parts": [{"type": "reasoning", "text": "so"}, {"type": "text", "text": "Well, it is basically done."}]}),
            json!({"info": {"id": "m4", "sessionID": "s", "role": "user"},
                   "parts": [{"type": "text", "text": "thanks"}]}),
        ]
        .into_iter()
        .map(|v| Message::decode(v).unwrap())
        .collect();
        let world = World {
            tags: vec![
                tag(1, TagKind::Message),
                tag(2, TagKind::Tool),
                tag(3, TagKind::Message),
                tag(4, TagKind::Message),
            ],
            bindings: vec![
                vec![Some(0)],
                vec![None, Some(1)],
                vec![None, Some(2)],
                vec![Some(3)],
            ],
            prefixes: true,
            reasoning_cleared_through: 0,
            keep_reasoning: vec![false; 4],
            ordinals: vec![Some(1), Some(2), Some(3), Some(4)],
            covered_through: 0,
            markers: vec![None; 4],
            nudge2: BTreeMap::new(),
            hints: BTreeMap::new(),
        };
        (messages, world)
    }

    fn encoded(messages: Vec<Message>) -> Vec<Value> {
        messages.into_iter().map(Message::encode).collect()
    }

    /// The slots with each index resolved in `previous`, and how many were indices.
    fn resolved(slots: Vec<Slot>, previous: &[Value]) -> (Vec<Value>, usize) {
        let mut again = 0;
        let values = slots
            .into_iter()
            .map(|slot| match slot {
                Slot::Fresh(message) => message.encode(),
                Slot::Again(i) => {
                    again += 1;
                    previous[i].clone()
                }
            })
            .collect();
        (values, again)
    }

    #[test]
    fn a_replayed_render_is_the_render_and_renders_again_only_what_changed() {
        let (messages, world) = session();
        let first = encoded(render(messages.clone(), &world.state()));
        // Nothing to replay: everything is rendered, as `render` renders it.
        let (slots, kept) = render_replaying(messages.clone(), &world.state(), &Replay::default());
        assert_eq!(resolved(slots, &[]), (first.clone(), 0));
        assert!(kept.unused.is_empty());
        let replay = || Replay {
            previous: kept.renderings.clone(),
            previous_len: first.len(),
            changed: FxHashSet::default(),
        };
        // The same state again: only the head is rendered.
        let (slots, again) = render_replaying(messages.clone(), &world.state(), &replay());
        assert_eq!(resolved(slots, &first), (first.clone(), 4));
        assert_eq!(again.unused.len(), 4);

        // Each thing the render reads, changed on its own: the replayed
        // render is still the render (a key that missed it would replay old
        // bytes), and the messages it does not touch are replayed.
        type Change = (&'static str, fn(&mut World), usize);
        let changes: [Change; 13] = [
            (
                "tool dropped whole",
                |w| w.tags[1].dropped = Some(DropMode::Full),
                3,
            ),
            (
                "tool skeleton",
                |w| w.tags[1].dropped = Some(DropMode::Skeleton),
                3,
            ),
            (
                "text dropped",
                |w| w.tags[2].dropped = Some(DropMode::Full),
                3,
            ),
            (
                "nudge on a tool",
                |w| w.tags[1].nudge = Some("\n(reduce me)".into()),
                3,
            ),
            ("caveman depth", |w| w.tags[2].caveman_depth = 3, 3),
            ("a tag renumbered", |w| w.tags[3].number = 9, 3),
            ("a marker", |w| w.markers[3] = Some("[later] ".into()), 3),
            ("no prefixes", |w| w.prefixes = false, 0),
            // (m1 has no reasoning to clear, but its input says "clear".)
            ("reasoning cleared", |w| w.reasoning_cleared_through = 3, 1),
            (
                "reasoning kept",
                |w| {
                    w.reasoning_cleared_through = 3;
                    w.keep_reasoning[1] = true;
                },
                2,
            ),
            ("covered by the head", |w| w.covered_through = 2, 2),
            (
                "a reminder after it",
                |w| {
                    w.nudge2.insert("m3".into(), "reminder".into());
                },
                3,
            ),
            (
                "a recall hint on a prompt",
                |w| {
                    w.hints.insert(
                        "m4".into(),
                        "\n\n<ctx-search-hint>h</ctx-search-hint>".into(),
                    );
                },
                3,
            ),
        ];
        for (what, change, replayed) in changes {
            let mut changed = world.clone();
            change(&mut changed);
            let want = encoded(render(messages.clone(), &changed.state()));
            assert_ne!(want, first, "{what}: the change shows");
            let (slots, _) = render_replaying(messages.clone(), &changed.state(), &replay());
            assert_eq!(resolved(slots, &first), (want, replayed), "{what}");
        }

        // A message named changed, or whose id another message carries
        // too, is rendered again even with the same render input.
        let mut named = replay();
        named.changed.insert("m2".into());
        let (slots, _) = render_replaying(messages.clone(), &world.state(), &named);
        assert_eq!(resolved(slots, &first), (first.clone(), 3));
        let mut twice = messages.clone();
        twice.push(messages[0].clone());
        let mut with_twice = world.clone();
        with_twice.bindings.push(vec![Some(0)]);
        with_twice.ordinals.push(Some(1));
        with_twice.keep_reasoning.push(false);
        with_twice.markers.push(None);
        let want = encoded(render(twice.clone(), &with_twice.state()));
        let (slots, kept_twice) = render_replaying(twice, &with_twice.state(), &replay());
        assert_eq!(resolved(slots, &first), (want, 3));
        assert!(
            !kept_twice.renderings.contains_key("m1"),
            "a repeated id is not kept"
        );
        // A rendering beyond the previous output is not used.
        let short = Replay {
            previous_len: first.len() - 1,
            ..replay()
        };
        let (slots, _) = render_replaying(messages, &world.state(), &short);
        assert_eq!(resolved(slots, &first), (first, 3));
    }

    #[test]
    fn the_render_in_the_input_s_own_vector_keeps_every_message_in_order() {
        // The head (two messages) and reminders do not fit the slots taken
        // so far and wait; covered messages free slots. Whatever the mix,
        // the output is the plain render's (`render_replaying` with
        // nothing to replay builds a new vector in order).
        let (messages, world) = session();
        let ids = ["m1", "m2", "m3", "m4"];
        for covered_through in 0..=4 {
            for reminders in 0u8..16 {
                let mut changed = world.clone();
                changed.covered_through = covered_through;
                for (bit, id) in ids.iter().enumerate() {
                    if reminders & (1 << bit) != 0 {
                        changed.nudge2.insert((*id).into(), format!("after {id}"));
                    }
                }
                let (slots, _) =
                    render_replaying(messages.clone(), &changed.state(), &Replay::default());
                let want = resolved(slots, &[]).0;
                let got = encoded(render(messages.clone(), &changed.state()));
                assert_eq!(
                    got, want,
                    "covered through {covered_through}, reminders {reminders:04b}"
                );
            }
        }
        // With room in the input's vector for the head, the output is that
        // vector: no second one as long as the input.
        let mut roomy = Vec::with_capacity(messages.len() + 8);
        roomy.extend(messages);
        let buffer = roomy.as_ptr();
        let out = render(roomy, &world.state());
        assert_eq!(out.len(), 6);
        assert_eq!(out.as_ptr(), buffer, "rendered into the input's vector");
    }

    #[test]
    fn a_recall_hint_follows_the_prompts_typed_text_and_goes_with_a_drop() {
        let (messages, mut world) = session();
        world.hints.insert(
            "m4".into(),
            "\n\n<ctx-search-hint>h</ctx-search-hint>".into(),
        );
        let out = encoded(render(messages.clone(), &world.state()));
        let last = out.last().unwrap();
        assert_eq!(
            last["parts"][0]["text"],
            "§4§ thanks\n\n<ctx-search-hint>h</ctx-search-hint>"
        );
        // Only its own prompt carries it.
        assert_eq!(out[2]["parts"][0]["text"], "§1§ please read the file");
        // A drop of that text takes the hint with it.
        world.tags[3].dropped = Some(DropMode::Full);
        let out = encoded(render(messages, &world.state()));
        assert_eq!(out.last().unwrap()["parts"][0]["text"], "[dropped §4§]");
    }

    #[test]
    fn a_skeleton_keeps_real_arguments_up_to_the_cap_and_cuts_the_longest_first() {
        let tool = |input: Value| {
            Part::decode(
                json!({"type": "tool", "tool": "bash", "state": {"status": "completed",
                "input": input, "output": "x"}}),
            )
            .unwrap()
        };
        // Under the cap: the real arguments, whole.
        let body = "y".repeat(900);
        let input = json!({"filePath": "src/lib.rs", "command": body, "n": 3});
        let mut short = tool(input.clone());
        skeleton(&mut short, 4);
        assert_eq!(short.tool_output(), Some("[dropped §4§]"));
        assert_eq!(short.tool_input(), Some(&input));

        // Over it: the longest text is cut to fit, marked; the rest stays.
        let mut long = tool(
            json!({"filePath": "src/lib.rs", "command": "y".repeat(3000),
                                   "note": "z".repeat(200), "list": [1, 2]}),
        );
        skeleton(&mut long, 5);
        let cut = long.tool_input().unwrap();
        assert!(json_len(cut) <= ARGUMENTS_CAP, "{}", json_len(cut));
        assert_eq!(cut["filePath"], "src/lib.rs");
        assert_eq!(cut["note"], json!("z".repeat(200)));
        assert_eq!(cut["list"], json!([1, 2]));
        let command = cut["command"].as_str().unwrap();
        assert!(command.starts_with("yyyy"), "{command}");
        assert!(command.ends_with(" bytes cut]"), "{command}");
        // The same input gives the same bytes (a replay), and multibyte text
        // is cut at a character boundary.
        let mut again = tool(
            json!({"filePath": "src/lib.rs", "command": "y".repeat(3000),
                                    "note": "z".repeat(200), "list": [1, 2]}),
        );
        skeleton(&mut again, 5);
        assert_eq!(again.tool_input(), long.tool_input());
        let mut wide = tool(json!({"text": "é".repeat(2000)}));
        skeleton(&mut wide, 6);
        assert!(json_len(wide.tool_input().unwrap()) <= ARGUMENTS_CAP);

        // Many small values: lists and objects are named by their size.
        let many: Vec<u32> = (0..600).collect();
        let mut numbers = tool(json!({"ids": many, "o": {"a": 1}, "k": "v"}));
        skeleton(&mut numbers, 7);
        assert_eq!(
            numbers.tool_input(),
            Some(&json!({"ids": "[600 items]", "o": "[object]", "k": "v"}))
        );
    }

    #[test]
    fn an_edit_marker_keeps_the_path_and_a_region_hint() {
        let mut part = Part::decode(json!({"type": "tool", "tool": "edit", "state": {
            "status": "completed", "output": "Edit applied successfully.",
            "input": {"filePath": "src/lib.rs", "oldString": "a".repeat(500), "newString": "b"}}}))
        .unwrap();
        edit_marker(&mut part, 9);
        assert_eq!(part.tool_output(), Some("[dropped §9§]"));
        assert_eq!(
            part.tool_input(),
            Some(&json!({"filePath": "src/lib.rs",
                         "oldString": format!("{}…", "a".repeat(40)), "newString": "b"}))
        );
    }
}

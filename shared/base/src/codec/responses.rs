//! OpenAI Responses requests (`POST {base}/responses`, as Codex sends them
//! through the gateway), read as byte spans of the body and mapped to the
//! internal `{info, parts}` model; written back by splicing, like
//! [`super::anthropic`].
//!
//! **Spans, not values.** [`Request::parse`] finds where every item of
//! `input` sits in the body; an item mc did not change leaves as the bytes it
//! came as — a `reasoning` item's `encrypted_content`, a `local_shell_call`,
//! a custom tool call, an item kind this module has never heard of — and a
//! request nothing changed comes out identical to its input.
//!
//! **The model.** `input` is a flat list; mc's messages are groups of it,
//! the way the rollout codec ([`super::codex`]) groups the same items:
//!
//! - a `message` of role `user` is a user message: one text part when its
//!   content is one `input_text`, else (images, several pieces) one part
//!   the pass leaves alone; text Codex writes itself (the environment,
//!   AGENTS.md: [`super::codex::is_harness_context`]) is left alone too;
//! - `developer` and `system` messages, and any item kind not listed here,
//!   are a message of their own that the pass neither tags nor changes;
//! - consecutive model items (an `assistant` message — one text part —,
//!   `reasoning`, and every `…_call` item: `function_call`,
//!   `custom_tool_call`, `local_shell_call`, `web_search_call`, …) are one
//!   assistant message whose non-text parts are left alone, so a call never
//!   leaves while its output is sent;
//! - consecutive outputs (every `…_call_output` item) are one user message of
//!   tool parts, each answering its call (`call_id`, the name and arguments
//!   of the call item of the same id). A dropped output keeps its item with
//!   the placeholder as `output`: a call and its output are never separated.
//!
//! **Identity.** Codex sends an `id` on every item it resends; a message's
//! identity is `cx-<hash>` of its items' ids (an item without one counts by
//! its kind and `call_id`, else its bytes; a repeat gets `#<n>`). Parts are `<message id>/<item
//! index in the message>`.

use std::collections::BTreeMap;

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::anthropic::{
    Piece, RawEntries, RawMap, Span, count_tools, field, join_array, repeated_items, rest_of_array,
    rest_of_keys, span_of, splice, to_bytes,
};
use super::codex::{call_parts, is_harness_context, output_text};
use super::opencode::{Message, Part, PartKind};
use super::{block_index, part, set};
use crate::error::{Error, Result};

/// The kind of the parts the pass leaves alone.
pub const OPAQUE_PART: &str = "responses-item";
/// What is left of an output the pass removed whole.
pub const DROPPED_OUTPUT: &str = "[dropped]";

/// Where an item goes when items are grouped into messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// A user message (one per item).
    User,
    /// The model's items, grouped while consecutive.
    Model,
    /// Tool outputs, grouped while consecutive.
    Outputs,
    /// A message of its own the pass leaves alone.
    Other,
}

/// One item of `input`.
#[derive(Debug, Clone)]
pub struct Item {
    pub span: Span,
    /// `type` (`message` when absent, as the API reads it).
    pub kind: String,
    pub role: Option<String>,
    pub id: Option<String>,
    pub call_id: Option<String>,
    pub side: Side,
}

/// One internal message: consecutive items of `input`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    /// The first item and one past the last.
    pub start: usize,
    pub end: usize,
    pub side: Side,
}

/// call id → (the index of the first call item of that id, tool name, input).
type Calls = BTreeMap<String, (usize, String, Value)>;

/// A call item's id, tool name and input.
type CallParts = (String, String, Value);

/// A request body read as spans.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub body: &'a [u8],
    pub model: Option<String>,
    /// How many tools the request declares.
    pub tools: usize,
    /// The `instructions` and `tools` values (Codex's system prompt and
    /// tool set, for the per-call record).
    pub instructions: Option<Span>,
    pub tools_span: Option<Span>,
    /// The `input` array, when it is one.
    pub input: Option<Span>,
    pub items: Vec<Item>,
    pub groups: Vec<Group>,
    calls: Calls,
    /// Every top-level key and its value, in body order.
    keys: Vec<(String, Span)>,
}

/// What [`Request::parse`] read of a body, without the body: what a
/// resident gateway keeps of a session's previous request to read the next
/// one by what it adds ([`Request::parse_after`]).
#[derive(Debug, Clone, Default)]
pub struct Layout {
    model: Option<String>,
    tools: usize,
    input: Option<Span>,
    tools_span: Option<Span>,
    items: Vec<Item>,
    groups: Vec<Group>,
    calls: Calls,
    keys: Vec<(String, Span)>,
}

fn bad(what: &str, e: serde_json::Error) -> Error {
    Error::input(format!(
        "the Responses request's {what} is not what the Responses API accepts ({e}); forward it unchanged"
    ))
}

/// Where an item of this kind and role goes.
fn side_of(kind: &str, role: Option<&str>) -> Side {
    match (kind, role) {
        ("message", Some("user")) => Side::User,
        ("message", Some("assistant")) | ("reasoning", _) => Side::Model,
        ("message", _) => Side::Other,
        (k, _) if k.ends_with("_call_output") => Side::Outputs,
        (k, _) if k.ends_with("_call") => Side::Model,
        _ => Side::Other,
    }
}

fn string_of(map: &RawMap<'_>, key: &str) -> Option<String> {
    map.get(key)
        .and_then(|r| serde_json::from_str::<String>(r.get()).ok())
}

/// One item of `input`, and its call (id, tool name, input) when it is a call.
fn read_item<'a>(body: &'a [u8], raw: &'a RawValue) -> Result<(Item, Option<CallParts>)> {
    let map: RawMap<'a> = serde_json::from_str(raw.get()).map_err(|e| bad("item", e))?;
    let kind = string_of(&map, "type").unwrap_or_else(|| "message".into());
    let role = string_of(&map, "role");
    let side = side_of(&kind, role.as_deref());
    let item = Item {
        span: span_of(body, raw)?,
        id: string_of(&map, "id"),
        call_id: string_of(&map, "call_id"),
        side,
        kind,
        role,
    };
    let call = (side == Side::Model && item.kind.ends_with("_call")).then(|| {
        let value: Value = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
        call_parts(&value)
    });
    Ok((item, call))
}

impl<'a> Request<'a> {
    /// Read a request body. An error means: not a Responses request mc can
    /// work on (the caller forwards it as it came).
    pub fn parse(body: &'a [u8]) -> Result<Request<'a>> {
        let entries: Vec<(String, &'a RawValue)> = serde_json::from_slice::<RawEntries<'a>>(body)
            .map_err(|e| bad("body", e))?
            .0;
        let mut keys = Vec::with_capacity(entries.len());
        for (key, raw) in &entries {
            keys.push((key.clone(), span_of(body, raw)?));
        }
        // A key given twice counts as its last value, as a map reads it.
        let top: RawMap<'a> = entries.into_iter().collect();
        let mut request = Request {
            body,
            model: string_of(&top, "model"),
            tools: top.get("tools").map_or(0, |raw| count_tools(raw.get())),
            instructions: top
                .get("instructions")
                .map(|r| span_of(body, r))
                .transpose()?,
            tools_span: top.get("tools").map(|r| span_of(body, r)).transpose()?,
            input: None,
            items: Vec::new(),
            groups: Vec::new(),
            calls: BTreeMap::new(),
            keys,
        };
        let Some(input) = top.get("input") else {
            return Ok(request);
        };
        // A string `input` is one user message the pass has nothing to do with.
        if input.get().as_bytes().first() != Some(&b'[') {
            return Ok(request);
        }
        request.input = Some(span_of(body, input)?);
        let list: Vec<&'a RawValue> =
            serde_json::from_str(input.get()).map_err(|e| bad("input", e))?;
        request.items.reserve(list.len());
        for raw in list {
            let (item, call) = read_item(body, raw)?;
            request.place(item, call);
        }
        Ok(request)
    }

    /// Add an item at the end of `input`'s reading: its group, its call.
    fn place(&mut self, item: Item, call: Option<CallParts>) {
        let at = self.items.len();
        if let Some((call_id, name, input)) = call {
            self.calls.entry(call_id).or_insert((at, name, input));
        }
        let side = item.side;
        match self.groups.last_mut() {
            Some(g) if g.side == side && matches!(side, Side::Model | Side::Outputs) => {
                g.end = at + 1;
            }
            _ => self.groups.push(Group {
                start: at,
                end: at + 1,
                side,
            }),
        }
        self.items.push(item);
    }

    /// [`Request::parse`] of `body` for a resident reader that kept the
    /// previous request of the same conversation (`before`, read from
    /// `before_body`): the items whose bytes `body` repeats at the same place
    /// are taken as they were read, and only what follows them is read. The
    /// answer is the one [`Request::parse`] gives, with how many of its first
    /// messages (groups of items) are the previous request's, byte for byte
    /// at the same place; anything this cannot vouch for (another start, a
    /// key given twice, no item in common) is read whole (and counts none).
    pub fn parse_after(
        body: &'a [u8],
        before_body: &[u8],
        before: &Layout,
    ) -> Result<(Request<'a>, usize)> {
        match Request::parse_tail(body, before_body, before) {
            Some(read) => Ok(read),
            None => Ok((Request::parse(body)?, 0)),
        }
    }

    fn parse_tail(
        body: &'a [u8],
        before_body: &[u8],
        before: &Layout,
    ) -> Option<(Request<'a>, usize)> {
        let input = before.input?;
        let ends = before.items.iter().map(|it| it.span.end);
        let (reused, at) = repeated_items(body, before_body, ends, &before.keys, ("input", input))?;
        let mut request = Request {
            body,
            model: None,
            tools: 0,
            instructions: None,
            tools_span: None,
            input: None,
            items: Vec::with_capacity(before.items.len() + 4),
            groups: Vec::new(),
            calls: BTreeMap::new(),
            keys: before.keys.get(..at)?.to_vec(),
        };
        for item in before.items.get(..reused)? {
            request.place(item.clone(), None);
        }
        request.calls = before
            .calls
            .iter()
            .filter(|(_, (first, _, _))| *first < reused)
            .map(|(id, call)| (id.clone(), call.clone()))
            .collect();
        let p = request.items.last()?.span.end;
        let input = rest_of_array(body, input.start, p, |raw| {
            let (item, call) = read_item(body, raw).ok()?;
            request.place(item, call);
            Some(())
        })?;
        request.input = Some(input);
        request.keys.push(("input".into(), input));
        rest_of_keys(body, input.end, &mut request.keys)?;
        let value = |name: &str| {
            request
                .keys
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, s)| *s)
        };
        let bytes = |span: Span| body.get(span.start..span.end);
        // What lies before `input` is the previous body's, byte for byte.
        let reuse = |span: Span| span.end <= input.start;
        request.model = match value("model") {
            Some(span) if reuse(span) => before.model.clone(),
            Some(span) => serde_json::from_slice::<String>(bytes(span)?).ok(),
            None => None,
        };
        let (tools, old_tools) = (value("tools"), before.tools_span);
        request.tools = match tools {
            Some(span) if reuse(span) => before.tools,
            // Codex sends its tools after `input`: the same bytes, the same count.
            Some(span)
                if old_tools.and_then(|o| before_body.get(o.start..o.end)) == bytes(span) =>
            {
                before.tools
            }
            Some(span) => count_tools(std::str::from_utf8(bytes(span)?).ok()?),
            None => 0,
        };
        request.tools_span = tools;
        request.instructions = value("instructions");
        let repeated = request
            .groups
            .iter()
            .zip(&before.groups)
            .take_while(|(new, old)| new == old && new.end <= reused)
            .count();
        Some((request, repeated))
    }

    /// What a resident reader keeps of this request for the next one.
    pub fn layout(&self) -> Layout {
        Layout {
            model: self.model.clone(),
            tools: self.tools,
            input: self.input,
            tools_span: self.tools_span,
            items: self.items.clone(),
            groups: self.groups.clone(),
            calls: self.calls.clone(),
            keys: self.keys.clone(),
        }
    }

    /// The bytes of a span.
    pub fn bytes(&self, span: Span) -> &'a [u8] {
        self.body.get(span.start..span.end).unwrap_or_default()
    }

    fn items_of(&self, g: usize) -> &[Item] {
        self.groups
            .get(g)
            .and_then(|group| self.items.get(group.start..group.end))
            .unwrap_or_default()
    }

    /// Message `g`'s items' bytes, as they sit in `input` (comma-joined).
    pub fn group_bytes(&self, g: usize) -> &'a [u8] {
        let items = self.items_of(g);
        match (items.first(), items.last()) {
            (Some(first), Some(last)) => self.bytes(Span {
                start: first.span.start,
                end: last.span.end,
            }),
            _ => &[],
        }
    }

    fn value(&self, item: &Item) -> Value {
        serde_json::from_slice(self.bytes(item.span)).unwrap_or(Value::Null)
    }

    /// The role of message `g` in mc's model.
    pub fn role(&self, g: usize) -> &'static str {
        match self.groups.get(g).map(|group| group.side) {
            Some(Side::Model) => "assistant",
            _ => "user",
        }
    }

    /// Whether message `g` holds tool outputs.
    pub fn has_results(&self, g: usize) -> bool {
        self.groups
            .get(g)
            .is_some_and(|group| group.side == Side::Outputs)
    }

    /// The stable identity of message `g` (see the module docs).
    pub fn message_id(&self, g: usize) -> String {
        let mut hash = Sha256::new();
        for item in self.items_of(g) {
            let key: Vec<u8> = match (&item.id, &item.call_id) {
                (Some(id), _) => id.as_bytes().to_vec(),
                (None, Some(call)) => format!("{}:{call}", item.kind).into_bytes(),
                (None, None) => self.bytes(item.span).to_vec(),
            };
            hash.update((key.len() as u64).to_le_bytes());
            hash.update(&key);
        }
        let digest = hash.finalize();
        let hex: String = digest.iter().take(10).map(|b| format!("{b:02x}")).collect();
        format!("cx-{hex}")
    }

    /// Every message's identity, in order; a repeat (Codex resends some
    /// instruction items with the same id) gets `#<n>`, its n-th time.
    pub fn message_ids(&self) -> Vec<String> {
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        (0..self.groups.len())
            .map(|g| {
                let id = self.message_id(g);
                let n = seen.entry(id.clone()).or_insert(0);
                *n += 1;
                if *n == 1 { id } else { format!("{id}#{n}") }
            })
            .collect()
    }

    /// The one text of a message item, when its content is exactly one
    /// `input_text` / `output_text` (or a string).
    fn single_text(value: &Value) -> Option<String> {
        match value.get("content") {
            Some(Value::String(text)) => Some(text.clone()),
            Some(Value::Array(pieces)) if pieces.len() == 1 => {
                let piece = pieces.first()?;
                matches!(field(piece, "type"), "input_text" | "output_text")
                    .then(|| field(piece, "text").to_string())
            }
            _ => None,
        }
    }

    /// Message `g` as an internal message named `id` (from
    /// [`Request::message_id`]), in `session_id`; an assistant message is
    /// stamped `seen_ms` (when it was first seen: requests carry no times).
    pub fn decode(&self, g: usize, id: &str, session_id: &str, seen_ms: Option<i64>) -> Message {
        let role = self.role(g);
        let side = self.groups.get(g).map_or(Side::Other, |group| group.side);
        let mut info = Map::new();
        info.insert("id".into(), json!(id));
        info.insert("sessionID".into(), json!(session_id));
        info.insert("role".into(), json!(role));
        let mut parts = Vec::new();
        let mut calls = false;
        for (k, item) in self.items_of(g).iter().enumerate() {
            let pid = format!("{id}/{k}");
            let opaque = json!({"id": pid, "type": OPAQUE_PART});
            let p = match (side, item.kind.as_str()) {
                (Side::User | Side::Model, "message") => {
                    match Self::single_text(&self.value(item)) {
                        Some(text) if !(side == Side::User && is_harness_context(&text)) => {
                            json!({"id": pid, "type": "text", "text": text})
                        }
                        _ => opaque,
                    }
                }
                (Side::Outputs, _) => {
                    let value = self.value(item);
                    let call = item.call_id.as_deref().unwrap_or_default();
                    let (name, input) = self
                        .calls
                        .get(call)
                        .map(|(_, name, input)| (name.clone(), input.clone()))
                        .unwrap_or_else(|| ("unknown".into(), json!({})));
                    let (text, failed) = output_text(&value);
                    let mut state = Map::new();
                    state.insert("input".into(), input);
                    super::close_tool_state(&mut state, text, failed, None);
                    json!({"id": pid, "type": "tool", "callID": call, "tool": name,
                        "state": state})
                }
                (_, kind) => {
                    calls |= kind.ends_with("_call");
                    opaque
                }
            };
            parts.push(part(p));
        }
        if role == "assistant" {
            info.insert(
                "finish".into(),
                json!(if calls { "tool-calls" } else { "stop" }),
            );
            if let Some(ms) = seen_ms {
                info.insert("time".into(), json!({"created": ms, "completed": ms}));
            }
        }
        let mut raw = Map::new();
        raw.insert("info".into(), Value::Object(info));
        Message::new(raw, parts)
    }

    /// Message `g` as the pass left it (`message`, decoded from it): the
    /// original bytes when nothing changed, else its items with only the
    /// changed ones rewritten (comma-joined, as they sit in `input`).
    pub fn encode(&self, g: usize, message: &Message) -> Vec<u8> {
        let side = self.groups.get(g).map_or(Side::Other, |group| group.side);
        let mut by_index: BTreeMap<usize, &Part> = BTreeMap::new();
        let mut extras = Vec::new();
        for p in &message.parts {
            match block_index(p) {
                Some(k) => {
                    by_index.insert(k, p);
                }
                None => extras.extend(p.text()),
            }
        }
        let mut changed = false;
        let mut pieces: Vec<Vec<u8>> = Vec::new();
        for (k, item) in self.items_of(g).iter().enumerate() {
            let raw = self.bytes(item.span);
            match self.rewrite_item(item, side, by_index.get(&k).copied()) {
                Some(bytes) => {
                    changed = true;
                    pieces.push(bytes);
                }
                None => pieces.push(raw.to_vec()),
            }
        }
        if side == Side::Other {
            return self.group_bytes(g).to_vec();
        }
        for text in &extras {
            changed = true;
            pieces.push(message_item(self.role(g), text));
        }
        if !changed {
            return self.group_bytes(g).to_vec();
        }
        join(pieces.iter().map(Vec::as_slice))
    }

    fn rewrite_item(&self, item: &Item, side: Side, part: Option<&Part>) -> Option<Vec<u8>> {
        match side {
            Side::Outputs => {
                let new_text = match part {
                    None => DROPPED_OUTPUT,
                    Some(p) if p.kind == PartKind::Tool => match p.tool_status() {
                        Some("error") => p
                            .get("state")
                            .and_then(|s| s.get("error"))
                            .and_then(Value::as_str)?,
                        _ => p.tool_output()?,
                    },
                    Some(_) => return None,
                };
                let mut value = self.value(item);
                let (before, _) = output_text(&value);
                if before == new_text {
                    return None;
                }
                let output = match value.get("output") {
                    Some(Value::Object(o)) if o.contains_key("content") => {
                        let mut o = o.clone();
                        o.insert("content".into(), json!(new_text));
                        Value::Object(o)
                    }
                    _ => json!(new_text),
                };
                set(&mut value, "output", output);
                Some(to_bytes(&value))
            }
            Side::User | Side::Model if item.kind == "message" => {
                let part = part?;
                if part.kind != PartKind::Text {
                    return None;
                }
                let text = part.text()?;
                let mut value = self.value(item);
                if Self::single_text(&value).as_deref() == Some(text) {
                    return None;
                }
                let piece = match value.get("content") {
                    Some(Value::Array(pieces)) => pieces.first().cloned().map(|mut p| {
                        set(&mut p, "text", json!(text));
                        p
                    }),
                    _ => None,
                };
                let content = match piece {
                    Some(p) => json!([p]),
                    None => json!(text),
                };
                set(&mut value, "content", content);
                Some(to_bytes(&value))
            }
            _ => None,
        }
    }

    /// Message bytes (from [`Request::encode`] or the previous request) with
    /// their tool outputs taken out, `None` when they hold none: an output
    /// whose call is no longer sent (the head covers it) must go, since the
    /// API refuses an output without its call.
    pub fn without_results(bytes: &[u8]) -> Option<Vec<u8>> {
        memchr::memmem::find(bytes, b"_call_output\"")?;
        let wrapped = [b"[".as_slice(), bytes, b"]"].concat();
        let items: Vec<&RawValue> = serde_json::from_slice(&wrapped).ok()?;
        let before = items.len();
        let kept: Vec<&[u8]> = items
            .into_iter()
            .filter(|raw| {
                let kind = serde_json::from_str::<RawMap<'_>>(raw.get())
                    .ok()
                    .and_then(|m| string_of(&m, "type"))
                    .unwrap_or_default();
                !kind.ends_with("_call_output")
            })
            .map(|raw| raw.get().as_bytes())
            .collect();
        (kept.len() != before).then(|| join(kept.into_iter()))
    }

    /// The body with `input` made of these messages (empty pieces leave no
    /// item); the input bytes themselves when every message is the original
    /// in its place.
    pub fn assemble(&self, pieces: &[Piece<'_>]) -> Vec<u8> {
        let Some(input) = self.input else {
            return self.body.to_vec();
        };
        let unchanged = pieces.len() == self.groups.len()
            && pieces
                .iter()
                .enumerate()
                .all(|(i, p)| matches!(p, Piece::Original(j) if *j == i));
        if unchanged {
            return self.body.to_vec();
        }
        let array = join_array(
            pieces
                .iter()
                .map(|p| match p {
                    Piece::Original(g) => self.group_bytes(*g),
                    Piece::Bytes(b) => b,
                })
                .filter(|b| !b.is_empty()),
        );
        let whole = Span {
            start: 0,
            end: self.body.len(),
        };
        splice(self.body, whole, input, &array)
    }
}

/// A message item of `role` holding `text`.
fn message_item(role: &str, text: &str) -> Vec<u8> {
    let kind = if role == "assistant" {
        "output_text"
    } else {
        "input_text"
    };
    to_bytes(&json!({"type": "message", "role": role,
        "content": [{"type": kind, "text": text}]}))
}

/// An added message (mc's head): one message item of its role with its text.
pub fn added(message: &Message) -> Vec<u8> {
    let texts: Vec<&str> = message.parts.iter().filter_map(Part::text).collect();
    message_item(message.role().as_str(), &texts.join("\n"))
}

/// Items' bytes joined by commas (no brackets): a message's place in `input`.
fn join<'x>(items: impl Iterator<Item = &'x [u8]>) -> Vec<u8> {
    let mut out = join_array(items);
    out.pop();
    out.remove(0);
    out
}

#[cfg(test)]
mod tests;

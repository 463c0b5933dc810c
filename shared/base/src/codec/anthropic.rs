//! Anthropic Messages requests (`POST /v1/messages`, as Claude Code sends
//! them through a gateway), read as byte spans of the body and mapped to the
//! internal `{info, parts}` model; written back by splicing.
//!
//! **Spans, not values.** [`Request::parse`] finds where every message and
//! every content block of `messages` sits in the body (serde_json's borrowed
//! `RawValue`s); nothing is re-serialised. The writer ([`Request::encode`] and
//! [`Request::assemble`]) copies each block mc did not change as the bytes it
//! came as, so a `thinking` signature, a `cache_control`, an image's data or
//! a field this module has never heard of leaves exactly as it arrived, and
//! a request nothing changed comes out identical to its input.
//!
//! **The model.** One Anthropic message is one internal message. `text`
//! blocks (and a string `content`) are text parts; `image` and `document`
//! blocks are file parts; a `tool_result` is a tool part (`callID` its
//! `tool_use_id`, the name and input of the `tool_use` it answers, its text
//! as the output or, with `is_error`, the error). Everything else (`tool_use`,
//! `thinking`, `redacted_thinking`, `server_tool_use`,
//! `web_search_tool_result`, any newer kind) is an `anthropic-block` part the
//! pass neither tags nor changes, and so is a message of any role but
//! `user` and `assistant` (`system`). A `tool_use` therefore never leaves: a
//! result the pass dropped is written as its skeleton (same `tool_use_id`,
//! placeholder content), so a call and its result are never separated.
//!
//! **Identity.** Anthropic messages carry no id. Message `i` is
//! `cc-<hash>` of its position, its role and what does not change while
//! Claude Code resends the same prefix: each block's kind, a text's text, a
//! tool block's id, a thinking block's signature, any other block's bytes —
//! never `cache_control` (Claude Code moves its breakpoint to the newest
//! message on every call) nor a tool result's content (its client-side
//! clearing rewrites old results in place, and the tag must survive that).
//! Parts are `<message id>/<block index>`.
//!
//! **Breakpoints.** [`Request::breakpoints`] lists every `cache_control` of
//! the body (tools → system → messages) with its TTL; [`Request::head_cache`]
//! says whether mc may add one for its head (fewer than four in all) and with
//! which TTL, so that every 1-hour breakpoint still precedes every 5-minute one.

use std::collections::BTreeMap;

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::opencode::{Message, Part, PartKind};
use super::{block_index, part, set};
use crate::error::{Error, Result};

/// Anthropic's limit on `cache_control` breakpoints in one request.
pub const MAX_BREAKPOINTS: usize = 4;
/// The kind of the parts the pass leaves alone.
pub const OPAQUE_PART: &str = "anthropic-block";
/// How every message id this codec gives begins (a transcript's ids are
/// UUIDs): how a store tells the gateway's record of a session.
pub const ID_PREFIX: &str = "cc-";
/// What is left of a tool result the pass removed whole.
pub const DROPPED_RESULT: &str = "[dropped]";

/// A byte range of the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

/// One message of `messages`.
#[derive(Debug, Clone)]
pub struct Item {
    /// The whole message object.
    pub span: Span,
    pub role: Option<String>,
    /// The `content` value.
    pub content: Option<Span>,
    /// Whether `content` is a string (one text part).
    pub text_content: bool,
    /// The content blocks, when `content` is an array.
    pub blocks: Vec<Span>,
    /// Whether a block is (or holds) a `tool_result`.
    pub results: bool,
}

/// One `cache_control` of the body: where it is and whether its TTL is 1 hour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Breakpoint {
    pub at: usize,
    pub long: bool,
}

/// A request body read as spans.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub body: &'a [u8],
    pub model: Option<String>,
    /// How many tools the request declares.
    pub tools: usize,
    /// The `messages` array.
    pub messages: Option<Span>,
    /// The `tools` and `system` values.
    pub tools_span: Option<Span>,
    pub system: Option<Span>,
    pub items: Vec<Item>,
    /// Every top-level key and its value, in body order.
    pub keys: Vec<(String, Span)>,
}

/// What [`Request::parse`] read of a body, without the body: what a
/// resident gateway keeps of a session's previous request to read the next
/// one by what it adds ([`Request::parse_after`]).
#[derive(Debug, Clone, Default)]
pub struct Layout {
    pub model: Option<String>,
    pub tools: usize,
    pub messages: Option<Span>,
    pub tools_span: Option<Span>,
    pub system: Option<Span>,
    pub items: Vec<Item>,
    pub keys: Vec<(String, Span)>,
}

/// One output message for [`Request::assemble`].
#[derive(Debug, Clone, Copy)]
pub enum Piece<'b> {
    /// Input message `i`, as it came.
    Original(usize),
    /// These bytes (a rewritten or added message).
    Bytes(&'b [u8]),
}

pub(crate) fn span_of(body: &[u8], raw: &RawValue) -> Result<Span> {
    let text = raw.get();
    let start = (text.as_ptr() as usize)
        .checked_sub(body.as_ptr() as usize)
        .filter(|&s| s + text.len() <= body.len())
        .ok_or_else(|| Error::input("a request value lies outside the body"))?;
    Ok(Span {
        start,
        end: start + text.len(),
    })
}

fn bad(what: &str, e: serde_json::Error) -> Error {
    Error::input(format!(
        "the Anthropic request's {what} is not what the Messages API accepts ({e}); forward it unchanged"
    ))
}

pub(crate) type RawMap<'a> = BTreeMap<String, &'a RawValue>;

/// A JSON object's entries in body order, a key given twice kept twice.
pub(crate) struct RawEntries<'a>(pub(crate) Vec<(String, &'a RawValue)>);

impl<'de> serde::Deserialize<'de> for RawEntries<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        struct Entries;
        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = RawEntries<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> std::result::Result<Self::Value, M::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry::<String, &'de RawValue>()? {
                    out.push(entry);
                }
                Ok(RawEntries(out))
            }
        }
        deserializer.deserialize_map(Entries)
    }
}

/// One message of `messages`, read as spans.
fn item<'a>(body: &'a [u8], raw: &'a RawValue) -> Result<Item> {
    let map: RawMap<'a> = serde_json::from_str(raw.get()).map_err(|e| bad("message", e))?;
    let role = map
        .get("role")
        .and_then(|r| serde_json::from_str::<String>(r.get()).ok());
    let mut item = Item {
        span: span_of(body, raw)?,
        role,
        content: None,
        text_content: false,
        blocks: Vec::new(),
        results: false,
    };
    if let Some(content) = map.get("content") {
        item.content = Some(span_of(body, content)?);
        match content.get().as_bytes().first() {
            Some(b'"') => item.text_content = true,
            Some(b'[') => {
                let blocks: Vec<&'a RawValue> =
                    serde_json::from_str(content.get()).map_err(|e| bad("content", e))?;
                for block in blocks {
                    item.results |= contains(block.get().as_bytes(), b"\"tool_result\"");
                    item.blocks.push(span_of(body, block)?);
                }
            }
            _ => {}
        }
    }
    Ok(item)
}

/// How many tools a `tools` value declares (none unless it is an array).
pub(crate) fn count_tools(text: &str) -> usize {
    serde_json::from_str::<Vec<&RawValue>>(text).map_or(0, |t| t.len())
}

/// The value starting at `at` and where it ends.
pub(crate) fn raw_at(body: &[u8], at: usize) -> Option<(&RawValue, usize)> {
    let rest = body.get(at..)?;
    let mut reader = serde_json::Deserializer::from_slice(rest);
    let raw: &RawValue = serde::Deserialize::deserialize(&mut reader).ok()?;
    let end = span_of(body, raw).ok()?.end;
    Some((raw, end))
}

pub(crate) fn skip_space(body: &[u8], mut at: usize) -> usize {
    while matches!(body.get(at), Some(b' ' | b'\n' | b'\r' | b'\t')) {
        at += 1;
    }
    at
}

/// Where a body that repeats the previous one's bytes stops repeating them,
/// as both wires' `parse_after` reads it: how many of the previous items
/// (by their ends, `item_ends`) lie wholly inside the common prefix, and
/// the place of the array's key (`name`, at `array`) among the previous
/// keys. `None` — read the body whole — when no item is repeated, the key
/// is not there, or a previous key was given twice.
pub(crate) fn repeated_items(
    body: &[u8],
    before_body: &[u8],
    item_ends: impl Iterator<Item = usize>,
    keys: &[(String, Span)],
    (name, array): (&str, Span),
) -> Option<(usize, usize)> {
    let common = common_prefix(body, before_body);
    let reused = item_ends.take_while(|&end| end <= common).count();
    let at = keys
        .iter()
        .position(|(k, span)| k == name && *span == array)?;
    if reused == 0 {
        return None;
    }
    distinct(keys)?;
    Some((reused, at))
}

/// The rest of an array from `p` (the end of its last repeated element):
/// each further element to `each`, up to the closing `]`; the array's span
/// from `start`.
pub(crate) fn rest_of_array<'a>(
    body: &'a [u8],
    start: usize,
    mut p: usize,
    mut each: impl FnMut(&'a RawValue) -> Option<()>,
) -> Option<Span> {
    loop {
        p = skip_space(body, p);
        match body.get(p)? {
            b',' => {
                let (raw, end) = raw_at(body, skip_space(body, p + 1))?;
                each(raw)?;
                p = end;
            }
            b']' => return Some(Span { start, end: p + 1 }),
            _ => return None,
        }
    }
}

/// The keys that follow a body's array (from `p`, its end) onto `keys`:
/// `, "key": value` … `}`, then only space; `None` on anything else or a key
/// given twice.
pub(crate) fn rest_of_keys(
    body: &[u8],
    mut p: usize,
    keys: &mut Vec<(String, Span)>,
) -> Option<()> {
    loop {
        p = skip_space(body, p);
        match body.get(p)? {
            b',' => {
                let (raw, end) = raw_at(body, skip_space(body, p + 1))?;
                let key: String = serde_json::from_str(raw.get()).ok()?;
                p = skip_space(body, end);
                if body.get(p) != Some(&b':') {
                    return None;
                }
                let (raw, end) = raw_at(body, skip_space(body, p + 1))?;
                keys.push((key, span_of(body, raw).ok()?));
                p = end;
            }
            b'}' => break,
            _ => return None,
        }
    }
    if skip_space(body, p + 1) != body.len() {
        return None;
    }
    distinct(keys)
}

/// `Some` when no key is given twice.
pub(crate) fn distinct(keys: &[(String, Span)]) -> Option<()> {
    let mut names: Vec<&str> = keys.iter().map(|(k, _)| k.as_str()).collect();
    names.sort_unstable();
    let before = names.len();
    names.dedup();
    (names.len() == before).then_some(())
}

/// How many leading bytes `a` and `b` share (compared a block at a time).
pub fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    const BLOCK: usize = 256;
    let n = a.len().min(b.len());
    let mut at = 0;
    while at + BLOCK <= n && a.get(at..at + BLOCK) == b.get(at..at + BLOCK) {
        at += BLOCK;
    }
    while at < n && a.get(at) == b.get(at) {
        at += 1;
    }
    at
}

impl<'a> Request<'a> {
    /// Read a request body. An error means: not a Messages request mc can
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
        let model = top
            .get("model")
            .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok());
        let tools = top.get("tools").map_or(0, |raw| count_tools(raw.get()));
        let mut request = Request {
            body,
            model,
            tools,
            messages: None,
            tools_span: top.get("tools").map(|r| span_of(body, r)).transpose()?,
            system: top.get("system").map(|r| span_of(body, r)).transpose()?,
            items: Vec::new(),
            keys,
        };
        let Some(messages) = top.get("messages") else {
            return Ok(request);
        };
        request.messages = Some(span_of(body, messages)?);
        let list: Vec<&'a RawValue> =
            serde_json::from_str(messages.get()).map_err(|e| bad("messages", e))?;
        request.items.reserve(list.len());
        for raw in list {
            request.items.push(item(body, raw)?);
        }
        Ok(request)
    }

    /// [`Request::parse`] of `body` for a resident reader that kept the
    /// previous request of the same conversation (`before`, read from
    /// `before_body`): the messages whose bytes `body` repeats at the same
    /// place are taken as they were read, and only what follows them is
    /// read. The answer is the one [`Request::parse`] gives, with how many
    /// of its first messages are the previous request's, byte for byte at
    /// the same place; anything this cannot vouch for (another start, a key
    /// given twice, no message in common) is read whole (and counts none).
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
        let messages = before.messages?;
        let ends = before.items.iter().map(|it| it.span.end);
        let (reused, at) = repeated_items(
            body,
            before_body,
            ends,
            &before.keys,
            ("messages", messages),
        )?;
        let mut items: Vec<Item> = before.items.get(..reused)?.to_vec();
        let p = items.last()?.span.end;
        let messages = rest_of_array(body, messages.start, p, |raw| {
            items.push(item(body, raw).ok()?);
            Some(())
        })?;
        let mut keys: Vec<(String, Span)> = before.keys.get(..at)?.to_vec();
        keys.push(("messages".into(), messages));
        rest_of_keys(body, messages.end, &mut keys)?;
        let value = |name: &str| keys.iter().find(|(k, _)| k == name).map(|(_, s)| *s);
        let bytes = |span: Span| body.get(span.start..span.end);
        // What lies before `messages` is the previous body's, byte for byte.
        let reuse = |span: Span| span.end <= messages.start;
        let model = match value("model") {
            Some(span) if reuse(span) => before.model.clone(),
            Some(span) => serde_json::from_slice::<String>(bytes(span)?).ok(),
            None => None,
        };
        let tools = match value("tools") {
            Some(span) if reuse(span) => before.tools,
            Some(span) => count_tools(std::str::from_utf8(bytes(span)?).ok()?),
            None => 0,
        };
        let request = Request {
            body,
            model,
            tools,
            messages: Some(messages),
            tools_span: value("tools"),
            system: value("system"),
            items,
            keys,
        };
        Some((request, reused))
    }

    /// What a resident reader keeps of this request for the next one.
    pub fn layout(&self) -> Layout {
        Layout {
            model: self.model.clone(),
            tools: self.tools,
            messages: self.messages,
            tools_span: self.tools_span,
            system: self.system,
            items: self.items.clone(),
            keys: self.keys.clone(),
        }
    }

    /// The bytes of a span.
    pub fn bytes(&self, span: Span) -> &'a [u8] {
        self.body.get(span.start..span.end).unwrap_or_default()
    }

    /// Input message `i`'s bytes.
    pub fn item_bytes(&self, i: usize) -> &'a [u8] {
        self.items
            .get(i)
            .map_or(&[][..], |item| self.bytes(item.span))
    }

    fn block_value(&self, span: Span) -> Value {
        serde_json::from_slice(self.bytes(span)).unwrap_or(Value::Null)
    }

    fn content_value(&self, item: &Item) -> Value {
        item.content.map_or(Value::Null, |c| {
            serde_json::from_slice(self.bytes(c)).unwrap_or(Value::Null)
        })
    }

    /// The stable identity of input message `i` (see the module docs).
    pub fn message_id(&self, i: usize) -> String {
        let Some(item) = self.items.get(i) else {
            return format!("{ID_PREFIX}{i}");
        };
        let mut hash = Sha256::new();
        hash.update(i.to_le_bytes());
        hash.update(item.role.as_deref().unwrap_or("?").as_bytes());
        let mut add = |kind: &str, text: &[u8]| {
            hash.update(kind.as_bytes());
            hash.update([0]);
            hash.update((text.len() as u64).to_le_bytes());
            hash.update(text);
        };
        if item.text_content {
            if let Value::String(text) = self.content_value(item) {
                add("text", text.as_bytes());
            }
        } else {
            for span in &item.blocks {
                let mut block = self.block_value(*span);
                let kind = field(&block, "type").to_string();
                let stable = match kind.as_str() {
                    "text" => field(&block, "text").to_string(),
                    "tool_use" | "server_tool_use" => field(&block, "id").to_string(),
                    "tool_result" => field(&block, "tool_use_id").to_string(),
                    "thinking" => field(&block, "signature").to_string(),
                    "redacted_thinking" => field(&block, "data").to_string(),
                    _ => {
                        if let Some(map) = block.as_object_mut() {
                            map.remove("cache_control");
                        }
                        serde_json::to_string(&block).unwrap_or_default()
                    }
                };
                add(&kind, stable.as_bytes());
            }
        }
        let digest = hash.finalize();
        let hex: String = digest.iter().take(10).map(|b| format!("{b:02x}")).collect();
        format!("{ID_PREFIX}{hex}")
    }

    /// The `tool_use` blocks of input message `i`: id → (name, input).
    fn tool_uses(&self, i: usize) -> BTreeMap<String, (String, Value)> {
        let mut uses = BTreeMap::new();
        let Some(item) = self.items.get(i) else {
            return uses;
        };
        for span in &item.blocks {
            let block = self.block_value(*span);
            if field(&block, "type") == "tool_use" {
                let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
                uses.insert(
                    field(&block, "id").to_string(),
                    (field(&block, "name").to_string(), input),
                );
            }
        }
        uses
    }

    /// Input message `i` as an internal message named `id` (from
    /// [`Request::message_id`]), in `session_id`. An assistant message is
    /// stamped `seen_ms` (when it was first seen: requests carry no times).
    pub fn decode(&self, i: usize, id: &str, session_id: &str, seen_ms: Option<i64>) -> Message {
        let item = self.items.get(i);
        let role = item.and_then(|it| it.role.as_deref());
        let mut info = Map::new();
        info.insert("id".into(), json!(id));
        info.insert("sessionID".into(), json!(session_id));
        info.insert(
            "role".into(),
            json!(match role {
                Some("assistant") => "assistant",
                _ => "user",
            }),
        );
        let mut parts = Vec::new();
        // A `system` message (Claude Code's mid-conversation system beta) or
        // any other role: carried as it is, never tagged.
        let known = matches!(role, Some("user" | "assistant"));
        if let Some(item) = item.filter(|_| known) {
            if item.text_content {
                if let Value::String(text) = self.content_value(item) {
                    parts.push(part(
                        json!({"id": format!("{id}/0"), "type": "text", "text": text}),
                    ));
                }
            } else {
                let uses = if item.results {
                    self.tool_uses(i.wrapping_sub(1))
                } else {
                    BTreeMap::new()
                };
                let mut calls = false;
                for (k, span) in item.blocks.iter().enumerate() {
                    let block = self.block_value(*span);
                    let pid = format!("{id}/{k}");
                    let p = match field(&block, "type") {
                        "text" => json!({"id": pid, "type": "text", "text": field(&block, "text")}),
                        "image" | "document" => {
                            let mime = block
                                .get("source")
                                .and_then(|s| s.get("media_type"))
                                .and_then(Value::as_str)
                                .unwrap_or(if field(&block, "type") == "image" {
                                    "image/png"
                                } else {
                                    "application/pdf"
                                });
                            // The data stays in the block; the url only names the kind.
                            json!({"id": pid, "type": "file", "mime": mime,
                                "url": format!("data:{mime};base64,")})
                        }
                        "tool_result" => {
                            let call = field(&block, "tool_use_id");
                            let (name, input) = uses
                                .get(call)
                                .cloned()
                                .unwrap_or_else(|| ("unknown".into(), json!({})));
                            let text = result_text(block.get("content"));
                            let failed =
                                block.get("is_error").and_then(Value::as_bool) == Some(true);
                            let mut state = Map::new();
                            state.insert("input".into(), input);
                            super::close_tool_state(&mut state, text, failed, None);
                            json!({"id": pid, "type": "tool", "callID": call, "tool": name,
                                "state": state})
                        }
                        kind => {
                            calls |= kind == "tool_use";
                            json!({"id": pid, "type": OPAQUE_PART})
                        }
                    };
                    parts.push(part(p));
                }
                if role == Some("assistant") {
                    info.insert(
                        "finish".into(),
                        json!(if calls { "tool-calls" } else { "stop" }),
                    );
                }
            }
            if item.text_content && role == Some("assistant") {
                info.insert("finish".into(), json!("stop"));
            }
        }
        if let Some(ms) = seen_ms.filter(|_| role == Some("assistant")) {
            info.insert("time".into(), json!({"created": ms, "completed": ms}));
        }
        let mut raw = Map::new();
        raw.insert("info".into(), Value::Object(info));
        Message::new(raw, parts)
    }

    /// Input message `i` as the pass left it (`message`, decoded from it):
    /// the original bytes when nothing changed, else the message with only
    /// its changed blocks rewritten.
    pub fn encode(&self, i: usize, message: &Message) -> Vec<u8> {
        let Some(item) = self.items.get(i) else {
            return added(message, None);
        };
        let original = self.bytes(item.span);
        // A message of another role was never decoded into parts.
        let known = matches!(item.role.as_deref(), Some("user" | "assistant"));
        let Some(content) = item.content.filter(|_| known) else {
            return original.to_vec();
        };
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
        let new_content: Option<Vec<u8>> = if item.text_content {
            let before = match self.content_value(item) {
                Value::String(s) => s,
                _ => String::new(),
            };
            match by_index.get(&0).and_then(|p| p.text()) {
                Some(text) if text != before || !extras.is_empty() => {
                    if extras.is_empty() {
                        Some(to_bytes(&json!(text)))
                    } else {
                        let mut blocks = vec![json!({"type": "text", "text": text})];
                        blocks.extend(extras.iter().map(|t| json!({"type": "text", "text": t})));
                        Some(to_bytes(&Value::Array(blocks)))
                    }
                }
                _ => None,
            }
        } else {
            let mut changed = !extras.is_empty();
            let mut pieces: Vec<Vec<u8>> = Vec::with_capacity(item.blocks.len());
            for (k, span) in item.blocks.iter().enumerate() {
                let raw = self.bytes(*span);
                match self.rewrite_block(*span, by_index.get(&k).copied()) {
                    Some(bytes) => {
                        changed = true;
                        pieces.push(bytes);
                    }
                    None => pieces.push(raw.to_vec()),
                }
            }
            for text in &extras {
                pieces.push(to_bytes(&json!({"type": "text", "text": text})));
            }
            changed.then(|| join_array(pieces.iter().map(Vec::as_slice)))
        };
        match new_content {
            None => original.to_vec(),
            Some(bytes) => splice(self.body, item.span, content, &bytes),
        }
    }

    /// A block's new bytes when the pass changed it; `None` keeps it.
    fn rewrite_block(&self, span: Span, part: Option<&Part>) -> Option<Vec<u8>> {
        let raw = self.bytes(span);
        let is_result = || memchr::memmem::find(raw, b"\"tool_result\"").is_some();
        let Some(part) = part else {
            // Only a tool result is ever removed whole: keep its skeleton.
            if !is_result() {
                return None;
            }
            let mut block = self.block_value(span);
            if field(&block, "type") != "tool_result" {
                return None;
            }
            set(&mut block, "content", json!(DROPPED_RESULT));
            return Some(to_bytes(&block));
        };
        match part.kind {
            PartKind::Text => {
                let text = part.text()?;
                let mut block = self.block_value(span);
                match field(&block, "type") {
                    "text" if field(&block, "text") == text => None,
                    "text" => {
                        set(&mut block, "text", json!(text));
                        Some(to_bytes(&block))
                    }
                    // A dropped image or document: its placeholder, its breakpoint kept.
                    "image" | "document" => {
                        let mut out = json!({"type": "text", "text": text});
                        if let Some(cc) = block.get("cache_control") {
                            set(&mut out, "cache_control", cc.clone());
                        }
                        Some(to_bytes(&out))
                    }
                    _ => None,
                }
            }
            PartKind::Tool => {
                let state = part.get("state");
                let new_text = match part.tool_status() {
                    Some("error") => state.and_then(|s| s.get("error")).and_then(Value::as_str),
                    _ => part.tool_output(),
                }?;
                let mut block = self.block_value(span);
                if field(&block, "type") != "tool_result"
                    || result_text(block.get("content")) == new_text
                {
                    return None;
                }
                let dropped = new_text.starts_with("[dropped");
                let content = match block.get("content") {
                    Some(Value::Array(items)) => {
                        let mut out = Vec::with_capacity(items.len().max(1));
                        let mut placed = false;
                        for b in items {
                            if field(b, "type") == "text" {
                                if !placed {
                                    let mut b = b.clone();
                                    set(&mut b, "text", json!(new_text));
                                    out.push(b);
                                    placed = true;
                                }
                            } else if !dropped {
                                out.push(b.clone());
                            }
                        }
                        if !placed {
                            out.insert(0, json!({"type": "text", "text": new_text}));
                        }
                        Value::Array(out)
                    }
                    _ => json!(new_text),
                };
                set(&mut block, "content", content);
                Some(to_bytes(&block))
            }
            _ => None,
        }
    }

    /// A message's bytes with its `tool_result` blocks taken out (their
    /// calls are not in the output any more), or `None` if it has none.
    /// A message left empty gets a placeholder text.
    pub fn without_results(bytes: &[u8]) -> Option<Vec<u8>> {
        memchr::memmem::find(bytes, b"\"tool_result\"")?;
        let mut message: Value = serde_json::from_slice(bytes).ok()?;
        let blocks = message.get_mut("content")?.as_array_mut()?;
        let before = blocks.len();
        blocks.retain(|b| field(b, "type") != "tool_result");
        if blocks.len() == before {
            return None;
        }
        if blocks.is_empty() {
            blocks.push(json!({"type": "text", "text": DROPPED_RESULT}));
        }
        Some(to_bytes(&message))
    }

    /// A message's bytes with every `cache_control` taken off its blocks
    /// (each other block as it came), or `None` when it has none or is not
    /// a message: a breakpoint Claude Code has since moved on.
    pub fn without_cache_control(bytes: &[u8]) -> Option<Vec<u8>> {
        if !contains(bytes, b"\"cache_control\"") {
            return None;
        }
        let raw: &RawValue = serde_json::from_slice(bytes).ok()?;
        let message = item(bytes, raw).ok()?;
        let content = message.content?;
        let mut changed = false;
        let mut pieces: Vec<Vec<u8>> = Vec::with_capacity(message.blocks.len());
        for span in &message.blocks {
            let block = bytes.get(span.start..span.end)?;
            if contains(block, b"\"cache_control\"") {
                let mut value: Value = serde_json::from_slice(block).ok()?;
                if value.as_object_mut()?.remove("cache_control").is_some() {
                    changed = true;
                    pieces.push(to_bytes(&value));
                    continue;
                }
            }
            pieces.push(block.to_vec());
        }
        changed.then(|| {
            let new = join_array(pieces.iter().map(Vec::as_slice));
            splice(bytes, message.span, content, &new)
        })
    }

    /// Whether input message `i` holds a `tool_result`.
    pub fn has_results(&self, i: usize) -> bool {
        self.items.get(i).is_some_and(|item| item.results)
    }

    /// Every `cache_control` of the body in the order Anthropic reads them:
    /// tools, then system, then messages (a body may list its keys in any order).
    pub fn breakpoints(&self) -> Vec<Breakpoint> {
        let inside =
            |span: Option<Span>, at: usize| span.is_some_and(|s| s.start <= at && at < s.end);
        let mut points = self.body_breakpoints();
        points.retain(|p| {
            inside(self.tools_span, p.at)
                || inside(self.system, p.at)
                || inside(self.messages, p.at)
        });
        points.sort_by_key(|p| {
            let rank = if inside(self.tools_span, p.at) {
                0
            } else if inside(self.system, p.at) {
                1
            } else {
                2
            };
            (rank, p.at)
        });
        points
    }

    fn body_breakpoints(&self) -> Vec<Breakpoint> {
        let mut out = Vec::new();
        for at in memchr::memmem::find_iter(self.body, b"\"cache_control\"") {
            let mut p = at + b"\"cache_control\"".len();
            while matches!(self.body.get(p), Some(b' ' | b'\n' | b'\r' | b'\t')) {
                p += 1;
            }
            if self.body.get(p) != Some(&b':') {
                continue;
            }
            let rest = self.body.get(p + 1..).unwrap_or_default();
            let value = serde_json::Deserializer::from_slice(rest)
                .into_iter::<Value>()
                .next()
                .and_then(|v| v.ok());
            if let Some(Value::Object(map)) = value {
                out.push(Breakpoint {
                    at,
                    long: map.get("ttl").and_then(Value::as_str) == Some("1h"),
                });
            }
        }
        out
    }

    /// The `cache_control` mc may put on its head (placed before the first
    /// message), or `None` when the request already has four breakpoints.
    /// Its TTL is the next breakpoint's (or, with none after, the previous
    /// one's), so 1-hour breakpoints still all come first.
    pub fn head_cache(&self) -> Option<Value> {
        let points = self.breakpoints();
        if points.len() >= MAX_BREAKPOINTS {
            return None;
        }
        let in_messages = |p: &&Breakpoint| {
            self.messages
                .is_some_and(|m| m.start <= p.at && p.at < m.end)
        };
        let next = points.iter().find(in_messages);
        let prev = points.iter().rev().find(|p| !in_messages(p));
        let long = next.or(prev).is_some_and(|p| p.long);
        Some(if long {
            json!({"type": "ephemeral", "ttl": "1h"})
        } else {
            json!({"type": "ephemeral"})
        })
    }

    /// The body with `messages` replaced by `pieces`. The input itself when
    /// the pieces are its messages, in order, unchanged.
    pub fn assemble(&self, pieces: &[Piece<'_>]) -> Vec<u8> {
        let Some(messages) = self.messages else {
            return self.body.to_vec();
        };
        let unchanged = pieces.len() == self.items.len()
            && pieces
                .iter()
                .enumerate()
                .all(|(i, p)| matches!(p, Piece::Original(j) if *j == i));
        if unchanged {
            return self.body.to_vec();
        }
        // Written once, straight into the new body.
        fn bytes<'x>(request: &Request<'x>, p: &Piece<'x>) -> &'x [u8] {
            match *p {
                Piece::Original(i) => request.item_bytes(i),
                Piece::Bytes(b) => b,
            }
        }
        let head = self.body.get(..messages.start).unwrap_or_default();
        let tail = self.body.get(messages.end..).unwrap_or_default();
        let size: usize = pieces.iter().map(|p| bytes(self, p).len() + 1).sum();
        let mut out = Vec::with_capacity(head.len() + size + 1 + tail.len());
        out.extend_from_slice(head);
        out.push(b'[');
        for (n, piece) in pieces.iter().enumerate() {
            if n > 0 {
                out.push(b',');
            }
            out.extend_from_slice(bytes(self, piece));
        }
        out.push(b']');
        out.extend_from_slice(tail);
        out
    }
}

/// A message the pass made (the head, a reminder): a user message of its
/// text parts, `cache` on its last block.
pub fn added(message: &Message, cache: Option<&Value>) -> Vec<u8> {
    let texts: Vec<&str> = message.parts.iter().filter_map(Part::text).collect();
    let mut block = json!({"type": "text", "text": texts.join("\n")});
    if let Some(cache) = cache {
        set(&mut block, "cache_control", cache.clone());
    }
    to_bytes(&json!({"role": "user", "content": [block]}))
}

/// Whether `needle` occurs in `haystack`.
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(haystack, needle).is_some()
}

/// The text of a tool result's content (a string, or its text blocks).
pub fn result_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter(|b| field(b, "type") == "text")
            .map(|b| field(b, "text"))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

pub(crate) fn field<'v>(value: &'v Value, key: &str) -> &'v str {
    value.get(key).and_then(Value::as_str).unwrap_or_default()
}

pub(crate) fn to_bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

pub(crate) fn join_array<'x>(items: impl Iterator<Item = &'x [u8]>) -> Vec<u8> {
    let mut out = vec![b'['];
    for (n, item) in items.enumerate() {
        if n > 0 {
            out.push(b',');
        }
        out.extend_from_slice(item);
    }
    out.push(b']');
    out
}

/// `outer`'s bytes with `inner` (inside it) replaced by `new`.
pub(crate) fn splice(body: &[u8], outer: Span, inner: Span, new: &[u8]) -> Vec<u8> {
    let head = body.get(outer.start..inner.start).unwrap_or_default();
    let tail = body.get(inner.end..outer.end).unwrap_or_default();
    let mut out = Vec::with_capacity(head.len() + new.len() + tail.len());
    out.extend_from_slice(head);
    out.extend_from_slice(new);
    out.extend_from_slice(tail);
    out
}

#[cfg(test)]
mod tests;

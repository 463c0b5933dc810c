//! Claude Code session transcripts (JSONL).
//!
//! One JSON object per line, appended as the session runs. Conversation lines
//! (`user`, `assistant`, `system`) carry a `uuid` and a `parentUuid`; other line
//! types (`attachment`, `queue-operation`, `mode`, `last-prompt`, …) are kept as
//! [`EntryKind::Other`] and ignored by [`to_messages`]. An assistant reply with
//! several content blocks spans several lines sharing `message.id`; a tool's
//! result arrives in a later `user` line as a `tool_result` block.
//!
//! Compaction leaves two marks and keeps every older line in the file: a
//! `system` line with `subtype: "compact_boundary"` (its `parentUuid` is null)
//! and a `user` line with `isCompactSummary: true` holding the summary.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use crate::error::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    User,
    Assistant,
    System,
    Other,
}

/// One line of a transcript.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The line's `uuid`; empty for line types that have none (`mode`, `queue-operation`, …).
    pub uuid: String,
    pub parent_uuid: Option<String>,
    pub kind: EntryKind,
    pub timestamp_ms: Option<i64>,
    /// Harness-written "user" lines (command echoes, caveats): not conversation.
    pub is_meta: bool,
    /// The `user` line holding a compaction summary.
    pub is_compact_summary: bool,
    /// The `system` line marking where a compaction cut the conversation.
    pub is_compact_boundary: bool,
    pub session_id: Option<String>,
    /// The whole line.
    pub raw: Value,
}

impl Entry {
    fn from_value(raw: Value) -> Entry {
        let str_field = |key: &str| raw.get(key).and_then(Value::as_str).map(str::to_string);
        let flag = |key: &str| raw.get(key).and_then(Value::as_bool) == Some(true);
        let kind = match raw.get("type").and_then(Value::as_str) {
            Some("user") => EntryKind::User,
            Some("assistant") => EntryKind::Assistant,
            Some("system") => EntryKind::System,
            _ => EntryKind::Other,
        };
        Entry {
            uuid: str_field("uuid").unwrap_or_default(),
            parent_uuid: str_field("parentUuid"),
            kind,
            timestamp_ms: raw
                .get("timestamp")
                .and_then(Value::as_str)
                .and_then(parse_timestamp),
            is_meta: flag("isMeta"),
            is_compact_summary: kind == EntryKind::User && flag("isCompactSummary"),
            is_compact_boundary: kind == EntryKind::System
                && raw.get("subtype").and_then(Value::as_str) == Some("compact_boundary"),
            session_id: str_field("sessionId"),
            raw,
        }
    }

    fn is_sidechain(&self) -> bool {
        self.raw.get("isSidechain").and_then(Value::as_bool) == Some(true)
    }

    /// `message.content` of a user or assistant line.
    fn content(&self) -> Option<&Value> {
        self.raw.get("message")?.get("content")
    }
}

/// Parse a whole transcript. Blank lines are skipped and every JSON object
/// becomes an [`Entry`], whatever its type; a line that is not JSON, or not an
/// object, is an input error naming its line number.
pub fn parse_transcript(text: &str) -> Result<Vec<Entry>> {
    let mut entries = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if let Some(entry) = parse_line(index + 1, line)? {
            entries.push(entry);
        }
    }
    Ok(entries)
}

/// Like [`parse_transcript`], but a bad line is skipped and reported instead of
/// failing the whole file. For transcripts read while the harness is still
/// appending to them (a hook), where one torn line must not hide the rest.
pub fn parse_transcript_lossy(text: &str) -> (Vec<Entry>, Vec<String>) {
    let mut entries = Vec::new();
    let mut skipped = Vec::new();
    for (index, line) in text.lines().enumerate() {
        match parse_line(index + 1, line) {
            Ok(Some(entry)) => entries.push(entry),
            Ok(None) => {}
            Err(e) => skipped.push(e.to_string()),
        }
    }
    (entries, skipped)
}

/// A transcript read from its file: [`read_transcript`].
#[derive(Debug, Clone, Default)]
pub struct TranscriptFile {
    pub entries: Vec<Entry>,
    /// Lines skipped (not a JSON object) or repaired (invalid UTF-8 replaced).
    pub warnings: Vec<String>,
}

/// Read and parse the transcript at `path` line by line (the file rules and
/// the size cap are [`super::jsonl::for_each_line`]'s). Like
/// [`parse_transcript_lossy`], a line that is not a JSON object is skipped
/// and reported, and each line is decoded on its own: an invalid UTF-8 byte
/// is replaced (and reported) and never makes another line unreadable.
pub fn read_transcript(path: &std::path::Path, max_bytes: u64) -> Result<TranscriptFile> {
    let objects = super::jsonl::read_objects(path, max_bytes, "transcript")?;
    Ok(TranscriptFile {
        entries: entries_from(objects.lines),
        warnings: objects.warnings,
    })
}

/// Entries of the JSON object lines of a transcript.
pub fn entries_from(lines: Vec<(usize, Value)>) -> Vec<Entry> {
    lines
        .into_iter()
        .map(|(_, value)| Entry::from_value(value))
        .collect()
}

fn parse_line(number: usize, line: &str) -> Result<Option<Entry>> {
    Ok(super::jsonl::parse_object(number, line, "transcript")?.map(Entry::from_value))
}

/// Milliseconds since the epoch of an RFC 3339 timestamp such as
/// `2025-10-09T09:20:00.000Z` or `2025-10-09T11:20:00+02:00`. Anything else
/// (including any non-ASCII character anywhere) is `None`; no input panics.
pub fn parse_timestamp(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let digits = |part: &[u8]| -> Option<i64> {
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        part.iter().try_fold(0i64, |n, d| {
            n.checked_mul(10)?
                .checked_add(i64::from(d.wrapping_sub(b'0')))
        })
    };
    let (date_time, rest) = b.split_at_checked(19)?;
    let [
        y0,
        y1,
        y2,
        y3,
        b'-',
        mo0,
        mo1,
        b'-',
        d0,
        d1,
        b'T' | b't' | b' ',
        h0,
        h1,
        b':',
        mi0,
        mi1,
        b':',
        s0,
        s1,
    ] = *date_time
    else {
        return None;
    };
    let year = digits(&[y0, y1, y2, y3])?;
    let (month, day) = (digits(&[mo0, mo1])?, digits(&[d0, d1])?);
    let (hour, minute, second) = (digits(&[h0, h1])?, digits(&[mi0, mi1])?, digits(&[s0, s1])?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    let mut rest = rest;
    let mut millis = 0i64;
    if let Some(fraction) = rest.strip_prefix(b".") {
        let len = fraction.iter().take_while(|c| c.is_ascii_digit()).count();
        let (whole, after) = fraction.split_at_checked(len)?;
        if whole.is_empty() {
            return None;
        }
        let first3: Vec<u8> = whole.iter().chain(b"000").take(3).copied().collect();
        millis = digits(&first3)?;
        rest = after;
    }
    let offset_minutes = match *rest {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h0, h1, b':', m0, m1] => {
            let (h, m) = (digits(&[h0, h1])?, digits(&[m0, m1])?);
            if h > 23 || m > 59 {
                return None;
            }
            if sign == b'+' {
                h * 60 + m
            } else {
                -(h * 60 + m)
            }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second - offset_minutes * 60;
    Some(seconds * 1_000 + millis)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

pub use super::GroupedMessage;

/// The `message.model` of assistant lines Claude Code writes itself.
pub const SYNTHETIC_MODEL: &str = "<synthetic>";

/// Where the newest exchange starts: the index of the first line of the
/// newest assistant reply (lines sharing its `message.id`), sidechains and
/// meta lines aside. Claude Code's compaction keeps that reply and every line
/// after it word for word (observed with 2.1.197: `compactMetadata.
/// preservedMessages` names them), so a pinned message from there on is
/// still in the context after a compaction.
pub fn newest_exchange_start(entries: &[Entry]) -> Option<usize> {
    let conversational =
        |e: &Entry| e.kind == EntryKind::Assistant && !e.is_meta && !e.is_sidechain();
    let last = entries.iter().rposition(conversational)?;
    let id = entries
        .get(last)?
        .raw
        .pointer("/message/id")
        .and_then(Value::as_str);
    let mut start = last;
    for (i, e) in entries.iter().enumerate().take(last).rev() {
        if !conversational(e) {
            continue;
        }
        match (id, e.raw.pointer("/message/id").and_then(Value::as_str)) {
            (Some(a), Some(b)) if a == b => start = i,
            _ => break,
        }
    }
    Some(start)
}

/// OpenCode-shaped `{info, parts}` messages (what mc-transform and the
/// historian read), oldest first:
///
/// - consecutive assistant lines sharing `message.id` become one assistant
///   message whose id is the first line's uuid (tool-result lines in between
///   do not break the run); `text` blocks become text parts, `thinking`
///   blocks reasoning parts;
/// - a `tool_use` block and its `tool_result` (from a following user line)
///   become ONE `tool` part `{callID, tool, state: {status, input, output | error}}`
///   with status `completed` or `error` (`pending` while no result was seen);
/// - user lines become user messages with their text (and image) parts; a user
///   line holding only tool results adds no message;
/// - `isMeta` lines, sidechain lines and non-conversation lines are dropped;
/// - the compaction marks keep OpenCode's shape: the `compact_boundary` line
///   becomes a user message with a `compaction` part, the `isCompactSummary`
///   line an assistant message with `summary: true` holding the summary text;
/// - `time.created` (and `time.completed` for assistants) comes from the line
///   timestamps and `sessionID` is `session_id` on every message.
pub fn to_messages(entries: &[Entry], session_id: &str) -> Vec<Value> {
    to_grouped_messages(entries, session_id)
        .into_iter()
        .map(|m| m.message)
        .collect()
}

/// [`to_messages`], keeping which lines each message was made of.
pub fn to_grouped_messages(entries: &[Entry], session_id: &str) -> Vec<GroupedMessage> {
    let mut builder = Builder {
        session_id,
        out: Vec::new(),
        calls: HashMap::new(),
        open_assistant: None,
    };
    for entry in entries {
        if entry.is_meta || entry.is_sidechain() {
            continue;
        }
        match entry.kind {
            EntryKind::Assistant => builder.assistant(entry),
            EntryKind::User if entry.is_compact_summary => builder.summary(entry),
            EntryKind::User => builder.user(entry),
            EntryKind::System if entry.is_compact_boundary => builder.boundary(entry),
            EntryKind::System | EntryKind::Other => {}
        }
    }
    builder.out
}

struct Builder<'a> {
    session_id: &'a str,
    out: Vec<GroupedMessage>,
    /// tool_use id → (message index, part index) of its tool part.
    calls: HashMap<String, (usize, usize)>,
    /// The assistant message still open for more lines: (`message.id`, index).
    open_assistant: Option<(String, usize)>,
}

/// `info.time.completed = ts`, creating `time` if it is missing.
fn set_completed(info: &mut Map<String, Value>, ts: i64) {
    let time = info
        .entry("time")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(time) = time.as_object_mut() {
        time.insert("completed".into(), json!(ts));
    }
}

fn finish_reason(stop_reason: &str) -> &str {
    match stop_reason {
        "end_turn" | "stop_sequence" => "stop",
        "tool_use" => "tool-calls",
        "max_tokens" => "length",
        other => other,
    }
}

impl Builder<'_> {
    fn push(
        &mut self,
        entry: &Entry,
        role: &'static str,
        info: Map<String, Value>,
        parts: Vec<Value>,
    ) {
        self.out.push(GroupedMessage {
            id: entry.uuid.clone(),
            uuids: vec![entry.uuid.clone()],
            role,
            created_ms: entry.timestamp_ms,
            message: json!({"info": Value::Object(info), "parts": parts}),
        });
    }

    /// The parts of the message at `index`.
    fn parts_mut(&mut self, index: usize) -> Option<&mut Vec<Value>> {
        self.out
            .get_mut(index)?
            .message
            .get_mut("parts")?
            .as_array_mut()
    }

    fn base_info(&self, entry: &Entry, role: &str) -> Map<String, Value> {
        let mut info = Map::new();
        info.insert("id".into(), json!(entry.uuid));
        info.insert("sessionID".into(), json!(self.session_id));
        info.insert("role".into(), json!(role));
        let mut time = Map::new();
        if let Some(ts) = entry.timestamp_ms {
            time.insert("created".into(), json!(ts));
        }
        info.insert("time".into(), Value::Object(time));
        info
    }

    fn assistant(&mut self, entry: &Entry) {
        let message = entry.raw.get("message");
        let api_id = message
            .and_then(|m| m.get("id"))
            .and_then(Value::as_str)
            .map(str::to_string);
        let index = match (&self.open_assistant, &api_id) {
            (Some((open, index)), Some(id)) if open == id => {
                let index = *index;
                if let Some(grouped) = self.out.get_mut(index) {
                    grouped.uuids.push(entry.uuid.clone());
                }
                index
            }
            _ => {
                let mut info = self.base_info(entry, "assistant");
                if let Some(model) = message.and_then(|m| m.get("model")).and_then(Value::as_str) {
                    info.insert("providerID".into(), json!("anthropic"));
                    info.insert("modelID".into(), json!(model));
                }
                self.push(entry, "assistant", info, Vec::new());
                let index = self.out.len().saturating_sub(1);
                self.open_assistant = api_id.map(|id| (id, index));
                index
            }
        };
        // The newest line's timestamp, stop reason and usage describe the whole reply.
        if let Some(info) = self
            .out
            .get_mut(index)
            .and_then(|m| m.message.get_mut("info"))
            .and_then(Value::as_object_mut)
        {
            if let Some(ts) = entry.timestamp_ms {
                set_completed(info, ts);
            }
            if let Some(reason) = message
                .and_then(|m| m.get("stop_reason"))
                .and_then(Value::as_str)
            {
                info.insert("finish".into(), json!(finish_reason(reason)));
            }
            if let Some(usage) = message.and_then(|m| m.get("usage")) {
                let n = |key: &str| usage.get(key).and_then(Value::as_i64).unwrap_or(0);
                info.insert(
                    "tokens".into(),
                    json!({"input": n("input_tokens"), "output": n("output_tokens"), "reasoning": 0,
                           "cache": {"read": n("cache_read_input_tokens"), "write": n("cache_creation_input_tokens")}}),
                );
            }
        }
        let blocks = match entry.content() {
            Some(Value::Array(blocks)) => blocks.clone(),
            Some(Value::String(text)) => vec![json!({"type": "text", "text": text})],
            _ => Vec::new(),
        };
        for (i, block) in blocks.iter().enumerate() {
            let part_id = format!("{}/{i}", entry.uuid);
            let part = match block.get("type").and_then(Value::as_str) {
                Some("text") => {
                    let text = block.get("text").and_then(Value::as_str).unwrap_or("");
                    let mut part = json!({"id": part_id, "type": "text", "text": text});
                    // Claude Code's own stand-in replies ("No response requested."
                    // after a /compact), never the model's words.
                    if message.and_then(|m| m.get("model")).and_then(Value::as_str)
                        == Some(SYNTHETIC_MODEL)
                        && let Some(map) = part.as_object_mut()
                    {
                        map.insert("synthetic".into(), json!(true));
                    }
                    part
                }
                Some("thinking") => {
                    let text = block.get("thinking").and_then(Value::as_str).unwrap_or("");
                    if text.is_empty() {
                        continue;
                    }
                    json!({"id": part_id, "type": "reasoning", "text": text})
                }
                Some("tool_use" | "server_tool_use") => {
                    let call = block.get("id").and_then(Value::as_str).unwrap_or("");
                    let mut state = Map::new();
                    state.insert("status".into(), json!("pending"));
                    state.insert(
                        "input".into(),
                        block.get("input").cloned().unwrap_or_else(|| json!({})),
                    );
                    if let Some(ts) = entry.timestamp_ms {
                        state.insert("time".into(), json!({"start": ts}));
                    }
                    let parts = self.parts_mut(index).map_or(0, |p| p.len());
                    if !call.is_empty() {
                        self.calls.insert(call.to_string(), (index, parts));
                    }
                    json!({"id": part_id, "type": "tool", "callID": call,
                           "tool": block.get("name").and_then(Value::as_str).unwrap_or(""),
                           "state": Value::Object(state)})
                }
                _ => continue,
            };
            if let Some(parts) = self.parts_mut(index) {
                parts.push(part);
            }
        }
    }

    fn user(&mut self, entry: &Entry) {
        let mut parts = Vec::new();
        match entry.content() {
            Some(Value::String(text)) => {
                parts
                    .push(json!({"id": format!("{}/0", entry.uuid), "type": "text", "text": text}));
            }
            Some(Value::Array(blocks)) => {
                for (i, block) in blocks.iter().enumerate() {
                    let part_id = format!("{}/{i}", entry.uuid);
                    match block.get("type").and_then(Value::as_str) {
                        Some("tool_result") => self.tool_result(entry, block),
                        Some("text") => {
                            let text = block.get("text").and_then(Value::as_str).unwrap_or("");
                            parts.push(json!({"id": part_id, "type": "text", "text": text}));
                        }
                        Some("image") => {
                            let mime = block
                                .pointer("/source/media_type")
                                .and_then(Value::as_str)
                                .unwrap_or("image/*");
                            parts.push(json!({"id": part_id, "type": "file", "mime": mime, "filename": "image"}));
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        if parts.is_empty() {
            // Only tool results: the assistant reply may go on with more lines.
            if let Some(grouped) = self
                .open_assistant
                .as_ref()
                .and_then(|(_, index)| self.out.get_mut(*index))
            {
                grouped.uuids.push(entry.uuid.clone());
            }
            return;
        }
        self.open_assistant = None;
        let info = self.base_info(entry, "user");
        self.push(entry, "user", info, parts);
    }

    fn tool_result(&mut self, entry: &Entry, block: &Value) {
        let Some(call) = block.get("tool_use_id").and_then(Value::as_str) else {
            return;
        };
        // A result whose call is not in view (e.g. cut off before the file starts) is dropped.
        let Some(&(index, part)) = self.calls.get(call) else {
            return;
        };
        let text = result_text(block.get("content"));
        let is_error = block.get("is_error").and_then(Value::as_bool) == Some(true);
        let Some(state) = self
            .parts_mut(index)
            .and_then(|parts| parts.get_mut(part))
            .and_then(|p| p.get_mut("state"))
            .and_then(Value::as_object_mut)
        else {
            return;
        };
        super::close_tool_state(state, text, is_error, entry.timestamp_ms);
    }

    fn summary(&mut self, entry: &Entry) {
        self.open_assistant = None;
        let text = match entry.content() {
            Some(Value::String(text)) => text.clone(),
            Some(Value::Array(blocks)) => blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n\n"),
            _ => String::new(),
        };
        let mut info = self.base_info(entry, "assistant");
        if let Some(parent) = &entry.parent_uuid {
            info.insert("parentID".into(), json!(parent));
        }
        info.insert("summary".into(), json!(true));
        info.insert("mode".into(), json!("compaction"));
        info.insert("agent".into(), json!("compaction"));
        info.insert("finish".into(), json!("stop"));
        if let Some(ts) = entry.timestamp_ms {
            set_completed(&mut info, ts);
        }
        let part = json!({"id": format!("{}/0", entry.uuid), "type": "text", "text": text});
        self.push(entry, "assistant", info, vec![part]);
    }

    fn boundary(&mut self, entry: &Entry) {
        self.open_assistant = None;
        let trigger = entry
            .raw
            .pointer("/compactMetadata/trigger")
            .and_then(Value::as_str);
        let info = self.base_info(entry, "user");
        let part = json!({"id": format!("{}/0", entry.uuid), "type": "compaction",
                          "auto": trigger == Some("auto")});
        self.push(entry, "user", info, vec![part]);
    }
}

/// The text of a `tool_result` block's content (a string or a list of blocks).
fn result_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| match b.get("type").and_then(Value::as_str) {
                Some("text") => b.get("text").and_then(Value::as_str).map(str::to_string),
                Some("image") => Some("[image]".to_string()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    const SESSION: &str = "4b1f0c52-7d1e-4c8e-9a77-2f3c1d9e8a10";

    /// A line in the shape Claude Code writes, with the fields every
    /// conversation line carries.
    fn line(kind: &str, uuid: &str, parent: Option<&str>, ts: &str, extra: Value) -> String {
        let mut v = json!({
            "parentUuid": parent, "isSidechain": false, "type": kind, "uuid": uuid,
            "timestamp": ts, "userType": "external", "entrypoint": "cli",
            "cwd": "/home/dev/shop", "sessionId": SESSION, "version": "2.1.197", "gitBranch": "main",
        });
        for (k, val) in extra.as_object().unwrap() {
            v[k] = val.clone();
        }
        v.to_string()
    }

    fn assistant_line(
        uuid: &str,
        parent: &str,
        ts: &str,
        api_id: &str,
        block: Value,
        stop: Option<&str>,
    ) -> String {
        line(
            "assistant",
            uuid,
            Some(parent),
            ts,
            json!({"requestId": "req_0001", "message": {
                "id": api_id, "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                "content": [block], "stop_reason": stop, "stop_sequence": null,
                "usage": {"input_tokens": 12, "cache_creation_input_tokens": 300,
                          "cache_read_input_tokens": 9000, "output_tokens": 40}}}),
        )
    }

    fn transcript() -> String {
        [
            json!({"type": "queue-operation", "operation": "enqueue", "timestamp": "2026-03-02T10:00:00.000Z",
                   "sessionId": SESSION, "content": "Fix the cart total"})
            .to_string(),
            line("user", "u1", None, "2026-03-02T10:00:00.100Z",
                 json!({"message": {"role": "user", "content": "Fix the cart total rounding."}})),
            line("user", "m1", Some("u1"), "2026-03-02T10:00:00.200Z",
                 json!({"isMeta": true, "message": {"role": "user", "content": "<local-command-caveat>ignore</local-command-caveat>"}})),
            assistant_line("a1", "u1", "2026-03-02T10:00:02.000Z", "msg_A",
                 json!({"type": "thinking", "thinking": "Look at cart.rs first.", "signature": "sig"}), None),
            assistant_line("a2", "a1", "2026-03-02T10:00:02.500Z", "msg_A",
                 json!({"type": "text", "text": "Reading the cart module."}), None),
            assistant_line("a3", "a2", "2026-03-02T10:00:03.000Z", "msg_A",
                 json!({"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "/home/dev/shop/src/cart.rs"}}),
                 None),
            assistant_line("a4", "a3", "2026-03-02T10:00:03.100Z", "msg_A",
                 json!({"type": "tool_use", "id": "toolu_2", "name": "Bash", "input": {"command": "cargo test cart"}}),
                 Some("tool_use")),
            line("user", "r1", Some("a3"), "2026-03-02T10:00:04.000Z",
                 json!({"message": {"role": "user", "content": [{"tool_use_id": "toolu_1", "type": "tool_result",
                        "content": "1\tpub fn total() {}"}]},
                        "toolUseResult": {"type": "text"}, "sourceToolAssistantUUID": "a3"})),
            line("user", "r2", Some("a4"), "2026-03-02T10:00:06.000Z",
                 json!({"message": {"role": "user", "content": [{"tool_use_id": "toolu_2", "type": "tool_result",
                        "content": [{"type": "text", "text": "test failed: 10.005 != 10.01"}], "is_error": true}]}})),
            assistant_line("a5", "r2", "2026-03-02T10:00:09.000Z", "msg_B",
                 json!({"type": "text", "text": "The total rounds half-down; switching to banker's rounding."}),
                 Some("end_turn")),
            json!({"type": "last-prompt", "lastPrompt": "Fix the cart total", "leafUuid": "a5", "sessionId": SESSION}).to_string(),
            line("system", "cb1", None, "2026-03-02T11:00:00.000Z",
                 json!({"logicalParentUuid": "a5", "subtype": "compact_boundary", "content": "Conversation compacted",
                        "isMeta": false, "level": "info", "compactMetadata": {"trigger": "auto", "preTokens": 160000}})),
            line("user", "s1", Some("cb1"), "2026-03-02T11:00:01.000Z",
                 json!({"isCompactSummary": true, "isVisibleInTranscriptOnly": true,
                        "message": {"role": "user", "content": "This session is being continued from a previous conversation that ran out of context.\n\nSummary: cart rounding fixed."}})),
        ]
        .join("\n")
            + "\n"
    }

    #[test]
    fn timestamps_parse_to_epoch_millis() {
        assert_eq!(parse_timestamp("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_timestamp("2026-03-02T10:00:00.100Z"),
            Some(1_772_445_600_100)
        );
        assert_eq!(
            parse_timestamp("2026-03-02T12:00:00.1+02:00"),
            Some(1_772_445_600_100)
        );
        assert_eq!(
            parse_timestamp("2000-02-29T23:59:59.999999Z"),
            Some(951_868_799_999)
        );
        assert_eq!(parse_timestamp("2026-13-02T10:00:00Z"), None);
        assert_eq!(parse_timestamp("yesterday"), None);
        assert_eq!(parse_timestamp("2026-03-02T10:00:00"), None, "no zone");
    }

    #[test]
    fn non_ascii_anywhere_in_a_timestamp_is_no_timestamp_and_no_panic() {
        // Byte-index slicing used to panic on these (a multi-byte character
        // across the offset's or the zone's byte positions).
        for text in [
            "2026-03-02T10:00:00+0é:0",
            "2026-03-02T10:00:00é0:00",
            "2026-03-02T10:00:00+00:é",
            "2026-03-02T10:00:00.1é",
            "2026-03-02T10:00:0é",
            "２０２６-03-02T10:00:00Z",
        ] {
            assert_eq!(parse_timestamp(text), None, "{text}");
        }
        // Every position of valid timestamps, replaced by or followed by
        // characters of every UTF-8 length.
        for valid in [
            "2026-03-02T10:00:00.123Z",
            "2026-03-02T12:00:00.1+02:00",
            "2026-03-02T10:00:00-05:30",
        ] {
            assert!(parse_timestamp(valid).is_some(), "{valid}");
            for (i, _) in valid.char_indices() {
                for c in ['é', '€', '😀', '\u{0}'] {
                    let mut replaced = valid.to_string();
                    replaced.replace_range(i..=i, &c.to_string());
                    assert_eq!(parse_timestamp(&replaced), None, "{replaced}");
                    let mut inserted = valid.to_string();
                    inserted.insert(i, c);
                    assert_eq!(parse_timestamp(&inserted), None, "{inserted}");
                }
            }
            for cut in 0..valid.len() {
                let _ = parse_timestamp(&valid[..cut]);
            }
        }
        assert_eq!(parse_timestamp("2026-03-02T10:00:00+24:00"), None);
        assert_eq!(parse_timestamp("2026-03-02T10:00:00+-1:00"), None);
    }

    #[test]
    fn a_transcript_with_non_ascii_timestamps_converts_without_them() {
        let text = [
            line(
                "user",
                "u1",
                None,
                "2026-03-02T10:00:00+0é:0",
                json!({"message": {"role": "user", "content": "hello"}}),
            ),
            assistant_line(
                "a1",
                "u1",
                "2026-03-02T10:00:00é0:00",
                "msg_A",
                json!({"type": "text", "text": "hi"}),
                Some("end_turn"),
            ),
        ]
        .join("\n");
        let entries = parse_transcript(&text).unwrap();
        assert!(entries.iter().all(|e| e.timestamp_ms.is_none()));
        let messages = to_messages(&entries, SESSION);
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[1]["info"]["time"], json!({}));
    }

    #[test]
    fn reading_a_file_skips_bad_lines_and_repairs_bad_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let good = transcript();
        let mut lines: Vec<&str> = good.lines().collect();
        lines.insert(3, "{\"type\": \"user\", torn");
        let mut bytes = lines.join("\n").into_bytes();
        // An invalid byte inside the text of the first user line.
        let at = bytes
            .windows(19)
            .position(|w| w == b"cart total rounding")
            .unwrap();
        bytes[at] = 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let file = read_transcript(&path, 1 << 20).unwrap();
        assert_eq!(
            file.entries.len(),
            parse_transcript(&good).unwrap().len(),
            "only the torn line is lost"
        );
        assert_eq!(file.warnings.len(), 2, "{:?}", file.warnings);
        assert!(
            file.warnings[0].contains("line 2 holds invalid UTF-8"),
            "{:?}",
            file.warnings
        );
        assert!(
            file.warnings[1].contains("line 4 is not valid JSON"),
            "{:?}",
            file.warnings
        );
        assert!(
            file.warnings[1].ends_with("; skipped it"),
            "{:?}",
            file.warnings
        );
        let messages = to_messages(&file.entries, SESSION);
        assert_eq!(
            messages[0]["parts"][0]["text"],
            "Fix the \u{fffd}art total rounding."
        );
    }

    #[test]
    fn parse_keeps_every_object_line_and_flags_compaction() {
        let entries = parse_transcript(&transcript()).unwrap();
        assert_eq!(entries.len(), 13);
        assert_eq!(entries[0].kind, EntryKind::Other);
        assert_eq!(entries[0].uuid, "");
        assert_eq!(entries[1].kind, EntryKind::User);
        assert_eq!(entries[1].session_id.as_deref(), Some(SESSION));
        assert_eq!(entries[1].timestamp_ms, Some(1_772_445_600_100));
        assert!(entries[2].is_meta);
        assert_eq!(entries[3].parent_uuid.as_deref(), Some("u1"));
        let boundary = entries.iter().find(|e| e.is_compact_boundary).unwrap();
        assert_eq!(
            (boundary.uuid.as_str(), boundary.kind),
            ("cb1", EntryKind::System)
        );
        assert_eq!(boundary.parent_uuid, None);
        let summary = entries.iter().find(|e| e.is_compact_summary).unwrap();
        assert_eq!(summary.uuid, "s1");
    }

    #[test]
    fn a_malformed_line_is_an_input_error_naming_its_number() {
        let text = format!(
            "{}\n\n{{\"type\": \"user\", \"uuid\": \n",
            transcript().lines().next().unwrap()
        );
        match parse_transcript(&text) {
            Err(Error::Input(msg)) => assert!(msg.contains("line 3"), "{msg}"),
            other => panic!("expected an input error, got {other:?}"),
        }
        assert!(
            matches!(parse_transcript("[1, 2]\n"), Err(Error::Input(m)) if m.contains("line 1"))
        );
        let (entries, skipped) = parse_transcript_lossy(&text);
        assert_eq!(entries.len(), 1);
        assert_eq!(skipped.len(), 1);
        assert!(skipped[0].contains("line 3"));
    }

    #[test]
    fn messages_group_assistant_lines_and_pair_tools() {
        let entries = parse_transcript(&transcript()).unwrap();
        let grouped = to_grouped_messages(&entries, SESSION);
        let ids: Vec<&str> = grouped.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(
            ids,
            ["u1", "a1", "a5", "cb1", "s1"],
            "meta and non-conversation lines dropped"
        );
        assert_eq!(grouped[1].uuids, ["a1", "a2", "a3", "a4", "r1", "r2"]);

        let messages = to_messages(&entries, SESSION);
        let user = &messages[0];
        assert_eq!(user["info"]["role"], "user");
        assert_eq!(user["info"]["sessionID"], SESSION);
        assert_eq!(user["info"]["time"]["created"], 1_772_445_600_100i64);
        assert_eq!(user["parts"][0]["text"], "Fix the cart total rounding.");

        let reply = &messages[1];
        assert_eq!(reply["info"]["id"], "a1");
        assert_eq!(reply["info"]["role"], "assistant");
        assert_eq!(reply["info"]["finish"], "tool-calls");
        assert_eq!(reply["info"]["modelID"], "claude-sonnet-4-5");
        assert_eq!(
            reply["info"]["time"]["created"],
            parse_timestamp("2026-03-02T10:00:02.000Z").unwrap()
        );
        assert_eq!(
            reply["info"]["time"]["completed"],
            parse_timestamp("2026-03-02T10:00:03.100Z").unwrap()
        );
        let kinds: Vec<&str> = reply["parts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["type"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["reasoning", "text", "tool", "tool"]);
        let read = &reply["parts"][2];
        assert_eq!(read["callID"], "toolu_1");
        assert_eq!(read["tool"], "Read");
        assert_eq!(read["state"]["status"], "completed");
        assert_eq!(
            read["state"]["input"]["file_path"],
            "/home/dev/shop/src/cart.rs"
        );
        assert_eq!(read["state"]["output"], "1\tpub fn total() {}");
        let bash = &reply["parts"][3];
        assert_eq!(bash["state"]["status"], "error");
        assert_eq!(bash["state"]["error"], "test failed: 10.005 != 10.01");
        assert!(bash["state"].get("output").is_none());

        assert_eq!(messages[2]["info"]["finish"], "stop");
        assert_eq!(messages[3]["parts"][0]["type"], "compaction");
        assert_eq!(messages[3]["parts"][0]["auto"], true);
        let summary = &messages[4];
        assert_eq!(summary["info"]["summary"], true);
        assert_eq!(summary["info"]["role"], "assistant");
        assert_eq!(summary["info"]["parentID"], "cb1");
        assert!(
            summary["parts"][0]["text"]
                .as_str()
                .unwrap()
                .contains("cart rounding fixed")
        );
        // Every message decodes with the OpenCode codec the transform uses.
        crate::codec::opencode::decode_all(messages).unwrap();
    }

    #[test]
    fn the_fixture_transcript_converts_to_these_messages() {
        // The whole conversion at once, where the test above picks fields.
        let messages = to_messages(&parse_transcript(&transcript()).unwrap(), SESSION);
        insta::with_settings!({
            snapshot_path => concat!(env!("CARGO_MANIFEST_DIR"), "/snapshots"),
            prepend_module_to_snapshot => false,
            omit_expression => true,
            description => "codec::claude::to_messages of the test transcript (thinking, text, two tool calls, a compaction)",
        }, {
            insta::assert_snapshot!(
                "claude_transcript_to_messages",
                serde_json::to_string_pretty(&messages).unwrap()
            );
        });
    }

    #[test]
    fn a_tool_use_without_a_result_stays_pending_and_a_new_message_id_starts_a_new_reply() {
        let text = [
            line("user", "u1", None, "2026-03-02T10:00:00Z",
                 json!({"message": {"role": "user", "content": [{"type": "text", "text": "run it"}]}})),
            assistant_line("a1", "u1", "2026-03-02T10:00:01Z", "msg_A",
                 json!({"type": "text", "text": "first"}), Some("end_turn")),
            assistant_line("a2", "a1", "2026-03-02T10:00:02Z", "msg_B",
                 json!({"type": "tool_use", "id": "toolu_9", "name": "Bash", "input": {"command": "make"}}),
                 Some("tool_use")),
        ]
        .join("\n");
        let messages = to_messages(&parse_transcript(&text).unwrap(), SESSION);
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[2]["parts"][0]["state"]["status"], "pending");
    }
}

//! Pi's agent messages (`@mariozechner/pi-coding-agent`), as its `context`
//! event hands them to an extension before every model call, mapped to the
//! internal `{info, parts}` model and back.
//!
//! Pi's messages are role-tagged objects: `user` (`content` a string or
//! `text`/`image` blocks), `assistant` (`text`, `thinking`, `toolCall {id,
//! name, arguments}` blocks, `usage`, `stopReason`), `toolResult
//! {toolCallId, toolName, content, isError}`, and the coding agent's own
//! `compactionSummary`, `branchSummary`, `custom` and `bashExecution`. Every
//! one carries a `timestamp` (ms) that Pi stores with it, so it is the same
//! on every call, after a resume (`--session FILE`, `-c`) and after a
//! compaction (which only removes older messages).
//!
//! **Identity.** Pi messages carry no id. Each gets `pi-<r><timestamp>`
//! (`r` one letter for the role), `-<n>` appended for the n-th earlier message
//! with the same role and timestamp; a message without a numeric timestamp
//! gets a hash of its JSON text instead. Parts are named `<message id>/<block
//! index>`, so part identities (and tags) follow the block, not its position
//! in the rendered output.
//!
//! **Tools.** A `toolResult` is folded into the `tool` part of the assistant
//! `toolCall` it answers (the internal model keeps a call and its result
//! together, as OpenCode does); on the way back it is written out again right
//! after that assistant message, in its original order. A dropped call takes
//! its result with it, so the provider never sees half of a pair. A result
//! whose call is not in the array stays a message of its own, untouched.
//!
//! **Round trip.** Decoding keeps every original message; encoding starts from
//! it and writes back only what the pass changed (text, a tool's input and
//! output, removed blocks), so every field this module does not understand is
//! carried through unchanged and in its place, and a message the pass did
//! not touch comes back byte for byte.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::opencode::{Message, Part, PartKind};
use super::{block_index, part, set};
use crate::error::{Error, Result};
use crate::json::kind_name as json_kind;

/// What `encode` needs to write the pass's output back in Pi's shape.
#[derive(Debug, Clone, Default)]
pub struct Layout {
    /// Every input message as it came.
    originals: Vec<Map<String, Value>>,
    /// Message id → index into `originals`.
    by_id: BTreeMap<String, usize>,
    /// Per assistant message (index), its folded tool results: (call id, index).
    results: BTreeMap<usize, Vec<(String, usize)>>,
}

/// The one-letter role code of an identity.
fn role_code(role: Option<&str>) -> &'static str {
    match role {
        Some("user") => "u",
        Some("assistant") => "a",
        Some("toolResult") => "r",
        Some("compactionSummary") => "c",
        Some("branchSummary") => "b",
        Some("custom") => "x",
        Some("bashExecution") => "s",
        _ => "o",
    }
}

/// The stable identities of a Pi message array (see the module docs).
pub fn message_ids(values: &[Value]) -> Vec<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    values
        .iter()
        .map(|value| {
            let role = value.get("role").and_then(Value::as_str);
            let base = match value.get("timestamp").and_then(Value::as_i64) {
                Some(ts) => format!("pi-{}{ts}", role_code(role)),
                None => {
                    let text = serde_json::to_string(value).unwrap_or_default();
                    let digest = Sha256::digest(text.as_bytes());
                    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
                    format!("pi-{}h{hex}", role_code(role))
                }
            };
            let n = seen.entry(base.clone()).or_insert(0);
            let id = if *n == 0 { base } else { format!("{base}-{n}") };
            *n += 1;
            id
        })
        .collect()
}

fn text_of_blocks(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Parts of a `user` or `custom` message's content: a string is one text
/// part (`/s`), blocks are text and file parts named by their index.
fn content_parts(id: &str, content: Option<&Value>, synthetic: bool) -> Vec<Part> {
    let mark = |mut p: Value| {
        if synthetic && let Some(map) = p.as_object_mut() {
            map.insert("synthetic".into(), json!(true));
        }
        part(p)
    };
    match content {
        Some(Value::String(text)) => {
            vec![mark(
                json!({"id": format!("{id}/s"), "type": "text", "text": text}),
            )]
        }
        Some(Value::Array(blocks)) => blocks
            .iter()
            .enumerate()
            .map(|(k, block)| {
                let pid = format!("{id}/{k}");
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => mark(json!({"id": pid, "type": "text",
                        "text": block.get("text").and_then(Value::as_str).unwrap_or_default()})),
                    Some("image") => {
                        let mime = block
                            .get("mimeType")
                            .and_then(Value::as_str)
                            .unwrap_or("image/png");
                        // The data stays in the original; the url only names the kind.
                        part(json!({"id": pid, "type": "file", "mime": mime,
                            "url": format!("data:{mime};base64,")}))
                    }
                    _ => part(json!({"id": pid, "type": "pi-block"})),
                }
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn finish_of(stop: Option<&str>) -> Option<&'static str> {
    match stop? {
        "toolUse" => Some("tool-calls"),
        "stop" => Some("stop"),
        "length" => Some("length"),
        "error" => Some("error"),
        "aborted" => Some("aborted"),
        _ => Some("other"),
    }
}

/// An assistant message's content blocks as parts; each tool call is noted
/// in `open_calls` as belonging to message `i` (its results may fold into it).
fn assistant_parts(
    id: &str,
    content: Option<&Value>,
    i: usize,
    open_calls: &mut BTreeMap<String, usize>,
) -> Vec<Part> {
    let blocks = content.and_then(Value::as_array);
    blocks
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(k, block)| {
            let pid = format!("{id}/{k}");
            let field = |f: &str| block.get(f).and_then(Value::as_str).unwrap_or_default();
            match block.get("type").and_then(Value::as_str) {
                Some("text") => part(json!({"id": pid, "type": "text", "text": field("text")})),
                Some("thinking") => {
                    part(json!({"id": pid, "type": "reasoning", "text": field("thinking")}))
                }
                Some("toolCall") => {
                    let call = field("id");
                    open_calls.insert(call.to_string(), i);
                    let input = block.get("arguments").cloned().unwrap_or(json!({}));
                    part(json!({"id": pid, "type": "tool", "callID": call,
                        "tool": field("name"),
                        "state": {"status": "pending", "input": input}}))
                }
                _ => part(json!({"id": pid, "type": "pi-block"})),
            }
        })
        .collect()
}

/// Decode Pi's messages for the pass. `session_id` goes into every message's
/// `info.sessionID` (Pi's messages do not name their session).
pub fn decode(values: Vec<Value>, session_id: Option<&str>) -> Result<(Vec<Message>, Layout)> {
    let ids = message_ids(&values);
    let mut originals = Vec::with_capacity(values.len());
    for (i, value) in values.into_iter().enumerate() {
        match value {
            Value::Object(map) => originals.push(map),
            other => {
                return Err(Error::input(format!(
                    "messages[{i}]: a Pi message is not a JSON object (found {})",
                    json_kind(&other)
                )));
            }
        }
    }
    let mut layout = Layout {
        by_id: ids
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, id)| (id, i))
            .collect(),
        ..Layout::default()
    };
    // Which assistant message each tool call belongs to: the newest earlier one.
    let mut open_calls: BTreeMap<String, usize> = BTreeMap::new();
    // Output index of each decoded message, by original index.
    let mut out_index: BTreeMap<usize, usize> = BTreeMap::new();
    let mut messages: Vec<Message> = Vec::with_capacity(originals.len());
    // The assistant message whose results may follow now.
    let mut collecting: Option<usize> = None;
    for (i, (original, id)) in originals.iter().zip(&ids).enumerate() {
        let role = original.get("role").and_then(Value::as_str);
        let ts = original.get("timestamp").and_then(Value::as_i64);
        // A result is folded only while the results of one call step are
        // still coming, so nothing changes place on the way back.
        if role == Some("toolResult")
            && let Some(call) = original.get("toolCallId").and_then(Value::as_str)
            && let Some(&owner) = open_calls.get(call)
            && collecting == Some(owner)
            && let Some(message) = out_index.get(&owner).and_then(|&at| messages.get_mut(at))
        {
            let failed = original.get("isError").and_then(Value::as_bool) == Some(true);
            let text = text_of_blocks(original.get("content"));
            if let Some(p) = message.parts.iter_mut().find(|p| p.call_id() == Some(call))
                && let Some(state) = p.raw_mut().get_mut("state").and_then(Value::as_object_mut)
            {
                super::close_tool_state(state, text, failed, None);
                open_calls.remove(call);
                layout
                    .results
                    .entry(owner)
                    .or_default()
                    .push((call.to_string(), i));
                continue;
            }
        }
        let mut info = Map::new();
        info.insert("id".into(), json!(id));
        if let Some(s) = session_id {
            info.insert("sessionID".into(), json!(s));
        }
        let mut time = Map::new();
        if let Some(ts) = ts {
            time.insert("created".into(), json!(ts));
        }
        let parts = match role {
            Some("user") => {
                info.insert("role".into(), json!("user"));
                content_parts(id, original.get("content"), false)
            }
            Some("custom") => {
                info.insert("role".into(), json!("user"));
                content_parts(id, original.get("content"), true)
            }
            Some("assistant") => {
                info.insert("role".into(), json!("assistant"));
                if let Some(ts) = ts {
                    time.insert("completed".into(), json!(ts));
                }
                let stop = original.get("stopReason").and_then(Value::as_str);
                if let Some(finish) = finish_of(stop) {
                    info.insert("finish".into(), json!(finish));
                }
                if let Some(usage) = original.get("usage") {
                    let n = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
                    info.insert(
                        "tokens".into(),
                        json!({"input": n("input"), "output": n("output"),
                               "cache": {"read": n("cacheRead"), "write": n("cacheWrite")}}),
                    );
                }
                assistant_parts(id, original.get("content"), i, &mut open_calls)
            }
            Some("compactionSummary") => {
                // OpenCode's convention for a compaction's summary.
                info.insert("role".into(), json!("assistant"));
                info.insert("summary".into(), json!(true));
                let summary = original.get("summary").and_then(Value::as_str);
                vec![part(
                    json!({"id": format!("{id}/summary"), "type": "text", "text": summary.unwrap_or_default()}),
                )]
            }
            Some("branchSummary") => {
                info.insert("role".into(), json!("user"));
                let summary = original.get("summary").and_then(Value::as_str);
                vec![part(json!({"id": format!("{id}/summary"), "type": "text",
                    "text": summary.unwrap_or_default(), "synthetic": true}))]
            }
            Some("bashExecution")
                if original.get("excludeFromContext").and_then(Value::as_bool) != Some(true) =>
            {
                info.insert("role".into(), json!("user"));
                let output = original.get("output").and_then(Value::as_str);
                vec![part(json!({"id": format!("{id}/output"), "type": "text",
                    "text": output.unwrap_or_default(), "synthetic": true}))]
            }
            // Unknown roles, results whose call is not here, excluded shell runs:
            // carried as they are, never tagged.
            _ => {
                info.insert("role".into(), json!("other"));
                Vec::new()
            }
        };
        if !time.is_empty() {
            info.insert("time".into(), Value::Object(time));
        }
        let mut raw = Map::new();
        raw.insert("info".into(), Value::Object(info));
        collecting = (role == Some("assistant")).then_some(i);
        out_index.insert(i, messages.len());
        messages.push(Message::new(raw, parts));
    }
    layout.originals = originals;
    Ok((messages, layout))
}

fn part_suffix(part: &Part) -> Option<&str> {
    Some(part.str_field("id")?.rsplit_once('/')?.1)
}

/// `[dropped §N§]`: the whole output was dropped.
fn is_placeholder(text: &str) -> bool {
    text.starts_with("[dropped §") && text.ends_with("§]") && !text.contains('\n')
}

/// A content block array rebuilt from the parts that survived the pass.
fn rebuild_content(original: &[Value], parts: &[Part]) -> Vec<Value> {
    let mut out = Vec::with_capacity(parts.len());
    for p in parts {
        let Some(block) = block_index(p).and_then(|k| original.get(k)) else {
            // A part the pass made (none today): its text, if it has one.
            if let Some(text) = p.text() {
                out.push(json!({"type": "text", "text": text}));
            }
            continue;
        };
        let mut block = block.clone();
        let kind = block
            .get("type")
            .and_then(Value::as_str)
            .map(str::to_string);
        match (kind.as_deref(), p.kind) {
            (Some("text"), PartKind::Text) => {
                if let Some(text) = p.text()
                    && block
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        != text
                {
                    set(&mut block, "text", json!(text));
                }
            }
            (Some("toolCall"), PartKind::Tool) => {
                if let Some(input) = p.tool_input()
                    && block.get("arguments").cloned().unwrap_or(json!({})) != *input
                {
                    set(&mut block, "arguments", input.clone());
                }
            }
            // A dropped image: its placeholder text instead.
            (Some("image"), PartKind::Text) => {
                block = json!({"type": "text", "text": p.text().unwrap_or_default()});
            }
            _ => {}
        }
        out.push(block);
    }
    out
}

/// A tool result with its output as the pass left it.
fn rebuild_result(mut result: Map<String, Value>, tool: &Part) -> Map<String, Value> {
    let original_text = text_of_blocks(result.get("content"));
    let state = tool.get("state");
    let new_text = match tool.tool_status() {
        Some("error") => state.and_then(|s| s.get("error")).and_then(Value::as_str),
        _ => tool.tool_output(),
    };
    let Some(new_text) = new_text else {
        return result;
    };
    if new_text == original_text {
        return result;
    }
    let dropped = is_placeholder(new_text);
    let blocks = result
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut content = Vec::with_capacity(blocks.len().max(1));
    let mut placed = false;
    for block in blocks {
        let is_text = block.get("type").and_then(Value::as_str) == Some("text");
        if is_text {
            if !placed {
                let mut block = block;
                set(&mut block, "text", json!(new_text));
                content.push(block);
                placed = true;
            }
        } else if !dropped {
            content.push(block);
        }
    }
    if !placed {
        content.insert(0, json!({"type": "text", "text": new_text}));
    }
    result.insert("content".into(), Value::Array(content));
    result
}

fn take(originals: &mut [Map<String, Value>], index: usize) -> Map<String, Value> {
    originals
        .get_mut(index)
        .map(std::mem::take)
        .unwrap_or_default()
}

/// Encode the pass's output back into Pi's messages.
pub fn encode(messages: Vec<Message>, mut layout: Layout) -> Vec<Value> {
    let mut out = Vec::with_capacity(layout.originals.len() + 3);
    let mut last_ts = 0_i64;
    for message in messages {
        let index = message.id().and_then(|id| layout.by_id.get(id)).copied();
        let Some(index) = index else {
            // A message the pass made: the head, a reminder.
            let text: Vec<&str> = message.parts.iter().filter_map(Part::text).collect();
            out.push(json!({"role": "user",
                "content": [{"type": "text", "text": text.join("\n")}],
                "timestamp": last_ts}));
            continue;
        };
        let mut original = take(&mut layout.originals, index);
        if let Some(ts) = original.get("timestamp").and_then(Value::as_i64) {
            last_ts = ts;
        }
        let role = original
            .get("role")
            .and_then(Value::as_str)
            .map(str::to_string);
        // A part's text, when the pass changed it from what `field` held.
        let text_of = |suffix: &str, field: &str| {
            let text = message
                .parts
                .iter()
                .find(|p| part_suffix(p) == Some(suffix))
                .and_then(Part::text)?;
            let before = original
                .get(field)
                .and_then(Value::as_str)
                .unwrap_or_default();
            (text != before).then(|| text.to_string())
        };
        match role.as_deref() {
            Some("user" | "custom" | "assistant") => match original.get("content") {
                Some(Value::String(_)) => {
                    if let Some(text) = text_of("s", "content") {
                        original.insert("content".into(), json!(text));
                    }
                }
                Some(Value::Array(blocks)) => {
                    let rebuilt = rebuild_content(blocks, &message.parts);
                    original.insert("content".into(), Value::Array(rebuilt));
                }
                _ => {}
            },
            Some("compactionSummary" | "branchSummary") => {
                if let Some(text) = text_of("summary", "summary") {
                    original.insert("summary".into(), json!(text));
                }
            }
            Some("bashExecution") => {
                if let Some(text) = text_of("output", "output")
                    && original.get("output").is_some()
                {
                    original.insert("output".into(), json!(text));
                }
            }
            _ => {}
        }
        out.push(Value::Object(original));
        for (call, result_index) in layout.results.remove(&index).unwrap_or_default() {
            // A result goes out only with its call.
            let Some(tool) = message
                .parts
                .iter()
                .find(|p| p.call_id() == Some(call.as_str()))
            else {
                continue;
            };
            let result = take(&mut layout.originals, result_index);
            out.push(Value::Object(rebuild_result(result, tool)));
        }
    }
    out
}

/// A Pi session file (JSON Lines, format v3): a `session` header, then
/// entries that form a tree through `id` / `parentId`.
#[derive(Debug, Clone, Default)]
pub struct SessionFile {
    /// The header's session id (what `getSessionId()` answers).
    pub id: Option<String>,
    /// The folder the session ran in.
    pub cwd: Option<String>,
    /// Every entry with an id, in file order.
    pub entries: Vec<Map<String, Value>>,
}

/// Whether a file's first line is a Pi session header.
pub fn is_header(first: &Value) -> bool {
    first.get("type").and_then(Value::as_str) == Some("session")
}

impl SessionFile {
    /// From the lines of a session file (see [`super::jsonl::read_objects`]).
    pub fn from_lines(lines: Vec<(usize, Value)>) -> SessionFile {
        let mut file = SessionFile::default();
        for (_, value) in lines {
            let Value::Object(map) = value else { continue };
            if map.get("type").and_then(Value::as_str) == Some("session") {
                if file.id.is_none() {
                    file.id = map.get("id").and_then(Value::as_str).map(str::to_string);
                    file.cwd = map.get("cwd").and_then(Value::as_str).map(str::to_string);
                }
                continue;
            }
            if map.get("id").and_then(Value::as_str).is_some() {
                file.entries.push(map);
            }
        }
        file
    }

    /// The current branch, root first: from the newest entry (Pi's leaf
    /// when it loads the file) up through `parentId`.
    pub fn branch(&self) -> Vec<&Map<String, Value>> {
        let by_id: BTreeMap<&str, &Map<String, Value>> = self
            .entries
            .iter()
            .filter_map(|e| Some((e.get("id")?.as_str()?, e)))
            .collect();
        let mut path = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        let mut current = self.entries.last();
        while let Some(entry) = current {
            let Some(id) = entry.get("id").and_then(Value::as_str) else {
                break;
            };
            if !seen.insert(id) {
                break; // a cycle: stop rather than loop
            }
            path.push(entry);
            current = entry
                .get("parentId")
                .and_then(Value::as_str)
                .and_then(|p| by_id.get(p).copied());
        }
        path.reverse();
        path
    }

    /// The newest `compaction` entry on the current branch.
    pub fn newest_compaction(&self) -> Option<&Map<String, Value>> {
        self.branch()
            .into_iter()
            .rev()
            .find(|e| e.get("type").and_then(Value::as_str) == Some("compaction"))
    }

    /// The messages on the current branch as Pi builds them for the model,
    /// each with its entry id. `whole`: every message of the branch, the
    /// ones a compaction summarised too (each compaction's summary where the
    /// compaction is); else what the model sees, as Pi builds its context:
    /// the newest compaction's summary, the entries it kept, then the rest.
    pub fn messages(&self, whole: bool) -> Vec<(Value, String)> {
        let branch = self.branch();
        let entry_id = |e: &Map<String, Value>| {
            e.get("id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let compaction_at = if whole {
            None
        } else {
            branch
                .iter()
                .rposition(|e| e.get("type").and_then(Value::as_str) == Some("compaction"))
        };
        let mut out = Vec::new();
        let Some(at) = compaction_at else {
            for entry in &branch {
                if let Some(m) = entry_message(entry, true) {
                    out.push((m, entry_id(entry)));
                }
            }
            return out;
        };
        let (before, rest) = branch.split_at(at);
        let Some((compaction, after)) = rest.split_first() else {
            return out;
        };
        if let Some(m) = entry_message(compaction, true) {
            out.push((m, entry_id(compaction)));
        }
        let first_kept = compaction.get("firstKeptEntryId").and_then(Value::as_str);
        let kept_from = before
            .iter()
            .position(|e| e.get("id").and_then(Value::as_str) == first_kept)
            .unwrap_or(before.len());
        let kept = before.get(kept_from..).unwrap_or_default();
        for entry in kept.iter().chain(after) {
            // Earlier compactions inside the kept range are not messages here.
            if let Some(m) = entry_message(entry, false) {
                out.push((m, entry_id(entry)));
            }
        }
        out
    }
}

/// The message an entry puts in the context, as Pi builds it.
fn entry_message(entry: &Map<String, Value>, compaction: bool) -> Option<Value> {
    let ms = || {
        entry
            .get("timestamp")
            .and_then(Value::as_str)
            .and_then(super::claude::parse_timestamp)
    };
    let field = |k: &str| entry.get(k).cloned();
    let mut m = Map::new();
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            m.insert(k.into(), v);
        }
    };
    match entry.get("type").and_then(Value::as_str)? {
        "message" => return entry.get("message").filter(|v| v.is_object()).cloned(),
        "custom_message" => {
            put("role", Some(json!("custom")));
            put("customType", field("customType"));
            put("content", field("content"));
            put("display", field("display"));
            put("details", field("details"));
            put("timestamp", ms().map(Value::from));
        }
        "branch_summary"
            if entry
                .get("summary")
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty()) =>
        {
            put("role", Some(json!("branchSummary")));
            put("summary", field("summary"));
            put("fromId", field("fromId"));
            put("timestamp", ms().map(Value::from));
        }
        "compaction" if compaction => {
            put("role", Some(json!("compactionSummary")));
            put("summary", field("summary"));
            put("tokensBefore", field("tokensBefore"));
            put("timestamp", ms().map(Value::from));
        }
        _ => return None,
    }
    Some(Value::Object(m))
}

/// A session file's messages in the internal shape, each with the entries
/// it was made of (its own and its tool results'), for pins and the
/// historian. `whole` as in [`SessionFile::messages`].
pub fn to_grouped_messages(
    file: &SessionFile,
    session_id: &str,
    whole: bool,
) -> Vec<super::GroupedMessage> {
    let (values, entry_ids): (Vec<Value>, Vec<String>) = file.messages(whole).into_iter().unzip();
    let Ok((messages, layout)) = decode(values, Some(session_id)) else {
        return Vec::new();
    };
    messages
        .into_iter()
        .filter_map(|message| {
            let id = message.id()?.to_string();
            let role = match message.role() {
                super::Role::User => "user",
                super::Role::Assistant => "assistant",
                super::Role::Other => return None,
            };
            let index = *layout.by_id.get(&id)?;
            let mut uuids = vec![id.clone()];
            uuids.extend(entry_ids.get(index).cloned());
            for (_, result) in layout.results.get(&index).into_iter().flatten() {
                uuids.extend(entry_ids.get(*result).cloned());
            }
            Some(super::GroupedMessage {
                created_ms: message.created_ms(),
                id,
                uuids,
                role,
                message: message.encode(),
            })
        })
        .collect()
}

/// The model the session used last: `(provider, id)` of its newest
/// assistant message on the branch.
pub fn last_model(file: &SessionFile) -> Option<(String, String)> {
    file.branch().into_iter().rev().find_map(|e| {
        let m = e.get("message")?;
        (m.get("role")?.as_str()? == "assistant").then_some(())?;
        Some((
            m.get("provider")?.as_str()?.to_string(),
            m.get("model")?.as_str()?.to_string(),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::tags::part_identity;

    fn sample() -> Vec<Value> {
        serde_json::from_str(include_str!("../../testdata/pi/context.json")).unwrap()
    }

    #[test]
    fn round_trip_is_byte_identical() {
        let input = sample();
        let text = serde_json::to_string(&input).unwrap();
        let (messages, layout) = decode(input, Some("ses")).unwrap();
        let back = serde_json::to_string(&encode(messages, layout)).unwrap();
        assert_eq!(back, text);
    }

    #[test]
    fn maps_roles_blocks_and_tool_pairs() {
        let (messages, _) = decode(sample(), Some("ses")).unwrap();
        let roles: Vec<_> = messages.iter().map(|m| m.role().as_str()).collect();
        // compactionSummary, user, assistant (+ its result), user, custom,
        // bashExecution, assistant (+ result), assistant (open call)
        assert_eq!(
            roles,
            [
                "assistant",
                "user",
                "assistant",
                "user",
                "user",
                "user",
                "assistant",
                "assistant"
            ]
        );
        assert_eq!(messages[0].info()["summary"], true);
        assert_eq!(
            messages[0].parts[0].text(),
            Some("Earlier: the user set up login.")
        );
        let read = &messages[2].parts[2];
        assert_eq!(read.kind, PartKind::Tool);
        assert_eq!(read.call_id(), Some("toolu_1"));
        assert_eq!(read.tool_name(), Some("read"));
        assert_eq!(read.tool_status(), Some("completed"));
        assert_eq!(read.tool_output(), Some("fn main() {}\n// end"));
        assert_eq!(read.tool_input(), Some(&json!({"path": "src/main.rs"})));
        assert_eq!(messages[2].parts[0].kind, PartKind::Reasoning);
        assert_eq!(messages[2].finish(), Some("tool-calls"));
        assert_eq!(messages[2].usage_input_tokens(), Some(1000 + 20 + 3000));
        assert_eq!(messages[3].parts[1].kind, PartKind::File);
        assert!(messages[1].is_real_user());
        assert!(
            !messages[4].is_real_user(),
            "custom messages are not the user's"
        );
        assert!(
            !messages[5].is_real_user(),
            "a shell run is not a typed prompt"
        );
        assert_eq!(messages[6].parts[0].tool_status(), Some("error"));
        assert_eq!(messages[7].parts[0].tool_status(), Some("pending"));
        assert!(!messages[7].parts[0].tool_is_closed());
    }

    fn identities(values: Vec<Value>) -> Vec<(String, Vec<String>)> {
        let (messages, _) = decode(values, Some("ses")).unwrap();
        messages
            .iter()
            .map(|m| {
                let id = m.id().unwrap().to_string();
                let parts = m
                    .parts
                    .iter()
                    .enumerate()
                    .filter_map(|(k, p)| part_identity(&id, k, p).map(|(_, key)| key))
                    .collect();
                (id, parts)
            })
            .collect()
    }

    #[test]
    fn identity_is_stable_across_calls_resume_and_compaction() {
        let full = sample();
        let first = identities(full.clone());
        // Every call: the same array (a deep copy) gives the same identities.
        assert_eq!(identities(full.clone()), first);
        // A resume reloads the messages from the session file: the same JSON
        // through a text round trip (numbers and key order as stored).
        let reloaded: Vec<Value> =
            serde_json::from_str(&serde_json::to_string(&full).unwrap()).unwrap();
        assert_eq!(identities(reloaded), first);
        // A later call appends: earlier identities are unchanged.
        let mut longer = full.clone();
        longer.push(json!({"role": "user", "content": "next", "timestamp": 1_764_770_500_000_i64}));
        let grown = identities(longer);
        assert_eq!(grown[..first.len()], first[..]);
        // A compaction replaces the head with a new summary: every kept
        // message keeps its identity.
        // (Pi cuts at a turn: here before the second prompt.)
        let mut compacted = vec![json!({"role": "compactionSummary", "summary": "s2",
            "tokensBefore": 9, "timestamp": 1_764_770_600_000_i64})];
        compacted.extend(full[4..].iter().cloned());
        let after = identities(compacted);
        assert_eq!(after[1..], first[3..]);
        assert_ne!(after[0].0, first[0].0, "a new summary is a new message");
        // Two messages of one role and millisecond stay apart, in order.
        let twins = vec![
            json!({"role": "user", "content": "a", "timestamp": 5}),
            json!({"role": "user", "content": "b", "timestamp": 5}),
            json!({"role": "assistant", "content": [], "timestamp": 5}),
        ];
        let ids: Vec<_> = identities(twins).into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, ["pi-u5", "pi-u5-1", "pi-a5"]);
    }

    #[test]
    fn pass_edits_land_in_the_right_fields_and_unknown_fields_stay() {
        let (mut messages, layout) = decode(sample(), Some("ses")).unwrap();
        // Tag the user's text, drop the read's output, clear the thinking,
        // drop the failed bash call whole.
        messages[1].parts[0].set_text("§1§ Read src/main.rs".into());
        messages[2].parts.remove(0);
        messages[2].parts[1].set_tool_output("[dropped §3§]".into());
        messages[6].parts.clear();
        messages.remove(6);
        let out = encode(messages, layout);
        assert_eq!(out[1]["content"], "§1§ Read src/main.rs");
        assert_eq!(
            out[2]["content"].as_array().unwrap().len(),
            2,
            "thinking cleared"
        );
        assert_eq!(out[2]["content"][0]["text"], "Reading it.");
        assert_eq!(
            out[2]["futureField"],
            json!({"z": 1, "a": 2}),
            "carried through"
        );
        assert_eq!(out[3]["role"], "toolResult");
        assert_eq!(
            out[3]["content"],
            json!([{"type": "text", "text": "[dropped §3§]"}])
        );
        assert_eq!(out[3]["details"], json!({"lines": 2}));
        // The dropped call's result went with it.
        assert!(
            !out.iter().any(|m| m["toolCallId"] == "toolu_2"),
            "{out:#?}"
        );
        // The open call at the end is still there, with no result.
        assert_eq!(out.last().unwrap()["content"][0]["id"], "toolu_3");
    }

    #[test]
    fn messages_the_pass_adds_become_user_messages() {
        let (mut messages, layout) = decode(sample(), Some("ses")).unwrap();
        let head = Message::decode(json!({"info": {"role": "user", "syntheticHead": true},
            "parts": [{"type": "text", "text": "<session-history>", "synthetic": true}]}))
        .unwrap();
        messages.insert(0, head);
        let out = encode(messages, layout);
        assert_eq!(
            out[0],
            json!({"role": "user", "content": [{"type": "text", "text": "<session-history>"}],
                   "timestamp": 0})
        );
        assert_eq!(out[1]["role"], "compactionSummary");
    }

    fn session_file() -> SessionFile {
        let text = include_str!("../../testdata/pi/session.jsonl");
        let lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, serde_json::from_str(l).unwrap()))
            .collect();
        SessionFile::from_lines(lines)
    }

    #[test]
    fn a_session_file_gives_pis_context_and_the_whole_branch() {
        let file = session_file();
        assert_eq!(
            file.id.as_deref(),
            Some("3c9e1f2a-8d7b-4f4e-9a51-0d2c6e7b1a90")
        );
        assert_eq!(file.cwd.as_deref(), Some("/home/me/repo"));
        // What the model sees: the summary, the kept reply, then the rest;
        // not the abandoned branch.
        let context = file.messages(false);
        let entries: Vec<_> = context.iter().map(|(_, e)| e.as_str()).collect();
        assert_eq!(entries, ["f6a7b8c9", "d4e5f6a7", "d0e1f2a3", "a7b8c9d0"]);
        assert_eq!(
            context[0].0,
            json!({"role": "compactionSummary", "summary": "User is hardening login...",
                   "tokensBefore": 152000, "timestamp": 1_764_774_600_000_i64})
        );
        assert_eq!(context[2].0["role"], "custom");
        assert_eq!(context[2].0["timestamp"], 1_764_774_601_000_i64);
        // The whole branch, for pins: the summarised messages too.
        let whole = to_grouped_messages(&file, "s", true);
        let ids: Vec<_> = whole.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "pi-u1764770401000",
                "pi-a1764770405000",
                "pi-a1764770409000",
                "pi-c1764774600000",
                "pi-x1764774601000",
                "pi-u1764774660000"
            ]
        );
        // A message is found by its own id or by any entry it was made of.
        assert_eq!(
            whole[1].uuids,
            ["pi-a1764770405000", "b2c3d4e5", "c3d4e5f6"]
        );
        assert_eq!(whole[1].message["parts"][0]["state"]["output"], "ok");
        // The context's messages have the identities the pass gives them.
        let seen: Vec<Value> = context.into_iter().map(|(m, _)| m).collect();
        let grouped: Vec<_> = to_grouped_messages(&file, "s", false)
            .into_iter()
            .map(|m| m.id)
            .collect();
        let (decoded, _) = decode(seen, Some("s")).unwrap();
        let pass_ids: Vec<_> = decoded
            .iter()
            .filter_map(|m| m.id().map(str::to_string))
            .collect();
        assert_eq!(grouped, pass_ids);
        assert_eq!(
            last_model(&file),
            Some(("anthropic".into(), "claude-sonnet-4-5".into()))
        );
        let compaction = file.newest_compaction().unwrap();
        assert_eq!(compaction["id"], "f6a7b8c9");
    }

    #[test]
    fn refuses_what_is_not_a_message() {
        let err = decode(vec![json!({"role": "user"}), json!(3)], None).unwrap_err();
        assert!(err.to_string().contains("messages[1]"), "{err}");
    }
}

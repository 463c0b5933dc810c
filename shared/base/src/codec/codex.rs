//! Codex rollouts (JSONL): `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl`.
//!
//! Each line is `{timestamp, type, payload}` (newer builds add `ordinal`, the
//! line's sequence number). The lines mc reads:
//!
//! - `session_meta` (the first line): the session id and its working folder;
//! - `response_item`: what the model saw and said, as OpenAI Responses items —
//!   `message` (role `user`, `assistant`, `developer`), `reasoning`,
//!   `function_call` / `function_call_output` and their `custom_tool_call`
//!   twins, paired by `call_id`;
//! - `turn_context`: the model of the turns that follow;
//! - `event_msg` of type `token_count`: the newest usage and the model window;
//! - `compacted`: a compaction, `{message, replacement_history}` — the summary
//!   and the items Codex carries on in its place (the user's earlier messages,
//!   word for word). The summary the model wrote for it is an assistant
//!   `response_item` marked `metadata.compaction_output`.
//!
//! Every other line (`world_state`, `token_usage_record`, other events) is kept
//! as [`LineKind::Other`] and ignored. Nothing here panics on any input.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::GroupedMessage;
use super::claude::parse_timestamp;
use crate::error::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineKind {
    SessionMeta,
    ResponseItem,
    TurnContext,
    Compacted,
    EventMsg,
    Other,
}

/// One line of a rollout.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// The line's `ordinal`, else its 0-based position among the object lines.
    pub ordinal: i64,
    pub kind: LineKind,
    pub timestamp_ms: Option<i64>,
    /// `payload` (null when missing).
    pub payload: Value,
}

impl Line {
    fn from_value(position: usize, raw: Value) -> Line {
        let kind = match raw.get("type").and_then(Value::as_str) {
            Some("session_meta") => LineKind::SessionMeta,
            Some("response_item") => LineKind::ResponseItem,
            Some("turn_context") => LineKind::TurnContext,
            Some("compacted") => LineKind::Compacted,
            Some("event_msg") => LineKind::EventMsg,
            _ => LineKind::Other,
        };
        let ordinal = raw
            .get("ordinal")
            .and_then(Value::as_i64)
            .unwrap_or(i64::try_from(position).unwrap_or(i64::MAX));
        Line {
            ordinal,
            kind,
            timestamp_ms: raw
                .get("timestamp")
                .and_then(Value::as_str)
                .and_then(parse_timestamp),
            payload: match raw {
                Value::Object(mut map) => map.remove("payload").unwrap_or(Value::Null),
                _ => Value::Null,
            },
        }
    }

    /// `payload.type`.
    fn item_type(&self) -> Option<&str> {
        self.payload.get("type").and_then(Value::as_str)
    }

    /// A `response_item` message's role.
    fn role(&self) -> Option<&str> {
        self.payload.get("role").and_then(Value::as_str)
    }
}

/// A rollout read from its file.
#[derive(Debug, Clone, Default)]
pub struct RolloutFile {
    pub lines: Vec<Line>,
    /// Lines skipped (not a JSON object) or repaired (invalid UTF-8 replaced).
    pub warnings: Vec<String>,
}

/// Parse a whole rollout; a line that is not a JSON object is skipped and reported.
pub fn parse_rollout(text: &str) -> (Vec<Line>, Vec<String>) {
    let mut values = Vec::new();
    let mut skipped = Vec::new();
    for (index, line) in text.lines().enumerate() {
        match super::jsonl::parse_object(index + 1, line, "rollout") {
            Ok(Some(value)) => values.push((index + 1, value)),
            Ok(None) => {}
            Err(e) => skipped.push(e.to_string()),
        }
    }
    (lines_from(values), skipped)
}

/// Read the rollout at `path` line by line, with the file rules and the size
/// cap of [`super::jsonl::for_each_line`]: a line that cannot be read is
/// skipped with a warning, a bad byte costs at most its line.
pub fn read_rollout(path: &std::path::Path, max_bytes: u64) -> Result<RolloutFile> {
    let objects = super::jsonl::read_objects(path, max_bytes, "rollout")?;
    Ok(RolloutFile {
        lines: lines_from(objects.lines),
        warnings: objects.warnings,
    })
}

/// Lines of the JSON object lines of a rollout.
pub fn lines_from(values: Vec<(usize, Value)>) -> Vec<Line> {
    values
        .into_iter()
        .enumerate()
        .map(|(position, (_, value))| Line::from_value(position, value))
        .collect()
}

/// Whether the first object line of `text` is a Codex `session_meta` line:
/// how a transcript tells its harness when nobody says.
pub fn looks_like_rollout(first_line: &str) -> bool {
    serde_json::from_str::<Value>(first_line)
        .ok()
        .is_some_and(|v| v.get("type").and_then(Value::as_str) == Some("session_meta"))
}

/// The session id `session_meta` names.
pub fn session_id(lines: &[Line]) -> Option<String> {
    lines
        .iter()
        .filter(|l| l.kind == LineKind::SessionMeta)
        .find_map(|l| {
            l.payload
                .get("id")
                .or_else(|| l.payload.get("session_id"))
                .and_then(Value::as_str)
                .map(str::to_string)
        })
}

/// The session's working folder: the newest `turn_context.cwd`, else `session_meta.cwd`.
pub fn cwd(lines: &[Line]) -> Option<String> {
    lines
        .iter()
        .rev()
        .filter(|l| matches!(l.kind, LineKind::TurnContext | LineKind::SessionMeta))
        .find_map(|l| l.payload.get("cwd").and_then(Value::as_str))
        .filter(|c| !c.is_empty())
        .map(str::to_string)
}

/// The model's context window as Codex last reported it (`token_count` events).
pub fn context_window(lines: &[Line]) -> Option<u64> {
    lines.iter().rev().find_map(|l| {
        (l.kind == LineKind::EventMsg && l.item_type() == Some("token_count"))
            .then(|| l.payload.pointer("/info/model_context_window"))
            .flatten()
            .and_then(Value::as_u64)
            .filter(|w| *w > 0)
    })
}

/// The newest compaction of a rollout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compaction {
    /// What names it: `codex:<window_id>` when the line has one, else
    /// `codex:line:<ordinal>`.
    pub key: String,
    pub ordinal: i64,
    pub at_ms: Option<i64>,
    /// Ids of the messages Codex carries on word for word (`replacement_history`).
    pub kept_ids: Vec<String>,
    /// Their texts, for items without an id.
    pub kept_texts: Vec<String>,
}

/// The newest `compacted` line, if any.
pub fn newest_compaction(lines: &[Line]) -> Option<Compaction> {
    let line = lines.iter().rev().find(|l| l.kind == LineKind::Compacted)?;
    let key = match line.payload.get("window_id").and_then(Value::as_str) {
        Some(window) if !window.is_empty() => format!("codex:{window}"),
        _ => format!("codex:line:{}", line.ordinal),
    };
    let mut kept_ids = Vec::new();
    let mut kept_texts = Vec::new();
    for item in line
        .payload
        .get("replacement_history")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if item.get("type").and_then(Value::as_str) != Some("message") {
            continue;
        }
        if let Some(id) = item.get("id").and_then(Value::as_str) {
            kept_ids.push(id.to_string());
        }
        let text = content_text(item.get("content"));
        if !text.is_empty() {
            kept_texts.push(text);
        }
    }
    Some(Compaction {
        key,
        ordinal: line.ordinal,
        at_ms: line.timestamp_ms,
        kept_ids,
        kept_texts,
    })
}

/// A Responses call item's (`function_call`, `custom_tool_call`,
/// `local_shell_call`) call id, tool name and input as an object: what a
/// rollout line and a request's `input` item both carry.
pub(crate) fn call_parts(p: &Value) -> (String, String, Value) {
    let call_id = p
        .get("call_id")
        .or_else(|| p.get("id"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let name = p
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or(
            if p.get("type").and_then(Value::as_str) == Some("local_shell_call") {
                "shell"
            } else {
                ""
            },
        )
        .to_string();
    let input = match p.get("arguments").or_else(|| p.get("input")) {
        Some(Value::String(raw)) => match serde_json::from_str::<Value>(raw) {
            Ok(v @ Value::Object(_)) => v,
            _ => json!({"input": raw}),
        },
        Some(v @ Value::Object(_)) => v.clone(),
        _ => p.get("action").cloned().unwrap_or_else(|| json!({})),
    };
    (call_id, name, input)
}

/// A Responses output item's (`function_call_output`,
/// `custom_tool_call_output`) text, and whether it says the call failed.
pub(crate) fn output_text(p: &Value) -> (String, bool) {
    match p.get("output") {
        Some(Value::String(text)) => (text.clone(), false),
        Some(Value::Object(o)) => (
            match o.get("content") {
                Some(Value::String(text)) => text.clone(),
                other => content_text(other),
            },
            o.get("success").and_then(Value::as_bool) == Some(false),
        ),
        Some(Value::Array(_)) => (content_text(p.get("output")), false),
        _ => (String::new(), false),
    }
}

/// The text of a message's content: its `input_text` / `output_text` /
/// `text` items, trimmed, joined by a blank line.
pub(crate) fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.trim().to_string(),
        Some(Value::Array(items)) => items
            .iter()
            .filter(|i| {
                matches!(
                    i.get("type").and_then(Value::as_str),
                    Some("input_text" | "output_text" | "text")
                )
            })
            .filter_map(|i| i.get("text").and_then(Value::as_str))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .collect::<Vec<_>>()
            .join("\n\n"),
        _ => String::new(),
    }
}

/// User-role messages Codex writes itself (the environment, instructions,
/// the compaction's summary carried on): context, not the user's words.
pub fn is_harness_context(text: &str) -> bool {
    const PREFIXES: [&str; 9] = [
        "<environment_context>",
        "<user_instructions>",
        "# AGENTS.md instructions",
        "<turn_aborted>",
        "<user_shell_command>",
        "<skills_instructions>",
        "<collaboration_mode>",
        "<subagent_notification>",
        "Another language model started to solve this problem",
    ];
    let text = text.trim_start();
    PREFIXES.iter().any(|p| text.starts_with(p))
}

/// OpenCode-shaped `{info, parts}` messages, oldest first, with the lines each
/// was made of (their ids: `payload.id`, else `line:<ordinal>`):
///
/// - a user `message` becomes a user message; text Codex writes itself
///   (environment, instructions) is kept as `synthetic` text;
/// - consecutive assistant-side items (assistant `message`, `reasoning`,
///   tool calls) become one assistant message, and a tool's output (a later
///   `function_call_output`) completes its call's `tool` part;
/// - `developer` and `system` messages are left out;
/// - the summary the model wrote for a compaction and the `compacted` line
///   keep OpenCode's compaction shape: a user message with a `compaction`
///   part and an assistant `summary: true` message holding the summary;
/// - `time.created` comes from the line timestamps, `modelID` from the newest
///   `turn_context`, `tokens` from the `token_count` event after a reply.
pub fn to_grouped_messages(lines: &[Line], session_id: &str) -> Vec<GroupedMessage> {
    let mut builder = Builder {
        session_id,
        out: Vec::new(),
        calls: HashMap::new(),
        open_assistant: None,
        model: None,
        seen: std::collections::HashSet::new(),
    };
    for line in lines {
        match line.kind {
            LineKind::TurnContext => {
                builder.model = line
                    .payload
                    .get("model")
                    .and_then(Value::as_str)
                    .map(str::to_string);
            }
            LineKind::ResponseItem => builder.item(line),
            LineKind::Compacted => builder.compacted(line),
            LineKind::EventMsg if line.item_type() == Some("token_count") => builder.usage(line),
            _ => {}
        }
    }
    builder.out
}

/// [`to_grouped_messages`] without the line ids.
pub fn to_messages(lines: &[Line], session_id: &str) -> Vec<Value> {
    to_grouped_messages(lines, session_id)
        .into_iter()
        .map(|m| m.message)
        .collect()
}

struct Builder<'a> {
    session_id: &'a str,
    out: Vec<GroupedMessage>,
    /// call_id → (message index, part index) of its tool part.
    calls: HashMap<String, (usize, usize)>,
    /// The assistant message still open for more items.
    open_assistant: Option<usize>,
    model: Option<String>,
    /// Item ids already turned into messages (an item written twice counts once).
    seen: std::collections::HashSet<String>,
}

/// The id mc gives an item: its `id`, else `line:<ordinal>`.
pub fn item_id(line: &Line) -> String {
    match line.payload.get("id").and_then(Value::as_str) {
        Some(id) if !id.is_empty() => id.to_string(),
        _ => format!("line:{}", line.ordinal),
    }
}

impl Builder<'_> {
    fn info(&self, id: &str, role: &str, at: Option<i64>) -> Map<String, Value> {
        let mut info = Map::new();
        info.insert("id".into(), json!(id));
        info.insert("sessionID".into(), json!(self.session_id));
        info.insert("role".into(), json!(role));
        let mut time = Map::new();
        if let Some(ts) = at {
            time.insert("created".into(), json!(ts));
        }
        info.insert("time".into(), Value::Object(time));
        info
    }

    fn push(&mut self, id: String, role: &'static str, at: Option<i64>, message: Value) -> usize {
        self.out.push(GroupedMessage {
            uuids: vec![id.clone()],
            id,
            role,
            created_ms: at,
            message,
        });
        self.out.len().saturating_sub(1)
    }

    fn parts_mut(&mut self, index: usize) -> Option<&mut Vec<Value>> {
        self.out
            .get_mut(index)?
            .message
            .get_mut("parts")?
            .as_array_mut()
    }

    fn info_mut(&mut self, index: usize) -> Option<&mut Map<String, Value>> {
        self.out
            .get_mut(index)?
            .message
            .get_mut("info")?
            .as_object_mut()
    }

    /// The open assistant message, or a new one starting with this line.
    fn assistant(&mut self, line: &Line, id: &str) -> usize {
        if let Some(index) = self.open_assistant {
            if let Some(grouped) = self.out.get_mut(index) {
                grouped.uuids.push(id.to_string());
            }
            if let (Some(ts), Some(info)) = (line.timestamp_ms, self.info_mut(index))
                && let Some(time) = info.get_mut("time").and_then(Value::as_object_mut)
            {
                time.insert("completed".into(), json!(ts));
            }
            return index;
        }
        let mut info = self.info(id, "assistant", line.timestamp_ms);
        if let Some(model) = &self.model {
            info.insert("providerID".into(), json!("openai"));
            info.insert("modelID".into(), json!(model));
        }
        if let (Some(ts), Some(time)) = (
            line.timestamp_ms,
            info.get_mut("time").and_then(Value::as_object_mut),
        ) {
            time.insert("completed".into(), json!(ts));
        }
        let index = self.push(
            id.to_string(),
            "assistant",
            line.timestamp_ms,
            json!({"info": Value::Object(info), "parts": []}),
        );
        self.open_assistant = Some(index);
        index
    }

    fn item(&mut self, line: &Line) {
        let id = item_id(line);
        let kind = line.item_type().unwrap_or("");
        if matches!(
            kind,
            "message" | "reasoning" | "function_call" | "custom_tool_call"
        ) && !self.seen.insert(id.clone())
        {
            return;
        }
        match kind {
            "message" => match line.role() {
                Some("user") => self.user(line, &id),
                Some("assistant") => self.assistant_text(line, &id),
                _ => {}
            },
            "reasoning" => {
                let text = line
                    .payload
                    .get("summary")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n\n");
                if text.trim().is_empty() {
                    return;
                }
                let index = self.assistant(line, &id);
                if let Some(parts) = self.parts_mut(index) {
                    parts.push(json!({"id": format!("{id}/r"), "type": "reasoning", "text": text}));
                }
            }
            "function_call" | "custom_tool_call" | "local_shell_call" => self.call(line, &id),
            "function_call_output" | "custom_tool_call_output" => self.output(line, &id),
            _ => {}
        }
    }

    fn user(&mut self, line: &Line, id: &str) {
        let text = content_text(line.payload.get("content"));
        if text.is_empty() {
            return;
        }
        self.open_assistant = None;
        let mut part = json!({"id": format!("{id}/0"), "type": "text", "text": text});
        if is_harness_context(&text)
            && let Some(map) = part.as_object_mut()
        {
            map.insert("synthetic".into(), json!(true));
        }
        let info = self.info(id, "user", line.timestamp_ms);
        self.push(
            id.to_string(),
            "user",
            line.timestamp_ms,
            json!({"info": Value::Object(info), "parts": [part]}),
        );
    }

    fn assistant_text(&mut self, line: &Line, id: &str) {
        let text = content_text(line.payload.get("content"));
        let compaction_output = line
            .payload
            .pointer("/metadata/compaction_output")
            .or_else(|| line.payload.get("compaction_output"))
            .and_then(Value::as_bool)
            == Some(true);
        if compaction_output {
            // The summary a compaction asked for: it becomes the summary
            // message when its `compacted` line arrives.
            self.open_assistant = None;
            return;
        }
        if text.is_empty() {
            return;
        }
        let index = self.assistant(line, id);
        if let Some(parts) = self.parts_mut(index) {
            let n = parts.len();
            parts.push(json!({"id": format!("{id}/{n}"), "type": "text", "text": text}));
        }
        if let Some(info) = self.info_mut(index) {
            info.insert("finish".into(), json!("stop"));
        }
    }

    fn call(&mut self, line: &Line, id: &str) {
        let (call_id, name, input) = call_parts(&line.payload);
        let index = self.assistant(line, id);
        let mut state = Map::new();
        state.insert("status".into(), json!("pending"));
        state.insert("input".into(), input);
        if let Some(ts) = line.timestamp_ms {
            state.insert("time".into(), json!({"start": ts}));
        }
        let part_index = self.parts_mut(index).map_or(0, |p| p.len());
        if !call_id.is_empty() {
            self.calls.insert(call_id.clone(), (index, part_index));
        }
        if let Some(parts) = self.parts_mut(index) {
            parts.push(
                json!({"id": format!("{id}/c"), "type": "tool", "callID": call_id,
                              "tool": name, "state": Value::Object(state)}),
            );
        }
        if let Some(info) = self.info_mut(index) {
            info.insert("finish".into(), json!("tool-calls"));
        }
    }

    fn output(&mut self, line: &Line, id: &str) {
        let p = &line.payload;
        let Some(call_id) = p.get("call_id").and_then(Value::as_str) else {
            return;
        };
        let Some(&(index, part)) = self.calls.get(call_id) else {
            return;
        };
        let (text, failed) = output_text(p);
        if let Some(grouped) = self.out.get_mut(index) {
            grouped.uuids.push(id.to_string());
        }
        let Some(state) = self
            .parts_mut(index)
            .and_then(|parts| parts.get_mut(part))
            .and_then(|p| p.get_mut("state"))
            .and_then(Value::as_object_mut)
        else {
            return;
        };
        super::close_tool_state(state, text, failed, line.timestamp_ms);
    }

    fn compacted(&mut self, line: &Line) {
        self.open_assistant = None;
        let id = format!("compacted:{}", line.ordinal);
        let auto = true;
        let info = self.info(&id, "user", line.timestamp_ms);
        self.push(
            id.clone(),
            "user",
            line.timestamp_ms,
            json!({"info": Value::Object(info),
                   "parts": [{"id": format!("{id}/0"), "type": "compaction", "auto": auto}]}),
        );
        let summary_id = format!("{id}/summary");
        let mut info = self.info(&summary_id, "assistant", line.timestamp_ms);
        info.insert("parentID".into(), json!(id));
        info.insert("summary".into(), json!(true));
        info.insert("mode".into(), json!("compaction"));
        info.insert("agent".into(), json!("compaction"));
        info.insert("finish".into(), json!("stop"));
        let text = line
            .payload
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        self.push(
            summary_id.clone(),
            "assistant",
            line.timestamp_ms,
            json!({"info": Value::Object(info),
                   "parts": [{"id": format!("{summary_id}/0"), "type": "text", "text": text}]}),
        );
    }

    /// A `token_count` event: the usage of the reply just finished.
    fn usage(&mut self, line: &Line) {
        let Some(last) = line.payload.pointer("/info/last_token_usage") else {
            return;
        };
        let Some(index) = self.out.iter().rposition(|m| {
            m.role == "assistant"
                && m.message.pointer("/info/summary").and_then(Value::as_bool) != Some(true)
        }) else {
            return;
        };
        let n = |key: &str| last.get(key).and_then(Value::as_i64).unwrap_or(0);
        let cached = n("cached_input_tokens");
        let tokens = json!({"input": n("input_tokens").saturating_sub(cached).max(0),
                            "output": n("output_tokens"), "reasoning": n("reasoning_output_tokens"),
                            "cache": {"read": cached, "write": n("cache_write_input_tokens")}});
        if let Some(info) = self.info_mut(index) {
            info.insert("tokens".into(), tokens);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SESSION: &str = "01a22fec-152e-7b93-ab35-a37faec58297";

    fn line(ordinal: i64, ts: &str, kind: &str, payload: Value) -> String {
        json!({"timestamp": ts, "ordinal": ordinal, "type": kind, "payload": payload}).to_string()
    }

    fn user(ordinal: i64, id: &str, text: &str) -> String {
        line(
            ordinal,
            "2026-12-01T04:45:31.000Z",
            "response_item",
            json!({"type": "message", "id": id, "role": "user",
                   "content": [{"type": "input_text", "text": text}]}),
        )
    }

    fn assistant(ordinal: i64, id: &str, text: &str, extra: Value) -> String {
        let mut payload = json!({"type": "message", "id": id, "role": "assistant",
                                 "content": [{"type": "output_text", "text": text}]});
        if let Some(map) = extra.as_object() {
            for (k, v) in map {
                payload[k] = v.clone();
            }
        }
        line(
            ordinal,
            "2026-12-01T04:45:32.000Z",
            "response_item",
            payload,
        )
    }

    pub(crate) fn rollout() -> String {
        [
            line(0, "2026-12-01T04:45:30.833Z", "session_meta",
                 json!({"id": SESSION, "cwd": "/home/dev/shop", "cli_version": "0.169.0"})),
            line(1, "2026-12-01T04:45:30.860Z", "response_item",
                 json!({"type": "message", "id": "msg_dev", "role": "developer",
                        "content": [{"type": "input_text", "text": "<permissions instructions>"}]})),
            user(2, "msg_env", "<environment_context>\n  <cwd>/home/dev/shop</cwd>\n</environment_context>"),
            line(3, "2026-12-01T04:45:30.873Z", "turn_context",
                 json!({"cwd": "/home/dev/shop", "model": "gpt-5.5-codex"})),
            user(4, "msg_u1", "Rule one: keep answers short."),
            line(5, "2026-12-01T04:45:31.500Z", "response_item",
                 json!({"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Look at the cart."}]})),
            line(6, "2026-12-01T04:45:31.600Z", "response_item",
                 json!({"type": "function_call", "id": "fc_1", "name": "shell", "call_id": "call_1",
                        "arguments": "{\"command\":[\"cargo\",\"test\"]}"})),
            line(7, "2026-12-01T04:45:31.900Z", "response_item",
                 json!({"type": "function_call_output", "call_id": "call_1",
                        "output": "{\"output\":\"ok\",\"metadata\":{\"exit_code\":0}}"})),
            assistant(8, "msg_a1", "Tests pass.", json!({})),
            line(9, "2026-12-01T04:45:32.100Z", "event_msg",
                 json!({"type": "token_count", "info": {"last_token_usage": {"input_tokens": 5000,
                        "cached_input_tokens": 4000, "output_tokens": 20}, "model_context_window": 258400}})),
            user(10, "msg_u2", "Now fix the rounding."),
            assistant(11, "msg_s", "Summary: the cart works.", json!({"metadata": {"compaction_output": true}})),
            line(12, "2026-12-01T04:46:00.000Z", "compacted",
                 json!({"message": "Another language model started … Summary: the cart works.",
                        "window_id": "w-1",
                        "replacement_history": [
                            {"type": "message", "id": "msg_u1", "role": "user", "content": [{"type": "input_text", "text": "Rule one: keep answers short."}]},
                            {"type": "message", "id": "msg_u2", "role": "user", "content": [{"type": "input_text", "text": "Now fix the rounding."}]}
                        ]})),
            assistant(13, "msg_a2", "Rounding fixed.", json!({})),
        ]
        .join("\n")
            + "\n"
    }

    #[test]
    fn a_rollout_becomes_user_and_assistant_messages_with_tools_paired() {
        let (lines, skipped) = parse_rollout(&rollout());
        assert!(skipped.is_empty());
        assert_eq!(session_id(&lines).as_deref(), Some(SESSION));
        assert_eq!(cwd(&lines).as_deref(), Some("/home/dev/shop"));
        assert_eq!(context_window(&lines), Some(258_400));
        let grouped = to_grouped_messages(&lines, SESSION);
        let ids: Vec<&str> = grouped.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "msg_env",
                "msg_u1",
                "rs_1",
                "msg_u2",
                "compacted:12",
                "compacted:12/summary",
                "msg_a2"
            ]
        );
        assert_eq!(grouped[0].message["parts"][0]["synthetic"], true);
        let reply = &grouped[2];
        assert_eq!(reply.uuids, ["rs_1", "fc_1", "line:7", "msg_a1"]);
        let kinds: Vec<&str> = reply.message["parts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["type"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["reasoning", "tool", "text"]);
        let tool = &reply.message["parts"][1];
        assert_eq!(tool["tool"], "shell");
        assert_eq!(tool["state"]["status"], "completed");
        assert_eq!(tool["state"]["input"]["command"], json!(["cargo", "test"]));
        assert_eq!(reply.message["info"]["modelID"], "gpt-5.5-codex");
        assert_eq!(reply.message["info"]["tokens"]["input"], 1000);
        assert_eq!(reply.message["info"]["tokens"]["cache"]["read"], 4000);
        assert_eq!(grouped[5].message["info"]["summary"], true);
        let messages: Vec<Value> = grouped.into_iter().map(|m| m.message).collect();
        crate::codec::opencode::decode_all(messages).unwrap();
    }

    #[test]
    fn the_newest_compaction_names_what_codex_kept() {
        let (lines, _) = parse_rollout(&rollout());
        let c = newest_compaction(&lines).unwrap();
        assert_eq!(c.key, "codex:w-1");
        assert_eq!(c.kept_ids, ["msg_u1", "msg_u2"]);
        assert_eq!(c.kept_texts[0], "Rule one: keep answers short.");
        assert!(newest_compaction(&lines[..5]).is_none());
        assert!(looks_like_rollout(rollout().lines().next().unwrap()));
        assert!(!looks_like_rollout("{\"type\":\"user\"}"));
    }

    #[test]
    fn bad_lines_are_skipped_and_nothing_panics() {
        let text = format!("{}\n[1]\n{{torn\n\"x\"\n", rollout());
        let (lines, skipped) = parse_rollout(&text);
        assert_eq!(skipped.len(), 3);
        assert_eq!(to_grouped_messages(&lines, SESSION).len(), 7);
        for garbage in [
            json!({"type": "response_item", "payload": {"type": "function_call_output", "call_id": "nope"}}),
            json!({"type": "response_item", "payload": {"type": "message", "role": "user", "content": 5}}),
            json!({"type": "compacted", "payload": null}),
            json!({"type": "event_msg", "payload": {"type": "token_count", "info": null}}),
        ] {
            let (lines, _) = parse_rollout(&garbage.to_string());
            let _ = to_grouped_messages(&lines, SESSION);
            let _ = newest_compaction(&lines);
        }
    }
}

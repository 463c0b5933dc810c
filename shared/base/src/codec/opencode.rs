//! OpenCode's `{info, parts}` messages (MessageV2), as the
//! `experimental.chat.messages.transform` hook hands them over.

use std::sync::LazyLock;

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::json::kind_name as json_kind;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
    Other,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Other => "other",
        }
    }
}

/// What the transform needs to know about a part; everything else stays in `raw`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartKind {
    Text,
    Reasoning,
    Tool,
    File,
    StepStart,
    StepFinish,
    Other,
}

#[derive(Debug, Clone)]
pub struct Part {
    pub kind: PartKind,
    pub raw: Map<String, Value>,
}

#[derive(Debug, Clone)]
pub struct Message {
    /// The whole message object; its `parts` slot is held in `parts` while
    /// decoded. Its `info` is read, never changed, after [`Message::new`].
    pub raw: Map<String, Value>,
    pub parts: Vec<Part>,
    /// What a pass asks of `info` over and over, read once.
    facts: Facts,
}

/// `info` fields read once per message (each read of `raw` hashes its keys).
#[derive(Debug, Clone, Default)]
struct Facts {
    id: Option<Box<str>>,
    role: Option<Role>,
    created_ms: Option<i64>,
    completed_ms: Option<i64>,
}

impl Facts {
    fn of(raw: &Map<String, Value>) -> Facts {
        let Some(info) = field(raw, "info").and_then(Value::as_object) else {
            return Facts::default();
        };
        // One walk over `info` instead of a hashed lookup per field (a map
        // never holds a key twice, so the first match is the only one).
        let mut facts = Facts {
            role: Some(Role::Other),
            ..Facts::default()
        };
        for (key, value) in info {
            match key.as_str() {
                "id" => facts.id = value.as_str().map(Box::from),
                "role" => {
                    facts.role = Some(match value.as_str() {
                        Some("user") => Role::User,
                        Some("assistant") => Role::Assistant,
                        _ => Role::Other,
                    });
                }
                "time" => {
                    facts.created_ms = value.get("created").and_then(Value::as_i64);
                    facts.completed_ms = value.get("completed").and_then(Value::as_i64);
                }
                _ => {}
            }
        }
        facts
    }
}

/// `map.get(key)` by a walk over the entries while the map is small: a
/// message's and a part's objects hold a handful of keys, and comparing
/// those (by length first) costs less than hashing the key.
fn field<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    if map.len() <= 12 {
        map.iter().find(|(k, _)| k.as_str() == key).map(|(_, v)| v)
    } else {
        map.get(key)
    }
}

fn field_mut<'a>(map: &'a mut Map<String, Value>, key: &str) -> Option<&'a mut Value> {
    if map.len() <= 12 {
        map.iter_mut()
            .find(|(k, _)| k.as_str() == key)
            .map(|(_, v)| v)
    } else {
        map.get_mut(key)
    }
}

/// `map.insert(key, value)`: an existing key's value is replaced in place
/// (found as [`field`] finds it), a new key goes last.
fn set_field(map: &mut Map<String, Value>, key: &str, value: Value) {
    match field_mut(map, key) {
        Some(slot) => *slot = value,
        None => {
            map.insert(key.into(), value);
        }
    }
}

fn kind_of(type_name: Option<&str>) -> PartKind {
    match type_name {
        Some("text") => PartKind::Text,
        Some("reasoning" | "thinking" | "redacted_thinking") => PartKind::Reasoning,
        Some("tool") => PartKind::Tool,
        Some("file") => PartKind::File,
        Some("step-start") => PartKind::StepStart,
        Some("step-finish") => PartKind::StepFinish,
        _ => PartKind::Other,
    }
}

impl Part {
    pub fn decode(value: Value) -> Result<Part> {
        match value {
            Value::Object(raw) => {
                let kind = kind_of(field(&raw, "type").and_then(Value::as_str));
                Ok(Part { kind, raw })
            }
            other => Err(Error::input(format!(
                "a message part is not a JSON object (found {})",
                json_kind(&other)
            ))),
        }
    }

    pub fn encode(self) -> Value {
        Value::Object(self.raw)
    }

    pub fn text(&self) -> Option<&str> {
        field(&self.raw, "text").and_then(Value::as_str)
    }

    pub fn set_text(&mut self, text: String) {
        set_field(&mut self.raw, "text", Value::String(text));
    }

    fn flag(&self, name: &str) -> bool {
        field(&self.raw, name)
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    pub fn is_synthetic(&self) -> bool {
        self.flag("synthetic")
    }

    pub fn is_ignored(&self) -> bool {
        self.flag("ignored")
    }

    pub fn call_id(&self) -> Option<&str> {
        field(&self.raw, "callID").and_then(Value::as_str)
    }

    pub fn tool_name(&self) -> Option<&str> {
        field(&self.raw, "tool").and_then(Value::as_str)
    }

    fn state(&self) -> Option<&Map<String, Value>> {
        field(&self.raw, "state").and_then(Value::as_object)
    }

    fn state_mut(&mut self) -> Option<&mut Map<String, Value>> {
        field_mut(&mut self.raw, "state").and_then(Value::as_object_mut)
    }

    pub fn tool_status(&self) -> Option<&str> {
        field(self.state()?, "status").and_then(Value::as_str)
    }

    /// The output of a completed tool call.
    pub fn tool_output(&self) -> Option<&str> {
        field(self.state()?, "output").and_then(Value::as_str)
    }

    pub fn set_tool_output(&mut self, output: String) {
        if let Some(state) = self.state_mut() {
            set_field(state, "output", Value::String(output));
        }
    }

    pub fn tool_input(&self) -> Option<&Value> {
        field(self.state()?, "input")
    }

    pub fn tool_input_mut(&mut self) -> Option<&mut Value> {
        field_mut(self.state_mut()?, "input")
    }

    /// A tool arc is closed once it has a result (completed) or failed; open
    /// arcs (pending, running) are never dropped or truncated.
    pub fn tool_is_closed(&self) -> bool {
        self.tool_output().is_some() || self.tool_status() == Some("error")
    }

    pub fn provider_executed(&self) -> bool {
        self.flag("providerExecuted")
    }

    pub fn file_url(&self) -> Option<&str> {
        field(&self.raw, "url").and_then(Value::as_str)
    }

    /// Does this part carry content the model reads (as opposed to structure)?
    pub fn is_meaningful(&self) -> bool {
        match self.kind {
            PartKind::Text => self.text().is_some_and(|t| !t.trim().is_empty()),
            PartKind::Reasoning | PartKind::StepStart | PartKind::StepFinish => false,
            PartKind::Tool | PartKind::File => true,
            PartKind::Other => !matches!(
                field(&self.raw, "type").and_then(Value::as_str),
                Some("snapshot" | "patch" | "agent" | "retry" | "meta")
            ),
        }
    }
}

impl Message {
    pub fn decode(value: Value) -> Result<Message> {
        let mut raw = match value {
            Value::Object(map) => map,
            other => {
                return Err(Error::input(format!(
                    "a message is not a JSON object (found {})",
                    json_kind(&other)
                )));
            }
        };
        if !field(&raw, "info").is_some_and(Value::is_object) {
            return Err(Error::input(
                "a message has no \"info\" object; expected OpenCode's {info, parts} shape",
            ));
        }
        // Take the parts out but leave the slot, so the key keeps its position.
        let parts = match raw
            .iter_mut()
            .find(|(k, _)| k.as_str() == "parts")
            .map(|(_, v)| v.take())
        {
            Some(Value::Array(items)) => items
                .into_iter()
                .map(Part::decode)
                .collect::<Result<Vec<_>>>()?,
            Some(Value::Null) | None => Vec::new(),
            Some(other) => {
                return Err(Error::input(format!(
                    "a message's \"parts\" is not an array (found {})",
                    json_kind(&other)
                )));
            }
        };
        Ok(Message::new(raw, parts))
    }

    /// A message from its object (the `parts` slot aside) and its parts.
    pub fn new(raw: Map<String, Value>, parts: Vec<Part>) -> Message {
        let facts = Facts::of(&raw);
        Message { raw, parts, facts }
    }

    pub fn encode(mut self) -> Value {
        let parts = Value::Array(self.parts.into_iter().map(Part::encode).collect());
        // Into the slot `decode` left (no new key to hash and allocate).
        match self.raw.iter_mut().find(|(k, _)| k.as_str() == "parts") {
            Some((_, slot)) => *slot = parts,
            None => {
                self.raw.insert("parts".into(), parts);
            }
        }
        Value::Object(self.raw)
    }

    /// The `info` object (`decode` checked there is one; a message built by
    /// hand without it reads as an empty one).
    pub fn info(&self) -> &Map<String, Value> {
        static EMPTY: LazyLock<Map<String, Value>> = LazyLock::new(Map::new);
        field(&self.raw, "info")
            .and_then(Value::as_object)
            .unwrap_or(&EMPTY)
    }

    pub fn id(&self) -> Option<&str> {
        self.facts.id.as_deref()
    }

    pub fn session_id(&self) -> Option<&str> {
        field(self.info(), "sessionID").and_then(Value::as_str)
    }

    pub fn role(&self) -> Role {
        self.facts.role.unwrap_or(Role::Other)
    }

    pub fn created_ms(&self) -> Option<i64> {
        self.facts.created_ms
    }

    pub fn completed_ms(&self) -> Option<i64> {
        self.facts.completed_ms
    }

    pub fn finish(&self) -> Option<&str> {
        field(self.info(), "finish").and_then(Value::as_str)
    }

    /// The user message's per-session tool allow-list (`tools: {name: bool}`).
    pub fn tools(&self) -> Option<&Map<String, Value>> {
        self.info().get("tools").and_then(Value::as_object)
    }

    /// Input tokens the provider reported for an assistant message
    /// (`input + cache.read + cache.write`), if it carries a usage sample.
    /// All zeros is no sample: OpenCode writes them before a step streams
    /// and keeps them on a step that failed.
    pub fn usage_input_tokens(&self) -> Option<u64> {
        let tokens = self.info().get("tokens")?;
        let input = tokens.get("input")?.as_u64()?;
        let cache = tokens.get("cache");
        let read = cache.and_then(|c| c.get("read")).and_then(Value::as_u64);
        let write = cache.and_then(|c| c.get("write")).and_then(Value::as_u64);
        let total = input
            .saturating_add(read.unwrap_or(0))
            .saturating_add(write.unwrap_or(0));
        Some(total).filter(|&total| total > 0)
    }

    /// A user message typed by a person: at least one text part that is neither
    /// synthetic nor ignored.
    pub fn is_real_user(&self) -> bool {
        self.role() == Role::User
            && self.parts.iter().any(|p| {
                p.kind == PartKind::Text
                    && !p.is_synthetic()
                    && !p.is_ignored()
                    && p.raw
                        .get("metadata")
                        .and_then(|m| m.get("marker"))
                        .is_none()
            })
    }
}

/// mc's compaction boundary in OpenCode (ARCHITECTURE "Compaction markers"):
/// after the head covers a range, the OpenCode plugin writes a user message
/// with a `compaction` part and a finished `summary: true` assistant message
/// answering it, right after the newest covered message, so OpenCode's
/// `filterCompacted` stops there and never hands the covered messages to the
/// hook again. Their ids are the covered message's id plus these suffixes
/// (OpenCode orders a session's messages by creation time, then id: the
/// markers sort right after that message and before the next one).
pub const BOUNDARY_USER_SUFFIX: &str = "mcb0";
pub const BOUNDARY_SUMMARY_SUFFIX: &str = "mcb1";

/// The id of the message mc's boundary follows, if `id`/`role`/`parts` are
/// one of the boundary's two messages (the user one with its `compaction`
/// part, or the `summary: true` reply to it).
fn boundary_of<'a>(
    id: &'a str,
    role: Option<&str>,
    summary: bool,
    has_compaction: bool,
) -> Option<&'a str> {
    match role {
        Some("user") if has_compaction => id.strip_suffix(BOUNDARY_USER_SUFFIX),
        Some("assistant") if summary => id.strip_suffix(BOUNDARY_SUMMARY_SUFFIX),
        _ => None,
    }
    .filter(|base| !base.is_empty())
}

impl Message {
    /// The id of the message mc's boundary follows, if this is one of the
    /// boundary's two messages.
    pub fn boundary_base(&self) -> Option<&str> {
        let id = self.id()?;
        if !id.ends_with(BOUNDARY_USER_SUFFIX) && !id.ends_with(BOUNDARY_SUMMARY_SUFFIX) {
            return None;
        }
        let info = self.info();
        boundary_of(
            id,
            info.get("role").and_then(Value::as_str),
            info.get("summary").and_then(Value::as_bool) == Some(true),
            self.parts
                .iter()
                .any(|p| p.raw.get("type").and_then(Value::as_str) == Some("compaction")),
        )
    }
}

/// [`Message::boundary_base`] on an undecoded `{info, parts}` value (what
/// OpenCode's API answers).
pub fn boundary_base_of_value(message: &Value) -> Option<&str> {
    let info = message.get("info")?;
    boundary_of(
        info.get("id")?.as_str()?,
        info.get("role").and_then(Value::as_str),
        info.get("summary").and_then(Value::as_bool) == Some(true),
        message
            .get("parts")
            .and_then(Value::as_array)
            .is_some_and(|parts| {
                parts
                    .iter()
                    .any(|p| p.get("type").and_then(Value::as_str) == Some("compaction"))
            }),
    )
}

/// Take mc's boundary messages out of a session's messages (they are mc's
/// own bookkeeping: the head already says what they stand for). Returns the
/// id of the message the newest boundary follows, if any was there.
pub fn take_boundary(messages: &mut Vec<Message>) -> Option<String> {
    let mut base = None;
    messages.retain(|m| match m.boundary_base() {
        Some(b) => {
            if m.role() == Role::User {
                base = Some(b.to_string());
            }
            false
        }
        None => true,
    });
    base
}

/// Decode a whole message array.
pub fn decode_all(values: Vec<Value>) -> Result<Vec<Message>> {
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| decode_at(i, v))
        .collect()
}

/// Decode the message at `index` of an array, an error naming where it is.
pub fn decode_at(index: usize, value: Value) -> Result<Message> {
    Message::decode(value).map_err(|e| Error::input(format!("messages[{index}]: {e}")))
}

pub fn encode_all(messages: Vec<Message>) -> Vec<Value> {
    messages.into_iter().map(Message::encode).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_hand_built_message_without_info_reads_as_empty_info() {
        let message = Message::new(Map::new(), Vec::new());
        assert!(message.info().is_empty());
        assert_eq!(message.id(), None);
    }

    #[test]
    fn round_trip_keeps_unknown_fields_in_order() {
        let input = json!({
            "zeta": 1,
            "info": {"id": "msg_1", "role": "assistant", "weird": {"b": 2, "a": 1}, "sessionID": "s"},
            "parts": [
                {"type": "future-kind", "z": true, "a": [3, 2, 1]},
                {"id": "p", "type": "tool", "callID": "c", "state": {"status": "completed", "output": "o", "x": null}}
            ],
            "alpha": "last"
        });
        let text = serde_json::to_string(&input).unwrap();
        let msg = Message::decode(serde_json::from_str(&text).unwrap()).unwrap();
        assert_eq!(msg.parts[0].kind, PartKind::Other);
        assert_eq!(msg.parts[1].tool_output(), Some("o"));
        let back = serde_json::to_string(&msg.encode()).unwrap();
        assert_eq!(back, text, "bytes and key order must survive a round trip");
    }

    #[test]
    fn rejects_shapes_that_are_not_opencode() {
        assert!(Message::decode(json!([1])).is_err());
        assert!(Message::decode(json!({"parts": []})).is_err());
        assert!(Message::decode(json!({"info": {}, "parts": 3})).is_err());
        let err = decode_all(vec![json!({"info": {}}), json!("x")]).unwrap_err();
        assert!(err.to_string().starts_with("messages[1]:"), "{err}");
    }

    #[test]
    fn accessors_read_the_fields_the_transform_needs() {
        let msg = Message::decode(json!({
            "info": {"id": "m", "sessionID": "s", "role": "assistant", "finish": "tool-calls",
                     "time": {"created": 5, "completed": 9},
                     "tokens": {"input": 10, "output": 3, "cache": {"read": 100, "write": 7}}},
            "parts": [{"type": "step-start"}, {"type": "text", "text": "  "},
                      {"type": "tool", "callID": "c", "tool": "read", "state": {"status": "running", "input": {}}}]
        }))
        .unwrap();
        assert_eq!(msg.role(), Role::Assistant);
        assert_eq!((msg.created_ms(), msg.completed_ms()), (Some(5), Some(9)));
        assert_eq!(msg.usage_input_tokens(), Some(117));
        let failed = Message::decode(json!({
            "info": {"id": "f", "role": "assistant",
                     "tokens": {"input": 0, "output": 0, "cache": {"read": 0, "write": 0}}},
            "parts": []
        }))
        .unwrap();
        assert_eq!(failed.usage_input_tokens(), None, "all zeros is no sample");
        assert_eq!(msg.finish(), Some("tool-calls"));
        assert!(!msg.parts[0].is_meaningful());
        assert!(!msg.parts[1].is_meaningful(), "blank text is not content");
        assert!(!msg.parts[2].tool_is_closed());
        assert!(msg.parts[2].is_meaningful());
    }

    #[test]
    fn real_user_excludes_synthetic_and_ignored() {
        let synthetic = Message::decode(json!({"info": {"role": "user"},
            "parts": [{"type": "text", "text": "x", "synthetic": true}, {"type": "text", "text": "y", "ignored": true}]})).unwrap();
        assert!(!synthetic.is_real_user());
        let real = Message::decode(json!({"info": {"role": "user"},
            "parts": [{"type": "text", "text": "hello"}]}))
        .unwrap();
        assert!(real.is_real_user());
    }
}

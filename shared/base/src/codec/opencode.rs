//! OpenCode's `{info, parts}` messages (MessageV2), as the
//! `experimental.chat.messages.transform` hook hands them over.

use std::sync::{LazyLock, OnceLock};

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::error::{Error, Result};
use crate::json::{Compact, Scratch, kind_name as json_kind};

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
    body: Body,
}

/// A part's object: as a tree, or (a decoded text part, most parts of a
/// long session) packed, its text apart and every other entry as compact
/// JSON text. A pass reads and sets a text part's text and flags; as a
/// tree its map is most of a small part's memory (an ordered map with a
/// hash index and a heap string per key and value: ~320 bytes for
/// `{"type", "text"}`, against ~70 packed).
#[derive(Debug, Clone)]
enum Body {
    Tree(Map<String, Value>),
    Text(PackedText),
}

#[derive(Debug, Clone)]
struct PackedText {
    /// The entries other than `text`, in their order.
    rest: Box<[(Box<str>, Box<RawValue>)]>,
    /// How many of `rest` come before `text`.
    at: u32,
    text: Box<str>,
    synthetic: bool,
    ignored: bool,
    /// `metadata.marker` is there (mc's own marker text).
    marker: bool,
    /// The whole object, built the first time someone asks for it
    /// ([`Part::raw`]); dropped when the text changes.
    tree: OnceLock<Box<Map<String, Value>>>,
}

impl PackedText {
    /// A text part's map packed, if its `text` is a string.
    fn pack(raw: &Map<String, Value>) -> Option<PackedText> {
        let mut rest = Vec::with_capacity(raw.len().saturating_sub(1));
        let mut text = None;
        let mut at = 0;
        for (key, value) in raw {
            if key == "text" {
                text = Some(value.as_str()?);
                at = u32::try_from(rest.len()).ok()?;
            } else {
                rest.push((
                    Box::from(key.as_str()),
                    serde_json::value::to_raw_value(value).ok()?,
                ));
            }
        }
        let flag = |name: &str| field(raw, name).and_then(Value::as_bool) == Some(true);
        Some(PackedText {
            rest: rest.into_boxed_slice(),
            at,
            text: Box::from(text?),
            synthetic: flag("synthetic"),
            ignored: flag("ignored"),
            marker: marked(raw),
            tree: OnceLock::new(),
        })
    }

    /// The packed text of an entry other than `text`.
    fn entry(&self, name: &str) -> Option<&RawValue> {
        self.rest
            .iter()
            .find(|(key, _)| &**key == name)
            .map(|(_, value)| &**value)
    }

    /// The whole object, taking the tree if one was built.
    fn take_map(&mut self) -> Map<String, Value> {
        match self.tree.take() {
            Some(tree) => *tree,
            None => self.to_map(),
        }
    }

    /// The entries in order, `text` among them.
    fn entries(&self) -> impl Iterator<Item = (&str, Entry<'_>)> {
        let at = self.at as usize;
        let (before, after) = self.rest.split_at(at.min(self.rest.len()));
        fn raw((key, value): &(Box<str>, Box<RawValue>)) -> (&str, Entry<'_>) {
            (key, Entry::Raw(value))
        }
        before
            .iter()
            .map(raw)
            .chain(std::iter::once(("text", Entry::Text(&self.text))))
            .chain(after.iter().map(raw))
    }

    fn to_map(&self) -> Map<String, Value> {
        #[cfg(feature = "testkit")]
        TREES_BUILT.with(|built| built.set(built.get() + 1));
        let mut map = Map::new();
        for (key, entry) in self.entries() {
            let value = match entry {
                Entry::Raw(raw) => crate::json::parse_compact(raw.get()).unwrap_or(Value::Null),
                Entry::Text(text) => Value::String(text.to_string()),
            };
            map.insert(key.to_string(), value);
        }
        map
    }
}

/// A part object's `metadata.marker` is there (mc's own marker text).
fn marked(raw: &Map<String, Value>) -> bool {
    field(raw, "metadata")
        .and_then(|m| m.get("marker"))
        .is_some()
}

#[cfg(feature = "testkit")]
thread_local! {
    static TREES_BUILT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// (testkit) How many trees of packed text parts this thread has built:
/// what a test counts to prove a pass reads and sets text parts without.
#[cfg(feature = "testkit")]
pub fn packed_trees_built() -> usize {
    TREES_BUILT.with(std::cell::Cell::get)
}

/// One entry of a [`PackedText`], as it is written out.
enum Entry<'a> {
    Raw(&'a RawValue),
    Text(&'a str),
}

impl Serialize for Entry<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Entry::Raw(raw) => raw.serialize(serializer),
            Entry::Text(text) => serializer.serialize_str(text),
        }
    }
}

impl Serialize for Part {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        match &self.body {
            Body::Tree(map) => map.serialize(serializer),
            Body::Text(packed) => {
                let mut map = serializer.serialize_map(Some(packed.rest.len() + 1))?;
                for (key, entry) in packed.entries() {
                    map.serialize_entry(key, &entry)?;
                }
                map.end()
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct Message {
    /// The whole message object; its `parts` slot is held in `parts` while
    /// decoded, and its `info` slot in `packed` (the slot holds null then)
    /// when [`Message::decode`] made it. Its `info` is read, never changed,
    /// after [`Message::new`] or [`Message::decode`].
    pub raw: Map<String, Value>,
    pub parts: Vec<Part>,
    /// What a pass asks of `info` over and over, read once.
    facts: Facts,
    /// `info` as the compact JSON text serde_json writes for it, when the
    /// message was decoded: a pass only reads `info`, and as a tree it is
    /// most of a small message's memory (a dozen ordered-map entries of
    /// ~110 bytes each, against ~100 bytes of text).
    packed: Option<Packed>,
}

/// A decoded message's `info` ([`Message::packed`]), and the tree read from
/// it the first time someone asks for the whole object ([`Message::info`]).
#[derive(Debug, Clone)]
struct Packed {
    text: Box<RawValue>,
    tree: OnceLock<Box<Map<String, Value>>>,
}

/// `info` fields read once per message (each read of `raw` hashes its keys).
#[derive(Debug, Clone, Default)]
struct Facts {
    id: Option<Box<str>>,
    session_id: Option<Box<str>>,
    role: Option<Role>,
    created_ms: Option<i64>,
    completed_ms: Option<i64>,
    finish: Option<Box<str>>,
    /// [`Message::usage_input_tokens`], 0 for none.
    usage_input_tokens: u64,
    summary: bool,
    /// With `info` packed: the object held `info` (then `parts`) and
    /// nothing else, so `raw` is left empty (no map for two empty slots)
    /// and both come back in that order (`encode` puts `parts` after
    /// `info` in any case).
    bare: bool,
}

impl Facts {
    fn of(raw: &Map<String, Value>) -> Facts {
        match field(raw, "info").and_then(Value::as_object) {
            Some(info) => Facts::of_info(info),
            None => Facts::default(),
        }
    }

    fn of_info(info: &Map<String, Value>) -> Facts {
        // One walk over `info` instead of a hashed lookup per field (a map
        // never holds a key twice, so the first match is the only one).
        let mut facts = Facts {
            role: Some(Role::Other),
            ..Facts::default()
        };
        for (key, value) in info {
            match key.as_str() {
                "id" => facts.id = value.as_str().map(Box::from),
                "sessionID" => facts.session_id = value.as_str().map(Box::from),
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
                "finish" => facts.finish = value.as_str().map(Box::from),
                "tokens" => facts.usage_input_tokens = usage_input_tokens(value).unwrap_or(0),
                "summary" => facts.summary = value.as_bool() == Some(true),
                _ => {}
            }
        }
        facts
    }
}

/// `input + cache.read + cache.write` of an `info.tokens` object, when it
/// is a usage sample (see [`Message::usage_input_tokens`]).
fn usage_input_tokens(tokens: &Value) -> Option<u64> {
    let input = tokens.get("input")?.as_u64()?;
    let cache = tokens.get("cache");
    let read = cache.and_then(|c| c.get("read")).and_then(Value::as_u64);
    let write = cache.and_then(|c| c.get("write")).and_then(Value::as_u64);
    let total = input
        .saturating_add(read.unwrap_or(0))
        .saturating_add(write.unwrap_or(0));
    Some(total).filter(|&total| total > 0)
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
            Value::Object(raw) => Ok(Part::from_map(raw)),
            other => Err(Error::input(format!(
                "a message part is not a JSON object (found {})",
                json_kind(&other)
            ))),
        }
    }

    /// A part from its object (a text part with a string `text` is packed).
    pub fn from_map(raw: Map<String, Value>) -> Part {
        let kind = kind_of(field(&raw, "type").and_then(Value::as_str));
        let body = match kind {
            PartKind::Text => PackedText::pack(&raw).map_or(Body::Tree(raw), Body::Text),
            _ => Body::Tree(raw),
        };
        Part { kind, body }
    }

    pub fn encode(self) -> Value {
        Value::Object(self.into_map())
    }

    /// The part's whole object.
    pub fn into_map(self) -> Map<String, Value> {
        match self.body {
            Body::Tree(map) => map,
            Body::Text(mut packed) => packed.take_map(),
        }
    }

    /// The part's whole object (a packed part's is built once, on the
    /// first call, and kept).
    pub fn raw(&self) -> &Map<String, Value> {
        match &self.body {
            Body::Tree(map) => map,
            Body::Text(packed) => packed.tree.get_or_init(|| Box::new(packed.to_map())),
        }
    }

    /// Packed, and no tree of it built: what a pass that only reads and
    /// sets a text part's text and flags leaves it.
    pub fn is_packed(&self) -> bool {
        matches!(&self.body, Body::Text(packed) if packed.tree.get().is_none())
    }

    /// The part's whole object to edit (a packed part becomes a tree).
    pub fn raw_mut(&mut self) -> &mut Map<String, Value> {
        if let Body::Text(packed) = &mut self.body {
            self.body = Body::Tree(packed.take_map());
        }
        match &mut self.body {
            Body::Tree(map) => map,
            Body::Text(_) => unreachable!("a packed part was just unpacked"),
        }
    }

    pub fn text(&self) -> Option<&str> {
        match &self.body {
            Body::Tree(map) => field(map, "text").and_then(Value::as_str),
            Body::Text(packed) => Some(&packed.text),
        }
    }

    pub fn set_text(&mut self, text: String) {
        match &mut self.body {
            Body::Tree(map) => set_field(map, "text", Value::String(text)),
            Body::Text(packed) => {
                packed.text = text.into_boxed_str();
                packed.tree = OnceLock::new();
            }
        }
    }

    fn flag(&self, name: &str) -> bool {
        match (&self.body, name) {
            (Body::Text(packed), "synthetic") => packed.synthetic,
            (Body::Text(packed), "ignored") => packed.ignored,
            _ => self.get(name).and_then(Value::as_bool).unwrap_or(false),
        }
    }

    /// `metadata.marker` is there: a text mc wrote itself.
    pub fn has_marker(&self) -> bool {
        match &self.body {
            Body::Text(packed) => packed.marker,
            Body::Tree(map) => marked(map),
        }
    }

    /// A string entry of the part's object (a packed part's is read off
    /// its text, no tree built, unless the string has escapes).
    pub fn str_field(&self, name: &str) -> Option<&str> {
        if let Body::Text(packed) = &self.body {
            if name == "text" {
                return Some(&packed.text);
            }
            let raw = packed.entry(name)?.get();
            if let Some(inner) = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"'))
                && !inner.contains('\\')
            {
                return Some(inner);
            }
        }
        field(self.raw(), name).and_then(Value::as_str)
    }

    /// The part's `type`, as its object says.
    pub fn type_name(&self) -> Option<&str> {
        match &self.body {
            Body::Tree(map) => field(map, "type").and_then(Value::as_str),
            Body::Text(_) => Some("text"),
        }
    }

    pub fn is_synthetic(&self) -> bool {
        self.flag("synthetic")
    }

    pub fn is_ignored(&self) -> bool {
        self.flag("ignored")
    }

    /// An entry of the part's object. A packed part builds its tree only
    /// for a key it has (a pass asks every part for tool fields).
    pub fn get(&self, name: &str) -> Option<&Value> {
        match &self.body {
            Body::Tree(map) => field(map, name),
            Body::Text(packed) if name != "text" && packed.entry(name).is_none() => None,
            Body::Text(_) => field(self.raw(), name),
        }
    }

    pub fn call_id(&self) -> Option<&str> {
        self.get("callID").and_then(Value::as_str)
    }

    pub fn tool_name(&self) -> Option<&str> {
        self.get("tool").and_then(Value::as_str)
    }

    fn state(&self) -> Option<&Map<String, Value>> {
        self.get("state").and_then(Value::as_object)
    }

    fn state_mut(&mut self) -> Option<&mut Map<String, Value>> {
        field_mut(self.raw_mut(), "state").and_then(Value::as_object_mut)
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
        self.get("url").and_then(Value::as_str)
    }

    /// Does this part carry content the model reads (as opposed to structure)?
    pub fn is_meaningful(&self) -> bool {
        match self.kind {
            PartKind::Text => self.text().is_some_and(|t| !t.trim().is_empty()),
            PartKind::Reasoning | PartKind::StepStart | PartKind::StepFinish => false,
            PartKind::Tool | PartKind::File => true,
            PartKind::Other => !matches!(
                self.type_name(),
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
            Some(Value::Array(items)) => {
                // Sized by the items: a collect through `Result` cannot
                // know its length and starts at four parts (a one-part
                // message would hold three spare, 240 bytes).
                let mut parts = Vec::with_capacity(items.len());
                for item in items {
                    parts.push(Part::decode(item)?);
                }
                parts
            }
            Some(Value::Null) | None => Vec::new(),
            Some(other) => {
                return Err(Error::input(format!(
                    "a message's \"parts\" is not an array (found {})",
                    json_kind(&other)
                )));
            }
        };
        // `info` leaves its slot (which keeps the key's position) as text.
        let Some(Value::Object(info)) = field_mut(&mut raw, "info").map(Value::take) else {
            return Ok(Message::new(raw, parts));
        };
        let mut facts = Facts::of_info(&info);
        let info = Value::Object(info);
        let bare = raw
            .keys()
            .map(String::as_str)
            .eq(["info", "parts"].into_iter().take(raw.len()));
        let packed = serde_json::value::to_raw_value(&info)
            .ok()
            .map(|text| Packed {
                text,
                tree: OnceLock::new(),
            });
        match &packed {
            // Not expected (a tree always serialises): keep the tree.
            None => set_field(&mut raw, "info", info),
            Some(_) if bare => {
                raw = Map::new();
                facts.bare = true;
            }
            Some(_) => {}
        }
        Ok(Message {
            raw,
            parts,
            facts,
            packed,
        })
    }

    /// A message from its object (the `parts` slot aside) and its parts.
    pub fn new(raw: Map<String, Value>, parts: Vec<Part>) -> Message {
        let facts = Facts::of(&raw);
        Message {
            raw,
            parts,
            facts,
            packed: None,
        }
    }

    /// Put a packed `info` back in its slot, as a tree.
    fn unpack(&mut self) {
        if let Some(packed) = self.packed.take() {
            let info = match packed.tree.into_inner() {
                Some(tree) => Value::Object(*tree),
                None => crate::json::parse_compact(packed.text.get()).unwrap_or(Value::Null),
            };
            if std::mem::take(&mut self.facts.bare) {
                self.raw = Map::new();
                self.raw.insert("info".into(), info);
            } else {
                set_field(&mut self.raw, "info", info);
            }
        }
    }

    pub fn encode(mut self) -> Value {
        self.unpack();
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

    /// The JSON [`Message::encode`] gives, written with no tree: a packed
    /// `info` goes out as its text. Compact output only (a pretty printer
    /// would write the text as it is).
    pub fn to_writer(&self) -> Written<'_> {
        Written(self)
    }

    /// The `info` object (`decode` checked there is one; a message built by
    /// hand without it reads as an empty one).
    pub fn info(&self) -> &Map<String, Value> {
        static EMPTY: LazyLock<Map<String, Value>> = LazyLock::new(Map::new);
        if let Some(packed) = &self.packed {
            return packed.tree.get_or_init(|| {
                match crate::json::parse_compact(packed.text.get()) {
                    Ok(Value::Object(map)) => Box::new(map),
                    _ => Box::default(),
                }
            });
        }
        field(&self.raw, "info")
            .and_then(Value::as_object)
            .unwrap_or(&EMPTY)
    }

    pub fn id(&self) -> Option<&str> {
        self.facts.id.as_deref()
    }

    /// `info.sessionID`, read at decode (no walk of a packed `info`).
    pub fn session_id(&self) -> Option<&str> {
        self.facts.session_id.as_deref()
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
        self.facts.finish.as_deref()
    }

    /// `info.summary` is `true`: the harness's own compaction record.
    pub fn is_summary(&self) -> bool {
        self.facts.summary
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
        Some(self.facts.usage_input_tokens).filter(|&total| total > 0)
    }

    /// A user message typed by a person: at least one text part that is neither
    /// synthetic nor ignored.
    pub fn is_real_user(&self) -> bool {
        self.role() == Role::User
            && self.parts.iter().any(|p| {
                p.kind == PartKind::Text && !p.is_synthetic() && !p.is_ignored() && !p.has_marker()
            })
    }
}

/// A message as [`Message::encode`]'s value serialises, compactly
/// ([`Message::to_writer`]).
pub struct Written<'a>(&'a Message);

impl Serialize for Written<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let message = self.0;
        if let Some(packed) = message.packed.as_ref().filter(|_| message.facts.bare) {
            let mut map = serializer.serialize_map(Some(2))?;
            map.serialize_entry("info", &packed.text)?;
            map.serialize_entry("parts", &Parts(&message.parts))?;
            return map.end();
        }
        let has_parts = message.raw.keys().any(|k| k.as_str() == "parts");
        let len = message.raw.len() + usize::from(!has_parts);
        let mut map = serializer.serialize_map(Some(len))?;
        for (key, value) in &message.raw {
            match (key.as_str(), &message.packed) {
                ("parts", _) => map.serialize_entry(key, &Parts(&message.parts))?,
                ("info", Some(packed)) => map.serialize_entry(key, &packed.text)?,
                _ => map.serialize_entry(key, value)?,
            }
        }
        if !has_parts {
            map.serialize_entry("parts", &Parts(&message.parts))?;
        }
        map.end()
    }
}

/// A message's parts as the array [`Message::encode`] puts in its slot.
struct Parts<'a>(&'a [Part]);

impl Serialize for Parts<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0)
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
        boundary_of(
            id,
            Some(self.role().as_str()),
            self.is_summary(),
            self.parts
                .iter()
                .any(|p| p.type_name() == Some("compaction")),
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

/// Does `value` decode ([`Message::decode`]) into a message that encodes
/// back to `value` itself? An object with an `info` object and `parts` an
/// array of objects (a missing or null `parts` would come back as `[]`).
fn decodable(value: &Value) -> bool {
    let Some(map) = value.as_object() else {
        return false;
    };
    field(map, "info").is_some_and(Value::is_object)
        && field(map, "parts")
            .and_then(Value::as_array)
            .is_some_and(|parts| parts.iter().all(Value::is_object))
}

/// The session of decoded messages as `Envelope::session_hint` reads it
/// off their values: the `info.sessionID` of the newest user message that
/// has one, else of any message.
pub fn session_hint(messages: &[Message]) -> Option<String> {
    let session_of = |m: &Message| m.session_id().map(str::to_string);
    messages
        .iter()
        .rev()
        .filter(|m| m.role() == Role::User)
        .chain(messages.iter().rev())
        .find_map(session_of)
}

/// Spare slots [`parse_envelope`] leaves in its vector of messages for
/// the messages a pass renders among them.
pub const RENDER_ROOM: usize = 8;

/// An envelope's JSON text parsed as [`crate::json::parse_compact`] parses
/// it, except that each item of its top-level `messages` array is decoded
/// as an OpenCode message ([`Message::decode`]) as soon as it is read, so
/// the envelope's tree never exists whole. When every item decodes, the
/// value's `messages` is an empty array and the messages come beside it;
/// else (another harness's shape, a bad message the pass will name) every
/// item stays the value `parse_compact` gives, and `None` comes beside.
pub fn parse_envelope(text: &str) -> serde_json::Result<(Value, Option<Vec<Message>>)> {
    // Only an object has `messages` to decode; anything else is refused by
    // the envelope's reader, after `parse_compact`'s errors if any.
    if !text
        .trim_start_matches([' ', '\t', '\n', '\r'])
        .starts_with('{')
    {
        return crate::json::parse_compact(text).map(|value| (value, None));
    }
    let mut scratch = Scratch::default();
    let mut messages = None;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value = DeserializeSeed::deserialize(
        Envelope {
            scratch: &mut scratch,
            messages: &mut messages,
        },
        &mut deserializer,
    )?;
    deserializer.end()?;
    Ok((value, messages))
}

/// The top-level object of [`parse_envelope`].
struct Envelope<'s> {
    scratch: &'s mut Scratch,
    messages: &'s mut Option<Vec<Message>>,
}

impl<'de> DeserializeSeed<'de> for Envelope<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> std::result::Result<Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Envelope<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Value, A::Error> {
        let start = self.scratch.entries.len();
        while let Some(key) = map.next_key::<String>()? {
            let value = if key == "messages" {
                let (value, decoded) = map.next_value_seed(Items(&mut *self.scratch))?;
                // A repeated key keeps its last value, as `Map::insert` does.
                *self.messages = decoded;
                value
            } else {
                map.next_value_seed(Compact(&mut *self.scratch))?
            };
            self.scratch.entries.push((key, value));
        }
        Ok(Value::Object(self.scratch.entries.drain(start..).collect()))
    }
}

/// The `messages` value of [`parse_envelope`]: an array's items decoded
/// while they decode, any other value as [`Compact`] reads it.
struct Items<'s>(&'s mut Scratch);

impl<'de> DeserializeSeed<'de> for Items<'_> {
    type Value = (Value, Option<Vec<Message>>);

    fn deserialize<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

/// [`Items`] for anything but an array: the value [`Compact`] makes.
macro_rules! as_compact {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {
        $(fn $name<E: serde::de::Error>(self, $($arg: $ty),*) -> std::result::Result<Self::Value, E> {
            Compact(self.0).$name($($arg),*).map(|value| (value, None))
        })*
    };
}

impl<'de> Visitor<'de> for Items<'_> {
    type Value = (Value, Option<Vec<Message>>);

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any valid JSON value")
    }

    as_compact! {
        visit_bool(value: bool);
        visit_i64(value: i64);
        visit_u64(value: u64);
        visit_f64(value: f64);
        visit_str(value: &str);
        visit_string(value: String);
        visit_none();
        visit_unit();
    }

    fn visit_some<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        Compact(self.0)
            .visit_some(deserializer)
            .map(|value| (value, None))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<Self::Value, A::Error> {
        Compact(self.0).visit_map(map).map(|value| (value, None))
    }

    fn visit_seq<A: SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut decoded = Vec::new();
        // Once an item does not decode: every item, as a value.
        let mut values: Option<Vec<Value>> = None;
        while let Some(item) = seq.next_element_seed(Compact(&mut *self.0))? {
            match &mut values {
                Some(values) => values.push(item),
                // `decodable` is exactly what `decode` takes.
                None if decodable(&item) => {
                    decoded.push(Message::decode(item).map_err(serde::de::Error::custom)?);
                }
                None => {
                    let mut all = encode_all(std::mem::take(&mut decoded));
                    all.push(item);
                    values = Some(all);
                }
            }
        }
        Ok(match values {
            Some(values) => (Value::Array(values), None),
            None => {
                // Room for what a pass puts among them (its head, the todo
                // call, a reminder): the render writes its output into this
                // vector, and growing it then would copy every message.
                decoded.shrink_to(decoded.len() + RENDER_ROOM);
                (Value::Array(Vec::new()), Some(decoded))
            }
        })
    }
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

    /// `value` with its messages put back from `decoded`, as text.
    fn rejoined(mut value: Value, decoded: Option<Vec<Message>>) -> String {
        if let Some(decoded) = decoded {
            assert_eq!(value["messages"], json!([]));
            value["messages"] = Value::Array(encode_all(decoded));
        }
        serde_json::to_string(&value).unwrap()
    }

    #[test]
    fn an_envelope_parsed_while_decoding_is_the_compact_parse() {
        let message = r#"{"info":{"id":"m1","sessionID":"s","role":"user","time":{"created":5},"x":[1.50,-0,1e300,18446744073709551616,"\u00e9\n\"",{"k":1,"k":2}]},"z":null,"parts":[{"type":"text","text":"a\tb"}],"a":{}}"#;
        let bare = r#"{"info":{"id":"m2","role":"assistant"},"parts":[]}"#;
        for (text, decodes) in [
            (
                format!(r#"{{"harness":"opencode","messages":[{message},{bare}],"now_ms":1}}"#),
                true,
            ),
            (
                format!(r#" {{ "messages" : [ {message} ] , "system" : ["s"] }} "#),
                true,
            ),
            (r#"{"messages":[]}"#.to_string(), true),
            // A repeated key keeps its first place and its last value.
            (
                format!(r#"{{"messages":[{bare}],"a":1,"messages":[{message}]}}"#),
                true,
            ),
            (format!(r#"{{"messages":[{message}],"messages":3}}"#), false),
            // One item that does not decode: every item stays a value.
            (
                format!(r#"{{"messages":[{message},{{"role":"user","content":"pi"}},{bare}]}}"#),
                false,
            ),
            (
                format!(r#"{{"messages":[{message},{{"info":{{}},"parts":[1]}}]}}"#),
                false,
            ),
            (
                format!(r#"{{"messages":[{message},{{"info":{{}},"parts":{{}}}}]}}"#),
                false,
            ),
            (
                r#"{"messages":{"a":[1]},"b":[{"info":{}}]}"#.to_string(),
                false,
            ),
            (r#"{"other":[{"info":{}}]}"#.to_string(), false),
            // No parts, or null: the codec would answer `[]`, so values.
            (
                format!(r#"{{"messages":[{message},{{"info":{{}}}}]}}"#),
                false,
            ),
            (
                format!(r#"{{"messages":[{{"info":{{}},"parts":null}},{message}]}}"#),
                false,
            ),
            (r#"[{"messages":[]}]"#.to_string(), false),
            (r#""top""#.to_string(), false),
        ] {
            let (value, decoded) = parse_envelope(&text).unwrap();
            assert_eq!(decoded.is_some(), decodes, "{text}");
            let want = crate::json::parse_compact(&text).unwrap();
            assert_eq!(
                rejoined(value, decoded),
                serde_json::to_string(&want).unwrap(),
                "{text}"
            );
        }
        for bad in [
            "",
            "{",
            r#"{"messages":[{"info":{}},]}"#,
            r#"{"messages":[{"info":{"a":1e400}}]}"#,
            r#"{"messages":[{"info":{}}]} x"#,
            &format!(
                r#"{{"messages":[{}1{}]}}"#,
                "[".repeat(200),
                "]".repeat(200)
            ),
        ] {
            let want = crate::json::parse_compact(bad).unwrap_err().to_string();
            assert_eq!(parse_envelope(bad).unwrap_err().to_string(), want, "{bad}");
        }
    }

    #[test]
    fn a_decoded_message_keeps_info_as_text_and_writes_the_bytes_it_encodes_to() {
        let value = json!({
            "zeta": 1,
            "info": {"id": "m", "sessionID": "s", "role": "assistant", "finish": "stop", "summary": true,
                     "time": {"created": 5, "completed": 9}, "providerID": "p",
                     "tokens": {"input": 10, "output": 3, "cache": {"read": 100, "write": 7}}},
            "parts": [{"type": "text", "text": "t\u{e9}"}],
            "alpha": [1.5, null]
        });
        let decoded = Message::decode(value.clone()).unwrap();
        assert_eq!(decoded.raw["info"], Value::Null, "info is kept as text");
        let built = {
            let Value::Object(mut raw) = value.clone() else {
                unreachable!()
            };
            raw.shift_remove("parts");
            Message::new(raw, decoded.parts.clone())
        };
        for message in [&decoded, &built] {
            assert_eq!(message.id(), Some("m"));
            assert_eq!(message.session_id(), Some("s"));
            assert_eq!(message.finish(), Some("stop"));
            assert!(message.is_summary());
            assert_eq!(message.usage_input_tokens(), Some(117));
            assert_eq!(
                (message.created_ms(), message.completed_ms()),
                (Some(5), Some(9))
            );
            assert_eq!(message.info()["providerID"], "p");
        }
        let text = serde_json::to_string(&value).unwrap();
        assert_eq!(serde_json::to_string(&decoded.to_writer()).unwrap(), text);
        assert_eq!(
            serde_json::to_string(&decoded.clone().encode()).unwrap(),
            text
        );
        // Without a parts slot, parts go last, as `encode` puts them.
        for value in [
            json!({"info": {"id": "b"}, "x": 1}),
            json!({"x": 1, "info": {"id": "b"}}),
            json!({"info": {"id": "b"}}),
            json!({"info": {"id": "b"}, "parts": null}),
            json!({"parts": [], "info": {"id": "b"}}),
        ] {
            let message = Message::decode(value.clone()).unwrap();
            let written = serde_json::to_string(&message.to_writer()).unwrap();
            assert_eq!(
                written,
                serde_json::to_string(&message.encode()).unwrap(),
                "{value}"
            );
        }
        // `{info, parts}` alone keeps no map for its two slots.
        let bare = Message::decode(json!({"info": {"id": "b"}, "parts": []})).unwrap();
        assert_eq!(bare.raw.len(), 0);
        assert_eq!(
            serde_json::to_string(&bare.to_writer()).unwrap(),
            r#"{"info":{"id":"b"},"parts":[]}"#
        );
        assert_eq!(
            serde_json::to_string(&bare.encode()).unwrap(),
            r#"{"info":{"id":"b"},"parts":[]}"#
        );
    }

    #[test]
    fn decodable_values_decode_and_encode_back_to_themselves() {
        for (value, decodes) in [
            (json!({"info": {"id": "a"}, "parts": []}), true),
            (
                json!({"parts": [{}, {"type": "x"}], "z": 1, "info": {"b": [1]}}),
                true,
            ),
            (json!({"info": {}}), false),
            (json!({"info": {}, "parts": null}), false),
            (json!({"info": {}, "parts": [{}, 1]}), false),
            (json!({"info": {}, "parts": "p"}), false),
            (json!({"info": 1, "parts": []}), false),
            (json!({"parts": []}), false),
            (json!([]), false),
            (json!(null), false),
        ] {
            assert_eq!(decodable(&value), decodes, "{value}");
            if decodes {
                let back = Message::decode(value.clone()).unwrap().encode();
                assert_eq!(
                    serde_json::to_string(&back).unwrap(),
                    serde_json::to_string(&value).unwrap()
                );
            }
        }
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

    /// A text part packs, reads and writes as its tree would: the entries
    /// in their order, `text` in its place, before and after a change.
    #[test]
    fn a_packed_text_part_reads_and_writes_as_its_tree() {
        let value = json!({"id": "p\"1", "type": "text", "synthetic": true,
            "text": "a\tb\u{e9}", "time": {"start": 1.50, "end": null},
            "metadata": {"marker": "m"}, "z": [1e300, "\u{2028}"]});
        let mut part = Part::decode(value.clone()).unwrap();
        assert!(matches!(part.body, Body::Text(_)), "a text part is packed");
        assert_eq!(part.kind, PartKind::Text);
        assert_eq!(part.text(), Some("a\tb\u{e9}"));
        assert!(part.is_synthetic() && !part.is_ignored() && part.has_marker());
        assert_eq!(part.type_name(), Some("text"));
        assert_eq!(part.call_id(), None);
        assert_eq!(part.tool_output(), None);
        let Body::Text(packed) = &part.body else {
            unreachable!()
        };
        assert!(packed.tree.get().is_none(), "absent keys build no tree");
        assert_eq!(
            part.str_field("id"),
            Some("p\"1"),
            "an escaped string reads through the tree"
        );
        assert_eq!(part.get("time").unwrap()["start"], json!(1.50));
        assert_eq!(part.raw(), value.as_object().unwrap());
        let compact = |v: &Value| serde_json::to_string(v).unwrap();
        assert_eq!(serde_json::to_string(&part).unwrap(), compact(&value));
        part.set_text("§1§ new".into());
        let mut expected = value.clone();
        expected["text"] = json!("§1§ new");
        assert_eq!(part.text(), Some("§1§ new"));
        assert_eq!(
            part.raw(),
            expected.as_object().unwrap(),
            "a change drops the old tree"
        );
        assert_eq!(serde_json::to_string(&part).unwrap(), compact(&expected));
        assert_eq!(compact(&part.clone().encode()), compact(&expected));
        part.raw_mut().insert("ignored".into(), json!(true));
        expected["ignored"] = json!(true);
        assert!(
            matches!(part.body, Body::Tree(_)),
            "an edit of the object unpacks it"
        );
        assert!(part.is_ignored());
        assert_eq!(serde_json::to_string(&part).unwrap(), compact(&expected));
        // `text` first, last, alone; a text that is not a string stays a tree.
        for value in [
            json!({"text": "x", "type": "text"}),
            json!({"type": "text", "text": ""}),
            json!({"type": "text", "id": "p", "text": "x"}),
        ] {
            let part = Part::decode(value.clone()).unwrap();
            assert!(matches!(part.body, Body::Text(_)), "{value}");
            assert_eq!(serde_json::to_string(&part).unwrap(), compact(&value));
            assert_eq!(compact(&part.encode()), compact(&value));
        }
        for value in [json!({"type": "text", "text": 3}), json!({"type": "text"})] {
            let part = Part::decode(value.clone()).unwrap();
            assert!(matches!(part.body, Body::Tree(_)), "{value}");
            assert_eq!(serde_json::to_string(&part).unwrap(), compact(&value));
        }
    }
}

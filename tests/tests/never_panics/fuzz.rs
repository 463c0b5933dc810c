//! Generators for the never-panics properties: arbitrary JSON, tricky
//! strings and numbers, structure-aware mutations of real samples, text
//! edits, and the samples themselves.

use std::path::PathBuf;

use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Map, Number, Value};

/// Field names of every format mc reads, so arbitrary objects hit the
/// accessors instead of being ignored as unknown keys.
const KEYS: &[&str] = &[
    "info",
    "parts",
    "type",
    "text",
    "role",
    "id",
    "sessionID",
    "messageID",
    "time",
    "created",
    "completed",
    "start",
    "end",
    "tokens",
    "input",
    "output",
    "cache",
    "read",
    "write",
    "state",
    "status",
    "callID",
    "tool",
    "metadata",
    "synthetic",
    "ignored",
    "finish",
    "summary",
    "tools",
    "url",
    "mime",
    "filename",
    "providerExecuted",
    "messages",
    "harness",
    "session_id",
    "project_dir",
    "model",
    "provider",
    "context_limit",
    "output_limit",
    "usage",
    "cache_read",
    "cache_write",
    "now_ms",
    "subagent",
    "system",
    "drop",
    "properties",
    "payload",
    "directory",
    "event",
    "hook_event_name",
    "source",
    "transcript_path",
    "cwd",
    "turn_id",
    "uuid",
    "parentUuid",
    "timestamp",
    "message",
    "content",
    "isMeta",
    "isSidechain",
    "isCompactSummary",
    "subtype",
    "sessionId",
    "tool_use_id",
    "is_error",
    "name",
    "thinking",
    "openchamber",
    "context_obligatory_messages",
    "context_obligatory_last_compaction_message_id",
    "createdAt",
    "choices",
    "stop_reason",
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "prompt_tokens",
    "completion_tokens",
    "error",
    "code",
    "transform",
    "historian",
    "sqlite",
    "providers",
    "cache_ttl",
];

/// Strings that have hurt parsers before or mean something to mc.
const TRICKY: &[&str] = &[
    "",
    " ",
    "\n\n\n",
    "\r\n",
    "\t",
    "\u{0}",
    "\u{7f}",
    "\u{feff}",
    "\u{202e}",
    "\u{fffd}",
    "é",
    "€",
    "𝄞",
    "日本語のテキスト",
    "e\u{301}",
    "§",
    "§§",
    "§1§",
    "§0§",
    "§-1§",
    "§99999999999999999999§",
    "§123456789012§ echoed",
    "[dropped §3§]",
    "Today's date: Mon Nov 30 2026",
    "Today's date: €",
    "<history>",
    "</history>",
    "<!--",
    "&#x110000;",
    "&#xD800;",
    "&#1114112;",
    "&amp",
    "2025-10-09T09:20:00.000Z",
    "2025-10-09T09:20:00.000+02:00",
    "2025-10-09T09:20:00.0€0Z",
    "2025-10-09T09:20:00+0€:00",
    "2025-10-09T09:20:00€",
    "2025-10-09T09:20:00.000+99:99",
    "9999-99-99T99:99:99Z",
    "0000-01-01T00:00:00Z",
    "-1",
    "0",
    "18446744073709551616",
    "-9223372036854775809",
    "1e309",
    "NaN",
    "null",
    "{",
    "[]",
    "user",
    "assistant",
    "system",
    "tool",
    "text",
    "reasoning",
    "file",
    "completed",
    "error",
    "running",
    "pending",
    "tool-calls",
    "stop",
    "step-start",
    "step-finish",
    "compaction",
    "compact",
    "compact_boundary",
    "session.compacted",
    "SessionStart",
    "opencode",
    "data:image/png;base64,AAAA",
    "file:///etc/hostname",
    "ses_x",
    "msg_x",
    "/",
    "..",
    "5m",
    "never",
    "anthropic/claude",
];

/// A string: a tricky one, an arbitrary one, or a tricky one repeated.
pub fn text() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        4 => prop::sample::select(TRICKY).prop_map(str::to_string),
        3 => any::<String>(),
        1 => prop::collection::vec(any::<char>(), 0..40).prop_map(|c| c.into_iter().collect()),
        1 => (prop::sample::select(TRICKY), 2usize..400).prop_map(|(s, n)| s.repeat(n)),
    ]
}

fn key() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        4 => prop::sample::select(KEYS).prop_map(str::to_string),
        1 => text(),
    ]
}

/// The numbers that break arithmetic: the ends of i64 and u64, around zero,
/// floats where integers are expected.
pub fn extreme_number() -> impl Strategy<Value = Value> + Clone {
    prop::sample::select(vec![
        Value::from(0),
        Value::from(-1),
        Value::from(1),
        Value::from(i64::MIN),
        Value::from(i64::MAX),
        Value::from(u64::MAX),
        Value::from(i64::MAX as u64 + 1),
        Value::from(9_007_199_254_740_993u64),
        Value::from(1e308),
        Value::from(-1e308),
        Value::from(0.5),
    ])
}

/// A JSON number: mostly extremes, else realistic or arbitrary.
pub fn number() -> impl Strategy<Value = Value> + Clone {
    prop_oneof![
        5 => extreme_number(),
        2 => (0i64..2_000_000_000_000).prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => any::<u64>().prop_map(Value::from),
        1 => any::<f64>()
            .prop_filter_map("finite", Number::from_f64)
            .prop_map(Value::Number),
    ]
}

fn leaf() -> impl Strategy<Value = Value> + Clone {
    prop_oneof![
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        2 => number(),
        3 => text().prop_map(Value::String),
    ]
}

/// Any JSON value, up to a few levels deep, with keys mc looks for.
pub fn json() -> impl Strategy<Value = Value> + Clone {
    leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
}

/// An object shaped like an OpenCode message: `info` and `parts`, with
/// arbitrary members inside.
pub fn message_like() -> impl Strategy<Value = Value> + Clone {
    let info = prop::collection::vec((key(), json()), 0..8)
        .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>()));
    let part = prop::collection::vec((key(), json()), 0..6).prop_map(|m| {
        let mut map: Map<String, Value> = m.into_iter().collect();
        map.entry("type").or_insert_with(|| Value::from("text"));
        Value::Object(map)
    });
    (info, prop::collection::vec(part, 0..5))
        .prop_map(|(info, parts)| serde_json::json!({"info": info, "parts": parts}))
}

/// One change to one node of a JSON document.
#[derive(Debug, Clone)]
pub enum Mutation {
    /// Replace the node by any JSON.
    Replace(Value),
    /// Remove the node from its parent (the root becomes null).
    Remove,
    /// Replace the node by a (tricky) string.
    Text(String),
    /// Replace the node by an extreme number.
    Number(Value),
    EmptyArray,
    EmptyObject,
    Null,
    /// Wrap the node in this many arrays.
    Nest(usize),
    /// Objects get a member, arrays an element, strings an insertion.
    Insert(String, Value),
    /// Arrays repeat an element; strings are doubled.
    Duplicate(Index),
    /// Every number inside the node gets this value (times, token counts).
    Flood(Value),
}

pub fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => json().prop_map(Mutation::Replace),
        3 => Just(Mutation::Remove),
        3 => text().prop_map(Mutation::Text),
        3 => number().prop_map(Mutation::Number),
        1 => Just(Mutation::EmptyArray),
        1 => Just(Mutation::EmptyObject),
        1 => Just(Mutation::Null),
        1 => (1usize..60).prop_map(Mutation::Nest),
        2 => (key(), json()).prop_map(|(k, v)| Mutation::Insert(k, v)),
        1 => any::<Index>().prop_map(Mutation::Duplicate),
        2 => extreme_number().prop_map(Mutation::Flood),
    ]
}

/// Where to mutate: a depth (shallow nodes are few, so choosing the depth
/// first reaches them as often as the many deep ones), then a node at it.
pub type Target = (Index, Index);

pub fn mutations(max: usize) -> impl Strategy<Value = Vec<(Target, Mutation)>> {
    prop::collection::vec(((any::<Index>(), any::<Index>()), mutation()), 1..=max)
}

#[derive(Debug, Clone)]
enum Step {
    Key(String),
    At(usize),
}

fn paths(value: &Value, path: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    out.push(path.clone());
    match value {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                path.push(Step::At(i));
                paths(item, path, out);
                path.pop();
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                path.push(Step::Key(k.clone()));
                paths(item, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

fn node_mut<'a>(mut value: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    for step in path {
        value = match (step, value) {
            (Step::Key(k), Value::Object(map)) => map.get_mut(k)?,
            (Step::At(i), Value::Array(items)) => items.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(value)
}

/// Apply the mutations in order.
pub fn mutate(mut value: Value, mutations: &[(Target, Mutation)]) -> Value {
    for ((depth, node), mutation) in mutations {
        let mut all = Vec::new();
        paths(&value, &mut Vec::new(), &mut all);
        let deepest = all.iter().map(Vec::len).max().unwrap_or(0);
        let depth = depth.index(deepest + 1);
        let at_depth: Vec<&Vec<Step>> = all.iter().filter(|p| p.len() == depth).collect();
        let path = at_depth[node.index(at_depth.len())].clone();
        apply(&mut value, &path, mutation);
    }
    value
}

fn apply(root: &mut Value, path: &[Step], mutation: &Mutation) {
    if let Mutation::Remove = mutation {
        match path.split_last() {
            None => *root = Value::Null,
            Some((last, parent)) => match (last, node_mut(root, parent)) {
                (Step::Key(k), Some(Value::Object(map))) => {
                    map.shift_remove(k);
                }
                (Step::At(i), Some(Value::Array(items))) => {
                    items.remove(*i);
                }
                _ => {}
            },
        }
        return;
    }
    let Some(node) = node_mut(root, path) else {
        return;
    };
    match mutation {
        Mutation::Remove => {}
        Mutation::Replace(v) | Mutation::Number(v) => *node = v.clone(),
        Mutation::Text(s) => *node = Value::String(s.clone()),
        Mutation::EmptyArray => *node = Value::Array(Vec::new()),
        Mutation::EmptyObject => *node = Value::Object(Map::new()),
        Mutation::Null => *node = Value::Null,
        Mutation::Nest(n) => {
            for _ in 0..*n {
                *node = Value::Array(vec![node.take()]);
            }
        }
        Mutation::Insert(k, v) => match node {
            Value::Object(map) => {
                map.insert(k.clone(), v.clone());
            }
            Value::Array(items) => items.push(v.clone()),
            Value::String(s) => {
                let at = s.char_indices().nth(k.len()).map_or(s.len(), |(i, _)| i);
                s.insert_str(at, k);
            }
            other => *other = v.clone(),
        },
        Mutation::Duplicate(i) => match node {
            Value::Array(items) if !items.is_empty() => {
                let at = i.index(items.len());
                let copy = items[at].clone();
                items.insert(at, copy);
            }
            Value::String(s) => *s = s.repeat(2),
            _ => {}
        },
        Mutation::Flood(number) => flood(node, number),
    }
}

fn flood(node: &mut Value, number: &Value) {
    match node {
        Value::Number(_) => *node = number.clone(),
        Value::Array(items) => items.iter_mut().for_each(|v| flood(v, number)),
        Value::Object(map) => map.values_mut().for_each(|v| flood(v, number)),
        _ => {}
    }
}

/// One edit of a text (a model's answer, a transcript line, a config file).
#[derive(Debug, Clone)]
pub enum Edit {
    /// Insert a string at a character position.
    Insert(Index, String),
    /// Delete this many characters from a position.
    Delete(Index, usize),
    /// Replace the digit run at or after a position by another number.
    Digits(Index, String),
    /// Cut the text at a position.
    Truncate(Index),
}

pub fn edits(max: usize) -> impl Strategy<Value = Vec<Edit>> {
    let numbers = prop_oneof![
        Just("-1".to_string()),
        Just("0".to_string()),
        Just("9223372036854775807".to_string()),
        Just("-9223372036854775808".to_string()),
        Just("99999999999999999999".to_string()),
        Just("٣".to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
    ];
    let edit = prop_oneof![
        4 => (any::<Index>(), text()).prop_map(|(i, s)| Edit::Insert(i, s)),
        3 => (any::<Index>(), 1usize..40).prop_map(|(i, n)| Edit::Delete(i, n)),
        3 => (any::<Index>(), numbers).prop_map(|(i, s)| Edit::Digits(i, s)),
        1 => any::<Index>().prop_map(Edit::Truncate),
    ];
    prop::collection::vec(edit, 1..=max)
}

/// Apply the edits in order, on character boundaries.
pub fn edit(text: &str, edits: &[Edit]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for edit in edits {
        let at = |i: &Index| i.index(chars.len() + 1);
        match edit {
            Edit::Insert(i, s) => {
                let at = at(i);
                chars.splice(at..at, s.chars());
            }
            Edit::Delete(i, n) => {
                let at = at(i);
                let end = at.saturating_add(*n).min(chars.len());
                chars.drain(at..end);
            }
            Edit::Digits(i, s) => {
                let from = at(i);
                let Some(start) = chars[from..].iter().position(char::is_ascii_digit) else {
                    continue;
                };
                let start = from + start;
                let len = chars[start..]
                    .iter()
                    .take_while(|c| c.is_ascii_digit())
                    .count();
                chars.splice(start..start + len, s.chars());
            }
            Edit::Truncate(i) => {
                let at = at(i);
                chars.truncate(at);
            }
        }
    }
    chars.into_iter().collect()
}

/// The shared samples folder beside the repository (`../shared/samples`).
fn samples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/samples")
}

/// A sample's text, or `None` (with a note on stderr) when the shared
/// samples are not beside the repository.
pub fn sample(name: &str) -> Option<String> {
    let path = samples_dir().join(name);
    match std::fs::read_to_string(&path) {
        Ok(text) => Some(text),
        Err(e) => {
            eprintln!(
                "never_panics: skipping the mutations of {name}: cannot read {} ({e}); \
                 the shared samples live in ../shared/samples beside the repository",
                path.display()
            );
            None
        }
    }
}

/// The repository's own example envelope.
pub fn example_envelope() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/opencode-session.json");
    let text =
        std::fs::read_to_string(&path).expect("examples/opencode-session.json is in the repo");
    serde_json::from_str(&text).expect("the example envelope is JSON")
}

/// Lines of a JSONL sample, parsed.
pub fn jsonl(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a sample line is JSON"))
        .collect()
}

/// RFC 3339-ish timestamps: a valid date and time followed by any short
/// tail (fraction, offset, stray characters), or an edited valid stamp.
pub fn timestamp() -> impl Strategy<Value = String> + Clone {
    let heads = prop::sample::select(vec![
        "2025-10-09T09:20:00",
        "2025-10-09T09:20:00.",
        "2025-10-09T09:20:00.123",
        "2025-10-09 09:20:60",
    ]);
    let tail_char = prop::sample::select(vec![
        '0', '1', '9', '+', '-', ':', 'Z', 'z', '.', 'é', '€', '𝄞', 'a', ' ',
    ]);
    prop_oneof![
        3 => (heads, prop::collection::vec(tail_char, 0..8))
            .prop_map(|(head, tail)| format!("{head}{}", tail.into_iter().collect::<String>())),
        2 => (
            prop::sample::select(vec!["2025-10-09T09:20:00.000Z", "2025-10-09T11:20:00+02:00"]),
            edits(3),
        )
            .prop_map(|(stamp, e)| edit(stamp, &e)),
        1 => text(),
    ]
}

/// New values for number nodes, each picked among the document's numbers.
pub fn renumbering(max: usize) -> impl Strategy<Value = Vec<(Index, Value)>> {
    prop::collection::vec((any::<Index>(), number()), 0..=max)
}

/// Give number nodes new (extreme) values: timestamps, token counts, limits.
pub fn renumber(mut value: Value, renumbering: &[(Index, Value)]) -> Value {
    let mut all = Vec::new();
    paths(&value, &mut Vec::new(), &mut all);
    let numbers: Vec<Vec<Step>> = all
        .into_iter()
        .filter(|p| node_mut(&mut value, p).is_some_and(|v| v.is_number()))
        .collect();
    if numbers.is_empty() {
        return value;
    }
    for (at, number) in renumbering {
        if let Some(node) = node_mut(&mut value, &numbers[at.index(numbers.len())]) {
            *node = number.clone();
        }
    }
    value
}

/// The envelope's own numbers, which every pass reads.
const ENVELOPE_NUMBERS: &[&[&str]] = &[
    &["now_ms"],
    &["model", "context_limit"],
    &["model", "output_limit"],
    &["usage", "input"],
    &["usage", "cache_read"],
    &["usage", "cache_write"],
    &["usage", "output"],
];

/// For each of the envelope's own numbers, maybe an extreme value.
pub fn envelope_overrides() -> impl Strategy<Value = Vec<Option<Value>>> {
    prop::collection::vec(
        prop::option::weighted(0.3, extreme_number()),
        ENVELOPE_NUMBERS.len(),
    )
}

/// Set some of the envelope's own numbers (creating the objects they sit in).
pub fn override_envelope(mut value: Value, overrides: &[Option<Value>]) -> Value {
    for (path, number) in ENVELOPE_NUMBERS.iter().zip(overrides) {
        let Some(number) = number else {
            continue;
        };
        let mut node = &mut value;
        for (i, key) in path.iter().enumerate() {
            let Value::Object(map) = node else {
                break;
            };
            if i + 1 == path.len() {
                map.insert((*key).to_string(), number.clone());
                break;
            }
            node = map.entry(*key).or_insert_with(|| Value::Object(Map::new()));
        }
    }
    value
}

/// A real document changed three ways: structure, numbers anywhere, and
/// (for envelopes) the top-level numbers.
#[derive(Debug, Clone)]
pub struct Changes {
    pub mutations: Vec<(Target, Mutation)>,
    pub renumbering: Vec<(Index, Value)>,
    pub overrides: Vec<Option<Value>>,
}

pub fn changes(max: usize) -> impl Strategy<Value = Changes> {
    (
        prop::collection::vec(((any::<Index>(), any::<Index>()), mutation()), 0..=max),
        renumbering(3),
        envelope_overrides(),
    )
        .prop_map(|(mutations, renumbering, overrides)| Changes {
            mutations,
            renumbering,
            overrides,
        })
}

impl Changes {
    pub fn apply(&self, value: &Value) -> Value {
        let value = renumber(value.clone(), &self.renumbering);
        let value = override_envelope(value, &self.overrides);
        mutate(value, &self.mutations)
    }
}

//! A deterministic generator of OpenCode sessions.
//!
//! [`session`] produces `{info, parts}` messages in chronological order, shaped
//! like what OpenCode hands its plugins: per turn one real user message, then
//! one assistant message per model step (tool steps finish with
//! `"tool-calls"`, the last step with `"stop"` and a text answer). Tool parts
//! are completed and carry plausible inputs and outputs: numbered source reads,
//! grep hits, cargo/npm logs, edits, globs and todo lists. Everything comes
//! from a small splitmix64 PRNG seeded by the spec, so the same spec always
//! yields the same bytes.

use serde_json::{Map, Value, json};

/// Working directory of the generated project (a synthetic path).
pub const PROJECT_DIR: &str = "/home/dev/acme";
pub const PROVIDER_ID: &str = "anthropic";
pub const MODEL_ID: &str = "claude-sonnet-4-5";
/// The model [`envelope`] reports.
pub const CONTEXT_LIMIT: u64 = 400_000;
pub const OUTPUT_LIMIT: u64 = 32_000;
/// The usable input window for that model: the context limit less the output
/// reserve (`min(output_limit, 25 % of context)`).
pub const USABLE_WINDOW: u64 = CONTEXT_LIMIT - OUTPUT_LIMIT;
/// Tokens the system prompt and tool definitions occupy in the recorded usage.
const SYSTEM_TOKENS: u64 = 14_000;
/// Bytes per token for the approximate counts.
const BYTES_PER_TOKEN: u64 = 4;

/// What to generate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSpec {
    pub seed: u64,
    /// Real user turns.
    pub turns: usize,
    /// Aim for this many [`approx_tokens`] over the whole session.
    pub target_tokens: u64,
    pub session_id: String,
    /// `time.created` of the first user message.
    pub start_ms: i64,
}

impl SessionSpec {
    /// A spec with a session id derived from the seed and a fixed start time.
    pub fn new(seed: u64, turns: usize, target_tokens: u64) -> SessionSpec {
        let mut rng = Rng::new(seed ^ 0x5e55_1011);
        let session_id = format!("ses_{:012x}{}", rng.next_u64() >> 16, rng.base62(14));
        SessionSpec {
            seed,
            turns,
            target_tokens,
            session_id,
            start_ms: 1_796_000_000_000,
        }
    }

    /// The benchmark's session: 100 turns, 200k tokens.
    pub fn bench() -> SessionSpec {
        SessionSpec::new(0xbe4c_0001, 100, 200_000)
    }
}

impl Default for SessionSpec {
    fn default() -> SessionSpec {
        SessionSpec::new(1, 10, 20_000)
    }
}

/// Generate the session's messages, oldest first.
pub fn session(spec: &SessionSpec) -> Vec<Value> {
    let mut generator = Generator::new(spec);
    let total_bytes = spec.target_tokens * BYTES_PER_TOKEN;
    for turn in 0..spec.turns {
        let remaining = total_bytes.saturating_sub(generator.bytes);
        let left = (spec.turns - turn) as u64;
        let share = remaining / left;
        let jitter = 0.55 + generator.rng.f64() * 0.9;
        let budget = (share as f64 * jitter) as u64;
        generator.turn(budget, remaining);
    }
    generator.messages
}

/// Wrap messages in the mc-transform envelope. The usage sample occupies
/// exactly `usage_tokens` prompt tokens (input + cache read + cache write), so
/// `usage_tokens * 100 / USABLE_WINDOW` is the pass's usage percent.
pub fn envelope(messages: &[Value], session_id: &str, usage_tokens: u64, now_ms: i64) -> Value {
    let input = usage_tokens.min(2_000);
    let cache_write = (usage_tokens - input).min(1_000);
    let cache_read = usage_tokens - input - cache_write;
    json!({
        "harness": "opencode",
        "session_id": session_id,
        "project_dir": PROJECT_DIR,
        "model": {
            "provider": PROVIDER_ID,
            "id": MODEL_ID,
            "context_limit": CONTEXT_LIMIT,
            "output_limit": OUTPUT_LIMIT,
        },
        "usage": {
            "input": input,
            "cache_read": cache_read,
            "cache_write": cache_write,
            "output": 400,
        },
        "now_ms": now_ms,
        "messages": messages,
    })
}

/// Prompt tokens that put the pass at `percent` of [`USABLE_WINDOW`].
pub fn usage_at_percent(percent: f64) -> u64 {
    (USABLE_WINDOW as f64 * percent / 100.0).round() as u64
}

/// Rough token count: bytes / 4 of every text and reasoning part, tool output
/// and serialised tool input.
pub fn approx_tokens(messages: &[Value]) -> u64 {
    messages
        .iter()
        .flat_map(|m| m["parts"].as_array().into_iter().flatten())
        .map(part_bytes)
        .sum::<u64>()
        / BYTES_PER_TOKEN
}

fn part_bytes(part: &Value) -> u64 {
    match part["type"].as_str() {
        Some("text" | "reasoning") => part["text"].as_str().map_or(0, str::len) as u64,
        Some("tool") => {
            let state = &part["state"];
            let output = state["output"].as_str().map_or(0, str::len);
            let input = match &state["input"] {
                Value::Null => 0,
                input => input.to_string().len(),
            };
            (output + input) as u64
        }
        _ => 0,
    }
}

/// The newest `time.completed` (or `time.created`) of any message.
pub fn last_time_ms(messages: &[Value]) -> i64 {
    messages
        .iter()
        .filter_map(|m| {
            let time = &m["info"]["time"];
            time["completed"].as_i64().or(time["created"].as_i64())
        })
        .max()
        .unwrap_or(0)
}

/// A new real user message for the tail of `messages`: same session, created
/// `after_ms` after the newest message, with an id that sorts after every
/// existing id.
pub fn follow_up(messages: &[Value], text: &str, after_ms: i64) -> Value {
    let session_id = messages
        .iter()
        .rev()
        .find_map(|m| m["info"]["sessionID"].as_str())
        .unwrap_or("ses_unknown")
        .to_string();
    let created = last_time_ms(messages) + after_ms.max(1);
    let mut rng = Rng::new(created as u64 ^ text.len() as u64 ^ 0xf0110);
    for b in text.bytes() {
        rng.0 = rng.0.rotate_left(5) ^ u64::from(b);
    }
    // Ids encode `time * 4096 + n`; the existing ones were minted before `created`.
    let seq = created as u64 * 4096;
    let message_id = format!("msg_{seq:013x}{}", rng.base62(14));
    let part_id = format!("prt_{:013x}{}", seq + 1, rng.base62(14));
    user_message_value(&session_id, &message_id, &part_id, text, created)
}

fn user_message_value(
    session_id: &str,
    message_id: &str,
    part_id: &str,
    text: &str,
    created: i64,
) -> Value {
    json!({
        "info": {
            "id": message_id,
            "sessionID": session_id,
            "role": "user",
            "time": {"created": created},
            "summary": {"diffs": []},
            "agent": "build",
            "model": {"providerID": PROVIDER_ID, "modelID": MODEL_ID},
        },
        "parts": [{
            "id": part_id,
            "sessionID": session_id,
            "messageID": message_id,
            "type": "text",
            "text": text,
        }],
    })
}

// ---------------------------------------------------------------------------
// PRNG

/// splitmix64: tiny, fast, and good enough for test data.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    /// Uniform in `[0, 1)`.
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.f64() < p
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// A word from a vocabulary list.
    pub fn word(&mut self, words: &[&'static str]) -> &'static str {
        words[self.below(words.len() as u64) as usize]
    }

    /// Index chosen with the given weights.
    pub fn weighted(&mut self, weights: &[u64]) -> usize {
        let mut roll = self.below(weights.iter().sum());
        for (i, &w) in weights.iter().enumerate() {
            if roll < w {
                return i;
            }
            roll -= w;
        }
        weights.len() - 1
    }

    pub fn base62(&mut self, len: usize) -> String {
        const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
        (0..len)
            .map(|_| ALPHABET[self.below(62) as usize] as char)
            .collect()
    }

    pub fn hex(&mut self, len: usize) -> String {
        (0..len)
            .map(|_| char::from_digit(self.below(16) as u32, 16).unwrap_or('0'))
            .collect()
    }
}

// ---------------------------------------------------------------------------
// Vocabulary

const NOUNS: &[&str] = &[
    "session", "message", "part", "tag", "token", "cache", "config", "store", "entry", "record",
    "batch", "window", "budget", "request", "response", "route", "user", "event", "queue",
    "snapshot", "payload", "handler", "schema", "index", "cursor", "lease", "job", "worker",
];
const VERBS: &[&str] = &[
    "load", "save", "parse", "render", "apply", "build", "resolve", "fetch", "update", "merge",
    "flush", "encode", "decode", "validate", "compute", "collect", "insert", "remove", "find",
    "check", "prune", "refresh",
];
const SUFFIXES: &[&str] = &[
    "", "Row", "Config", "State", "Error", "Builder", "Options", "Report", "Store", "Handle",
];
const FIELDS: &[&str] = &[
    "id",
    "name",
    "created_at",
    "updated_at",
    "count",
    "limit",
    "offset",
    "status",
    "owner",
    "version",
    "payload",
    "retries",
    "deadline",
    "priority",
];
const RUST_FIELD_TYPES: &[&str] = &[
    "u64",
    "i64",
    "String",
    "Option<String>",
    "Vec<u8>",
    "bool",
    "usize",
    "Duration",
    "HashMap<String, u64>",
];
const TS_FIELD_TYPES: &[&str] = &[
    "string",
    "number",
    "boolean",
    "string | null",
    "Date",
    "Record<string, number>",
    "string[]",
];
const SYMPTOMS: &[&str] = &[
    "is dropped silently",
    "gets written twice",
    "comes back empty",
    "panics with an index out of bounds",
    "is stale after a reload",
    "takes several seconds to load",
    "loses its ordering",
    "ignores the configured limit",
    "leaks a file handle",
];
const CONDITIONS: &[&str] = &[
    "the cache is cold",
    "two workers run at once",
    "the config file is missing",
    "the input has trailing whitespace",
    "the server restarts",
    "the queue is empty",
    "a request times out",
    "the batch is larger than the limit",
];
const CRATES: &[&str] = &["core", "server", "cli"];
const WEB_AREAS: &[&str] = &["api", "components", "state", "lib"];

fn camel(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
        None => String::new(),
    }
}

fn past(verb: &str) -> String {
    match verb {
        "build" => "built".into(),
        "find" => "found".into(),
        "apply" => "applied".into(),
        v if v.ends_with('e') => format!("{v}d"),
        v => format!("{v}ed"),
    }
}

fn third_person(verb: &str) -> String {
    match verb {
        "apply" => "applies".into(),
        v if v.ends_with("sh") || v.ends_with("ch") => format!("{v}es"),
        v => format!("{v}s"),
    }
}

fn type_name(rng: &mut Rng) -> String {
    camel(rng.word(NOUNS)) + rng.word(SUFFIXES)
}

fn fn_name(rng: &mut Rng) -> String {
    format!("{}_{}", rng.pick(VERBS), rng.pick(NOUNS))
}

fn ts_fn_name(rng: &mut Rng) -> String {
    format!("{}{}", rng.pick(VERBS), camel(rng.word(NOUNS)))
}

fn var_name(rng: &mut Rng) -> String {
    let noun = rng.pick(NOUNS);
    match rng.below(3) {
        0 => noun.to_string(),
        1 => format!("{noun}s"),
        _ => format!(
            "{}_{noun}",
            rng.pick(&["next", "old", "new", "raw", "last", "pending"])
        ),
    }
}

fn sentence(rng: &mut Rng) -> String {
    let noun = rng.pick(NOUNS);
    let other = rng.pick(NOUNS);
    let verb = rng.pick(VERBS);
    match rng.below(8) {
        0 => format!(
            "{} the {noun} before the {other} is {}.",
            camel(verb),
            past(verb)
        ),
        1 => format!("Returns `None` when the {noun} has no {other}."),
        2 => format!("Keeps {noun}s ordered by their {other} id."),
        3 => format!(
            "The {noun} is {} once per {other}, never twice.",
            past(verb)
        ),
        4 => format!("Callers must hold the {noun} lock while they {verb} the {other}."),
        5 => format!(
            "{} every pending {noun} and reports how many changed.",
            camel(&third_person(verb))
        ),
        6 => format!("Fails when the {noun} is older than the {other} it points at."),
        _ => format!("A cheap {noun} handle; cloning it does not copy the {other}."),
    }
}

// ---------------------------------------------------------------------------
// Source code

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lang {
    Rust,
    Ts,
}

#[derive(Debug, Clone)]
struct SourceFile {
    path: String,
    lang: Lang,
    lines: usize,
    seed: u64,
}

impl SourceFile {
    fn abs(&self) -> String {
        format!("{PROJECT_DIR}/{}", self.path)
    }

    fn name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }

    fn content(&self) -> Vec<String> {
        let mut rng = Rng::new(self.seed);
        let mut out = Vec::with_capacity(self.lines + 20);
        match self.lang {
            Lang::Rust => rust_file(&mut rng, self.lines, &mut out),
            Lang::Ts => ts_file(&mut rng, self.lines, &mut out),
        }
        out.truncate(self.lines);
        out
    }
}

fn project_files(rng: &mut Rng) -> Vec<SourceFile> {
    let mut files = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    while files.len() < 64 {
        // Three Rust files for every two TypeScript ones.
        let (path, lang) = if files.len() % 5 < 3 {
            let krate = rng.pick(CRATES);
            let module = rng.pick(NOUNS);
            let path = if rng.chance(0.3) {
                format!("crates/{krate}/src/{module}/{}.rs", rng.pick(VERBS))
            } else {
                format!("crates/{krate}/src/{module}.rs")
            };
            (path, Lang::Rust)
        } else {
            let area = rng.pick(WEB_AREAS);
            let module = ts_fn_name(rng);
            let suffix = if rng.chance(0.25) { ".test.ts" } else { ".ts" };
            (format!("web/src/{area}/{module}{suffix}"), Lang::Ts)
        };
        if seen.insert(path.clone()) {
            let lines = if rng.chance(0.2) {
                rng.range(400, 1200)
            } else {
                rng.range(40, 380)
            } as usize;
            files.push(SourceFile {
                path,
                lang,
                lines,
                seed: rng.next_u64(),
            });
        }
    }
    files
}

fn rust_file(rng: &mut Rng, lines: usize, out: &mut Vec<String>) {
    out.push(format!("//! {}", sentence(rng)));
    out.push(String::new());
    out.push("use std::collections::HashMap;".into());
    for _ in 0..rng.range(1, 4) {
        out.push(format!(
            "use crate::{}::{};",
            rng.pick(NOUNS),
            type_name(rng)
        ));
    }
    out.push(String::new());
    while out.len() < lines {
        match rng.below(10) {
            0 | 1 => rust_struct(rng, out),
            2 => rust_enum(rng, out),
            3 | 4 => {
                let ty = type_name(rng);
                out.push(format!("impl {ty} {{"));
                for i in 0..rng.range(1, 3) {
                    if i > 0 {
                        out.push(String::new());
                    }
                    rust_fn(rng, 1, true, out);
                }
                out.push("}".into());
            }
            _ => rust_fn(rng, 0, false, out),
        }
        out.push(String::new());
    }
}

fn rust_struct(rng: &mut Rng, out: &mut Vec<String>) {
    out.push(format!("/// {}", sentence(rng)));
    out.push("#[derive(Debug, Clone, PartialEq)]".into());
    out.push(format!("pub struct {} {{", type_name(rng)));
    for _ in 0..rng.range(2, 7) {
        out.push(format!(
            "    pub {}: {},",
            rng.pick(FIELDS),
            rng.pick(RUST_FIELD_TYPES)
        ));
    }
    out.push("}".into());
}

fn rust_enum(rng: &mut Rng, out: &mut Vec<String>) {
    out.push("#[derive(Debug, Clone, Copy, PartialEq, Eq)]".into());
    out.push(format!("pub enum {} {{", type_name(rng)));
    for _ in 0..rng.range(2, 5) {
        out.push(format!("    {},", camel(&past(rng.word(VERBS)))));
    }
    out.push("}".into());
}

fn rust_fn(rng: &mut Rng, indent: usize, method: bool, out: &mut Vec<String>) {
    let pad = "    ".repeat(indent);
    if rng.chance(0.6) {
        out.push(format!("{pad}/// {}", sentence(rng)));
    }
    let receiver = if method { "&self, " } else { "" };
    let ret = match rng.below(4) {
        0 => format!("Result<{}>", type_name(rng)),
        1 => format!("Option<{}>", type_name(rng)),
        2 => "usize".to_string(),
        _ => format!("Vec<{}>", type_name(rng)),
    };
    out.push(format!(
        "{pad}pub fn {}({receiver}{}: &{}) -> {ret} {{",
        fn_name(rng),
        rng.pick(NOUNS),
        type_name(rng)
    ));
    let body = rng.range(2, 12) as usize;
    rust_body(rng, indent + 1, body, out);
    out.push(format!("{pad}}}"));
}

fn rust_body(rng: &mut Rng, indent: usize, lines: usize, out: &mut Vec<String>) {
    let pad = "    ".repeat(indent);
    let mut written = 0;
    while written < lines {
        match rng.below(9) {
            0 if indent < 4 => {
                out.push(format!(
                    "{pad}if {}.{} {} {} {{",
                    var_name(rng),
                    rng.pick(FIELDS),
                    rng.pick(&[">", "<", "==", ">="]),
                    rng.range(0, 64)
                ));
                let inner = rng.range(1, 3) as usize;
                rust_body(rng, indent + 1, inner, out);
                out.push(format!("{pad}}}"));
                written += inner + 2;
            }
            1 if indent < 4 => {
                let item = rng.pick(NOUNS);
                out.push(format!("{pad}for {item} in {}.iter() {{", var_name(rng)));
                let inner = rng.range(1, 3) as usize;
                rust_body(rng, indent + 1, inner, out);
                out.push(format!("{pad}}}"));
                written += inner + 2;
            }
            _ => {
                out.push(format!("{pad}{}", rust_statement(rng)));
                written += 1;
            }
        }
    }
}

fn rust_statement(rng: &mut Rng) -> String {
    let var = var_name(rng);
    match rng.below(10) {
        0 => format!(
            "let {var} = self.{}.{}(&{})?;",
            rng.pick(NOUNS),
            fn_name(rng),
            rng.pick(NOUNS)
        ),
        1 => format!("let mut {var} = Vec::with_capacity({});", rng.range(2, 256)),
        2 => format!("{var}.push({}.clone());", rng.pick(NOUNS)),
        3 => format!(
            "tracing::debug!({} = ?{var}, \"{} {}\");",
            rng.pick(FIELDS),
            rng.pick(VERBS),
            rng.pick(NOUNS)
        ),
        4 => format!("self.{}s.insert({var}.id, {var});", rng.pick(NOUNS)),
        5 => format!(
            "let {var}: {} = serde_json::from_str(&raw).context(\"{} {}\")?;",
            type_name(rng),
            rng.pick(VERBS),
            rng.pick(NOUNS)
        ),
        6 => format!("// {}", sentence(rng)),
        7 => {
            let field = rng.pick(FIELDS);
            format!(
                "{var}.{field} = {var}.{field}.saturating_sub({});",
                rng.range(1, 16)
            )
        }
        8 => format!(
            "return Err(Error::{}(format!(\"{} {{}} not found\", {var}.id)));",
            camel(rng.word(NOUNS)),
            rng.pick(NOUNS)
        ),
        _ => format!("Ok({var})"),
    }
}

fn ts_file(rng: &mut Rng, lines: usize, out: &mut Vec<String>) {
    for _ in 0..rng.range(1, 4) {
        out.push(format!(
            "import {{ {} }} from \"../{}/{}\";",
            type_name(rng),
            rng.pick(WEB_AREAS),
            ts_fn_name(rng)
        ));
    }
    out.push(String::new());
    while out.len() < lines {
        if rng.chance(0.3) {
            out.push(format!("/** {} */", sentence(rng)));
            out.push(format!("export interface {} {{", type_name(rng)));
            for _ in 0..rng.range(2, 7) {
                out.push(format!(
                    "  {}: {};",
                    ts_fn_name(rng).to_lowercase(),
                    rng.pick(TS_FIELD_TYPES)
                ));
            }
            out.push("}".into());
        } else {
            let asyncness = if rng.chance(0.5) { "async " } else { "" };
            out.push(format!(
                "export {asyncness}function {}({}: {}): {} {{",
                ts_fn_name(rng),
                rng.pick(NOUNS),
                type_name(rng),
                if asyncness.is_empty() {
                    type_name(rng)
                } else {
                    format!("Promise<{}>", type_name(rng))
                }
            ));
            let body = rng.range(2, 12) as usize;
            ts_body(rng, 1, body, out);
            out.push("}".into());
        }
        out.push(String::new());
    }
}

fn ts_body(rng: &mut Rng, indent: usize, lines: usize, out: &mut Vec<String>) {
    let pad = "  ".repeat(indent);
    let mut written = 0;
    while written < lines {
        let var = ts_fn_name(rng);
        match rng.below(9) {
            0 if indent < 4 => {
                out.push(format!("{pad}if (!{var}) {{"));
                out.push(format!(
                    "{pad}  throw new Error(\"{} not found\");",
                    rng.pick(NOUNS)
                ));
                out.push(format!("{pad}}}"));
                written += 3;
            }
            1 if indent < 4 => {
                out.push(format!("{pad}for (const {} of {var}) {{", rng.pick(NOUNS)));
                let inner = rng.range(1, 3) as usize;
                ts_body(rng, indent + 1, inner, out);
                out.push(format!("{pad}}}"));
                written += inner + 2;
            }
            2 => {
                out.push(format!(
                    "{pad}const {var} = await {}.{}({});",
                    rng.pick(NOUNS),
                    ts_fn_name(rng),
                    rng.pick(NOUNS)
                ));
                written += 1;
            }
            3 => {
                out.push(format!(
                    "{pad}const {var} = {}.filter((x) => x.{} !== undefined);",
                    rng.pick(NOUNS),
                    rng.pick(FIELDS)
                ));
                written += 1;
            }
            4 => {
                out.push(format!("{pad}// {}", sentence(rng)));
                written += 1;
            }
            5 => {
                out.push(format!(
                    "{pad}logger.debug(\"{} {}\", {{ {var} }});",
                    rng.pick(VERBS),
                    rng.pick(NOUNS)
                ));
                written += 1;
            }
            _ => {
                out.push(format!("{pad}return {var};"));
                written += 1;
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The session

struct ToolCall {
    tool: &'static str,
    input: Value,
    output: String,
    title: String,
    metadata: Value,
    /// The call changed the working tree (new snapshot).
    writes: bool,
}

struct Step {
    reasoning: Option<String>,
    text: Option<String>,
    tools: Vec<ToolCall>,
}

#[derive(Debug, Clone)]
struct Todo {
    id: String,
    content: String,
    status: &'static str,
    priority: &'static str,
}

struct Generator {
    rng: Rng,
    session_id: String,
    clock: i64,
    seq: u64,
    snapshot: String,
    files: Vec<SourceFile>,
    todos: Vec<Todo>,
    todo_seq: u64,
    messages: Vec<Value>,
    /// Bytes counted by `approx_tokens` so far.
    bytes: u64,
    /// The prompt of the previous model call (what the provider has cached).
    cached_prompt: u64,
}

impl Generator {
    fn new(spec: &SessionSpec) -> Generator {
        let mut rng = Rng::new(spec.seed);
        let files = project_files(&mut rng);
        let snapshot = rng.hex(40);
        Generator {
            rng,
            session_id: spec.session_id.clone(),
            clock: spec.start_ms,
            seq: 0,
            snapshot,
            files,
            todos: Vec::new(),
            todo_seq: 0,
            messages: Vec::new(),
            bytes: 0,
            cached_prompt: 0,
        }
    }

    /// A sortable, unique id minted at the current clock.
    fn id(&mut self, prefix: &str) -> String {
        self.seq = (self.seq + 1).max(self.clock as u64 * 4096);
        format!("{prefix}_{:013x}{}", self.seq, self.rng.base62(14))
    }

    fn tick(&mut self, lo_ms: u64, hi_ms: u64) -> i64 {
        self.clock += self.rng.range(lo_ms, hi_ms) as i64;
        self.clock
    }

    fn push(&mut self, message: Value) {
        self.bytes += message["parts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(part_bytes)
            .sum::<u64>();
        self.messages.push(message);
    }

    /// One user turn of about `budget` bytes; `remaining` is the session's
    /// unspent byte budget (large outputs only when it can afford them).
    fn turn(&mut self, budget: u64, remaining: u64) {
        if !self.messages.is_empty() {
            self.tick(15_000, 240_000);
        }
        let user_text = self.user_prompt();
        let user_id = self.id("msg");
        let part_id = self.id("prt");
        let created = self.clock;
        let user = user_message_value(&self.session_id, &user_id, &part_id, &user_text, created);
        self.push(user);

        let steps = self.rng.weighted(&[14, 22, 22, 18, 14, 10]) + 1;
        let mut plans = Vec::with_capacity(steps);
        let mut fixed = user_text.len() as u64;
        for i in 0..steps {
            let last = i + 1 == steps;
            let reasoning = if self.rng.chance(if last { 0.3 } else { 0.25 }) {
                Some(self.reasoning())
            } else {
                None
            };
            let text = if last {
                Some(String::new()) // written after the tools, sized to what is left
            } else if self.rng.chance(0.35) {
                Some(self.progress_note())
            } else {
                None
            };
            fixed += reasoning.as_ref().map_or(0, |r| r.len() as u64)
                + text.as_ref().map_or(0, |t| t.len() as u64);
            plans.push(Step {
                reasoning,
                text,
                tools: Vec::new(),
            });
        }
        let answer_bytes = self.rng.range(250, 1400);
        fixed += answer_bytes;

        // Split what is left of the budget over the tool steps.
        let tool_steps = steps - 1;
        let tool_budget = budget.saturating_sub(fixed);
        let weights: Vec<u64> = (0..tool_steps).map(|_| self.rng.range(1, 6)).collect();
        let weight_sum: u64 = weights.iter().sum::<u64>().max(1);
        let mut large_left = remaining.saturating_sub(budget);
        for (i, plan) in plans.iter_mut().take(tool_steps).enumerate() {
            let mut target = (tool_budget * weights[i] / weight_sum).max(200);
            if self.rng.chance(0.03) {
                let large = self.rng.range(8_000, 32_000);
                if large_left > large * 4 {
                    large_left -= large;
                    target = large;
                }
            }
            let phase = i as f64 / tool_steps.max(1) as f64;
            let calls = if self.rng.chance(0.08) { 2 } else { 1 };
            for _ in 0..calls {
                let call = self.tool_call(target / calls, phase);
                plan.tools.push(call);
            }
        }
        let answer = self.answer(answer_bytes as usize);
        if let Some(last) = plans.last_mut() {
            last.text = Some(answer);
        }

        for plan in plans {
            let message = self.assistant_message(&user_id, plan);
            self.push(message);
        }
    }

    fn assistant_message(&mut self, parent: &str, step: Step) -> Value {
        let created = self.tick(150, 1_800);
        let id = self.id("msg");
        let sid = self.session_id.clone();
        let finish = if step.tools.is_empty() {
            "stop"
        } else {
            "tool-calls"
        };

        let mut output_bytes = 0u64;
        let mut parts = Vec::new();
        let step_start = self.id("prt");
        parts.push(json!({
            "id": step_start, "sessionID": sid, "messageID": id,
            "type": "step-start", "snapshot": self.snapshot,
        }));
        let mut reasoning_tokens = 0;
        if let Some(text) = step.reasoning {
            let start = self.tick(200, 900);
            let end = self.tick(300 + text.len() as u64 * 2, 800 + text.len() as u64 * 6);
            let pid = self.id("prt");
            reasoning_tokens = text.len() as u64 / BYTES_PER_TOKEN;
            let signature = self.rng.base62(96);
            parts.push(json!({
                "id": pid, "sessionID": sid, "messageID": id, "type": "reasoning",
                "text": text,
                "metadata": {"anthropic": {"signature": signature}},
                "time": {"start": start, "end": end},
            }));
        }
        if let Some(text) = step.text {
            let start = self.tick(100, 600);
            let end = self.tick(100 + text.len() as u64, 400 + text.len() as u64 * 4);
            let pid = self.id("prt");
            output_bytes += text.len() as u64;
            parts.push(json!({
                "id": pid, "sessionID": sid, "messageID": id, "type": "text",
                "text": text, "time": {"start": start, "end": end},
            }));
        }
        let mut writes = false;
        for call in step.tools {
            let start = self.tick(150, 1_200);
            let end = self.tick(20, 400 + call.output.len() as u64 / 8);
            let pid = self.id("prt");
            let call_id = format!("toolu_01{}", self.rng.base62(22));
            output_bytes += call.input.to_string().len() as u64;
            writes |= call.writes;
            parts.push(json!({
                "id": pid, "sessionID": sid, "messageID": id, "type": "tool",
                "callID": call_id, "tool": call.tool,
                "state": {
                    "status": "completed",
                    "input": call.input,
                    "output": call.output,
                    "title": call.title,
                    "metadata": call.metadata,
                    "time": {"start": start, "end": end},
                },
            }));
        }
        if writes {
            self.snapshot = self.rng.hex(40);
        }
        let completed = self.tick(40, 400);

        // Usage: everything so far is the prompt; the provider cached the
        // previous call's prompt.
        let prompt = SYSTEM_TOKENS + self.bytes / BYTES_PER_TOKEN;
        let input = self.rng.range(2, 40);
        let cache_read = self.cached_prompt.min(prompt.saturating_sub(input));
        let cache_write = prompt - input - cache_read;
        self.cached_prompt = prompt;
        let output = output_bytes / BYTES_PER_TOKEN + self.rng.range(8, 60);
        let cost = (input as f64 * 3.0
            + cache_write as f64 * 3.75
            + cache_read as f64 * 0.3
            + (output + reasoning_tokens) as f64 * 15.0)
            / 1e6;
        let cost = (cost * 1e8).round() / 1e8;
        let tokens = json!({
            "total": input + output + reasoning_tokens + cache_read + cache_write,
            "input": input,
            "output": output,
            "reasoning": reasoning_tokens,
            "cache": {"read": cache_read, "write": cache_write},
        });
        let finish_id = self.id("prt");
        parts.push(json!({
            "id": finish_id, "sessionID": sid, "messageID": id,
            "type": "step-finish", "reason": finish, "snapshot": self.snapshot,
            "cost": cost, "tokens": tokens,
        }));
        json!({
            "info": {
                "id": id,
                "sessionID": sid,
                "role": "assistant",
                "time": {"created": created, "completed": completed},
                "parentID": parent,
                "modelID": MODEL_ID,
                "providerID": PROVIDER_ID,
                "mode": "build",
                "agent": "build",
                "path": {"cwd": PROJECT_DIR, "root": PROJECT_DIR},
                "cost": cost,
                "tokens": tokens,
                "finish": finish,
            },
            "parts": parts,
        })
    }

    fn file(&mut self) -> SourceFile {
        self.rng.pick(&self.files).clone()
    }

    fn some_fn(&mut self) -> String {
        fn_name(&mut self.rng)
    }

    // -- prose ----------------------------------------------------------------

    fn user_prompt(&mut self) -> String {
        let file = self.file();
        let rng = &mut self.rng;
        let noun = rng.word(NOUNS);
        let symptom = rng.pick(SYMPTOMS);
        let condition = rng.pick(CONDITIONS);
        let func = fn_name(rng);
        let mut text = match rng.below(9) {
            0 => format!("The {noun} {symptom} when {condition}. Can you find out why and fix it?"),
            1 => format!(
                "Add a `{func}` helper to `{}` that {} the {noun}s in one go. Keep the existing tests passing.",
                file.path,
                rng.pick(&["validates", "deduplicates", "sorts", "batches", "counts"])
            ),
            2 => "Run the test suite and fix whatever fails.".to_string(),
            3 => format!(
                "Refactor `{}` so that the {noun} handling lives in its own module; it has grown too big.",
                file.path
            ),
            4 => format!(
                "Why does `{func}` return early for empty {noun}s? That looks wrong to me when {condition}."
            ),
            5 => format!(
                "Looks good. Now make the {noun} {} configurable, default {}.",
                rng.pick(FIELDS),
                rng.range(2, 500)
            ),
            6 => format!(
                "Please write tests for `{func}` covering the case where {condition} and the one where the {noun} {symptom}."
            ),
            7 => format!(
                "Rename `{func}` to `{}` everywhere and update the docs.",
                fn_name(rng)
            ),
            _ => format!(
                "I think the {noun} {symptom}. Check `{}` and the callers of `{func}`, but don't change the public API.",
                file.path
            ),
        };
        if self.rng.chance(0.1) {
            let size = self.rng.range(600, 2_500) as usize;
            let log = self.cargo_failure(size);
            text.push_str("\n\nHere is what I get:\n\n```\n");
            text.push_str(&log);
            text.push_str("\n```");
        }
        text
    }

    fn progress_note(&mut self) -> String {
        let file = self.file();
        let func = self.some_fn();
        let rng = &mut self.rng;
        match rng.below(6) {
            0 => format!("Let me look at `{}` first.", file.path),
            1 => format!("I'll search for the callers of `{func}`."),
            2 => "Now let me run the tests to see where we stand.".to_string(),
            3 => format!(
                "The {} path looks fine; checking `{}` next.",
                rng.pick(NOUNS),
                file.name()
            ),
            4 => "Let me update the todo list before making changes.".to_string(),
            _ => format!(
                "Found it: `{func}` skips the {} when {}. Fixing that now.",
                rng.pick(NOUNS),
                rng.pick(CONDITIONS)
            ),
        }
    }

    fn reasoning(&mut self) -> String {
        let sentences = self.rng.range(2, 9);
        let mut out = String::new();
        for i in 0..sentences {
            if i > 0 {
                out.push(' ');
            }
            let file = self.file();
            let func = self.some_fn();
            let rng = &mut self.rng;
            let noun = rng.pick(NOUNS);
            let s = match rng.below(7) {
                0 => format!(
                    "The user wants the {noun} to stop being {} twice.",
                    past(rng.word(VERBS))
                ),
                1 => format!("I should check how `{func}` handles {noun}s first."),
                2 => format!(
                    "If the {noun} is empty we return early, which skips the {} step.",
                    rng.pick(VERBS)
                ),
                3 => format!("That would explain why it {}.", rng.pick(SYMPTOMS)),
                4 => format!(
                    "Let me read `{}` to confirm before editing anything.",
                    file.path
                ),
                5 => format!(
                    "The tests in `{}` only cover the case where {}.",
                    file.name(),
                    rng.pick(CONDITIONS)
                ),
                _ => format!(
                    "A smaller fix is to {} the {noun} in `{func}` and leave the callers alone.",
                    rng.pick(VERBS)
                ),
            };
            out.push_str(&s);
        }
        out
    }

    fn answer(&mut self, target: usize) -> String {
        let file = self.file();
        let func = self.some_fn();
        let mut out = format!(
            "I updated `{}` so that `{func}` no longer {} when {}.\n\nChanges:\n",
            file.path,
            self.rng.pick(SYMPTOMS),
            self.rng.pick(CONDITIONS)
        );
        while out.len() < target {
            let bullet = match self.rng.below(5) {
                0 => format!(
                    "- `{}`: {}\n",
                    fn_name(&mut self.rng),
                    sentence(&mut self.rng)
                ),
                1 => format!(
                    "- Added a test for the empty {} case.\n",
                    self.rng.pick(NOUNS)
                ),
                2 => format!(
                    "- The {} is now {} before the {} is written.\n",
                    self.rng.pick(NOUNS),
                    past(self.rng.word(VERBS)),
                    self.rng.pick(NOUNS)
                ),
                3 => {
                    let line = rust_statement(&mut self.rng);
                    format!("- Replaced the manual loop with:\n  ```rust\n  {line}\n  ```\n")
                }
                _ => format!(
                    "- Renamed `{}` to `{}` for consistency.\n",
                    fn_name(&mut self.rng),
                    fn_name(&mut self.rng)
                ),
            };
            out.push_str(&bullet);
        }
        let passed = self.rng.range(12, 400);
        out.push_str(&format!("\nAll {passed} tests pass and clippy is clean."));
        out
    }

    // -- tools ----------------------------------------------------------------

    fn tool_call(&mut self, target: u64, phase: f64) -> ToolCall {
        let target = target as usize;
        // Early in a turn the agent explores; later it edits and tests.
        let weights: &[u64] = if phase < 0.5 {
            &[40, 22, 8, 2, 2, 8, 18]
        } else {
            &[18, 8, 3, 30, 6, 6, 29]
        };
        match self.rng.weighted(weights) {
            0 => self.read(target),
            1 => self.grep(target),
            2 => self.glob(target),
            3 => self.edit(target),
            4 => self.write(target),
            5 => self.todowrite(),
            _ => self.bash(target),
        }
    }

    fn read(&mut self, target: usize) -> ToolCall {
        // Prefer a file long enough for the target.
        let mut file = self.file();
        for _ in 0..6 {
            if file.lines * 34 >= target {
                break;
            }
            file = self.file();
        }
        let lines = file.content();
        let avg = (lines.iter().map(|l| l.len() + 6).sum::<usize>() / lines.len().max(1)).max(8);
        let want = (target / avg).clamp(5, lines.len());
        let offset = if want < lines.len() && self.rng.chance(0.4) {
            self.rng.below((lines.len() - want) as u64) as usize
        } else {
            0
        };
        let end = (offset + want).min(lines.len());
        let mut output = format!(
            "<path>{}</path>\n<type>file</type>\n<content>\n",
            file.abs()
        );
        for (i, line) in lines[offset..end].iter().enumerate() {
            output.push_str(&format!("{}: {line}\n", offset + i + 1));
        }
        if end < lines.len() {
            output.push_str(&format!(
                "\n(File has more lines. Use 'offset' parameter to read beyond line {end})\n</content>"
            ));
        } else {
            output.push_str(&format!(
                "\n(End of file - total {} lines)\n</content>",
                lines.len()
            ));
        }
        let mut input = Map::new();
        input.insert("filePath".into(), json!(file.abs()));
        if offset > 0 || end < lines.len() {
            input.insert("offset".into(), json!(offset + 1));
            input.insert("limit".into(), json!(end - offset));
        }
        let preview = lines[offset..end.min(offset + 20)].join("\n");
        ToolCall {
            tool: "read",
            input: Value::Object(input),
            output,
            title: file.path.clone(),
            metadata: json!({"preview": preview, "truncated": end < lines.len()}),
            writes: false,
        }
    }

    fn grep(&mut self, target: usize) -> ToolCall {
        let rust = self.rng.chance(0.6);
        let lang = if rust { Lang::Rust } else { Lang::Ts };
        let (pattern, include) = match (rust, self.rng.chance(0.5)) {
            (true, true) => (fn_name(&mut self.rng), "*.rs"),
            (false, true) => (ts_fn_name(&mut self.rng), "*.ts"),
            (true, false) => (type_name(&mut self.rng), "*.rs"),
            (false, false) => (type_name(&mut self.rng), "*.ts"),
        };
        let pool: Vec<SourceFile> = self
            .files
            .iter()
            .filter(|f| f.lang == lang)
            .cloned()
            .collect();
        let hits = (target / 60).clamp(1, 400);
        let mut files: Vec<&SourceFile> = (0..hits.div_ceil(4).clamp(1, 40))
            .map(|_| self.rng.pick(&pool))
            .collect();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        files.dedup_by(|a, b| a.path == b.path);
        let mut output = format!("Found {hits} matches\n");
        let n = files.len();
        for (i, file) in files.iter().enumerate() {
            let count = hits * (i + 1) / n - hits * i / n;
            let mut lines: Vec<u64> = (0..count)
                .map(|_| self.rng.range(1, file.lines as u64))
                .collect();
            lines.sort_unstable();
            for line in lines {
                let var = var_name(&mut self.rng);
                let noun = self.rng.pick(NOUNS);
                let code = match (lang, self.rng.below(4)) {
                    (Lang::Rust, 0) => format!("    let {var} = {pattern}(&{noun})?;"),
                    (Lang::Rust, 1) => format!("pub fn {pattern}(&self) -> Result<()> {{"),
                    (Lang::Rust, 2) => format!("use crate::{noun}::{pattern};"),
                    (Lang::Rust, _) => format!("        .{pattern}({noun}, {})", line % 97),
                    (Lang::Ts, 0) => format!("  const {noun} = await {pattern}({var});"),
                    (Lang::Ts, 1) => format!("export function {pattern}({noun}: unknown) {{"),
                    (Lang::Ts, 2) => format!("import {{ {pattern} }} from \"../{noun}\";"),
                    (Lang::Ts, _) => format!("    expect({pattern}({noun})).toEqual([]);"),
                };
                output.push_str(&format!("{}:{line}:{code}\n", file.path));
            }
        }
        let output = output.trim_end().to_string();
        ToolCall {
            tool: "grep",
            input: json!({"pattern": pattern, "include": include}),
            title: pattern,
            metadata: json!({"matches": hits, "truncated": false}),
            output,
            writes: false,
        }
    }

    fn glob(&mut self, target: usize) -> ToolCall {
        let (pattern, rust) = if self.rng.chance(0.5) {
            ("**/*.rs", true)
        } else {
            ("web/src/**/*.ts", false)
        };
        let mut paths: Vec<String> = self
            .files
            .iter()
            .filter(|f| (f.lang == Lang::Rust) == rust)
            .map(SourceFile::abs)
            .collect();
        let want = (target / 40).clamp(3, paths.len().max(3));
        paths.truncate(want);
        ToolCall {
            tool: "glob",
            input: json!({"pattern": pattern, "path": PROJECT_DIR}),
            output: paths.join("\n"),
            title: pattern.to_string(),
            metadata: json!({"count": paths.len(), "truncated": false}),
            writes: false,
        }
    }

    fn edit(&mut self, target: usize) -> ToolCall {
        let file = self.file();
        let lines = file.content();
        let span = (target / 2 / 36).clamp(2, 60).min(lines.len());
        let start = self.rng.below((lines.len() - span + 1) as u64) as usize;
        let old: Vec<String> = lines[start..start + span].to_vec();
        let mut new = old.clone();
        let changes = self.rng.range(1, 3);
        for _ in 0..changes {
            let at = self.rng.below(new.len() as u64) as usize;
            let indent: String = new[at].chars().take_while(|c| c.is_whitespace()).collect();
            let statement = match file.lang {
                Lang::Rust => rust_statement(&mut self.rng),
                Lang::Ts => format!(
                    "const {} = {};",
                    ts_fn_name(&mut self.rng),
                    self.rng.range(0, 999)
                ),
            };
            if self.rng.chance(0.5) {
                new[at] = format!("{indent}{statement}");
            } else {
                new.insert(at, format!("{indent}{statement}"));
            }
        }
        let old_string = old.join("\n");
        let new_string = new.join("\n");
        let mut diff = format!(
            "Index: {abs}\n===================================================================\n--- {abs}\n+++ {abs}\n@@ -{},{} +{},{} @@\n",
            start + 1,
            old.len(),
            start + 1,
            new.len(),
            abs = file.abs()
        );
        for line in &old {
            diff.push_str(&format!("-{line}\n"));
        }
        for line in &new {
            diff.push_str(&format!("+{line}\n"));
        }
        ToolCall {
            tool: "edit",
            input: json!({"filePath": file.abs(), "oldString": old_string, "newString": new_string}),
            output: "Edit applied successfully.".to_string(),
            title: file.path.clone(),
            metadata: json!({"diagnostics": {}, "diff": diff}),
            writes: true,
        }
    }

    fn write(&mut self, target: usize) -> ToolCall {
        let lang = if self.rng.chance(0.5) {
            Lang::Rust
        } else {
            Lang::Ts
        };
        let path = match lang {
            Lang::Rust => format!(
                "crates/{}/tests/{}.rs",
                self.rng.pick(CRATES),
                self.rng.pick(NOUNS)
            ),
            Lang::Ts => format!(
                "web/src/{}/{}.test.ts",
                self.rng.pick(WEB_AREAS),
                ts_fn_name(&mut self.rng)
            ),
        };
        let file = SourceFile {
            path,
            lang,
            lines: (target / 34).clamp(10, 400),
            seed: self.rng.next_u64(),
        };
        let content = file.content().join("\n") + "\n";
        ToolCall {
            tool: "write",
            input: json!({"filePath": file.abs(), "content": content}),
            output: "Wrote file successfully.".to_string(),
            title: file.path.clone(),
            metadata: json!({"diagnostics": {}, "filepath": file.abs(), "exists": false}),
            writes: true,
        }
    }

    fn todowrite(&mut self) -> ToolCall {
        // Advance the list: finish the current item, start the next, add new work.
        if let Some(todo) = self.todos.iter_mut().find(|t| t.status == "in_progress") {
            todo.status = "completed";
        }
        if let Some(todo) = self.todos.iter_mut().find(|t| t.status == "pending") {
            todo.status = "in_progress";
        }
        let add = if self.todos.iter().all(|t| t.status == "completed") {
            // A new plan.
            self.todos.clear();
            self.rng.range(2, 5)
        } else {
            self.rng.range(0, 2)
        };
        for _ in 0..add {
            self.todo_seq += 1;
            let id = self.todo_seq.to_string();
            let content = format!(
                "{} `{}` {}",
                camel(self.rng.word(VERBS)),
                fn_name(&mut self.rng),
                self.rng.pick(&[
                    "and cover it with a test",
                    "for empty input",
                    "behind the config flag",
                    "in the web client too",
                    "without changing the schema",
                ])
            );
            let status = if self.todos.iter().any(|t| t.status == "in_progress") {
                "pending"
            } else {
                "in_progress"
            };
            let priority = self.rng.word(&["high", "medium", "low"]);
            self.todos.push(Todo {
                id,
                content,
                status,
                priority,
            });
        }
        if self.todos.len() > 8 {
            let excess = self.todos.len() - 8;
            self.todos.drain(..excess);
        }
        let todos: Vec<Value> = self
            .todos
            .iter()
            .map(|t| json!({"content": t.content, "status": t.status, "priority": t.priority, "id": t.id}))
            .collect();
        let open = self
            .todos
            .iter()
            .filter(|t| t.status != "completed")
            .count();
        let output = serde_json::to_string_pretty(&todos).unwrap_or_default();
        ToolCall {
            tool: "todowrite",
            input: json!({"todos": todos}),
            output,
            title: format!("{open} todos"),
            metadata: json!({"todos": todos}),
            writes: false,
        }
    }

    fn bash(&mut self, target: usize) -> ToolCall {
        let (command, description, output, exit) = match self.rng.below(6) {
            0 | 1 => {
                let krate = self.rng.word(CRATES);
                let (log, failed) = self.cargo_test(krate, target);
                (
                    format!("cargo test -p acme-{krate}"),
                    format!("Run the acme-{krate} tests"),
                    log,
                    i64::from(failed),
                )
            }
            2 => (
                "cargo clippy --workspace --all-targets -- -D warnings".to_string(),
                "Lint the workspace".to_string(),
                self.cargo_failure(target),
                1,
            ),
            3 => {
                let (log, failed) = self.npm_test(target);
                (
                    "npm test -- --run".to_string(),
                    "Run the web tests".to_string(),
                    log,
                    i64::from(failed),
                )
            }
            4 => (
                "git status --short && git diff --stat".to_string(),
                "Show working tree changes".to_string(),
                self.git_status(target),
                0,
            ),
            _ => (
                "git log --oneline -n 40".to_string(),
                "Show recent commits".to_string(),
                self.git_log(target),
                0,
            ),
        };
        ToolCall {
            tool: "bash",
            input: json!({"command": command, "description": description}),
            title: command,
            metadata: json!({"exit": exit, "description": description, "truncated": false}),
            output,
            writes: false,
        }
    }

    fn cargo_test(&mut self, krate: &str, target: usize) -> (String, bool) {
        let mut out = String::new();
        for dep in ["serde", "serde_json", "tracing", "thiserror"] {
            if self.rng.chance(0.3) {
                out.push_str(&format!(
                    "   Compiling {dep} v1.0.{}\n",
                    self.rng.range(10, 200)
                ));
            }
        }
        out.push_str(&format!(
            "   Compiling acme-{krate} v0.1.0 ({PROJECT_DIR}/crates/{krate})\n    Finished `test` profile [unoptimized + debuginfo] target(s) in {}.{:02}s\n     Running unittests src/lib.rs (target/debug/deps/acme_{krate}-{})\n\n",
            self.rng.range(1, 40),
            self.rng.range(0, 99),
            self.rng.hex(16)
        ));
        let tests = (target.saturating_sub(out.len() + 200) / 52).clamp(1, 900);
        out.push_str(&format!("running {tests} tests\n"));
        let failing = if self.rng.chance(0.3) {
            Some(self.rng.below(tests as u64) as usize)
        } else {
            None
        };
        let mut names = Vec::new();
        for i in 0..tests {
            let name = format!(
                "{}::tests::{}_{}",
                self.rng.pick(NOUNS),
                fn_name(&mut self.rng),
                self.rng.pick(&[
                    "works",
                    "rejects_empty",
                    "keeps_order",
                    "round_trips",
                    "is_idempotent"
                ])
            );
            let verdict = if Some(i) == failing { "FAILED" } else { "ok" };
            out.push_str(&format!("test {name} ... {verdict}\n"));
            names.push(name);
        }
        if let Some(i) = failing {
            let name = &names[i];
            out.push_str(&format!(
                "\nfailures:\n\n---- {name} stdout ----\n\nthread '{name}' panicked at crates/{krate}/src/{}.rs:{}:{}:\nassertion `left == right` failed\n  left: {}\n right: {}\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n\n\nfailures:\n    {name}\n\n",
                self.rng.pick(NOUNS),
                self.rng.range(10, 900),
                self.rng.range(5, 40),
                self.rng.range(0, 9),
                self.rng.range(10, 99)
            ));
        }
        let failed = usize::from(failing.is_some());
        out.push_str(&format!(
            "\ntest result: {}. {} passed; {failed} failed; 0 ignored; 0 measured; 0 filtered out; finished in {}.{:02}s\n",
            if failed == 0 { "ok" } else { "FAILED" },
            tests - failed,
            self.rng.range(0, 4),
            self.rng.range(0, 99)
        ));
        if failed > 0 {
            out.push_str(&format!(
                "\nerror: test failed, to rerun pass `-p acme-{krate} --lib`"
            ));
        }
        (out, failed > 0)
    }

    fn cargo_failure(&mut self, target: usize) -> String {
        let mut out = String::new();
        while out.len() < target {
            let file = self.file();
            let line = self.rng.range(3, file.lines.max(4) as u64);
            let var = var_name(&mut self.rng);
            let col = self.rng.range(5, 30);
            let block = match self.rng.below(3) {
                0 => format!(
                    "warning: unused variable: `{var}`\n  --> {}:{line}:{col}\n   |\n{line:>3} |     let {var} = {}.clone();\n   |         {} help: if this is intentional, prefix it with an underscore: `_{var}`\n   |\n   = note: `#[warn(unused_variables)]` on by default\n\n",
                    file.path,
                    self.rng.pick(NOUNS),
                    "^".repeat(var.len())
                ),
                1 => format!(
                    "error[E0308]: mismatched types\n  --> {}:{line}:{col}\n   |\n{line:>3} |     Ok({var})\n   |        {} expected `{}`, found `Option<{}>`\n   |\n\n",
                    file.path,
                    "^".repeat(var.len()),
                    type_name(&mut self.rng),
                    type_name(&mut self.rng)
                ),
                _ => format!(
                    "error: this `if` has identical blocks\n  --> {}:{line}:{col}\n   |\n{line:>3} |         if {var}.is_empty() {{\n   |                             ^\n   |\n   = help: for further information visit https://rust-lang.github.io/rust-clippy/master/index.html#if_same_then_else\n\n",
                    file.path
                ),
            };
            out.push_str(&block);
        }
        out.push_str("error: could not compile `acme-core` (lib) due to 1 previous error");
        out
    }

    fn npm_test(&mut self, target: usize) -> (String, bool) {
        let mut out = format!(
            "\n> acme-web@0.4.{} test\n> vitest --run\n\n RUN  v3.2.{} {PROJECT_DIR}/web\n\n",
            self.rng.range(0, 9),
            self.rng.range(0, 4)
        );
        let files: Vec<SourceFile> = self
            .files
            .iter()
            .filter(|f| f.lang == Lang::Ts)
            .cloned()
            .collect();
        let failing = self.rng.chance(0.25);
        let mut total = 0;
        let mut passed_files = 0;
        let mut i = 0;
        while out.len() + 260 < target || i == 0 {
            let file = &files[i % files.len().max(1)];
            let n = self.rng.range(1, 40);
            total += n;
            if failing && i == 1 {
                out.push_str(&format!(
                    " ❯ {} ({n} tests | 1 failed) {}ms\n   × {} > {} when {}\n     → expected {} to be {}\n",
                    file.path.trim_start_matches("web/"),
                    self.rng.range(3, 900),
                    ts_fn_name(&mut self.rng),
                    self.rng.pick(VERBS),
                    self.rng.pick(CONDITIONS),
                    self.rng.range(0, 9),
                    self.rng.range(10, 99)
                ));
            } else {
                passed_files += 1;
                out.push_str(&format!(
                    " ✓ {} ({n} tests) {}ms\n",
                    file.path.trim_start_matches("web/"),
                    self.rng.range(2, 400)
                ));
            }
            i += 1;
        }
        let failed = u64::from(failing && i > 1);
        out.push_str(&format!(
            "\n Test Files  {}{passed_files} passed ({i})\n      Tests  {}{} passed ({total})\n   Start at  {:02}:{:02}:{:02}\n   Duration  {}.{:02}s\n",
            if failed > 0 { "1 failed | " } else { "" },
            if failed > 0 { "1 failed | " } else { "" },
            total - failed,
            self.rng.range(8, 19),
            self.rng.range(0, 59),
            self.rng.range(0, 59),
            self.rng.range(1, 9),
            self.rng.range(0, 99)
        ));
        (out, failed > 0)
    }

    fn git_status(&mut self, target: usize) -> String {
        let mut status = String::new();
        let mut stat = String::new();
        let mut changed = 0;
        let (mut plus, mut minus) = (0, 0);
        while status.len() + stat.len() < target || changed == 0 {
            let file = self.file();
            let (p, m) = (self.rng.range(0, 120), self.rng.range(0, 60));
            plus += p;
            minus += m;
            changed += 1;
            status.push_str(&format!(" M {}\n", file.path));
            stat.push_str(&format!(
                " {:<48} | {:>4} {}{}\n",
                file.path,
                p + m,
                "+".repeat((p / 4) as usize),
                "-".repeat((m / 4) as usize)
            ));
            if changed > 200 {
                break;
            }
        }
        format!(
            "{status}{stat} {changed} files changed, {plus} insertions(+), {minus} deletions(-)"
        )
    }

    fn git_log(&mut self, target: usize) -> String {
        let mut out = String::new();
        while out.len() < target.min(40 * 70) || out.is_empty() {
            out.push_str(&format!(
                "{} {} {} {}\n",
                self.rng.hex(7),
                camel(self.rng.word(VERBS)),
                self.rng.pick(NOUNS),
                self.rng.pick(&[
                    "handling",
                    "tests",
                    "edge cases",
                    "config",
                    "docs",
                    "ordering",
                    "error messages",
                ])
            ));
        }
        out.trim_end().to_string()
    }
}

// ---------------------------------------------------------------------------
// Historian output

/// The texts of one historian compartment, shaped like what the historian
/// publishes: a short title and four paraphrase tiers of falling length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompartmentText {
    /// About eight words.
    pub title: String,
    /// `p1` … `p4`: about 300, 100, 35 and 12 tokens.
    pub tiers: [String; 4],
    /// In 20..=90.
    pub importance: i64,
    pub episode: &'static str,
}

/// One project memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryText {
    /// One of mc-core's memory categories.
    pub category: &'static str,
    /// 15 to 40 words.
    pub content: String,
    /// In 30..=95.
    pub importance: i64,
}

/// `count` compartments, the same for the same seed.
pub fn compartment_texts(seed: u64, count: usize) -> Vec<CompartmentText> {
    let mut rng = Rng::new(seed ^ 0xc0a1_7e47);
    (0..count)
        .map(|_| Topic::new(&mut rng).compartment(&mut rng))
        .collect()
}

/// `count` distinct memories, spread evenly over the categories, the same for
/// the same seed.
pub fn memory_texts(seed: u64, count: usize) -> Vec<MemoryText> {
    use mc_history::store::CATEGORIES;
    let mut rng = Rng::new(seed ^ 0x3e30_5e11);
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let index = out.len() % CATEGORIES.len();
        let content = Topic::new(&mut rng).memory(&mut rng, index);
        if seen.insert(content.clone()) {
            out.push(MemoryText {
                category: CATEGORIES[index],
                content,
                importance: rng.range(30, 95) as i64,
            });
        }
    }
    out
}

/// Bytes (about 4 a token) the `p1` and `p2` tiers aim for.
const P1_BYTES: usize = 1_200;
const P2_BYTES: usize = 400;

const EPISODES: &[&str] = &[
    "debugging",
    "feature",
    "refactor",
    "testing",
    "investigation",
    "review",
];

/// What one compartment (or memory) is about.
struct Topic {
    episode: &'static str,
    noun: &'static str,
    other: &'static str,
    verb: &'static str,
    krate: &'static str,
    function: String,
    type_name: String,
    file: String,
    symptom: &'static str,
    condition: &'static str,
}

impl Topic {
    fn new(rng: &mut Rng) -> Topic {
        let noun = rng.word(NOUNS);
        let mut other = rng.word(NOUNS);
        while other == noun {
            other = rng.word(NOUNS);
        }
        let krate = rng.word(CRATES);
        Topic {
            episode: rng.word(EPISODES),
            noun,
            other,
            verb: rng.word(VERBS),
            krate,
            function: fn_name(rng),
            type_name: type_name(rng),
            file: format!("crates/{krate}/src/{noun}.rs"),
            symptom: rng.word(SYMPTOMS),
            condition: rng.word(CONDITIONS),
        }
    }

    fn compartment(&self, rng: &mut Rng) -> CompartmentText {
        CompartmentText {
            title: self.title(),
            tiers: [
                self.detail(rng),
                self.summary(rng),
                self.gist(),
                self.line(),
            ],
            importance: rng.range(20, 90) as i64,
            episode: self.episode,
        }
    }

    fn title(&self) -> String {
        let Topic {
            noun,
            other,
            verb,
            krate,
            symptom,
            condition,
            ..
        } = self;
        match self.episode {
            "debugging" => format!("Fix {noun} {other} that {symptom}"),
            "feature" => format!("Add {other} support to the {krate} {noun} {verb} path"),
            "refactor" => format!("Move {noun} {verb} logic into `{}`", self.type_name),
            "testing" => format!("Cover {noun} {other} edge cases when {condition}"),
            "investigation" => format!("Trace why the {noun} {symptom}"),
            _ => format!("Review the {krate} {noun} {other} changes before release"),
        }
    }

    /// `p1`: the story of the range, sentence by sentence, in order.
    fn detail(&self, rng: &mut Rng) -> String {
        let Topic {
            noun,
            other,
            verb,
            krate,
            function,
            type_name,
            file,
            symptom,
            condition,
            ..
        } = self;
        let sentences = [
            format!(
                "The user reported that the {noun} {symptom} when {condition}, and asked for a fix that keeps the {other} format unchanged."
            ),
            format!(
                "Read `{file}` and found that `{function}` {} the {noun} before the {other} is ready, so a second call sees stale state.",
                third_person(verb)
            ),
            format!(
                "Ran `cargo test -p {krate}`: {} passed and {} failed, all of the failures in the `{noun}_{other}` tests.",
                rng.range(40, 400),
                rng.range(1, 6)
            ),
            format!(
                "The {noun} lock is held across the {other} {verb}, which explains why it {symptom}."
            ),
            format!(
                "Changed `{function}` to {verb} the {other} first and to return early on an empty {noun}; added `{verb}_{noun}_twice` as a regression test."
            ),
            format!(
                "A grep for `{function}` found {} callers under `crates/{krate}`; each now passes the {other} explicitly.",
                rng.range(2, 9)
            ),
            format!(
                "Decided to keep the {noun} {other} in memory instead of re-reading `{file}` on every call, because the file rarely changes."
            ),
            format!(
                "Reverted an earlier attempt that cached the {other} globally: it broke `{verb}_{noun}` in the {krate} tests."
            ),
            format!(
                "Introduced `{type_name}` so the {other} and the {noun} travel together instead of as two loose arguments."
            ),
            format!(
                "The whole suite passed afterwards ({} tests), and clippy stayed clean.",
                rng.range(200, 900)
            ),
            format!(
                "The user confirmed the behaviour and asked to leave the {other} retries at {} for now.",
                rng.range(2, 8)
            ),
            format!(
                "Open question: should a {noun} expire after {} minutes, or only when its {other} changes?",
                rng.range(5, 60)
            ),
        ];
        join_until(sentences, P1_BYTES, rng)
    }

    /// `p2`: the outcome in a few sentences.
    fn summary(&self, rng: &mut Rng) -> String {
        let Topic {
            noun,
            other,
            krate,
            function,
            file,
            symptom,
            condition,
            ..
        } = self;
        let sentences = [
            format!(
                "The {noun} {symptom} when {condition}; `{function}` touched the {other} too early."
            ),
            format!("Fixed `{function}` in `{file}` and added a regression test."),
            format!(
                "`cargo test -p {krate}` passes ({} tests).",
                rng.range(200, 900)
            ),
            format!(
                "The {noun} {other} now stays cached in memory instead of being re-read on every call."
            ),
            format!(
                "Tried caching the {other} globally first; reverted because it broke the {krate} tests."
            ),
            format!("Still open: when stale {noun}s should expire, and who decides."),
        ];
        join_until(sentences, P2_BYTES, rng)
    }

    /// `p3`: one sentence.
    fn gist(&self) -> String {
        format!(
            "Fixed `{}` so the {} no longer {} when {}.",
            self.function, self.noun, self.symptom, self.condition
        )
    }

    /// `p4`: a few words.
    fn line(&self) -> String {
        format!(
            "{} {} {}: `{}`.",
            camel(self.episode),
            self.noun,
            self.other,
            self.function
        )
    }

    /// A memory of category `CATEGORIES[index]`.
    fn memory(&self, rng: &mut Rng, index: usize) -> String {
        let Topic {
            noun,
            other,
            verb,
            krate,
            function,
            type_name,
            file,
            symptom,
            condition,
            ..
        } = self;
        let n = rng.range(2, 64);
        let field = rng.word(FIELDS);
        match (index, rng.below(2)) {
            (0, 0) => format!(
                "Run `cargo fmt` and `cargo clippy -p {krate} -- -D warnings` before every commit that touches the {noun} {other} code; CI rejects warnings."
            ),
            (0, _) => format!(
                "Never {verb} a {noun} from the {other} handler directly: go through `{function}` so the audit log records who changed it."
            ),
            (1, 0) => format!(
                "The {krate} crate owns the {noun} {other}; `{function}` in `{file}` is its only writer and every other module reads through a shared `{type_name}` handle."
            ),
            (1, _) => format!(
                "`{type_name}` values flow from the {krate} crate to the web {} code as JSON; the {other} id is the stable key and never changes after insert.",
                rng.word(WEB_AREAS)
            ),
            (2, 0) => format!(
                "The {noun} {symptom} when {condition}, so `{function}` must hold the {other} lock until the write commits."
            ),
            (2, _) => format!(
                "Keep every {noun} payload under {n} KiB: the {other} queue rejects larger ones without reporting an error."
            ),
            (3, 0) => format!(
                "`{noun}.{field}` defaults to {n} and `{other}.{}` to {}; both are read once at startup from `config/{krate}.toml`.",
                rng.word(FIELDS),
                rng.range(1, 500)
            ),
            (3, _) => format!(
                "The {other} worker retries {n} times with a {} ms backoff; raising it further made the {noun} tests time out.",
                rng.range(10, 900)
            ),
            (_, 0) => format!(
                "Functions that {verb} a {noun} are named `{verb}_{noun}` and return `Result<{type_name}>`; a `try_` prefix marks the variant that never blocks."
            ),
            (_, _) => format!(
                "Tests for the {noun} {other} live in `crates/{krate}/tests/{noun}_{other}.rs` and are named after the behaviour, like `{verb}_{noun}_keeps_{field}`."
            ),
        }
    }
}

/// Sentences in order until the text reaches `bytes` or they run out; now and
/// then one is left out, when the rest can still make up the length.
fn join_until<const N: usize>(sentences: [String; N], bytes: usize, rng: &mut Rng) -> String {
    let mut rest: usize = sentences.iter().map(|s| s.len() + 1).sum();
    let mut out = String::new();
    for sentence in sentences {
        if out.len() >= bytes {
            break;
        }
        rest -= sentence.len() + 1;
        if out.len() + rest >= bytes && rng.chance(0.2) {
            continue;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&sentence);
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    fn ids<'a>(messages: &'a [Value], pointer: &str) -> Vec<&'a str> {
        messages
            .iter()
            .filter_map(|m| m.pointer(pointer).and_then(Value::as_str))
            .collect()
    }

    #[test]
    fn same_spec_same_bytes() {
        let spec = SessionSpec::new(7, 12, 30_000);
        let a = serde_json::to_string(&session(&spec)).unwrap();
        let b = serde_json::to_string(&session(&spec)).unwrap();
        assert_eq!(a, b);
        let other = serde_json::to_string(&session(&SessionSpec::new(8, 12, 30_000))).unwrap();
        assert_ne!(a, other);
    }

    #[test]
    fn ids_are_unique_and_sorted() {
        let messages = session(&SessionSpec::new(3, 20, 40_000));
        let message_ids = ids(&messages, "/info/id");
        assert_eq!(message_ids.len(), messages.len());
        assert!(message_ids.windows(2).all(|w| w[0] < w[1]), "sorted");
        let mut seen = HashSet::new();
        for message in &messages {
            let id = message["info"]["id"].as_str().unwrap();
            assert!(id.starts_with("msg_"));
            assert!(seen.insert(id.to_string()));
            for part in message["parts"].as_array().unwrap() {
                assert_eq!(part["messageID"], message["info"]["id"]);
                let pid = part["id"].as_str().unwrap();
                assert!(pid.starts_with("prt_"));
                assert!(seen.insert(pid.to_string()), "duplicate {pid}");
            }
        }
        let tail = follow_up(&messages, "one more thing", 30_000);
        assert!(tail["info"]["id"].as_str().unwrap() > *message_ids.last().unwrap());
        assert!(tail["info"]["time"]["created"].as_i64().unwrap() > last_time_ms(&messages));
    }

    #[test]
    fn turns_have_opencode_shape() {
        let spec = SessionSpec::new(11, 15, 30_000);
        let messages = session(&spec);
        let users: Vec<&Value> = messages
            .iter()
            .filter(|m| m["info"]["role"] == "user")
            .collect();
        assert_eq!(users.len(), spec.turns);
        assert_eq!(messages[0]["info"]["role"], "user");
        assert_eq!(messages.last().unwrap()["info"]["finish"], "stop");
        let mut last_user = "";
        let mut last_time = 0;
        for (i, message) in messages.iter().enumerate() {
            let info = &message["info"];
            assert_eq!(info["sessionID"], spec.session_id.as_str());
            let created = info["time"]["created"].as_i64().unwrap();
            assert!(created > last_time, "time goes forward");
            last_time = info["time"]["completed"].as_i64().unwrap_or(created);
            if info["role"] == "user" {
                last_user = info["id"].as_str().unwrap();
                continue;
            }
            assert_eq!(info["parentID"], last_user);
            let finish = info["finish"].as_str().unwrap();
            let next_is_user = messages
                .get(i + 1)
                .is_none_or(|m| m["info"]["role"] == "user");
            assert_eq!(finish, if next_is_user { "stop" } else { "tool-calls" });
            let parts = message["parts"].as_array().unwrap();
            assert_eq!(parts.first().unwrap()["type"], "step-start");
            assert_eq!(parts.last().unwrap()["type"], "step-finish");
            let has_tool = parts.iter().any(|p| p["type"] == "tool");
            assert_eq!(has_tool, finish == "tool-calls");
            let tokens = &info["tokens"];
            assert!(tokens["cache"]["read"].as_u64().is_some());
        }
    }

    #[test]
    fn every_tool_part_is_completed_with_output() {
        let messages = session(&SessionSpec::new(5, 30, 60_000));
        let mut tools = HashSet::new();
        for part in messages
            .iter()
            .flat_map(|m| m["parts"].as_array().unwrap())
            .filter(|p| p["type"] == "tool")
        {
            let state = &part["state"];
            assert_eq!(state["status"], "completed");
            assert!(!state["output"].as_str().unwrap().is_empty());
            assert!(state["input"].is_object());
            assert!(state["time"]["end"].as_i64() >= state["time"]["start"].as_i64());
            assert!(part["callID"].as_str().unwrap().starts_with("toolu_"));
            tools.insert(part["tool"].as_str().unwrap().to_string());
        }
        for tool in ["read", "grep", "bash", "edit"] {
            assert!(tools.contains(tool), "no {tool} call in {tools:?}");
        }
    }

    #[test]
    fn bench_spec_lands_near_200k_tokens() {
        let spec = SessionSpec::bench();
        let messages = session(&spec);
        let tokens = approx_tokens(&messages);
        assert!(
            (170_000..=230_000).contains(&tokens),
            "{tokens} approx tokens"
        );
        assert!(
            (250..=700).contains(&messages.len()),
            "{} messages",
            messages.len()
        );
        // The recorded usage grows with the session.
        let prompts: Vec<u64> = messages
            .iter()
            .filter(|m| m["info"]["role"] == "assistant")
            .map(|m| {
                let t = &m["info"]["tokens"];
                t["input"].as_u64().unwrap()
                    + t["cache"]["read"].as_u64().unwrap()
                    + t["cache"]["write"].as_u64().unwrap()
            })
            .collect();
        assert!(prompts.first() < prompts.last());
        assert!(*prompts.last().unwrap() > 150_000);
    }

    #[test]
    fn other_seeds_land_near_their_targets() {
        for (seed, turns, target) in [(1, 40, 80_000), (2, 100, 200_000), (9, 150, 300_000)] {
            let tokens = approx_tokens(&session(&SessionSpec::new(seed, turns, target)));
            let error = tokens.abs_diff(target) as f64 / target as f64;
            assert!(error <= 0.15, "seed {seed}: {tokens} vs {target}");
        }
    }

    #[test]
    fn envelope_usage_adds_up() {
        let messages = session(&SessionSpec::default());
        let usage = usage_at_percent(40.0);
        let env = envelope(&messages, "ses_x", usage, 5);
        let u = &env["usage"];
        let sum = u["input"].as_u64().unwrap()
            + u["cache_read"].as_u64().unwrap()
            + u["cache_write"].as_u64().unwrap();
        assert_eq!(sum, usage);
        assert_eq!(env["model"]["context_limit"], 400_000);
        assert_eq!(env["messages"].as_array().unwrap().len(), messages.len());
        let tiny = envelope(&messages, "ses_x", 10, 5);
        assert_eq!(tiny["usage"]["input"], 10);
    }

    #[test]
    fn rng_is_uniform_enough() {
        let mut rng = Rng::new(42);
        let mut counts = [0u32; 10];
        for _ in 0..10_000 {
            counts[rng.below(10) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
        assert!((0..1000).all(|_| rng.range(3, 5) <= 5));
    }

    #[test]
    fn compartment_texts_have_tiers_of_falling_length() {
        let texts = compartment_texts(5, 200);
        assert_eq!(texts, compartment_texts(5, 200));
        for text in &texts {
            let words = text.title.split_whitespace().count();
            assert!((4..=14).contains(&words), "title {:?}", text.title);
            let lens = text.tiers.each_ref().map(String::len);
            assert!((800..=1_600).contains(&lens[0]), "p1 {lens:?}");
            assert!((250..=650).contains(&lens[1]), "p2 {lens:?}");
            assert!((60..=250).contains(&lens[2]), "p3 {lens:?}");
            assert!((10..=90).contains(&lens[3]), "p4 {lens:?}");
            assert!((20..=90).contains(&text.importance));
        }
    }

    #[test]
    fn memory_texts_are_distinct_and_spread_over_categories() {
        use mc_history::store::CATEGORIES;
        let memories = memory_texts(9, 400);
        assert_eq!(memories, memory_texts(9, 400));
        let distinct: HashSet<&str> = memories.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(distinct.len(), memories.len());
        for memory in &memories {
            let words = memory.content.split_whitespace().count();
            assert!(
                (15..=40).contains(&words),
                "{words} words: {}",
                memory.content
            );
            assert!((30..=95).contains(&memory.importance));
        }
        for category in CATEGORIES {
            let n = memories.iter().filter(|m| m.category == category).count();
            assert_eq!(n, memories.len() / CATEGORIES.len(), "{category}");
        }
    }
}

//! The one table of configuration keys.
//!
//! Every leaf of [`Config`] has exactly one [`KeyDef`] here: its dotted path,
//! its type and bounds, its default, who may set it, its documentation and
//! how to read and write it in a [`Config`]. The validator, the built-in
//! defaults (`Config::default`), the project-tier trust rules and the JSON
//! Schema are all derived from this table, so they cannot disagree.
//!
//! To add a key: add the field to its struct in `config.rs`, add a row here,
//! then regenerate the committed schema (`MC_BLESS=1 cargo test -p mc-core`).
//! Keys that a cloned repository must not control (provider URLs, API-key
//! variable names, commands to run, agent prompts, SQLite pragmas) get
//! `Trust::UserOnly`; thresholds that guard against runaway context get
//! `Trust::RaiseOnly`.

use std::borrow::Cow;
use std::fmt;

use serde_json::Value;

use super::{CacheTtl, Config};

/// Who may set a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Trust {
    /// Any tier.
    Any,
    /// The user and override tiers only; the project tier is ignored with a warning.
    UserOnly,
    /// Any tier, but the project tier may only raise the value it inherits.
    RaiseOnly,
}

/// The type of a leaf and its bounds (inclusive).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Kind {
    /// A JSON number.
    Float { min: f64, max: f64 },
    /// A JSON number with no fractional part.
    Int { min: u64, max: u64 },
    /// `true` or `false`.
    Bool,
    /// A [`CacheTtl`] spelling: a string, or a non-negative integer of milliseconds.
    Ttl,
    /// A model named `provider/model`, or `null` for none.
    Model,
    /// An embeddings model: `provider/model` (an endpoint), `local:<name>`
    /// (a model mc runs itself), or `null` for none.
    EmbeddingModel,
    /// A list of `provider/model` names.
    ModelList,
    /// A cron expression (`config::parse_cron`), or `"off"` (or `null`) for none.
    Cron,
    /// An `http://` or `https://` base URL without credentials, query or fragment.
    Url,
    /// A loopback socket address (`127.0.0.1:PORT`, `[::1]:PORT`).
    Loopback,
}

/// A validated leaf value.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Val {
    Float(f64),
    Int(u64),
    Bool(bool),
    Ttl(CacheTtl),
    /// A model name (borrowed in the table's defaults), `None` for none.
    Model(Option<Cow<'static, str>>),
    ModelList(Vec<String>),
    /// A cron expression (borrowed in the table's defaults), `None` when off.
    Cron(Option<Cow<'static, str>>),
    /// A [`Kind::Url`] or [`Kind::Loopback`] value.
    Text(Cow<'static, str>),
}

/// What a `provider/model` name may look like: a provider name (letters,
/// digits, `_`, `.`, `-`), a slash, then the provider's model id (anything but
/// whitespace; it may contain more slashes).
pub(crate) const MODEL_PATTERN: &str = r"^[A-Za-z0-9_.-]+/\S+$";

/// What a local embeddings model's name may look like (`local:<name>`).
pub(crate) const LOCAL_MODEL_PATTERN: &str = r"^local:[A-Za-z0-9_.-]+$";

/// The embeddings model used when the config names none: the local one
/// mc fetches with `mc-doctor setup` (see mc-search-core's `embed::local`).
pub const DEFAULT_EMBEDDINGS_MODEL: &str = "local:wordllama-l2-supercat-256";

pub(crate) fn is_local_model_name(name: &str) -> bool {
    name.strip_prefix("local:").is_some_and(|n| {
        !n.is_empty()
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
    })
}

/// What a [`Kind::Url`] may look like.
pub(crate) const URL_PATTERN: &str = r"^https?://[^/@?#\s]+(/[^?#\s]*)?$";

/// Whether `url` is an `http(s)://host[:port][/path]` without credentials,
/// query or fragment.
pub(crate) fn is_base_url(url: &str) -> bool {
    let Some(rest) = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
    else {
        return false;
    };
    let host = rest.split('/').next().unwrap_or_default();
    !host.is_empty()
        && !host.contains('@')
        && !rest.contains(['?', '#'])
        && !url.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// Whether `name` is a well-formed `provider/model` name.
pub(crate) fn is_model_name(name: &str) -> bool {
    match name.split_once('/') {
        Some((provider, model)) => {
            super::providers::is_provider_name(provider)
                && !model.is_empty()
                && !model.chars().any(char::is_whitespace)
        }
        None => false,
    }
}

impl Val {
    fn float(&self) -> Option<f64> {
        match self {
            Val::Float(x) => Some(*x),
            _ => None,
        }
    }

    fn int(&self) -> Option<u64> {
        match self {
            Val::Int(n) => Some(*n),
            _ => None,
        }
    }

    fn int_u32(&self) -> Option<u32> {
        self.int().and_then(|n| u32::try_from(n).ok())
    }

    fn bool(&self) -> Option<bool> {
        match self {
            Val::Bool(b) => Some(*b),
            _ => None,
        }
    }

    fn ttl(&self) -> Option<CacheTtl> {
        match self {
            Val::Ttl(t) => Some(*t),
            _ => None,
        }
    }

    fn model(self) -> Option<Option<String>> {
        match self {
            Val::Model(m) => Some(m.map(Cow::into_owned)),
            _ => None,
        }
    }

    fn model_list(self) -> Option<Vec<String>> {
        match self {
            Val::ModelList(l) => Some(l),
            _ => None,
        }
    }

    fn text(self) -> Option<String> {
        match self {
            Val::Text(t) => Some(t.into_owned()),
            _ => None,
        }
    }

    fn cron(self) -> Option<Option<String>> {
        match self {
            Val::Cron(c) => Some(c.map(Cow::into_owned)),
            _ => None,
        }
    }

    /// Whether `self` is strictly below `other`; values without an order
    /// (booleans, durations) are never "lower".
    pub(super) fn is_lower_than(&self, other: &Val) -> bool {
        match (self, other) {
            (Val::Float(a), Val::Float(b)) => a < b,
            (Val::Int(a), Val::Int(b)) => a < b,
            _ => false,
        }
    }

    /// The value as JSON, as a user would write it.
    pub(super) fn to_json(&self) -> Value {
        match self {
            Val::Float(x) => number(*x),
            Val::Int(n) => Value::from(*n),
            Val::Bool(b) => Value::from(*b),
            Val::Ttl(t) => Value::from(t.to_string()),
            Val::Model(m) => m.as_deref().map_or(Value::Null, Value::from),
            Val::ModelList(l) => Value::from(l.clone()),
            Val::Cron(c) => Value::from(c.as_deref().unwrap_or("off")),
            Val::Text(t) => Value::from(t.as_ref()),
        }
    }
}

impl fmt::Display for Val {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Display of f64 is already the shortest form: 65.0 prints as 65.
            Val::Float(x) => write!(f, "{x}"),
            Val::Int(n) => write!(f, "{n}"),
            Val::Bool(b) => write!(f, "{b}"),
            Val::Ttl(t) => write!(f, "\"{t}\""),
            Val::Model(_) | Val::ModelList(_) | Val::Cron(_) | Val::Text(_) => {
                write!(f, "{}", self.to_json())
            }
        }
    }
}

/// A float as a JSON number, integral values without a fraction (`65`, not `65.0`).
pub(super) fn number(x: f64) -> Value {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    if x.fract() == 0.0 && x.abs() <= EXACT {
        Value::from(x as i64)
    } else {
        Value::from(x)
    }
}

impl Kind {
    /// Validates one JSON value; the error completes the sentence
    /// "`<key> = <value>` …".
    pub(super) fn check(self, value: &Value) -> Result<Val, String> {
        match self {
            Kind::Float { min, max } => {
                let x = value.as_f64().ok_or("is not a number")?;
                if (min..=max).contains(&x) {
                    Ok(Val::Float(x))
                } else {
                    Err(format!("is out of range {min}..={max}"))
                }
            }
            Kind::Int { min, max } => {
                let out_of_range = || format!("is out of range {min}..={max}");
                let n = match value {
                    Value::Number(n) => {
                        if let Some(u) = n.as_u64() {
                            u
                        } else if n.is_i64() {
                            return Err(out_of_range()); // negative
                        } else {
                            // Written with a fraction or exponent (`20.0`, `1e3`): JSON
                            // Schema counts an integral number as an integer, so do we.
                            let x = n.as_f64().unwrap_or(f64::NAN);
                            if x.fract() != 0.0 || !x.is_finite() {
                                return Err("is not an integer".into());
                            }
                            if x < min as f64 || x > max as f64 {
                                return Err(out_of_range());
                            }
                            x as u64
                        }
                    }
                    _ => return Err("is not an integer".into()),
                };
                if (min..=max).contains(&n) {
                    Ok(Val::Int(n))
                } else {
                    Err(out_of_range())
                }
            }
            Kind::Bool => value
                .as_bool()
                .map(Val::Bool)
                .ok_or_else(|| "is not true or false".into()),
            Kind::Ttl => {
                let parsed = match value {
                    Value::String(s) => CacheTtl::parse(s),
                    Value::Number(n) => n.as_u64().map(CacheTtl::Millis),
                    _ => None,
                };
                parsed.map(Val::Ttl).ok_or_else(|| {
                    "is not a duration (\"30s\", \"5m\", \"1h\", milliseconds, or \"never\")".into()
                })
            }
            Kind::Model => match value {
                Value::Null => Ok(Val::Model(None)),
                Value::String(s) if is_model_name(s) => Ok(Val::Model(Some(Cow::Owned(s.clone())))),
                _ => Err("is not a model name of the form \"provider/model\"".into()),
            },
            Kind::EmbeddingModel => match value {
                Value::Null => Ok(Val::Model(None)),
                Value::String(s) if is_model_name(s) || is_local_model_name(s) => {
                    Ok(Val::Model(Some(Cow::Owned(s.clone()))))
                }
                _ => Err(
                    "is not an embeddings model (\"local:<name>\" or \"provider/model\", or null)"
                        .into(),
                ),
            },
            Kind::ModelList => {
                let names = value
                    .as_array()
                    .ok_or("is not a list of \"provider/model\" names")?;
                names
                    .iter()
                    .map(|n| match n.as_str() {
                        Some(s) if is_model_name(s) => Ok(s.to_string()),
                        _ => Err(format!(
                            "has {}, which is not a model name of the form \"provider/model\"",
                            super::show(n)
                        )),
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map(Val::ModelList)
            }
            Kind::Cron => match value {
                Value::Null => Ok(Val::Cron(None)),
                Value::String(s) if s.trim().eq_ignore_ascii_case("off") => Ok(Val::Cron(None)),
                Value::String(s) => super::schedule::parse_cron(s)
                    .map(|_| Val::Cron(Some(Cow::Owned(s.trim().to_string())))),
                _ => Err(
                    "is not a cron expression (a string such as \"0 3 * * *\", or \"off\")".into(),
                ),
            },
            Kind::Url => match value.as_str() {
                Some(s) if is_base_url(s) => Ok(Val::Text(Cow::Owned(s.to_string()))),
                _ => Err(
                    "is not an http:// or https:// base URL without credentials, query or \
                          fragment (such as \"https://api.anthropic.com\")"
                        .into(),
                ),
            },
            Kind::Loopback => match value.as_str().map(str::parse::<std::net::SocketAddr>) {
                Some(Ok(addr)) if addr.ip().is_loopback() => {
                    Ok(Val::Text(Cow::Owned(addr.to_string())))
                }
                _ => Err(
                    "is not a loopback address with a port (such as \"127.0.0.1:4141\"): \
                          the gateway never listens beyond this machine"
                        .into(),
                ),
            },
        }
    }

    /// Whether a value belongs to this kind and lies within its bounds.
    #[cfg(test)]
    pub(super) fn admits(self, v: &Val) -> bool {
        self.check(&v.to_json()).is_ok_and(|w| w == *v)
    }
}

/// An object that groups keys (`transform`, `sqlite`).
pub(super) struct Section {
    /// Dotted path of the object.
    pub path: &'static str,
    pub description: &'static str,
}

/// One configuration leaf.
pub(super) struct KeyDef {
    /// Dotted path from the top of the file, e.g. `transform.protected_tags`.
    pub path: &'static str,
    pub kind: Kind,
    pub default: Val,
    pub trust: Trust,
    pub description: &'static str,
    /// Reads the leaf from a config.
    pub get: fn(&Config) -> Val,
    /// Writes a leaf value of the right kind (values of another kind are ignored).
    pub set: fn(&mut Config, Val),
}

/// The objects, parents before children; the schema lists them in this order.
pub(super) const SECTIONS: &[Section] = &[
    Section {
        path: "transform",
        description: "The per-call transform (mc-transform): when a pass may change the \
                      prompt, and what it keeps.",
    },
    Section {
        path: "sqlite",
        description: "The SQLite database every mc tool shares.",
    },
    Section {
        path: "historian",
        description: "The historian (mc-historian): which models fold old conversation into \
                      compartments, and how long and how often it may try. User-only: a \
                      project file may set none of it. Models name a provider of the \
                      top-level \"providers\" map.",
    },
    Section {
        path: "dream",
        description: "The dreamer (mc-dream, run from cron): which models maintain project \
                      memory, how many tokens a task and a tick may spend, and when each task \
                      runs. User-only: a project file may set none of it. Models name a \
                      provider of the top-level \"providers\" map.",
    },
    Section {
        path: "dream.schedule",
        description: "When each mc-dream task is due: a cron expression in the local time \
                      zone (5 fields: minute hour day-of-month month day-of-week; or @hourly, \
                      @daily, @weekly, @monthly), or \"off\". `mc-dream tick` (from cron, \
                      every 15 minutes) runs what is due.",
    },
    Section {
        path: "transcript",
        description: "Reading a harness's transcript file: mc-pin --transcript and the \
                      restore hook's transcript_path, mc-historian --transcript. User-only.",
    },
    Section {
        path: "gateway",
        description: "The gateway (mc-transform gateway): the local server Claude Code uses as \
                      its provider's base URL, which forwards each request to one upstream. \
                      User-only: a project file may set none of it.",
    },
    Section {
        path: "dashboard",
        description: "mc-doctor dashboard: the prices its spend view counts tokens at. \
                      User-only.",
    },
    Section {
        path: "embeddings",
        description: "Hybrid search (optional): an OpenAI-compatible embeddings endpoint whose \
                      vectors re-rank the full-text candidates (reciprocal rank fusion with \
                      BM25). Unset model: search is full-text only. User-only: a project file \
                      may set none of it.",
    },
];

/// Every leaf. Order matters only for the schema and for `fallbacks`.
pub(super) const KEYS: &[KeyDef] = &[
    KeyDef {
        path: "transform.execute_threshold_percentage",
        kind: Kind::Float {
            min: 20.0,
            max: 90.0,
        },
        default: Val::Float(65.0),
        trust: Trust::RaiseOnly,
        description: "Context usage, in percent of the model's window, at which a pass \
                      executes: it applies queued drops and cleanups, changing the prompt \
                      (and so busting the provider's prompt cache) once.",
        get: |c| Val::Float(c.transform.execute_threshold_percentage),
        set: |c, v| {
            if let Some(x) = v.float() {
                c.transform.execute_threshold_percentage = x;
            }
        },
    },
    KeyDef {
        path: "transform.cache_ttl",
        kind: Kind::Ttl,
        default: Val::Ttl(CacheTtl::Millis(5 * 60 * 1000)),
        trust: Trust::Any,
        description: "How long the provider keeps a prompt cached. After this much idle \
                      time the cache is taken to be cold, so a pass may execute without \
                      losing anything. \"30s\", \"5m\", \"1h\", bare digits for \
                      milliseconds, or \"never\".",
        get: |c| Val::Ttl(c.transform.cache_ttl),
        set: |c, v| {
            if let Some(t) = v.ttl() {
                c.transform.cache_ttl = t;
            }
        },
    },
    KeyDef {
        path: "transform.protected_tags",
        kind: Kind::Int { min: 1, max: 100 },
        default: Val::Int(20),
        trust: Trust::Any,
        description: "How many of the newest tags are never dropped by ctx_reduce or by \
                      age-based reclaim.",
        get: |c| Val::Int(u64::from(c.transform.protected_tags)),
        set: |c, v| {
            if let Some(n) = v.int_u32() {
                c.transform.protected_tags = n;
            }
        },
    },
    KeyDef {
        path: "transform.clear_reasoning_age",
        kind: Kind::Int {
            min: 10,
            max: 100_000,
        },
        default: Val::Int(50),
        trust: Trust::Any,
        description: "Reasoning in messages more than this many tags older than the newest \
                      one is cleared on execute passes.",
        get: |c| Val::Int(u64::from(c.transform.clear_reasoning_age)),
        set: |c, v| {
            if let Some(n) = v.int_u32() {
                c.transform.clear_reasoning_age = n;
            }
        },
    },
    KeyDef {
        path: "transform.keep_reasoning_tokens",
        kind: Kind::Int {
            min: 0,
            max: 1_000_000,
        },
        default: Val::Int(10_000),
        trust: Trust::Any,
        description: "Beside the age rule, reasoning is kept only for the newest this many \
                      tokens of it (estimated at 4 bytes a token); older reasoning is cleared \
                      on execute passes. The current turn's reasoning is never cleared.",
        get: |c| Val::Int(u64::from(c.transform.keep_reasoning_tokens)),
        set: |c, v| {
            if let Some(n) = v.int_u32() {
                c.transform.keep_reasoning_tokens = n;
            }
        },
    },
    KeyDef {
        path: "transform.tool_reclaim_min_tokens",
        kind: Kind::Int {
            min: 0,
            max: 100_000,
        },
        default: Val::Int(250),
        trust: Trust::Any,
        description: "Age-based reclaim leaves alone tool outputs (with their inputs) \
                      smaller than this many tokens: dropping them saves too little.",
        get: |c| Val::Int(u64::from(c.transform.tool_reclaim_min_tokens)),
        set: |c, v| {
            if let Some(n) = v.int_u32() {
                c.transform.tool_reclaim_min_tokens = n;
            }
        },
    },
    KeyDef {
        path: "transform.tool_reclaim",
        kind: Kind::Bool,
        default: Val::Bool(true),
        trust: Trust::Any,
        description: "Drop old tool outputs by age on execute passes that change the \
                      prompt anyway.",
        get: |c| Val::Bool(c.transform.tool_reclaim),
        set: |c, v| {
            if let Some(b) = v.bool() {
                c.transform.tool_reclaim = b;
            }
        },
    },
    KeyDef {
        path: "transform.smart_drops",
        kind: Kind::Bool,
        default: Val::Bool(true),
        trust: Trust::Any,
        description: "On execute passes that change the prompt anyway, turn edits of a file \
                      edited again later into edit markers (path and region kept, output \
                      dropped) and drop spent control-plane outputs (older todo lists, older \
                      ctx_reduce results, status-only tools).",
        get: |c| Val::Bool(c.transform.smart_drops),
        set: |c, v| {
            if let Some(b) = v.bool() {
                c.transform.smart_drops = b;
            }
        },
    },
    KeyDef {
        path: "transform.todo",
        kind: Kind::Bool,
        default: Val::Bool(true),
        trust: Trust::Any,
        description: "OpenCode: when the newest todowrite call left the wire (dropped, or folded \
                      into the head) and its list has an open item, a busting pass re-injects \
                      the list as a synthetic todowrite call right after the head, replayed \
                      byte for byte until the next bust.",
        get: |c| Val::Bool(c.transform.todo),
        set: |c, v| {
            if let Some(b) = v.bool() {
                c.transform.todo = b;
            }
        },
    },
    KeyDef {
        path: "transform.recall_hints",
        kind: Kind::Bool,
        default: Val::Bool(false),
        trust: Trust::Any,
        description: "When a new user prompt strongly matches what mc keeps out of view \
                      (memories the head does not show, other sessions' compartments, older \
                      messages), append a short <ctx-search-hint> naming them (at most 400 \
                      bytes, decided once per prompt, replayed byte for byte). Off by default until \
                      a measurement shows the hints help.",
        get: |c| Val::Bool(c.transform.recall_hints),
        set: |c, v| {
            if let Some(b) = v.bool() {
                c.transform.recall_hints = b;
            }
        },
    },
    KeyDef {
        path: "transform.relief_drop",
        kind: Kind::Bool,
        default: Val::Bool(true),
        trust: Trust::Any,
        description: "When a pass at or above the execute threshold changes the prompt anyway, \
                      drop old tool outputs (misc first, reads last, the newest kept) down to \
                      well under the threshold, so the next cache bust is many turns away.",
        get: |c| Val::Bool(c.transform.relief_drop),
        set: |c, v| {
            if let Some(b) = v.bool() {
                c.transform.relief_drop = b;
            }
        },
    },
    KeyDef {
        path: "transform.relief_window_percentage",
        kind: Kind::Int { min: 0, max: 100 },
        default: Val::Int(5),
        trust: Trust::Any,
        description: "When relief drops at the execute threshold, the tool outputs of the \
                      protected window it keeps: the newest, and older ones while they fit this \
                      percentage of the threshold's tokens (100 keeps the whole window and \
                      drops outside it only what reaching well under the threshold needs). \
                      What a bust keeps is re-sent uncached and is where the context grows back \
                      from, so a smaller window makes busts cheaper and rarer.",
        get: |c| Val::Int(u64::from(c.transform.relief_window_percentage)),
        set: |c, v| {
            if let Some(n) = v.int_u32() {
                c.transform.relief_window_percentage = n;
            }
        },
    },
    KeyDef {
        path: "transform.temporal_awareness",
        kind: Kind::Bool,
        default: Val::Bool(true),
        trust: Trust::Any,
        description: "Mark gaps of five minutes or more before user messages (<!-- +2h 5m -->) \
                      and date compartment headings.",
        get: |c| Val::Bool(c.transform.temporal_awareness),
        set: |c, v| {
            if let Some(b) = v.bool() {
                c.transform.temporal_awareness = b;
            }
        },
    },
    KeyDef {
        path: "transform.history_budget_percentage",
        kind: Kind::Float {
            min: 0.05,
            max: 0.5,
        },
        default: Val::Float(0.15),
        trust: Trust::Any,
        description: "Share of the execute threshold's token count that rendered session \
                      history (compartments) may use at the head of the prompt.",
        get: |c| Val::Float(c.transform.history_budget_percentage),
        set: |c, v| {
            if let Some(x) = v.float() {
                c.transform.history_budget_percentage = x;
            }
        },
    },
    KeyDef {
        path: "transform.memory_budget_tokens",
        kind: Kind::Int {
            min: 500,
            max: 20_000,
        },
        default: Val::Int(4_000),
        trust: Trust::Any,
        description: "Tokens of project memory rendered at the head of the prompt.",
        get: |c| Val::Int(u64::from(c.transform.memory_budget_tokens)),
        set: |c, v| {
            if let Some(n) = v.int_u32() {
                c.transform.memory_budget_tokens = n;
            }
        },
    },
    KeyDef {
        path: "transform.caveman",
        kind: Kind::Bool,
        default: Val::Bool(false),
        trust: Trust::Any,
        description: "Compress old long prose into terse \"caveman\" style on passes that \
                      change the prompt anyway (the oldest 20 % most, the newest 40 % not).",
        get: |c| Val::Bool(c.transform.caveman),
        set: |c, v| {
            if let Some(b) = v.bool() {
                c.transform.caveman = b;
            }
        },
    },
    KeyDef {
        path: "transform.caveman_min_chars",
        kind: Kind::Int {
            min: 100,
            max: 10_000,
        },
        default: Val::Int(500),
        trust: Trust::Any,
        description: "Texts shorter than this many bytes are never caveman-compressed.",
        get: |c| Val::Int(u64::from(c.transform.caveman_min_chars)),
        set: |c, v| {
            if let Some(n) = v.int_u32() {
                c.transform.caveman_min_chars = n;
            }
        },
    },
    KeyDef {
        path: "transform.system_prompt_guidance",
        kind: Kind::Bool,
        default: Val::Bool(true),
        trust: Trust::Any,
        description: "Append guidance about §N§ tags and ctx_reduce to the system prompt, and \
                      keep its \"Today's date:\" line stable between passes that bust anyway.",
        get: |c| Val::Bool(c.transform.system_prompt_guidance),
        set: |c, v| {
            if let Some(b) = v.bool() {
                c.transform.system_prompt_guidance = b;
            }
        },
    },
    KeyDef {
        path: "transform.calls_keep_rows",
        kind: Kind::Int {
            min: 1_000,
            max: 10_000_000,
        },
        default: Val::Int(200_000),
        trust: Trust::UserOnly,
        description: "The per-call record (what mc-transform status and mc-doctor dashboard \
                      show) keeps at most this many calls over all sessions; the oldest go first.",
        get: |c| Val::Int(c.transform.calls_keep_rows),
        set: |c, v| {
            if let Some(n) = v.int() {
                c.transform.calls_keep_rows = n;
            }
        },
    },
    KeyDef {
        path: "transform.calls_keep_days",
        kind: Kind::Int { min: 1, max: 3650 },
        default: Val::Int(90),
        trust: Trust::UserOnly,
        description: "The per-call record keeps no call older than this many days.",
        get: |c| Val::Int(u64::from(c.transform.calls_keep_days)),
        set: |c, v| {
            if let Some(n) = v.int_u32() {
                c.transform.calls_keep_days = n;
            }
        },
    },
    KeyDef {
        path: "sqlite.busy_timeout_ms",
        kind: Kind::Int {
            min: 5_000,
            max: 600_000,
        },
        default: Val::Int(5_000),
        trust: Trust::UserOnly,
        description: "How long, in milliseconds, a tool waits for another one to release \
                      the database before giving up.",
        get: |c| Val::Int(c.sqlite.busy_timeout_ms),
        set: |c, v| {
            if let Some(n) = v.int() {
                c.sqlite.busy_timeout_ms = n;
            }
        },
    },
    KeyDef {
        path: "sqlite.hook_busy_timeout_ms",
        kind: Kind::Int { min: 0, max: 1_500 },
        default: Val::Int(1_000),
        trust: Trust::UserOnly,
        description: "How long, in milliseconds, a per-call hook (an mc-transform pass, \
                      system or reduce) waits for another tool to release the database \
                      before it lets the call through unchanged. Bounded so the agent \
                      never waits long on mc.",
        get: |c| Val::Int(c.sqlite.hook_busy_timeout_ms),
        set: |c, v| {
            if let Some(n) = v.int() {
                c.sqlite.hook_busy_timeout_ms = n;
            }
        },
    },
    KeyDef {
        path: "historian.model",
        kind: Kind::Model,
        default: Val::Model(None),
        trust: Trust::UserOnly,
        description: "The model the historian asks first, as \"provider/model\" where \
                      provider is a name in \"providers\" (e.g. \"anthropic/claude-haiku-4-5\"). \
                      Split at the first slash, so the model id may contain slashes. \
                      Unset: the harness's own model (historian.harness_model), else \
                      mc-historian run refuses to start.",
        get: |c| Val::Model(c.historian.model.clone().map(Cow::Owned)),
        set: |c, v| {
            if let Some(m) = v.model() {
                c.historian.model = m;
            }
        },
    },
    KeyDef {
        path: "historian.fallback_models",
        kind: Kind::ModelList,
        default: Val::ModelList(Vec::new()),
        trust: Trust::UserOnly,
        description: "Models tried in order when the one before failed in a way worth \
                      retrying elsewhere (429, 5xx, a network error, a timeout), after its \
                      own retries.",
        get: |c| Val::ModelList(c.historian.fallback_models.clone()),
        set: |c, v| {
            if let Some(l) = v.model_list() {
                c.historian.fallback_models = l;
            }
        },
    },
    KeyDef {
        path: "historian.harness_model",
        kind: Kind::Bool,
        default: Val::Bool(true),
        trust: Trust::UserOnly,
        description: "When no historian model is configured, fold with the model the harness \
                      already uses, through the user's own login: an OpenCode session asks \
                      the running OpenCode server (a hidden child session on the session's \
                      model, or OpenCode's small_model when it costs no more); a Claude Code, \
                      Codex or Pi session runs claude -p, codex exec or pi -p when that \
                      program is on PATH. false: no historian without historian.model.",
        get: |c| Val::Bool(c.historian.harness_model),
        set: |c, v| {
            if let Some(b) = v.bool() {
                c.historian.harness_model = b;
            }
        },
    },
    KeyDef {
        path: "historian.connect_timeout_ms",
        kind: Kind::Int {
            min: 100,
            max: 120_000,
        },
        default: Val::Int(10_000),
        trust: Trust::UserOnly,
        description: "How long, in milliseconds, to wait for a provider's connection.",
        get: |c| Val::Int(c.historian.connect_timeout_ms),
        set: |c, v| {
            if let Some(n) = v.int() {
                c.historian.connect_timeout_ms = n;
            }
        },
    },
    KeyDef {
        path: "historian.timeout_ms",
        kind: Kind::Int {
            min: 100,
            max: 3_600_000,
        },
        default: Val::Int(300_000),
        trust: Trust::UserOnly,
        description: "How long, in milliseconds, one model call may take in all (sending, \
                      waiting, reading the answer; for a command provider, the whole run \
                      of the program). A call that times out is not retried on the same \
                      model; the next fallback model is tried.",
        get: |c| Val::Int(c.historian.timeout_ms),
        set: |c, v| {
            if let Some(n) = v.int() {
                c.historian.timeout_ms = n;
            }
        },
    },
    KeyDef {
        path: "historian.retries",
        kind: Kind::Int { min: 0, max: 5 },
        default: Val::Int(2),
        trust: Trust::UserOnly,
        description: "Retries of one model after a 429, a 5xx or a network error, before \
                      the next fallback model is tried.",
        get: |c| Val::Int(u64::from(c.historian.retries)),
        set: |c, v| {
            if let Some(n) = v.int_u32() {
                c.historian.retries = n;
            }
        },
    },
    KeyDef {
        path: "historian.retry_backoff_ms",
        kind: Kind::Int {
            min: 0,
            max: 60_000,
        },
        default: Val::Int(2_000),
        trust: Trust::UserOnly,
        description: "First retry delay in milliseconds; each further retry doubles it, \
                      plus up to 50 % random jitter. A provider's Retry-After header wins \
                      when it asks for longer (capped at one minute).",
        get: |c| Val::Int(c.historian.retry_backoff_ms),
        set: |c, v| {
            if let Some(n) = v.int() {
                c.historian.retry_backoff_ms = n;
            }
        },
    },
    KeyDef {
        path: "historian.max_output_tokens",
        kind: Kind::Int {
            min: 1_024,
            max: 128_000,
        },
        default: Val::Int(16_000),
        trust: Trust::UserOnly,
        description: "The most tokens one historian answer may have (max_tokens of the request).",
        get: |c| Val::Int(u64::from(c.historian.max_output_tokens)),
        set: |c, v| {
            if let Some(n) = v.int_u32() {
                c.historian.max_output_tokens = n;
            }
        },
    },
    KeyDef {
        path: "historian.chunk_tokens",
        kind: Kind::Int {
            min: 2_000,
            max: 200_000,
        },
        default: Val::Int(32_000),
        trust: Trust::UserOnly,
        description: "Tokens of compact transcript sent to the model in one call; a longer \
                      eligible range is folded in several chunks.",
        get: |c| Val::Int(u64::from(c.historian.chunk_tokens)),
        set: |c, v| {
            if let Some(n) = v.int_u32() {
                c.historian.chunk_tokens = n;
            }
        },
    },
    KeyDef {
        path: "historian.max_chunks",
        kind: Kind::Int { min: 1, max: 50 },
        default: Val::Int(4),
        trust: Trust::UserOnly,
        description: "The most chunks one mc-historian run folds (each is one model call, \
                      plus at most one repair call): bounds the cost of a run.",
        get: |c| Val::Int(u64::from(c.historian.max_chunks)),
        set: |c, v| {
            if let Some(n) = v.int_u32() {
                c.historian.max_chunks = n;
            }
        },
    },
    KeyDef {
        path: "transcript.max_bytes",
        kind: Kind::Int {
            min: 1 << 20,
            max: 4 << 30,
        },
        default: Val::Int(crate::codec::jsonl::DEFAULT_MAX_BYTES),
        trust: Trust::UserOnly,
        description: "The largest transcript file, in bytes, mc reads (default 256 MiB). A \
                      long Claude Code session's transcript reaches tens of MB; a larger file \
                      is refused with an error instead of being read. Only regular files are \
                      read at all (never a FIFO or a device).",
        get: |c| Val::Int(c.transcript.max_bytes),
        set: |c, v| {
            if let Some(n) = v.int() {
                c.transcript.max_bytes = n;
            }
        },
    },
    KeyDef {
        path: "dream.model",
        kind: Kind::Model,
        default: Val::Model(None),
        trust: Trust::UserOnly,
        description: "The model the dreamer's model tasks (consolidate, verify, classify, \
                      archive-stale) ask first, as \"provider/model\". Unset: those tasks \
                      are skipped and say why; git-index and sync still run.",
        get: |c| Val::Model(c.dream.model.clone().map(Cow::Owned)),
        set: |c, v| {
            if let Some(m) = v.model() {
                c.dream.model = m;
            }
        },
    },
    KeyDef {
        path: "dream.fallback_models",
        kind: Kind::ModelList,
        default: Val::ModelList(Vec::new()),
        trust: Trust::UserOnly,
        description: "Models tried in order when the one before failed in a way worth \
                      retrying elsewhere (429, 5xx, a network error, a timeout).",
        get: |c| Val::ModelList(c.dream.fallback_models.clone()),
        set: |c, v| {
            if let Some(l) = v.model_list() {
                c.dream.fallback_models = l;
            }
        },
    },
    KeyDef {
        path: "dream.timeout_ms",
        kind: Kind::Int {
            min: 1_000,
            max: 3_600_000,
        },
        default: Val::Int(300_000),
        trust: Trust::UserOnly,
        description: "How long, in milliseconds, one dreamer model call may take in all.",
        get: |c| Val::Int(c.dream.timeout_ms),
        set: |c, v| {
            if let Some(n) = v.int() {
                c.dream.timeout_ms = n;
            }
        },
    },
    KeyDef {
        path: "dream.retries",
        kind: Kind::Int { min: 0, max: 5 },
        default: Val::Int(2),
        trust: Trust::UserOnly,
        description: "Retries of one model after a 429, a 5xx or a network error, before \
                      the next fallback model is tried.",
        get: |c| Val::Int(u64::from(c.dream.retries)),
        set: |c, v| {
            if let Some(n) = v.int_u32() {
                c.dream.retries = n;
            }
        },
    },
    KeyDef {
        path: "dream.max_output_tokens",
        kind: Kind::Int {
            min: 512,
            max: 64_000,
        },
        default: Val::Int(4_000),
        trust: Trust::UserOnly,
        description: "The most tokens one dreamer answer may have (max_tokens of the request).",
        get: |c| Val::Int(u64::from(c.dream.max_output_tokens)),
        set: |c, v| {
            if let Some(n) = v.int_u32() {
                c.dream.max_output_tokens = n;
            }
        },
    },
    KeyDef {
        path: "dream.task_token_budget",
        kind: Kind::Int {
            min: 2_000,
            max: 2_000_000,
        },
        default: Val::Int(30_000),
        trust: Trust::UserOnly,
        description: "Model tokens (prompt plus the answer's limit) one task run may spend. A \
                      task sends only as many memories as fit; the rest wait for its next run.",
        get: |c| Val::Int(c.dream.task_token_budget),
        set: |c, v| {
            if let Some(n) = v.int() {
                c.dream.task_token_budget = n;
            }
        },
    },
    KeyDef {
        path: "dream.tick_token_budget",
        kind: Kind::Int {
            min: 2_000,
            max: 10_000_000,
        },
        default: Val::Int(120_000),
        trust: Trust::UserOnly,
        description: "Model tokens one mc-dream tick may spend over every project and task. \
                      A model task that no longer fits is left due for the next tick.",
        get: |c| Val::Int(c.dream.tick_token_budget),
        set: |c, v| {
            if let Some(n) = v.int() {
                c.dream.tick_token_budget = n;
            }
        },
    },
    KeyDef {
        path: "dream.stale_days",
        kind: Kind::Int { min: 7, max: 3_650 },
        default: Val::Int(90),
        trust: Trust::UserOnly,
        description: "archive-stale asks the model about memories that no head rendered and \
                      no query matched for this many days (never-used ones: created this long \
                      ago); expired memories are archived without asking.",
        get: |c| Val::Int(c.dream.stale_days),
        set: |c, v| {
            if let Some(n) = v.int() {
                c.dream.stale_days = n;
            }
        },
    },
    KeyDef {
        path: "dream.schedule.consolidate",
        kind: Kind::Cron,
        default: Val::Cron(Some(Cow::Borrowed("0 3 * * *"))),
        trust: Trust::UserOnly,
        description: "Merge duplicate and near-duplicate memories (lexical similarity first; the model is asked only when some are close).",
        get: |c| Val::Cron(c.dream.schedule.consolidate.clone().map(Cow::Owned)),
        set: |c, v| {
            if let Some(x) = v.cron() {
                c.dream.schedule.consolidate = x;
            }
        },
    },
    KeyDef {
        path: "dream.schedule.verify",
        kind: Kind::Cron,
        default: Val::Cron(Some(Cow::Borrowed("30 3 * * *"))),
        trust: Trust::UserOnly,
        description: "Re-check memories that name files, symbols or config values against the project's current code (only those whose files changed since their last check).",
        get: |c| Val::Cron(c.dream.schedule.verify.clone().map(Cow::Owned)),
        set: |c, v| {
            if let Some(x) = v.cron() {
                c.dream.schedule.verify = x;
            }
        },
    },
    KeyDef {
        path: "dream.schedule.classify",
        kind: Kind::Cron,
        default: Val::Cron(Some(Cow::Borrowed("0 4 * * *"))),
        trust: Trust::UserOnly,
        description: "Judge each new or changed memory's importance and whether it is true of this project only or of the user's work in general.",
        get: |c| Val::Cron(c.dream.schedule.classify.clone().map(Cow::Owned)),
        set: |c, v| {
            if let Some(x) = v.cron() {
                c.dream.schedule.classify = x;
            }
        },
    },
    KeyDef {
        path: "dream.schedule.archive_stale",
        kind: Kind::Cron,
        default: Val::Cron(Some(Cow::Borrowed("30 4 * * 0"))),
        trust: Trust::UserOnly,
        description: "Archive expired memories, and those the model agrees are stale among the ones nothing used for dream.stale_days.",
        get: |c| Val::Cron(c.dream.schedule.archive_stale.clone().map(Cow::Owned)),
        set: |c, v| {
            if let Some(x) = v.cron() {
                c.dream.schedule.archive_stale = x;
            }
        },
    },
    KeyDef {
        path: "dream.schedule.git_index",
        kind: Kind::Cron,
        default: Val::Cron(Some(Cow::Borrowed("*/15 * * * *"))),
        trust: Trust::UserOnly,
        description: "Index the commits of HEAD (no merges, the last year, the newest 2000) for search; nothing to do when HEAD did not move.",
        get: |c| Val::Cron(c.dream.schedule.git_index.clone().map(Cow::Owned)),
        set: |c, v| {
            if let Some(x) = v.cron() {
                c.dream.schedule.git_index = x;
            }
        },
    },
    KeyDef {
        path: "dream.schedule.sync",
        kind: Kind::Cron,
        default: Val::Cron(Some(Cow::Borrowed("0 * * * *"))),
        trust: Trust::UserOnly,
        description: "Team memory: import <repo>/.mc/memory/*.md, then export the project's memories back there; only in repositories that have .mc/memory/.",
        get: |c| Val::Cron(c.dream.schedule.sync.clone().map(Cow::Owned)),
        set: |c, v| {
            if let Some(x) = v.cron() {
                c.dream.schedule.sync = x;
            }
        },
    },
    KeyDef {
        path: "dream.schedule.embed",
        kind: Kind::Cron,
        default: Val::Cron(Some(Cow::Borrowed("20 * * * *"))),
        trust: Trust::UserOnly,
        description: "Embed what search holds that has no vector yet (mc-search index --embeddings); skipped without embeddings.model.",
        get: |c| Val::Cron(c.dream.schedule.embed.clone().map(Cow::Owned)),
        set: |c, v| {
            if let Some(x) = v.cron() {
                c.dream.schedule.embed = x;
            }
        },
    },
    KeyDef {
        path: "embeddings.model",
        kind: Kind::EmbeddingModel,
        default: Val::Model(Some(Cow::Borrowed(DEFAULT_EMBEDDINGS_MODEL))),
        trust: Trust::UserOnly,
        description: "The embedding model of hybrid search: \"local:<name>\", a static model mc \
                      runs itself once its files are fetched (mc-doctor setup, or the first \
                      mc-search index --embeddings; until then search is full-text only), or \
                      \"provider/model\", a provider of kind openai in \"providers\" (its \
                      base_url and api_key_env), called at <base_url>/embeddings. null: \
                      search is full-text (BM25) only.",
        get: |c| Val::Model(c.embeddings.model.clone().map(Cow::Owned)),
        set: |c, v| {
            if let Some(m) = v.model() {
                c.embeddings.model = m;
            }
        },
    },
    KeyDef {
        path: "embeddings.dimensions",
        kind: Kind::Int { min: 0, max: 8192 },
        default: Val::Int(0),
        trust: Trust::UserOnly,
        description: "The vector length the model must answer; an answer of another length \
                      is refused. 0: the length of the model's first answer, recorded and \
                      held to from then on.",
        get: |c| Val::Int(c.embeddings.dimensions),
        set: |c, v| {
            if let Some(n) = v.int() {
                c.embeddings.dimensions = n;
            }
        },
    },
    KeyDef {
        path: "embeddings.batch_size",
        kind: Kind::Int { min: 1, max: 512 },
        default: Val::Int(64),
        trust: Trust::UserOnly,
        description: "Texts per embeddings request of a backfill (mc-search index \
                      --embeddings); each batch is stored as it comes, so a stopped \
                      backfill resumes where it was.",
        get: |c| Val::Int(c.embeddings.batch_size),
        set: |c, v| {
            if let Some(n) = v.int() {
                c.embeddings.batch_size = n;
            }
        },
    },
    KeyDef {
        path: "embeddings.timeout_ms",
        kind: Kind::Int {
            min: 100,
            max: 600_000,
        },
        default: Val::Int(60_000),
        trust: Trust::UserOnly,
        description: "How long, in milliseconds, one backfill request may take in all.",
        get: |c| Val::Int(c.embeddings.timeout_ms),
        set: |c, v| {
            if let Some(n) = v.int() {
                c.embeddings.timeout_ms = n;
            }
        },
    },
    KeyDef {
        path: "embeddings.query_timeout_ms",
        kind: Kind::Int {
            min: 50,
            max: 60_000,
        },
        default: Val::Int(1_500),
        trust: Trust::UserOnly,
        description: "How long, in milliseconds, a search waits for its query's vector; \
                      past it the search ranks by full text alone and says so in its \
                      warnings.",
        get: |c| Val::Int(c.embeddings.query_timeout_ms),
        set: |c, v| {
            if let Some(n) = v.int() {
                c.embeddings.query_timeout_ms = n;
            }
        },
    },
    KeyDef {
        path: "embeddings.retries",
        kind: Kind::Int { min: 0, max: 10 },
        default: Val::Int(3),
        trust: Trust::UserOnly,
        description: "Retries of one backfill batch after a 429, a 5xx or a network error \
                      (waiting 0.5 s, then twice as long each time). A query is not retried.",
        get: |c| Val::Int(u64::from(c.embeddings.retries)),
        set: |c, v| {
            if let Some(n) = v.int_u32() {
                c.embeddings.retries = n;
            }
        },
    },
    KeyDef {
        path: "gateway.anthropic_upstream",
        kind: Kind::Url,
        default: Val::Text(Cow::Borrowed("https://api.anthropic.com")),
        trust: Trust::UserOnly,
        description: "The provider every request through the gateway goes to (its base URL; \
                      the request's path is appended). The gateway forwards nowhere else.",
        get: |c| Val::Text(Cow::Owned(c.gateway.anthropic_upstream.clone())),
        set: |c, v| {
            if let Some(t) = v.text() {
                c.gateway.anthropic_upstream = t;
            }
        },
    },
    KeyDef {
        path: "gateway.openai_upstream",
        kind: Kind::Url,
        default: Val::Text(Cow::Borrowed("https://api.openai.com/v1")),
        trust: Trust::UserOnly,
        description: "Where the gateway sends Codex's requests (its /openai/ paths, the \
                      prefix taken off and the rest appended); with a ChatGPT login, \
                      https://chatgpt.com/backend-api/codex. The gateway forwards nowhere else.",
        get: |c| Val::Text(Cow::Owned(c.gateway.openai_upstream.clone())),
        set: |c, v| {
            if let Some(t) = v.text() {
                c.gateway.openai_upstream = t;
            }
        },
    },
    KeyDef {
        path: "gateway.listen",
        kind: Kind::Loopback,
        default: Val::Text(Cow::Borrowed("127.0.0.1:4141")),
        trust: Trust::UserOnly,
        description: "Where the gateway listens: a loopback address and port (ANTHROPIC_BASE_URL \
                      is http:// and this address).",
        get: |c| Val::Text(Cow::Owned(c.gateway.listen.clone())),
        set: |c, v| {
            if let Some(t) = v.text() {
                c.gateway.listen = t;
            }
        },
    },
    KeyDef {
        path: "dashboard.price_input",
        kind: Kind::Float {
            min: -1.0,
            max: 10_000.0,
        },
        default: Val::Float(-1.0),
        trust: Trust::UserOnly,
        description: "The price of uncached input tokens, US dollars per million, that mc-doctor \
                      dashboard counts spend at for every model; -1: each model's price from \
                      its built-in table.",
        get: |c| Val::Float(c.dashboard.price_input),
        set: |c, v| {
            if let Some(x) = v.float() {
                c.dashboard.price_input = x;
            }
        },
    },
    KeyDef {
        path: "dashboard.price_output",
        kind: Kind::Float {
            min: -1.0,
            max: 10_000.0,
        },
        default: Val::Float(-1.0),
        trust: Trust::UserOnly,
        description: "The price of output tokens, US dollars per million, that mc-doctor \
                      dashboard counts spend at for every model; -1: each model's price from \
                      its built-in table.",
        get: |c| Val::Float(c.dashboard.price_output),
        set: |c, v| {
            if let Some(x) = v.float() {
                c.dashboard.price_output = x;
            }
        },
    },
    KeyDef {
        path: "dashboard.price_cache_write",
        kind: Kind::Float {
            min: -1.0,
            max: 10_000.0,
        },
        default: Val::Float(-1.0),
        trust: Trust::UserOnly,
        description: "The price of cache-write tokens, US dollars per million, that mc-doctor \
                      dashboard counts spend at for every model; -1: each model's price from \
                      its built-in table.",
        get: |c| Val::Float(c.dashboard.price_cache_write),
        set: |c, v| {
            if let Some(x) = v.float() {
                c.dashboard.price_cache_write = x;
            }
        },
    },
    KeyDef {
        path: "dashboard.price_cache_read",
        kind: Kind::Float {
            min: -1.0,
            max: 10_000.0,
        },
        default: Val::Float(-1.0),
        trust: Trust::UserOnly,
        description: "The price of cache-read tokens, US dollars per million, that mc-doctor \
                      dashboard counts spend at for every model; -1: each model's price from \
                      its built-in table.",
        get: |c| Val::Float(c.dashboard.price_cache_read),
        set: |c, v| {
            if let Some(x) = v.float() {
                c.dashboard.price_cache_read = x;
            }
        },
    },
];

/// The parent path of a dotted path (`""` for top-level names).
pub(super) fn parent(path: &str) -> &str {
    path.rsplit_once('.').map_or("", |(p, _)| p)
}

/// The last segment of a dotted path.
pub(super) fn last(path: &str) -> &str {
    path.rsplit_once('.').map_or(path, |(_, l)| l)
}

/// Index of the leaf at `path`.
pub(super) fn find_key(path: &str) -> Option<usize> {
    KEYS.iter().position(|k| k.path == path)
}

/// Whether `path` names a section.
pub(super) fn is_section(path: &str) -> bool {
    SECTIONS.iter().any(|s| s.path == path)
}

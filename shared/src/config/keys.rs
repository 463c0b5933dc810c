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
}

/// A validated leaf value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Val {
    Float(f64),
    Int(u64),
    Bool(bool),
    Ttl(CacheTtl),
}

impl Val {
    fn float(self) -> Option<f64> {
        match self {
            Val::Float(x) => Some(x),
            _ => None,
        }
    }

    fn int(self) -> Option<u64> {
        match self {
            Val::Int(n) => Some(n),
            _ => None,
        }
    }

    fn int_u32(self) -> Option<u32> {
        self.int().and_then(|n| u32::try_from(n).ok())
    }

    fn bool(self) -> Option<bool> {
        match self {
            Val::Bool(b) => Some(b),
            _ => None,
        }
    }

    fn ttl(self) -> Option<CacheTtl> {
        match self {
            Val::Ttl(t) => Some(t),
            _ => None,
        }
    }

    /// Whether `self` is strictly below `other`; values without an order
    /// (booleans, durations) are never "lower".
    pub(super) fn is_lower_than(self, other: Val) -> bool {
        match (self, other) {
            (Val::Float(a), Val::Float(b)) => a < b,
            (Val::Int(a), Val::Int(b)) => a < b,
            _ => false,
        }
    }

    /// The value as JSON, as a user would write it.
    pub(super) fn to_json(self) -> Value {
        match self {
            Val::Float(x) => number(x),
            Val::Int(n) => Value::from(n),
            Val::Bool(b) => Value::from(b),
            Val::Ttl(t) => Value::from(t.to_string()),
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
        }
    }

    /// Whether a value belongs to this kind and lies within its bounds.
    #[cfg(test)]
    pub(super) fn admits(self, v: Val) -> bool {
        self.check(&v.to_json()).is_ok_and(|w| w == v)
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

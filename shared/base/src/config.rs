//! Layered JSONC configuration.
//!
//! The binaries find the layer files (the user file, the project's
//! `.mc/config.jsonc`, an override named by `MC_CONFIG` or `--config`) and pass
//! them to [`load`]; this module never looks at the environment. Layers merge
//! over the built-in defaults in the order defaults < [`Tier::User`] <
//! [`Tier::Project`] < [`Tier::Override`].
//!
//! Loading never fails and never disables anything: a file that cannot be read
//! or parsed is skipped with one warning, and a leaf of the wrong type or out
//! of range keeps the value of the lower tiers, with a warning. The project
//! tier comes from a repository that may have been cloned from anyone, so keys
//! marked user-only are ignored there, and raise-only thresholds may not be
//! lowered there.
//!
//! Every key is declared once, in the table in `config/keys.rs`; validation,
//! defaults, trust and [`json_schema`] all come from it.

mod keys;
mod providers;
mod schedule;
mod schema;
mod ttl;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value};

pub use keys::DEFAULT_EMBEDDINGS_MODEL;
pub use providers::{ProviderConfig, ProviderKind};
pub use schedule::parse_cron;
pub use schema::json_schema;
pub use ttl::CacheTtl;

use keys::{KEYS, Trust};

/// A config file larger than this is not read (a hostile repository could
/// point its project config at something huge).
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// Where a layer comes from, which decides how far it is trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    /// The user's own config file.
    User,
    /// The project's config file. Untrusted: it may come from a cloned repository.
    Project,
    /// A file named by `MC_CONFIG` or `--config`. Trusted like [`Tier::User`].
    Override,
}

impl Tier {
    /// Whether the tier may set user-only keys and lower raise-only ones.
    pub fn is_trusted(self) -> bool {
        !matches!(self, Tier::Project)
    }

    /// `user`, `project` or `override`.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::User => "user",
            Tier::Project => "project",
            Tier::Override => "override",
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One config file to merge.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Layer {
    pub tier: Tier,
    pub path: PathBuf,
}

impl Layer {
    pub fn new(tier: Tier, path: impl Into<PathBuf>) -> Layer {
        Layer {
            tier,
            path: path.into(),
        }
    }
}

/// The result of [`load`]: the merged config and what went wrong on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    pub config: Config,
    /// One line each, `config: <file>: …`, in file order then key order.
    pub warnings: Vec<String>,
    /// Dotted keys whose effective value is not what the highest layer setting
    /// them asked for (invalid, or refused to the project tier), so they kept the
    /// value of the lower tiers. In key-table order, then `providers` entries
    /// (`providers.NAME`, or `providers` for a refused map) in name order.
    pub fallbacks: Vec<String>,
    /// The files that were read and applied, in merge order. Missing files,
    /// and files skipped because they could not be read or parsed, are absent.
    pub sources: Vec<PathBuf>,
}

/// The effective configuration. [`Config::default`] is the built-in defaults.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    pub transform: TransformConfig,
    pub sqlite: SqliteConfig,
    pub historian: HistorianConfig,
    pub transcript: TranscriptConfig,
    pub dream: DreamConfig,
    pub embeddings: EmbeddingsConfig,
    pub gateway: GatewayConfig,
    pub dashboard: DashboardConfig,
    /// `providers`: model providers by name. User-only.
    pub providers: BTreeMap<String, ProviderConfig>,
}

/// `transform.*`: the per-call transform.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TransformConfig {
    /// Usage percentage at which a pass executes (20..=90, default 65). The
    /// project tier may only raise it.
    pub execute_threshold_percentage: f64,
    /// The provider's prompt-cache lifetime (default 5 minutes).
    pub cache_ttl: CacheTtl,
    /// The newest tags ctx_reduce never drops (1..=100, default 20).
    pub protected_tags: u32,
    /// Reasoning older than this many tags is cleared (10..=100000, default 50).
    pub clear_reasoning_age: u32,
    /// Reasoning beyond the newest this many tokens of it is cleared too
    /// (0..=1000000, default 10000).
    pub keep_reasoning_tokens: u32,
    /// Tool outputs below this many tokens are not reclaimed by age
    /// (0..=100000, default 250).
    pub tool_reclaim_min_tokens: u32,
    /// Age-based reclaim of old tool outputs on execute passes (default true).
    pub tool_reclaim: bool,
    /// Edit markers and spent control-plane drops on execute passes (default on).
    pub smart_drops: bool,
    /// The todo list re-injected after the head when its call left the wire
    /// (OpenCode; default on).
    pub todo: bool,
    /// A short hint on a new user prompt naming what mc keeps that matches it
    /// strongly (default off).
    pub recall_hints: bool,
    /// Tiered drop to well under the threshold on busting passes at or above it (default true).
    pub relief_drop: bool,
    /// Of the protected window's tool outputs, relief keeps the newest within
    /// this percentage of the threshold's tokens (0..=100, default 5; 100: all).
    pub relief_window_percentage: u32,
    /// Gap markers on user messages and dates on compartments (default true).
    pub temporal_awareness: bool,
    /// History budget as a share of the threshold's tokens (0.05..=0.5, default 0.15).
    pub history_budget_percentage: f64,
    /// Tokens of project memory in the head (500..=20000, default 4000).
    pub memory_budget_tokens: u32,
    /// Caveman compression of old prose (default off).
    pub caveman: bool,
    /// Minimum bytes for caveman compression (100..=10000, default 500).
    pub caveman_min_chars: u32,
    /// System-prompt guidance and a stable date line (default on).
    pub system_prompt_guidance: bool,
    /// The per-call record keeps at most this many calls (1000..=10000000,
    /// default 200000), the oldest pruned first.
    pub calls_keep_rows: u64,
    /// ...and none older than this many days (1..=3650, default 90).
    pub calls_keep_days: u32,
}

/// `sqlite.*`: the shared database. User-only.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SqliteConfig {
    /// `PRAGMA busy_timeout` in milliseconds (5000..=600000, default 5000).
    pub busy_timeout_ms: u64,
    /// The per-call hooks' wait, milliseconds (0..=1500, default 1000).
    pub hook_busy_timeout_ms: u64,
}

/// `transcript.*`: reading a harness's transcript file (mc-pin `--transcript`
/// and the restore hook's `transcript_path`, mc-historian `--transcript`). User-only.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TranscriptConfig {
    /// Largest transcript read, in bytes (1 MiB..=4 GiB, default 256 MiB).
    pub max_bytes: u64,
}

/// `historian.*`: mc-historian's models, timeouts and budgets. User-only.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistorianConfig {
    /// `provider/model` asked first (default none: the harness's own model,
    /// else `run` refuses to start).
    pub model: Option<String>,
    /// Tried in order after retryable failures of the one before.
    pub fallback_models: Vec<String>,
    /// With no model configured, fold with the harness's own (default true).
    pub harness_model: bool,
    /// Connect timeout per call, milliseconds (100..=120000, default 10000).
    pub connect_timeout_ms: u64,
    /// Whole-call timeout, milliseconds (100..=3600000, default 300000).
    pub timeout_ms: u64,
    /// Retries of one model on 429/5xx/network errors (0..=5, default 2).
    pub retries: u32,
    /// First retry delay, milliseconds, doubled per retry (0..=60000, default 2000).
    pub retry_backoff_ms: u64,
    /// max_tokens of an answer (1024..=128000, default 16000).
    pub max_output_tokens: u32,
    /// Transcript tokens per model call (2000..=200000, default 32000).
    pub chunk_tokens: u32,
    /// Chunks per run (1..=50, default 4).
    pub max_chunks: u32,
}

impl HistorianConfig {
    /// The models to try, in order: `model`, then `fallback_models` (duplicates dropped).
    pub fn chain(&self) -> Vec<String> {
        let mut chain: Vec<String> = Vec::new();
        for name in self.model.iter().chain(&self.fallback_models) {
            if !chain.contains(name) {
                chain.push(name.clone());
            }
        }
        chain
    }
}

/// `dream.*`: mc-dream's models, budgets and schedules. User-only.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DreamConfig {
    /// `provider/model` asked first (default none: the model tasks do not run).
    pub model: Option<String>,
    /// Tried in order after retryable failures of the one before.
    pub fallback_models: Vec<String>,
    /// Whole-call timeout, milliseconds (1000..=3600000, default 300000).
    pub timeout_ms: u64,
    /// Retries of one model on 429/5xx/network errors (0..=5, default 2).
    pub retries: u32,
    /// max_tokens of one answer (512..=64000, default 4000).
    pub max_output_tokens: u32,
    /// Model tokens (prompt + answer) one task run may spend (default 30000).
    pub task_token_budget: u64,
    /// Model tokens one `tick` may spend over every project (default 120000).
    pub tick_token_budget: u64,
    /// A memory nothing rendered or matched for this many days is a candidate
    /// for archive-stale (7..=3650, default 90).
    pub stale_days: u64,
    pub schedule: DreamSchedule,
}

/// `embeddings.*`: the optional embedding provider of hybrid search. User-only.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EmbeddingsConfig {
    /// `local:<name>` (a model mc runs itself, the default) or
    /// `provider/model` of an OpenAI-compatible `/embeddings` endpoint;
    /// `None`: search is BM25 only.
    pub model: Option<String>,
    /// Vector length the model must answer (0: learned from its first answer).
    pub dimensions: u64,
    /// Texts per request (1..=512, default 64).
    pub batch_size: u64,
    /// Whole-request timeout of a backfill request, milliseconds.
    pub timeout_ms: u64,
    /// Whole-request timeout of a query's embedding (search falls back to BM25).
    pub query_timeout_ms: u64,
    /// Retries of one backfill batch on 429/5xx/network errors.
    pub retries: u32,
}

/// `gateway.*`: `mc-transform gateway`, the local server a harness (Claude
/// Code) uses as its provider's base URL. User-only: a project file may set
/// none of it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GatewayConfig {
    /// The provider every request is forwarded to (default
    /// `https://api.anthropic.com`).
    pub anthropic_upstream: String,
    /// Where Codex's Responses requests (the gateway's `/openai/…` paths)
    /// go (default `https://api.openai.com/v1`).
    pub openai_upstream: String,
    /// Where the gateway listens: a loopback address (default `127.0.0.1:4141`).
    pub listen: String,
}

/// `dashboard.*`: what `mc-doctor dashboard` prices tokens at, in US dollars
/// per million tokens, over every model; `-1` (the default) takes each
/// model's price from the dashboard's built-in table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DashboardConfig {
    pub price_input: f64,
    pub price_output: f64,
    pub price_cache_write: f64,
    pub price_cache_read: f64,
}

/// `dream.schedule.*`: a cron expression per task (5 fields, or `@daily`
/// and friends), `None` when the task is off.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DreamSchedule {
    pub consolidate: Option<String>,
    pub verify: Option<String>,
    pub classify: Option<String>,
    pub archive_stale: Option<String>,
    pub git_index: Option<String>,
    pub sync: Option<String>,
    pub embed: Option<String>,
}

impl DreamConfig {
    /// The models to try, in order: `model`, then `fallback_models` (duplicates dropped).
    pub fn chain(&self) -> Vec<String> {
        let mut chain: Vec<String> = Vec::new();
        for name in self.model.iter().chain(&self.fallback_models) {
            if !chain.contains(name) {
                chain.push(name.clone());
            }
        }
        chain
    }
}

impl Default for Config {
    /// The built-in defaults, taken from the key table.
    fn default() -> Config {
        // Placeholder values, every one overwritten from the table just below.
        let mut config = Config {
            transform: TransformConfig {
                execute_threshold_percentage: 0.0,
                cache_ttl: CacheTtl::Never,
                protected_tags: 0,
                clear_reasoning_age: 0,
                keep_reasoning_tokens: 0,
                tool_reclaim_min_tokens: 0,
                tool_reclaim: false,
                smart_drops: false,
                todo: false,
                recall_hints: false,
                relief_drop: false,
                relief_window_percentage: 0,
                temporal_awareness: false,
                history_budget_percentage: 0.0,
                memory_budget_tokens: 0,
                caveman: false,
                caveman_min_chars: 0,
                system_prompt_guidance: false,
                calls_keep_rows: 0,
                calls_keep_days: 0,
            },
            sqlite: SqliteConfig {
                busy_timeout_ms: 0,
                hook_busy_timeout_ms: 0,
            },
            historian: HistorianConfig {
                model: None,
                fallback_models: Vec::new(),
                harness_model: false,
                connect_timeout_ms: 0,
                timeout_ms: 0,
                retries: 0,
                retry_backoff_ms: 0,
                max_output_tokens: 0,
                chunk_tokens: 0,
                max_chunks: 0,
            },
            transcript: TranscriptConfig { max_bytes: 0 },
            dream: DreamConfig {
                model: None,
                fallback_models: Vec::new(),
                timeout_ms: 0,
                retries: 0,
                max_output_tokens: 0,
                task_token_budget: 0,
                tick_token_budget: 0,
                stale_days: 0,
                schedule: DreamSchedule {
                    consolidate: None,
                    verify: None,
                    classify: None,
                    archive_stale: None,
                    git_index: None,
                    sync: None,
                    embed: None,
                },
            },
            embeddings: EmbeddingsConfig {
                model: None,
                dimensions: 0,
                batch_size: 0,
                timeout_ms: 0,
                query_timeout_ms: 0,
                retries: 0,
            },
            gateway: GatewayConfig {
                anthropic_upstream: String::new(),
                openai_upstream: String::new(),
                listen: String::new(),
            },
            dashboard: DashboardConfig {
                price_input: 0.0,
                price_output: 0.0,
                price_cache_write: 0.0,
                price_cache_read: 0.0,
            },
            providers: BTreeMap::new(),
        };
        for key in KEYS {
            (key.set)(&mut config, key.default.clone());
        }
        config
    }
}

impl Default for TransformConfig {
    fn default() -> TransformConfig {
        Config::default().transform
    }
}

impl Default for SqliteConfig {
    fn default() -> SqliteConfig {
        Config::default().sqlite
    }
}

impl Default for TranscriptConfig {
    fn default() -> TranscriptConfig {
        Config::default().transcript
    }
}

impl Default for HistorianConfig {
    fn default() -> HistorianConfig {
        Config::default().historian
    }
}

impl Default for EmbeddingsConfig {
    fn default() -> EmbeddingsConfig {
        Config::default().embeddings
    }
}

impl Default for GatewayConfig {
    fn default() -> GatewayConfig {
        Config::default().gateway
    }
}

impl Default for DreamConfig {
    fn default() -> DreamConfig {
        Config::default().dream
    }
}

/// Reads and merges `layers` over the defaults.
///
/// Layers apply in tier order (a stable sort, so layers of one tier keep the
/// caller's order); callers normally pass them in that order already. A
/// missing file is skipped silently.
pub fn load(layers: &[Layer]) -> Loaded {
    let mut ordered: Vec<&Layer> = layers.iter().collect();
    ordered.sort_by_key(|layer| layer.tier);
    let mut merger = Merger::new();
    for layer in ordered {
        let name = layer.path.display().to_string();
        match read_layer_of(layer) {
            Ok(None) => {}
            Ok(Some(text)) => merger.apply_text(layer.tier, &name, &layer.path, &text),
            Err(problem) => merger.warn(&name, &format!("{problem}; ignoring this file")),
        }
    }
    merger.finish()
}

/// Like [`load`], from in-memory `(tier, name, text)` layers; `name` stands in
/// for the path in warnings and in `sources`.
pub fn from_str_layers(layers: &[(Tier, &str, &str)]) -> Loaded {
    let mut ordered: Vec<&(Tier, &str, &str)> = layers.iter().collect();
    ordered.sort_by_key(|(tier, _, _)| *tier);
    let mut merger = Merger::new();
    for &&(tier, name, text) in &ordered {
        merger.apply_text(tier, name, Path::new(name), text);
    }
    merger.finish()
}

/// The strict JSONC dialect: JSON plus comments and trailing commas. Every
/// JSONC mc reads or edits (its config, the harnesses' files the doctor
/// wires) is parsed with these options.
pub fn jsonc_options() -> jsonc_parser::ParseOptions {
    jsonc_parser::ParseOptions {
        allow_comments: true,
        allow_trailing_commas: true,
        allow_loose_object_property_names: false,
        allow_missing_commas: false,
        allow_single_quoted_strings: false,
        allow_hexadecimal_numbers: false,
        allow_unary_plus_numbers: false,
        allow_bare_decimal_point_numbers: false,
        allow_non_finite_numbers: false,
        allow_extended_string_escapes: false,
    }
}

/// The text of a layer's file; `Ok(None)` when it does not exist; `Err`
/// says why it cannot be used. The project layer, `<repo>/.mc/config.jsonc`,
/// is read only inside the repository: neither `.mc` nor the file may be a
/// symbolic link (`repo_fs`). The user's own files follow links as usual.
pub fn read_layer_of(layer: &Layer) -> Result<Option<String>, String> {
    match layer.tier {
        Tier::Project => read_project_layer(&layer.path),
        Tier::User | Tier::Override => read_layer(&layer.path),
    }
}

/// `path` read with no link followed below its grandparent (the folder
/// holding `.mc`).
fn read_project_layer(path: &Path) -> Result<Option<String>, String> {
    let parts: Vec<&std::ffi::OsStr> = path.iter().collect();
    let split = parts.len().saturating_sub(2).max(1).min(parts.len());
    let root: PathBuf = parts.iter().take(split).collect();
    let rel: PathBuf = parts.iter().skip(split).collect();
    let bytes = match crate::repo_fs::read(&root, &rel, MAX_CONFIG_BYTES) {
        Ok(None) | Err(crate::repo_fs::Refusal::NotDir(_)) => return Ok(None),
        Ok(Some(bytes)) => bytes,
        Err(crate::repo_fs::Refusal::TooLarge(..)) => {
            return Err(format!("is larger than {} KiB", MAX_CONFIG_BYTES / 1024));
        }
        Err(crate::repo_fs::Refusal::Io(_, e)) => return Err(format!("cannot read it: {e}")),
        Err(refusal) if refusal.path() == path => return Err(refusal.reason()),
        Err(refusal) => return Err(refusal.to_string()),
    };
    utf8(bytes).map(Some)
}

fn utf8(bytes: Vec<u8>) -> Result<String, String> {
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "is not valid UTF-8 (byte {})",
            e.utf8_error().valid_up_to() + 1
        )
    })
}

/// The file's text; `Ok(None)` when it does not exist; `Err` says why it
/// cannot be used.
fn read_layer(path: &Path) -> Result<Option<String>, String> {
    let missing = |e: &io::Error| {
        matches!(
            e.kind(),
            io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
        )
    };
    let meta = match fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if missing(&e) => return Ok(None),
        Err(e) => return Err(format!("cannot read it: {e}")),
    };
    // Refuse FIFOs, devices and directories before opening: a project could
    // point its config at one and hang or flood every tool.
    if !meta.is_file() {
        return Err("is not a regular file".into());
    }
    let too_big = || format!("is larger than {} KiB", MAX_CONFIG_BYTES / 1024);
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(too_big());
    }
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if missing(&e) => return Ok(None),
        Err(e) => return Err(format!("cannot read it: {e}")),
    };
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(too_big());
    }
    utf8(bytes).map(Some)
}

/// Merge state: the config so far and the diagnostics.
struct Merger {
    config: Config,
    warnings: Vec<String>,
    /// Per key of the table: the last layer that set it was refused.
    fell_back: Vec<bool>,
    /// `providers` entries (or `providers` itself) whose last setting was refused.
    providers_fell_back: BTreeMap<String, bool>,
    sources: Vec<PathBuf>,
}

impl Merger {
    fn new() -> Merger {
        Merger {
            config: Config::default(),
            warnings: Vec::new(),
            fell_back: vec![false; KEYS.len()],
            providers_fell_back: BTreeMap::new(),
            sources: Vec::new(),
        }
    }

    fn finish(self) -> Loaded {
        let fallbacks = KEYS
            .iter()
            .zip(&self.fell_back)
            .filter(|(_, fell)| **fell)
            .map(|(key, _)| key.path.to_string())
            .chain(
                self.providers_fell_back
                    .iter()
                    .filter(|(_, fell)| **fell)
                    .map(|(path, _)| path.clone()),
            )
            .collect();
        Loaded {
            config: self.config,
            warnings: self.warnings,
            fallbacks,
            sources: self.sources,
        }
    }

    fn warn(&mut self, name: &str, message: &str) {
        self.warnings.push(format!("config: {name}: {message}"));
    }

    fn apply_text(&mut self, tier: Tier, name: &str, path: &Path, text: &str) {
        // Some editors start UTF-8 files with a byte-order mark.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let options = jsonc_options();
        let root: Value = match jsonc_parser::parse_to_serde_value(text, &options) {
            Ok(value) => value,
            Err(e) => {
                self.warn(name, &format!("not valid JSONC: {e}; ignoring this file"));
                return;
            }
        };
        match root {
            Value::Object(map) => {
                self.sources.push(path.to_path_buf());
                self.apply_object(tier, name, "", &map);
            }
            // An empty or comments-only file reads as null: nothing to apply.
            Value::Null if matches!(jsonc_parser::parse_to_value(text, &options), Ok(None)) => {
                self.sources.push(path.to_path_buf());
            }
            other => self.warn(
                name,
                &format!(
                    "the top level is {}, not an object; ignoring this file",
                    crate::json::kind_name(&other)
                ),
            ),
        }
    }

    /// Applies the members of the object at dotted path `prefix`, in file order.
    fn apply_object(&mut self, tier: Tier, name: &str, prefix: &str, map: &Map<String, Value>) {
        for (member, value) in map {
            if prefix.is_empty() && member == "$schema" {
                continue;
            }
            if prefix.is_empty() && member == "providers" {
                self.apply_providers(tier, name, value);
                continue;
            }
            let path = if prefix.is_empty() {
                member.clone()
            } else {
                format!("{prefix}.{member}")
            };
            if member.contains('.') {
                // Dotted names are not expanded; say how to write it if it is known.
                let hint = match (keys::find_key(&path), keys::is_section(&path)) {
                    (None, false) => suggest(&path).map(|s| format!("; did you mean {s}?")),
                    _ => Some("; write it as nested objects, not as one dotted name".into()),
                };
                let message = format!(
                    "unknown key \"{}\"{}",
                    show_name(member),
                    hint.unwrap_or_default()
                );
                self.warn(name, &message);
            } else if let Some(index) = keys::find_key(&path) {
                self.apply_leaf(tier, name, index, value);
            } else if keys::is_section(&path) {
                match value {
                    Value::Object(inner) => self.apply_object(tier, name, &path, inner),
                    other => {
                        let message =
                            format!("{path} = {} is not an object; ignoring it", show(other));
                        self.warn(name, &message);
                    }
                }
            } else {
                let message = match suggest(&path) {
                    Some(s) => format!("unknown key {}; did you mean {s}?", show_name(&path)),
                    None => format!("unknown key {}", show_name(&path)),
                };
                self.warn(name, &message);
            }
        }
    }

    /// `providers`: each entry replaces the lower tiers' entry of that name
    /// whole; an invalid entry is ignored (the lower tiers' one stays). The
    /// project tier may not touch the map at all.
    fn apply_providers(&mut self, tier: Tier, name: &str, value: &Value) {
        if !tier.is_trusted() {
            self.warn(
                name,
                "providers may not be set by a project config (a cloned repository is not \
                 trusted); ignoring it",
            );
            self.providers_fell_back.insert("providers".into(), true);
            return;
        }
        let Value::Object(map) = value else {
            let message = format!("providers = {} is not an object; ignoring it", show(value));
            self.warn(name, &message);
            self.providers_fell_back.insert("providers".into(), true);
            return;
        };
        for (provider, entry) in map {
            let path = format!("providers.{}", show_name(provider));
            match providers::parse(provider, entry) {
                Ok((config, warnings)) => {
                    for warning in warnings {
                        self.warn(name, &format!("{path}: {warning}"));
                    }
                    self.config.providers.insert(provider.clone(), config);
                    self.providers_fell_back.insert(path, false);
                }
                Err(problem) => {
                    let kept = if self.config.providers.contains_key(provider) {
                        "keeping the lower layers' definition"
                    } else {
                        "ignoring it"
                    };
                    self.warn(name, &format!("{path} {problem}; {kept}"));
                    self.providers_fell_back.insert(path, true);
                }
            }
        }
    }

    fn apply_leaf(&mut self, tier: Tier, name: &str, index: usize, value: &Value) {
        // `index` comes from `keys::find_key`: a position in `KEYS`.
        let Some(key) = KEYS.get(index) else {
            return;
        };
        let current = (key.get)(&self.config);
        let refusal = match key.kind.check(value) {
            Err(problem) => Some(format!("{} = {} {problem}", key.path, show(value))),
            Ok(_) if !tier.is_trusted() && key.trust == Trust::UserOnly => Some(format!(
                "{} may not be set by a project config (a cloned repository is not trusted)",
                key.path
            )),
            Ok(new)
                if !tier.is_trusted()
                    && key.trust == Trust::RaiseOnly
                    && new.is_lower_than(&current) =>
            {
                Some(format!(
                    "{} = {new} would lower {current}, and a project config may only raise it",
                    key.path
                ))
            }
            Ok(new) => {
                (key.set)(&mut self.config, new);
                None
            }
        };
        if let Some(fell_back) = self.fell_back.get_mut(index) {
            *fell_back = refusal.is_some();
        }
        if let Some(refusal) = refusal {
            self.warn(name, &format!("{refusal}; using {current}"));
        }
    }
}

/// A JSON value for a warning: compact, and cut short if long.
fn show(value: &Value) -> String {
    const MAX_CHARS: usize = 40;
    let text = value.to_string();
    if text.chars().count() <= MAX_CHARS {
        text
    } else {
        let cut: String = text.chars().take(MAX_CHARS).collect();
        format!("{cut}…")
    }
}

/// A key name from a file for a warning: control characters escaped (a
/// hostile file must not drive the terminal), and cut short if long.
fn show_name(name: &str) -> String {
    const MAX_CHARS: usize = 60;
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if i == MAX_CHARS {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// The known key or section an unknown dotted path was most likely meant to be.
///
/// First the whole path is compared with every known path as deep (typos such as
/// `transform.protected_tag`); failing that, its last segment is compared with
/// the last segments of known paths (a key put in the wrong object, or at the
/// top level). Ties go to the earlier entry of the table.
fn suggest(unknown: &str) -> Option<&'static str> {
    let known = keys::SECTIONS
        .iter()
        .map(|s| s.path)
        .chain(["providers"])
        .chain(KEYS.iter().map(|k| k.path));
    let depth = |path: &str| path.matches('.').count();
    let whole_budget = typo_budget(unknown);
    let leaf = keys::last(unknown);
    let leaf_budget = typo_budget(leaf);
    let mut by_whole: Option<(usize, &'static str)> = None;
    let mut by_leaf: Option<(usize, &'static str)> = None;
    for path in known {
        if depth(path) == depth(unknown) {
            let d = edit_distance(unknown, path);
            if d <= whole_budget && by_whole.is_none_or(|(best, _)| d < best) {
                by_whole = Some((d, path));
            }
        }
        let d = edit_distance(leaf, keys::last(path));
        if d <= leaf_budget && by_leaf.is_none_or(|(best, _)| d < best) {
            by_leaf = Some((d, path));
        }
    }
    by_whole.or(by_leaf).map(|(_, path)| path)
}

/// How many edits still count as a typo of a name this long.
fn typo_budget(name: &str) -> usize {
    match name.chars().count() {
        0..=3 => 1,
        4..=8 => 2,
        _ => 3,
    }
}

/// Optimal-string-alignment distance, case-insensitive: insertions, deletions,
/// substitutions and swaps of two neighbouring characters each cost one.
#[allow(
    clippy::indexing_slicing,
    reason = "the textbook recurrence: i runs over 1..=a.len() and j over 1..=b.len(), \
              the rows hold b.len() + 1 entries, and every index is guarded by those bounds"
)]
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().flat_map(char::to_lowercase).collect();
    let b: Vec<char> = b.chars().flat_map(char::to_lowercase).collect();
    // rows[i][j] = distance between a[..i] and b[..j]; three rolling rows.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur: Vec<usize> = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(before[j - 2] + 1);
            }
            cur[j] = d;
        }
        std::mem::swap(&mut before, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

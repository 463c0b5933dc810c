//! The LLM client: providers configured by the user, called over HTTP or as a command.
//!
//! Four provider kinds (`config::ProviderKind`): Anthropic's Messages API,
//! any OpenAI-compatible chat-completions endpoint, a `command` that reads
//! the prompt on stdin and prints the answer, and a running OpenCode server
//! (`opencode`: a hidden child session of the folded session, on a model and
//! login the user already set up there). Models are named
//! `provider/model` ([`ModelRef`]); a [`Client`] holds a chain of them and
//! answers one [`Prompt`] with the first model that succeeds:
//!
//! - every call has a connect timeout and a whole-call timeout;
//! - 408, 429, 5xx, network errors and a failing command are retried on the
//!   same model with exponential backoff and jitter (a `Retry-After` header
//!   asking for longer wins, up to a minute), then the next model is tried;
//! - a timeout, or a model that cannot be called here (its API key variable
//!   is unset, its program is missing), moves straight to the next model;
//! - any other 4xx, or an answer that is not the provider's format, stops the
//!   chain: the request is wrong, and another model would not fix it;
//! - the provider's error body is part of the error (secrets redacted);
//! - API keys come in as values: the binary reads the environment variable
//!   the user config names and passes the key. This module never reads the
//!   environment (proxies too are passed in, [`ProxyEnv`]);
//! - the waits between retries go through a [`Sleeper`] the caller passes
//!   (the binary's is `std::thread::sleep`), so a test can check the backoff
//!   schedule without waiting for it.

// The I/O rule, enforced: no printing here (and `shared/clippy.toml` refuses the
// environment, stdin/stdout and ureq's environment-reading defaults).
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]
// Nothing reachable from outside input may panic: no expect, no indexing or
// slicing that can go out of range; the few proven invariants carry an
// `allow` with the reason on the smallest item.
#![cfg_attr(
    not(test),
    deny(clippy::expect_used, clippy::indexing_slicing, clippy::string_slice)
)]

mod anthropic;
mod command;
pub(crate) mod http;
mod openai;
pub mod opencode;
pub mod opencode_api;

pub use command::HISTORIAN_CHILD_ENV;
pub use opencode::{ModelPrice, ServerModels, opencode_models};

use std::collections::BTreeMap;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use mc_base::config::{HistorianConfig, ProviderConfig, ProviderKind};

/// `provider/model`, split at the first slash (model ids may contain slashes).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModelRef {
    pub provider: String,
    pub model: String,
}

impl ModelRef {
    pub fn parse(name: &str) -> Option<ModelRef> {
        let (provider, model) = name.split_once('/')?;
        (!provider.is_empty() && !model.is_empty()).then(|| ModelRef {
            provider: provider.to_string(),
            model: model.to_string(),
        })
    }
}

impl fmt::Display for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.provider, self.model)
    }
}

/// One request: a system prompt, one user message, an output limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    pub system: String,
    pub user: String,
    pub max_tokens: u32,
}

/// A model's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub text: String,
    /// The model that answered.
    pub model: ModelRef,
    /// Prompt and answer tokens as the provider reported them (estimated for
    /// a command provider, or a provider that reports none).
    pub tokens_in: u64,
    pub tokens_out: u64,
    /// The provider stopped at the output limit: the answer is cut short.
    pub truncated: bool,
}

/// How a call failed, which decides what happens next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallFailure {
    /// The chain or a provider is misconfigured (unknown provider, bad name).
    Config,
    /// This model cannot be called here: its API key variable is unset, its
    /// program is missing. The next model is tried.
    Unavailable,
    /// The provider answered with this HTTP status.
    Status(u16),
    /// No answer: connection refused or reset, DNS, TLS.
    Transport,
    /// The call took longer than the timeout.
    Timeout,
    /// A command provider failed (non-zero exit).
    Command,
    /// The harness ran the call and reported a failure of its own (OpenCode:
    /// a provider login missing, the prompt over the model's window, the
    /// child session aborted). Not retried; the next model is tried.
    Harness,
    /// An answer that is not the provider's format.
    Protocol,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LlmError {
    /// The model the failure belongs to (`None` for chain-level problems).
    pub model: Option<ModelRef>,
    pub kind: CallFailure,
    pub message: String,
    /// What the provider asked us to wait before retrying (Retry-After).
    pub retry_after: Option<Duration>,
    /// What the user can do about it, one line each (not part of the message).
    pub hints: Vec<String>,
}

impl LlmError {
    pub fn new(model: Option<&ModelRef>, kind: CallFailure, message: impl Into<String>) -> Self {
        LlmError {
            model: model.cloned(),
            kind,
            message: message.into(),
            retry_after: None,
            hints: Vec::new(),
        }
    }

    /// This error, with `hint` after its other hints.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hints.push(hint.into());
        self
    }

    /// The failure as mc's binaries classify it: a chain the config gets
    /// wrong is the setup's to fix; anything else is a model that could not
    /// answer.
    pub fn error_kind(&self) -> mc_base::error::ErrorKind {
        match self.kind {
            CallFailure::Config => mc_base::error::ErrorKind::Config,
            _ => mc_base::error::ErrorKind::Unavailable,
        }
    }

    /// Worth retrying on the same model after a pause.
    pub fn is_retryable(&self) -> bool {
        match self.kind {
            CallFailure::Status(code) => code == 408 || code == 429 || code >= 500,
            CallFailure::Transport | CallFailure::Command => true,
            _ => false,
        }
    }

    /// Worth trying the next model of the chain.
    fn falls_back(&self) -> bool {
        self.is_retryable()
            || matches!(
                self.kind,
                CallFailure::Timeout | CallFailure::Unavailable | CallFailure::Harness
            )
    }
}

impl fmt::Display for LlmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.model {
            Some(model) => write!(f, "{model}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for LlmError {}

/// Proxy settings as the environment gave them (`HTTPS_PROXY`, `HTTP_PROXY`,
/// `ALL_PROXY`, `NO_PROXY`, either case). Loopback hosts never use a proxy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyEnv {
    pub https: Option<String>,
    pub http: Option<String>,
    pub all: Option<String>,
    pub no_proxy: Option<String>,
}

impl ProxyEnv {
    /// Read through `lookup` (normally `std::env::var`), upper case first.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> ProxyEnv {
        let var = |name: &str| {
            lookup(name)
                .or_else(|| lookup(&name.to_ascii_lowercase()))
                .filter(|v| !v.trim().is_empty())
        };
        ProxyEnv {
            https: var("HTTPS_PROXY"),
            http: var("HTTP_PROXY"),
            all: var("ALL_PROXY"),
            no_proxy: var("NO_PROXY"),
        }
    }
}

/// How the client waits before a retry: the binaries pass
/// `Sleeper::new(std::thread::sleep)`; a test passes one that records the
/// delays instead of sleeping them.
#[derive(Clone)]
pub struct Sleeper(Arc<dyn Fn(Duration) + Send + Sync>);

impl Sleeper {
    pub fn new(sleep: impl Fn(Duration) + Send + Sync + 'static) -> Sleeper {
        Sleeper(Arc::new(sleep))
    }

    pub fn sleep(&self, delay: Duration) {
        (self.0)(delay);
    }
}

impl fmt::Debug for Sleeper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Sleeper")
    }
}

/// Timeouts, retries, proxies and the retry wait for every call.
#[derive(Debug, Clone)]
pub struct Options {
    pub connect_timeout: Duration,
    /// The whole call: connect, send, wait, read (or the command's whole run).
    pub timeout: Duration,
    /// Retries of one model before the next is tried.
    pub retries: u32,
    /// First retry delay, doubled per retry, plus up to 50 % jitter.
    pub backoff: Duration,
    pub proxy: ProxyEnv,
    /// Waits out each retry delay.
    pub sleep: Sleeper,
}

impl Options {
    pub fn from_config(config: &HistorianConfig, proxy: ProxyEnv, sleep: Sleeper) -> Options {
        Options {
            connect_timeout: Duration::from_millis(config.connect_timeout_ms),
            timeout: Duration::from_millis(config.timeout_ms),
            retries: config.retries,
            backoff: Duration::from_millis(config.retry_backoff_ms),
            proxy,
            sleep,
        }
    }

    /// The longest one [`Model::complete`] over `models` models may take,
    /// waits included: what a lease must outlast.
    pub fn worst_case(&self, models: usize) -> Duration {
        let attempts = self.retries + 1;
        let waits: Duration = (0..self.retries)
            .map(|n| backoff_delay(self.backoff, n, 0.5, None))
            .sum();
        (self.timeout * attempts + waits) * models.max(1) as u32
    }
}

/// A progress or warning note from a call.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// About to call `model` (attempt 1 is the first try).
    Calling { model: ModelRef, attempt: u32 },
    /// `error` happened; the same model is tried again after `delay`.
    Retrying {
        model: ModelRef,
        attempt: u32,
        delay: Duration,
        error: LlmError,
    },
    /// `error` ended `from`'s turn; `to` is tried next.
    FallingBack {
        from: ModelRef,
        to: ModelRef,
        error: LlmError,
    },
    /// Something worth a warning that did not fail the call (an OpenCode
    /// child session that could not be deleted).
    Note { model: ModelRef, message: String },
}

/// The session a run folds, for a provider that runs inside its harness
/// (`opencode`): where the server is, and whose child the call's session is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HarnessSession {
    /// The OpenCode server the session lives on (an `opencode` provider
    /// without a `base_url` calls this one).
    pub opencode_url: Option<String>,
    /// The project folder the server serves the session from (`?directory=`).
    pub directory: Option<String>,
    /// The folded session's id: the parent of the call's hidden child session.
    pub session_id: Option<String>,
}

/// Something that answers prompts. [`Client`] is the real one; tests may
/// script their own.
pub trait Model {
    fn complete(
        &self,
        prompt: &Prompt,
        events: &mut dyn FnMut(Event),
    ) -> Result<Completion, LlmError>;
}

/// Everything one call needs, resolved from the config.
#[derive(Debug, Clone)]
struct Target {
    model: ModelRef,
    provider: ProviderConfig,
    /// The key, when the provider names an `api_key_env` and it was set.
    key: Option<String>,
}

/// Calls a chain of models.
pub struct Client {
    targets: Vec<Target>,
    options: Options,
    http: http::Http,
    harness: HarnessSession,
}

impl Client {
    /// A client for `chain` (`provider/model` names, first = primary).
    /// `keys` maps provider names to the API keys read from their
    /// `api_key_env`; a provider whose variable was unset has no entry, and
    /// calling it fails as unavailable (the next model is tried).
    pub fn new(
        providers: &BTreeMap<String, ProviderConfig>,
        chain: &[String],
        keys: &BTreeMap<String, String>,
        options: Options,
    ) -> Result<Client, LlmError> {
        if chain.is_empty() {
            return Err(
                LlmError::new(None, CallFailure::Config, "no historian model configured")
                    .with_hint(
                        "set historian.model to \"provider/model\" in the user config \
                 ($XDG_CONFIG_HOME/mc/config.jsonc), with that provider under \"providers\"",
                    ),
            );
        }
        let mut targets = Vec::with_capacity(chain.len());
        for name in chain {
            let model = ModelRef::parse(name).ok_or_else(|| {
                LlmError::new(
                    None,
                    CallFailure::Config,
                    format!("model {name:?} is not of the form \"provider/model\""),
                )
            })?;
            let provider = providers.get(&model.provider).ok_or_else(|| {
                let known: Vec<&str> = providers.keys().map(String::as_str).collect();
                LlmError::new(
                    Some(&model),
                    CallFailure::Config,
                    format!(
                        "no provider {:?} in the user config's \"providers\" (known: {})",
                        model.provider,
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    ),
                )
                .with_hint(format!(
                    "add {:?} under \"providers\" in the user config, or name a provider it has",
                    model.provider
                ))
            })?;
            targets.push(Target {
                key: keys.get(&model.provider).cloned(),
                model,
                provider: provider.clone(),
            });
        }
        Ok(Client {
            http: http::Http::new(&options),
            targets,
            options,
            harness: HarnessSession::default(),
        })
    }

    /// The session the calls fold, for an `opencode` provider.
    pub fn with_harness(mut self, harness: HarnessSession) -> Client {
        self.harness = harness;
        self
    }

    pub fn chain(&self) -> Vec<ModelRef> {
        self.targets.iter().map(|t| t.model.clone()).collect()
    }

    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The exact request the primary model would get, API keys replaced by
    /// the name of their variable (`"<$ANTHROPIC_API_KEY>"`).
    pub fn describe(&self, prompt: &Prompt) -> Value {
        // `new` refuses an empty chain, so there is a primary model.
        self.targets.first().map_or(Value::Null, |target| {
            describe(target, prompt, &self.harness)
        })
    }

    /// One model, with its retries.
    fn complete_one(
        &self,
        target: &Target,
        prompt: &Prompt,
        events: &mut dyn FnMut(Event),
    ) -> Result<Completion, LlmError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            events(Event::Calling {
                model: target.model.clone(),
                attempt,
            });
            match self.call(target, prompt, events) {
                Ok(completion) => return Ok(completion),
                Err(error) if error.is_retryable() && attempt <= self.options.retries => {
                    let delay = backoff_delay(
                        self.options.backoff,
                        attempt - 1,
                        jitter(),
                        error.retry_after,
                    );
                    events(Event::Retrying {
                        model: target.model.clone(),
                        attempt,
                        delay,
                        error,
                    });
                    self.options.sleep.sleep(delay);
                }
                Err(error) => return Err(error),
            }
        }
    }

    fn call(
        &self,
        target: &Target,
        prompt: &Prompt,
        events: &mut dyn FnMut(Event),
    ) -> Result<Completion, LlmError> {
        let model = &target.model;
        if let Some(var) = &target.provider.api_key_env
            && target.key.is_none()
            && matches!(
                target.provider.kind,
                ProviderKind::Anthropic | ProviderKind::Openai
            )
        {
            return Err(LlmError::new(
                Some(model),
                CallFailure::Unavailable,
                format!(
                    "environment variable {var} is not set (providers.{}.api_key_env names it)",
                    model.provider
                ),
            )
            .with_hint(format!(
                "set {var} where mc-historian runs, or point providers.{}.api_key_env at the \
                 variable that holds the key",
                model.provider
            )));
        }
        match target.provider.kind {
            ProviderKind::Anthropic => anthropic::call(&self.http, target, prompt),
            ProviderKind::Openai => openai::call(&self.http, target, prompt),
            ProviderKind::Command => command::call(target, prompt, self.options.timeout),
            ProviderKind::Opencode => opencode::call(
                &self.http,
                &self.options,
                target,
                prompt,
                &self.harness,
                events,
            ),
        }
    }
}

impl Model for Client {
    fn complete(
        &self,
        prompt: &Prompt,
        events: &mut dyn FnMut(Event),
    ) -> Result<Completion, LlmError> {
        let mut failures: Vec<LlmError> = Vec::new();
        for (index, target) in self.targets.iter().enumerate() {
            match self.complete_one(target, prompt, events) {
                Ok(completion) => return Ok(completion),
                Err(error) => {
                    let next = self.targets.get(index + 1);
                    match next {
                        Some(next) if error.falls_back() => {
                            events(Event::FallingBack {
                                from: target.model.clone(),
                                to: next.model.clone(),
                                error: error.clone(),
                            });
                            failures.push(error);
                        }
                        _ => {
                            failures.push(error);
                            break;
                        }
                    }
                }
            }
        }
        // `new` refuses an empty chain, so at least one model was tried.
        let Some(last) = failures.pop() else {
            return Err(LlmError::new(
                None,
                CallFailure::Config,
                "no historian model to call",
            ));
        };
        if failures.is_empty() {
            return Err(last);
        }
        // Every model failed: say why for each, newest last.
        let earlier: Vec<String> = failures.iter().map(ToString::to_string).collect();
        Err(LlmError {
            message: format!("{} (after: {})", last.message, earlier.join("; ")),
            ..last
        })
    }
}

fn describe(target: &Target, prompt: &Prompt, harness: &HarnessSession) -> Value {
    let key_ref = target
        .provider
        .api_key_env
        .as_ref()
        .map(|var| format!("<${var}>"));
    match target.provider.kind {
        ProviderKind::Anthropic => {
            anthropic::request(target, prompt, key_ref.as_deref()).describe("anthropic")
        }
        ProviderKind::Openai => {
            openai::request(target, prompt, key_ref.as_deref(), false).describe("openai")
        }
        ProviderKind::Command => command::describe(target, prompt),
        ProviderKind::Opencode => opencode::describe(target, prompt, harness),
    }
}

/// `base × 2^n × (1 + jitter)`, or what the provider asked for if longer
/// (capped at a minute).
fn backoff_delay(base: Duration, n: u32, jitter: f64, retry_after: Option<Duration>) -> Duration {
    let exponential = base.saturating_mul(1u32 << n.min(16));
    let jittered = exponential.mul_f64(1.0 + jitter.clamp(0.0, 0.5));
    match retry_after {
        Some(asked) => jittered.max(asked.min(Duration::from_secs(60))),
        None => jittered,
    }
}

/// A random fraction in [0, 0.5): each `RandomState` is seeded afresh.
fn jitter() -> f64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u8(0);
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64 * 0.5
}

/// `text`, cut to `max` characters with a note of what was left out.
fn excerpt(text: &str, max: usize) -> String {
    let text = text.trim();
    match text
        .char_indices()
        .nth(max)
        .and_then(|(cut, _)| text.split_at_checked(cut))
    {
        Some((kept, rest)) => format!("{kept}… [{} more bytes]", rest.len()),
        None => text.to_string(),
    }
}

/// `text` with every occurrence of a secret replaced.
fn redact(text: &str, secret: Option<&str>) -> String {
    match secret.filter(|s| s.len() >= 4) {
        Some(secret) => text.replace(secret, "[redacted]"),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_refs_split_at_the_first_slash() {
        let m = ModelRef::parse("router/meta/llama-3:8b").unwrap();
        assert_eq!(m.provider, "router");
        assert_eq!(m.model, "meta/llama-3:8b");
        assert_eq!(m.to_string(), "router/meta/llama-3:8b");
        assert_eq!(ModelRef::parse("nope"), None);
        assert_eq!(ModelRef::parse("/x"), None);
        assert_eq!(ModelRef::parse("x/"), None);
    }

    #[test]
    fn backoff_doubles_with_bounded_jitter_and_honours_retry_after() {
        let base = Duration::from_millis(100);
        assert_eq!(
            backoff_delay(base, 0, 0.0, None),
            Duration::from_millis(100)
        );
        assert_eq!(
            backoff_delay(base, 2, 0.0, None),
            Duration::from_millis(400)
        );
        assert_eq!(
            backoff_delay(base, 1, 0.5, None),
            Duration::from_millis(300)
        );
        assert_eq!(
            backoff_delay(base, 1, 9.0, None),
            Duration::from_millis(300)
        );
        assert_eq!(
            backoff_delay(base, 0, 0.0, Some(Duration::from_secs(3))),
            Duration::from_secs(3)
        );
        assert_eq!(
            backoff_delay(base, 0, 0.0, Some(Duration::from_secs(3600))),
            Duration::from_secs(60),
            "a provider cannot park us for an hour"
        );
        for _ in 0..100 {
            let j = jitter();
            assert!((0.0..0.5).contains(&j), "{j}");
        }
    }

    #[test]
    fn retry_and_fallback_classes() {
        let e = |kind| LlmError::new(None, kind, "x");
        for code in [408, 429, 500, 502, 503, 529] {
            assert!(e(CallFailure::Status(code)).is_retryable(), "{code}");
            assert!(e(CallFailure::Status(code)).falls_back(), "{code}");
        }
        for code in [400, 401, 403, 404, 422] {
            assert!(!e(CallFailure::Status(code)).is_retryable(), "{code}");
            assert!(!e(CallFailure::Status(code)).falls_back(), "{code}");
        }
        assert!(e(CallFailure::Transport).is_retryable());
        assert!(!e(CallFailure::Timeout).is_retryable());
        assert!(e(CallFailure::Timeout).falls_back());
        assert!(e(CallFailure::Unavailable).falls_back());
        assert!(!e(CallFailure::Protocol).falls_back());
        assert!(!e(CallFailure::Config).falls_back());
    }

    #[test]
    fn chain_resolution_errors_name_the_problem() {
        let providers = BTreeMap::from([(
            "local".to_string(),
            ProviderConfig {
                kind: ProviderKind::Openai,
                base_url: Some("http://127.0.0.1:1/v1".into()),
                api_key_env: None,
                command: None,
            },
        )]);
        let options = Options::from_config(
            &HistorianConfig::default(),
            ProxyEnv::default(),
            Sleeper::new(|_| {}),
        );
        let err = Client::new(&providers, &[], &BTreeMap::new(), options.clone())
            .err()
            .unwrap();
        assert_eq!(err.message, "no historian model configured");
        assert_eq!(err.error_kind(), mc_base::error::ErrorKind::Config);
        assert!(
            err.hints[0].starts_with("set historian.model"),
            "{:?}",
            err.hints
        );
        let err = Client::new(&providers, &["cloud/x".into()], &BTreeMap::new(), options)
            .err()
            .unwrap();
        assert_eq!(err.kind, CallFailure::Config);
        assert!(
            err.to_string().contains(
                "no provider \"cloud\" in the user config's \"providers\" (known: local)"
            ),
            "{err}"
        );
    }

    #[test]
    fn excerpts_and_redaction() {
        assert_eq!(excerpt("  short  ", 10), "short");
        assert_eq!(excerpt("abcdef", 3), "abc… [3 more bytes]");
        assert_eq!(
            redact("key sk-1234 here", Some("sk-1234")),
            "key [redacted] here"
        );
        assert_eq!(redact("abc", Some("")), "abc");
    }
}

//! Which model a historian run uses, and why.
//!
//! Configured models always win (`historian.model`, `fallback_models`).
//! Without one, and unless `historian.harness_model` is off, the run uses
//! the model the session's harness already uses, through the user's own
//! login there, so the historian works without a key in mc's config:
//!
//! - an OpenCode session: the OpenCode server the run was given (the
//!   plugin passes its own) runs the fold in a hidden child session, on the
//!   session's model, or on OpenCode's `small_model` when it costs no more
//!   ([`ModelChoice::ask_opencode`]; never a dearer model);
//! - a Claude Code, Codex or Pi session: `claude -p`, `codex exec` or
//!   `pi -p` on the session's model, each only when the binary found that
//!   program on `PATH` (it passes the paths in), each bound by
//!   `historian.timeout_ms` like any command provider.
//!
//! The choice is pure over what it is given: the binary reads `PATH` and
//! `OPENCODE_URL`; only [`ModelChoice::ask_opencode`] talks to a server.

use std::collections::BTreeMap;
use std::path::PathBuf;

use rusqlite::Connection;
use serde::Serialize;
use serde_json::Value;

use mc_base::codec::Message;
use mc_base::codec::opencode::Role;
use mc_base::config::{HistorianConfig, ProviderConfig, ProviderKind};
use mc_base::domain::envelope::ModelInfo;
use mc_base::domain::sessions;
use mc_base::error::Result;
use mc_llm::{self as llm, LlmError};

use super::{CLAUDE_CODE, Input};

/// Where a run's model comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelSource {
    /// `historian.model` / `fallback_models` in the user config.
    Configured,
    /// The model the session's harness already uses.
    HarnessDefault,
    /// No model: a run refuses to start.
    None,
}

/// The programs a harness default may run, by harness.
pub const PROGRAMS: [(&str, &str); 3] = [(CLAUDE_CODE, "claude"), ("codex", "codex"), ("pi", "pi")];

/// What the binary found in its environment, as values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HarnessEnv {
    /// The OpenCode server the session lives on (`--opencode-url`, else
    /// `OPENCODE_URL`).
    pub opencode_url: Option<String>,
    /// Runs of OpenCode sessions are started by mc's plugin, which passes
    /// its server (what `mc-transform status` assumes, having none at hand).
    pub opencode_plugin: bool,
    /// The programs of [`PROGRAMS`] found on `PATH`, by name, as paths.
    pub programs: BTreeMap<String, PathBuf>,
}

/// The model chain of a run, the providers it names, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelChoice {
    pub source: ModelSource,
    pub reason: String,
    /// `provider/model` names, first = primary; empty when `source` is none.
    pub chain: Vec<String>,
    /// The user config's providers, plus the harness default's own.
    pub providers: BTreeMap<String, ProviderConfig>,
}

/// How reports show a choice: `model`, `model_source`, `model_reason`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelReport {
    pub model: Option<String>,
    pub model_source: ModelSource,
    pub model_reason: String,
}

impl ModelChoice {
    pub fn report(&self) -> ModelReport {
        ModelReport {
            model: self.chain.first().cloned(),
            model_source: self.source,
            model_reason: self.reason.clone(),
        }
    }

    /// The error a run without a model stops with (a usage error): why
    /// there is none, and what to write.
    pub fn missing(&self) -> LlmError {
        LlmError::new(None, llm::CallFailure::Config, self.reason.clone()).with_hint(
            "set historian.model to \"provider/model\" in the user config \
             ($XDG_CONFIG_HOME/mc/config.jsonc), with that provider under \"providers\"",
        )
    }

    /// The OpenCode default asks its server which model to use: the
    /// session's, or OpenCode's `small_model` when it costs no more. A server
    /// that does not answer leaves the session's model (the run then fails
    /// on the same server, with its reason).
    pub fn ask_opencode(&mut self, directory: Option<&str>, options: &llm::Options) {
        if self.source != ModelSource::HarnessDefault {
            return;
        }
        let Some(name) = self.chain.first().cloned() else {
            return;
        };
        let Some(provider) = self
            .providers
            .get(OPENCODE)
            .filter(|p| p.kind == ProviderKind::Opencode)
        else {
            return;
        };
        let Some(base) = provider.base_url.clone() else {
            return;
        };
        let session_model = name
            .strip_prefix("opencode/")
            .filter(|m| m.contains('/'))
            .map(str::to_string);
        match llm::opencode_models(&base, directory, options) {
            Ok(server) => {
                let (model, why) = server.pick(session_model.as_deref());
                self.chain = vec![format!(
                    "{OPENCODE}/{}",
                    model.as_deref().unwrap_or(SERVER_DEFAULT)
                )];
                self.reason = opencode_reason(&base, &why);
            }
            Err(error) => {
                self.reason = format!(
                    "{} (OpenCode's config could not be read: {})",
                    self.reason, error.message
                );
            }
        }
    }
}

/// The provider name of the OpenCode default.
const OPENCODE: &str = "opencode";
/// The model part when the server is left to pick (no session model known).
const SERVER_DEFAULT: &str = "default";
/// The model part of a command default when the session's model is unknown:
/// the program runs without a model flag (its own default).
const PROGRAM_DEFAULT: &str = "default";

fn opencode_reason(base: &str, model: &str) -> String {
    format!(
        "no historian.model configured: the OpenCode server at {base} folds in a hidden child \
         session with its own login, on {model}"
    )
}

/// The model chain a run of this session uses, and why.
pub fn choose(
    config: &HistorianConfig,
    providers: &BTreeMap<String, ProviderConfig>,
    harness: &str,
    session_model: &ModelInfo,
    env: &HarnessEnv,
) -> ModelChoice {
    let chain = config.chain();
    let mut choice = ModelChoice {
        source: ModelSource::None,
        reason: String::new(),
        chain: Vec::new(),
        providers: providers.clone(),
    };
    if !chain.is_empty() {
        choice.reason = if config.model.is_some() {
            "historian.model in the user config".into()
        } else {
            "historian.fallback_models in the user config".into()
        };
        choice.source = ModelSource::Configured;
        choice.chain = chain;
        return choice;
    }
    if !config.harness_model {
        choice.reason = "no historian.model configured, and historian.harness_model is false \
                         (no harness default)"
            .into();
        return choice;
    }
    if harness == "opencode" {
        let model = match (&session_model.provider, &session_model.id) {
            (Some(p), Some(m)) => format!("{p}/{m}"),
            _ => SERVER_DEFAULT.to_string(),
        };
        let whose = if model == SERVER_DEFAULT {
            "the model OpenCode picks".to_string()
        } else {
            format!("the session's model {model}")
        };
        match &env.opencode_url {
            Some(url) => {
                choice.providers.insert(
                    OPENCODE.into(),
                    ProviderConfig {
                        kind: ProviderKind::Opencode,
                        base_url: Some(url.trim_end_matches('/').to_string()),
                        api_key_env: None,
                        command: None,
                    },
                );
                choice.chain = vec![format!("{OPENCODE}/{model}")];
                choice.source = ModelSource::HarnessDefault;
                choice.reason = opencode_reason(url.trim_end_matches('/'), &whose);
            }
            None if env.opencode_plugin => {
                choice.chain = vec![format!("{OPENCODE}/{model}")];
                choice.source = ModelSource::HarnessDefault;
                choice.reason = format!(
                    "no historian.model configured: when mc's plugin starts a run, the OpenCode \
                     server it runs in folds in a hidden child session with its own login, on \
                     {whose} (or OpenCode's small_model when it costs no more)"
                );
            }
            None => {
                choice.reason = "no historian.model configured, and no OpenCode server to fold \
                                 through (mc's plugin passes --opencode-url; else set \
                                 OPENCODE_URL)"
                    .into();
            }
        }
        return choice;
    }
    let Some((_, program)) = PROGRAMS.iter().find(|(h, _)| *h == harness) else {
        choice.reason = format!(
            "no historian.model configured, and the {harness:?} harness has no default model \
             mc can use"
        );
        return choice;
    };
    let Some(path) = env.programs.get(*program) else {
        choice.reason = format!(
            "no historian.model configured, and {program} is not on PATH (the {harness} \
             session's own model would be asked through it)"
        );
        return choice;
    };
    let (argv, model) = program_argv(program, path, session_model);
    choice.providers.insert(
        (*program).to_string(),
        ProviderConfig {
            kind: ProviderKind::Command,
            base_url: None,
            api_key_env: None,
            command: Some(argv.clone()),
        },
    );
    choice.chain = vec![format!(
        "{program}/{}",
        model.as_deref().unwrap_or(PROGRAM_DEFAULT)
    )];
    choice.source = ModelSource::HarnessDefault;
    choice.reason = format!(
        "no historian.model configured: {} on {}, with its own login",
        shown(&argv),
        match &model {
            Some(m) => format!("the session's model {m}"),
            None => format!("{program}'s default model (the session's is unknown)"),
        }
    );
    choice
}

/// The command line of a program default, and the model it is given (the
/// session's; `None`: the program's own default). Tools are off: the
/// historian only reads its prompt.
fn program_argv(
    program: &str,
    path: &std::path::Path,
    session: &ModelInfo,
) -> (Vec<String>, Option<String>) {
    let exe = path.display().to_string();
    let id = session.id.clone().filter(|m| !m.is_empty());
    match program {
        "claude" => {
            let mut argv = vec![exe, "-p".to_string()];
            if let Some(id) = &id {
                argv.extend(["--model".to_string(), id.clone()]);
            }
            argv.extend(["--tools".to_string(), String::new()]);
            (argv, id)
        }
        "codex" => {
            let mut argv = vec![
                exe,
                "exec".to_string(),
                "--skip-git-repo-check".to_string(),
                "--sandbox".to_string(),
                "read-only".to_string(),
            ];
            if let Some(id) = &id {
                argv.extend(["--model".to_string(), id.clone()]);
            }
            argv.push("-".to_string());
            (argv, id)
        }
        _ => {
            // Pi takes provider/id. Checked against pi 0.73.1: without
            // --no-extensions it would load the user's extensions (mc's own
            // among them: a pass and a historian inside the historian), and
            // without the rest it would put skills, prompt templates and the
            // project's AGENTS.md into the prompt; no session file is written.
            let model = match (&session.provider, &id) {
                (Some(p), Some(m)) if !p.is_empty() => Some(format!("{p}/{m}")),
                (_, m) => m.clone(),
            };
            let mut argv = vec![exe, "-p".to_string()];
            argv.extend(
                [
                    "--no-session",
                    "--no-tools",
                    "--no-extensions",
                    "--no-skills",
                    "--no-prompt-templates",
                    "--no-context-files",
                ]
                .map(str::to_string),
            );
            if let Some(m) = &model {
                argv.extend(["--model".to_string(), m.clone()]);
            }
            (argv, model)
        }
    }
}

/// A command line as a reader would type it.
fn shown(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if a.is_empty() {
                "\"\"".to_string()
            } else if a.contains(char::is_whitespace) {
                format!("{a:?}")
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The model the session runs on: the input's (the envelope's), else the
/// newest message that names one (OpenCode's user messages carry the model
/// they were sent to, assistant messages the one that answered), else what
/// the transform last recorded for the session.
pub fn session_model(conn: &Connection, input: &Input) -> Result<ModelInfo> {
    if input.model.id.is_some() {
        return Ok(input.model.clone());
    }
    if let Some(model) = input.messages.iter().rev().find_map(message_model) {
        return Ok(model);
    }
    let key = sessions::find_session(conn, &input.harness, &input.session_id)?
        .and_then(|s| s.last_model_key);
    Ok(key.as_deref().map(model_from_key).unwrap_or_default())
}

/// A model key as the transform records it (`provider/model`, or a bare id).
pub fn model_from_key(key: &str) -> ModelInfo {
    match key.split_once('/') {
        Some((provider, id)) => ModelInfo {
            provider: Some(provider.to_string()),
            id: Some(id.to_string()),
            ..ModelInfo::default()
        },
        None => ModelInfo {
            id: Some(key.to_string()),
            ..ModelInfo::default()
        },
    }
}

fn message_model(message: &Message) -> Option<ModelInfo> {
    let info = message.info();
    let text = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .filter(|s| !s.is_empty() && !s.starts_with('<'))
            .map(str::to_string)
    };
    let (provider, id) = match message.role() {
        Role::User => {
            let model = info.get("model");
            (
                text(model.and_then(|m| m.get("providerID"))),
                text(model.and_then(|m| m.get("modelID"))),
            )
        }
        Role::Assistant => (text(info.get("providerID")), text(info.get("modelID"))),
        _ => (None, None),
    };
    id.map(|id| ModelInfo {
        provider,
        id: Some(id),
        ..ModelInfo::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(model: Option<&str>) -> HistorianConfig {
        HistorianConfig {
            model: model.map(str::to_string),
            ..HistorianConfig::default()
        }
    }

    fn sonnet() -> ModelInfo {
        ModelInfo {
            provider: Some("anthropic".into()),
            id: Some("claude-sonnet-4-5".into()),
            ..ModelInfo::default()
        }
    }

    fn env() -> HarnessEnv {
        HarnessEnv {
            opencode_url: Some("http://127.0.0.1:4096/".into()),
            opencode_plugin: false,
            programs: BTreeMap::from([
                ("claude".to_string(), PathBuf::from("/opt/bin/claude")),
                ("pi".to_string(), PathBuf::from("/opt/bin/pi")),
            ]),
        }
    }

    #[test]
    fn a_configured_model_always_wins() {
        for harness in ["opencode", CLAUDE_CODE, "codex"] {
            let c = choose(
                &config(Some("cloud/haiku")),
                &BTreeMap::new(),
                harness,
                &sonnet(),
                &env(),
            );
            assert_eq!(c.source, ModelSource::Configured);
            assert_eq!(c.chain, ["cloud/haiku"]);
            assert!(c.providers.is_empty());
        }
    }

    #[test]
    fn an_opencode_session_folds_through_its_server_on_its_model() {
        let c = choose(
            &config(None),
            &BTreeMap::new(),
            "opencode",
            &sonnet(),
            &env(),
        );
        assert_eq!(c.source, ModelSource::HarnessDefault);
        assert_eq!(c.chain, ["opencode/anthropic/claude-sonnet-4-5"]);
        let provider = &c.providers["opencode"];
        assert_eq!(provider.kind, ProviderKind::Opencode);
        assert_eq!(provider.base_url.as_deref(), Some("http://127.0.0.1:4096"));
        assert!(c.reason.contains("http://127.0.0.1:4096"), "{}", c.reason);
        // Without a server: none, and why.
        let mut no_server = env();
        no_server.opencode_url = None;
        let c = choose(
            &config(None),
            &BTreeMap::new(),
            "opencode",
            &sonnet(),
            &no_server,
        );
        assert_eq!(c.source, ModelSource::None);
        assert!(c.chain.is_empty());
        assert!(c.reason.contains("OPENCODE_URL"), "{}", c.reason);
        let missing = c.missing();
        assert!(
            missing
                .message
                .starts_with("no historian.model configured, and no OpenCode")
        );
        assert!(missing.hints[0].starts_with("set historian.model"));
        // What status says: the plugin passes its server.
        no_server.opencode_plugin = true;
        let c = choose(
            &config(None),
            &BTreeMap::new(),
            "opencode",
            &sonnet(),
            &no_server,
        );
        assert_eq!(c.source, ModelSource::HarnessDefault);
        assert_eq!(
            c.report().model.as_deref(),
            Some("opencode/anthropic/claude-sonnet-4-5")
        );
    }

    #[test]
    fn other_harnesses_run_their_program_when_it_is_on_path() {
        let c = choose(
            &config(None),
            &BTreeMap::new(),
            CLAUDE_CODE,
            &sonnet(),
            &env(),
        );
        assert_eq!(c.chain, ["claude/claude-sonnet-4-5"]);
        assert_eq!(
            c.providers["claude"].command.as_deref().unwrap(),
            [
                "/opt/bin/claude",
                "-p",
                "--model",
                "claude-sonnet-4-5",
                "--tools",
                ""
            ]
        );
        assert!(c.reason.contains("/opt/bin/claude -p"), "{}", c.reason);
        let c = choose(&config(None), &BTreeMap::new(), "pi", &sonnet(), &env());
        assert_eq!(c.chain, ["pi/anthropic/claude-sonnet-4-5"]);
        // Nothing of the user's Pi setup joins the historian's call: not
        // mc's own extension, not skills, templates or AGENTS.md.
        assert_eq!(
            c.providers["pi"].command.as_deref().unwrap(),
            [
                "/opt/bin/pi",
                "-p",
                "--no-session",
                "--no-tools",
                "--no-extensions",
                "--no-skills",
                "--no-prompt-templates",
                "--no-context-files",
                "--model",
                "anthropic/claude-sonnet-4-5"
            ]
        );
        // Codex is not on PATH here.
        let c = choose(&config(None), &BTreeMap::new(), "codex", &sonnet(), &env());
        assert_eq!(c.source, ModelSource::None);
        assert!(c.reason.contains("codex is not on PATH"), "{}", c.reason);
        // An unknown session model: the program's default, no model flag.
        let c = choose(
            &config(None),
            &BTreeMap::new(),
            CLAUDE_CODE,
            &ModelInfo::default(),
            &env(),
        );
        assert_eq!(c.chain, ["claude/default"]);
        assert!(
            !c.providers["claude"]
                .command
                .as_ref()
                .unwrap()
                .contains(&"--model".to_string())
        );
        // No default for a harness mc does not know.
        let c = choose(&config(None), &BTreeMap::new(), "aider", &sonnet(), &env());
        assert_eq!(c.source, ModelSource::None);
    }

    #[test]
    fn the_harness_default_can_be_turned_off() {
        let off = HistorianConfig {
            harness_model: false,
            ..HistorianConfig::default()
        };
        let c = choose(&off, &BTreeMap::new(), "opencode", &sonnet(), &env());
        assert_eq!(c.source, ModelSource::None);
        assert!(c.reason.contains("harness_model is false"), "{}", c.reason);
    }
}

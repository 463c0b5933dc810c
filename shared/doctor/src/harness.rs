//! The harness integrations as data: one entry per harness, each a list of
//! [`Piece`]s (a file mc owns, a JSON(C) or TOML value it sets, an element
//! it adds to a JSON array). Checks, `setup`, `--fix` and `setup
//! --uninstall` all walk the same pieces, so a new harness is one more entry
//! in [`integrations`].

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Value, json};

use super::Env;
use super::edit;

/// The harnesses mc wires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HarnessId {
    #[serde(rename = "opencode")]
    OpenCode,
    ClaudeCode,
    Codex,
    Pi,
}

impl HarnessId {
    pub const ALL: [HarnessId; 4] = [
        HarnessId::OpenCode,
        HarnessId::ClaudeCode,
        HarnessId::Codex,
        HarnessId::Pi,
    ];

    /// The name in flags, hook commands and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            HarnessId::OpenCode => "opencode",
            HarnessId::ClaudeCode => "claude-code",
            HarnessId::Codex => "codex",
            HarnessId::Pi => "pi",
        }
    }

    pub fn parse(name: &str) -> Option<HarnessId> {
        let name = name.trim().to_ascii_lowercase();
        HarnessId::ALL
            .into_iter()
            .find(|h| h.as_str() == name || (name == "claude" && *h == HarnessId::ClaudeCode))
    }

    /// The harness's program.
    pub fn program(self) -> &'static str {
        match self {
            HarnessId::OpenCode => "opencode",
            HarnessId::ClaudeCode => "claude",
            HarnessId::Codex => "codex",
            HarnessId::Pi => "pi",
        }
    }

    /// The npm package the harness ships as (its `package.json` names the
    /// version without starting the program).
    pub fn npm_package(self) -> Option<&'static str> {
        match self {
            HarnessId::OpenCode => Some("opencode-ai"),
            HarnessId::ClaudeCode => Some("@anthropic-ai/claude-code"),
            HarnessId::Codex => Some("@openai/codex"),
            HarnessId::Pi => Some("@mariozechner/pi-coding-agent"),
        }
    }

    /// The version mc's end-to-end tests run (tests/e2e/package.json).
    pub fn tested_with(self) -> Option<&'static str> {
        match self {
            HarnessId::OpenCode => Some("1.18.33"),
            HarnessId::ClaudeCode => Some("2.1.197"),
            HarnessId::Codex => Some("0.169.0"),
            HarnessId::Pi => Some("0.73.1"),
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            HarnessId::OpenCode => "OpenCode",
            HarnessId::ClaudeCode => "Claude Code",
            HarnessId::Codex => "Codex",
            HarnessId::Pi => "Pi",
        }
    }
}

/// The OpenCode plugin this build installs.
pub const OPENCODE_PLUGIN: &str = mc_adapters::OPENCODE_PLUGIN;

/// The Pi extension this build installs (a harness whose adapter a build
/// lacks would name the reason in the `Err`).
pub const PI_EXTENSION: std::result::Result<&str, &str> = Ok(mc_adapters::PI_EXTENSION);

/// What a piece does to its file.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// The whole file is mc's (a plugin): its bytes must be these, or the
    /// reason this build has none.
    File(std::result::Result<&'static str, &'static str>),
    /// The JSON(C) value at `keys` must be `value`.
    JsonSet { keys: Vec<String>, value: Value },
    /// The JSON array at `keys` must hold `item`; an element naming the same
    /// hook command (or equal to it) counts as this piece, out of date when it differs.
    JsonItem { keys: Vec<String>, item: Value },
    /// The TOML value at `keys` must be `value`.
    TomlSet { keys: Vec<String>, value: Value },
}

/// One thing setup writes and the checks look for.
#[derive(Debug, Clone, PartialEq)]
pub struct Piece {
    /// Stable name within its harness (`plugin`, `compaction`, `hook.Stop`, …).
    pub id: &'static str,
    /// What it is, for humans.
    pub label: String,
    pub path: PathBuf,
    pub action: Action,
}

/// A harness's entry: where it lives, whether it is here, its pieces.
#[derive(Debug, Clone)]
pub struct Integration {
    pub id: HarnessId,
    /// Why it counts as installed (its program on PATH, its folder), if it does.
    pub detected: Option<String>,
    /// The harness's program, when found on PATH.
    pub program: Option<PathBuf>,
    pub pieces: Vec<Piece>,
}

fn keys(path: &str) -> Vec<String> {
    path.split('.').map(str::to_string).collect()
}

fn hook_group(command: &str) -> Value {
    json!({"hooks": [{"type": "command", "command": command, "timeout": 10}]})
}

/// OpenCode's config folder: `$XDG_CONFIG_HOME/opencode`, else `~/.config/opencode`.
pub fn opencode_dir(env: &Env) -> PathBuf {
    env.config_home().join("opencode")
}

/// OpenCode's user config file: `opencode.jsonc` when it exists, else `opencode.json`.
pub fn opencode_config(env: &Env) -> PathBuf {
    let dir = opencode_dir(env);
    let jsonc = dir.join("opencode.jsonc");
    if jsonc.exists() {
        jsonc
    } else {
        dir.join("opencode.json")
    }
}

/// `$CLAUDE_CONFIG_DIR`, else `~/.claude`.
pub fn claude_dir(env: &Env) -> PathBuf {
    env.var_path("CLAUDE_CONFIG_DIR")
        .unwrap_or_else(|| env.home.join(".claude"))
}

/// Where Claude Code keeps user-scope MCP servers: `.claude.json` in
/// `$CLAUDE_CONFIG_DIR` when set, else `~/.claude.json`.
pub fn claude_state(env: &Env) -> PathBuf {
    match env.var_path("CLAUDE_CONFIG_DIR") {
        Some(dir) => dir.join(".claude.json"),
        None => env.home.join(".claude.json"),
    }
}

/// `$CODEX_HOME`, else `~/.codex`.
pub fn codex_dir(env: &Env) -> PathBuf {
    env.var_path("CODEX_HOME")
        .unwrap_or_else(|| env.home.join(".codex"))
}

/// `$PI_CODING_AGENT_DIR`, else `~/.pi/agent`.
pub fn pi_dir(env: &Env) -> PathBuf {
    env.var_path("PI_CODING_AGENT_DIR")
        .unwrap_or_else(|| env.home.join(".pi").join("agent"))
}

/// Every harness's entry, in [`HarnessId::ALL`] order.
pub fn integrations(env: &Env) -> Vec<Integration> {
    HarnessId::ALL
        .into_iter()
        .map(|id| integration(env, id))
        .collect()
}

pub fn integration(env: &Env, id: HarnessId) -> Integration {
    let program = env.which(id.program());
    let (folder, pieces) = match id {
        HarnessId::OpenCode => opencode_pieces(env),
        HarnessId::ClaudeCode => claude_code_pieces(env),
        HarnessId::Codex => codex_pieces(env),
        HarnessId::Pi => pi_pieces(env),
    };
    let detected = match (&program, folder.is_dir()) {
        (Some(path), _) => Some(format!("{} on PATH", env.tilde(path))),
        (None, true) => Some(format!("{} exists", env.tilde(&folder))),
        (None, false) if id == HarnessId::Pi && env.var_path("PI_CODING_AGENT_DIR").is_some() => {
            Some("PI_CODING_AGENT_DIR is set".into())
        }
        _ => None,
    };
    Integration {
        id,
        detected,
        program,
        pieces,
    }
}

/// OpenCode's folder and the pieces mc installs there.
fn opencode_pieces(env: &Env) -> (PathBuf, Vec<Piece>) {
    let dir = opencode_dir(env);
    let config = opencode_config(env);
    (
        dir.clone(),
        vec![
            Piece {
                id: "plugin",
                label: "mc's plugin".into(),
                path: dir.join("plugin").join("mc.js"),
                action: Action::File(Ok(OPENCODE_PLUGIN)),
            },
            Piece {
                id: "compaction",
                label: "auto-compaction off".into(),
                path: config,
                action: Action::JsonSet {
                    keys: keys("compaction.auto"),
                    value: json!(false),
                },
            },
        ],
    )
}

/// Claude Code's folder and the pieces mc installs there.
fn claude_code_pieces(env: &Env) -> (PathBuf, Vec<Piece>) {
    let dir = claude_dir(env);
    let settings = dir.join("settings.json");
    let mut pieces = vec![
        Piece {
            id: "hook.SessionStart",
            label: "the SessionStart hook (mc-pin restore)".into(),
            path: settings.clone(),
            action: Action::JsonItem {
                keys: keys("hooks.SessionStart"),
                item: hook_group("mc-pin restore --harness claude-code"),
            },
        },
        Piece {
            id: "hook.Stop",
            label: "the Stop hook (mc-historian hook)".into(),
            path: settings.clone(),
            action: Action::JsonItem {
                keys: keys("hooks.Stop"),
                item: hook_group("mc-historian hook --harness claude-code"),
            },
        },
        Piece {
            id: "allow.mcp",
            label: "permission for mc's MCP tools".into(),
            path: settings.clone(),
            action: Action::JsonItem {
                keys: keys("permissions.allow"),
                item: json!("mcp__mc"),
            },
        },
        Piece {
            id: "allow.pin",
            label: "permission for mc-pin in the shell".into(),
            path: settings.clone(),
            action: Action::JsonItem {
                keys: keys("permissions.allow"),
                item: json!("Bash(mc-pin:*)"),
            },
        },
        Piece {
            id: "mcp",
            label: "the MCP server mc (mc-search mcp)".into(),
            path: claude_state(env),
            action: Action::JsonSet {
                keys: keys("mcpServers.mc"),
                value: json!({"type": "stdio", "command": "mc-search",
                        "args": ["mcp", "--harness", "claude-code"], "env": {}}),
            },
        },
    ];
    pieces.extend(super::claude_gateway::pieces(env, &settings));
    (dir, pieces)
}

/// Codex's folder and the pieces mc installs there.
fn codex_pieces(env: &Env) -> (PathBuf, Vec<Piece>) {
    let dir = codex_dir(env);
    let config = dir.join("config.toml");
    let hooks = dir.join("hooks.json");
    let mut pieces = vec![
        Piece {
            id: "features.hooks",
            label: "hooks enabled ([features] hooks = true)".into(),
            path: config.clone(),
            action: Action::TomlSet {
                keys: keys("features.hooks"),
                value: json!(true),
            },
        },
        Piece {
            id: "mcp",
            label: "the MCP server mc (mc-search mcp)".into(),
            path: config.clone(),
            action: Action::TomlSet {
                keys: keys("mcp_servers.mc"),
                value: json!({"command": "mc-search",
                        "args": ["mcp", "--harness", "codex"],
                        "default_tools_approval_mode": "approve"}),
            },
        },
        Piece {
            id: "hook.SessionStart",
            label: "the SessionStart hook (mc-pin restore)".into(),
            path: hooks.clone(),
            action: Action::JsonItem {
                keys: keys("hooks.SessionStart"),
                item: hook_group("mc-pin restore --harness codex"),
            },
        },
        Piece {
            id: "hook.Stop",
            label: "the Stop hook (mc-historian hook)".into(),
            path: hooks.clone(),
            action: Action::JsonItem {
                keys: keys("hooks.Stop"),
                item: hook_group("mc-historian hook --harness codex"),
            },
        },
    ];
    pieces.extend(super::codex_gateway::pieces(env, &config, &hooks));
    (dir, pieces)
}

/// Pi's folder and the pieces mc installs there.
fn pi_pieces(env: &Env) -> (PathBuf, Vec<Piece>) {
    let dir = pi_dir(env);
    (
        dir.clone(),
        vec![Piece {
            id: "extension",
            label: "mc's Pi extension".into(),
            path: dir.join("extensions").join("mc.ts"),
            action: Action::File(PI_EXTENSION),
        }],
    )
}

/// Where a piece stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Installed,
    Missing,
    /// There, but not what this build writes (why).
    Stale(String),
    /// This build cannot install it (why).
    Unavailable(String),
    /// Its file cannot be read or parsed (why): fix by hand.
    Broken(String),
}

/// The text of `path`: `None` when it does not exist.
pub fn read(path: &Path) -> std::result::Result<Option<String>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// Whether `element` of an array is `item`'s piece: equal, or a hook group
/// running the same command (its first two words: program and subcommand,
/// plus the harness flag).
pub fn same_item(element: &Value, item: &Value) -> bool {
    if element == item {
        return true;
    }
    match (hook_commands(element), hook_commands(item)) {
        (Some(a), Some(b)) => a
            .iter()
            .any(|x| b.iter().any(|y| command_key(x) == command_key(y))),
        _ => false,
    }
}

fn hook_commands(group: &Value) -> Option<Vec<String>> {
    let hooks = group.get("hooks")?.as_array()?;
    Some(
        hooks
            .iter()
            .filter_map(|h| h.get("command")?.as_str().map(str::to_string))
            .collect(),
    )
}

/// `mc-pin restore --harness codex` → `mc-pin restore codex`: the program's
/// file name (an absolute path counts the same), its subcommand and the harness.
fn command_key(command: &str) -> String {
    let mut words = command.split_whitespace();
    let program = words
        .next()
        .map(|p| p.trim_matches(['\'', '"']))
        .map(|p| p.rsplit('/').next().unwrap_or(p).to_string())
        .unwrap_or_default();
    let sub = words.next().unwrap_or_default().to_string();
    let rest: Vec<&str> = words.collect();
    let harness = rest
        .windows(2)
        .find(|w| w.first() == Some(&"--harness"))
        .and_then(|w| w.get(1).copied())
        .unwrap_or_default();
    format!("{program} {sub} {harness}")
}

/// Where `piece` stands now.
pub fn state(piece: &Piece) -> State {
    let text = match read(&piece.path) {
        Ok(text) => text,
        Err(why) => return State::Broken(why),
    };
    let what = piece.path.display().to_string();
    match &piece.action {
        Action::File(Err(why)) => State::Unavailable((*why).to_string()),
        Action::File(Ok(content)) => match text {
            None => State::Missing,
            Some(text) if text == *content => State::Installed,
            Some(_) => State::Stale("its content differs from this build's".into()),
        },
        Action::JsonSet { keys, value } => {
            let Some(text) = text else {
                return State::Missing;
            };
            match edit::json_value(&text, &what) {
                Err(e) => State::Broken(e.to_string()),
                Ok(root) => match edit::get(&root, keys) {
                    None => State::Missing,
                    Some(v) if v == value => State::Installed,
                    Some(v) => State::Stale(format!("`{}` is {v}", keys.join("."))),
                },
            }
        }
        Action::JsonItem { keys, item } => {
            let Some(text) = text else {
                return State::Missing;
            };
            match edit::json_value(&text, &what) {
                Err(e) => State::Broken(e.to_string()),
                Ok(root) => {
                    let elements = edit::get(&root, keys)
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default();
                    if elements.iter().any(|e| e == item) {
                        State::Installed
                    } else if let Some(e) = elements.iter().find(|e| same_item(e, item)) {
                        State::Stale(format!("`{}` has {e}", keys.join(".")))
                    } else {
                        State::Missing
                    }
                }
            }
        }
        Action::TomlSet { keys, value } => {
            let Some(text) = text else {
                return State::Missing;
            };
            match edit::toml_get(&text, keys, &what) {
                Err(e) => State::Broken(e.to_string()),
                Ok(None) => State::Missing,
                Ok(Some(v)) if contains(&v, value) => State::Installed,
                Ok(Some(v)) => State::Stale(format!("`{}` is {v}", keys.join("."))),
            }
        }
    }
}

/// `found` holds everything of `wanted` (a table may carry more keys, such as
/// the user's own `env`).
fn contains(found: &Value, wanted: &Value) -> bool {
    match (found, wanted) {
        (Value::Object(f), Value::Object(w)) => w
            .iter()
            .all(|(k, v)| f.get(k).is_some_and(|fv| contains(fv, v))),
        _ => found == wanted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The adapters run ctx_reduce through mc-transform but take its words from
    /// `mc-search tools`; the copy they fall back on without mc-search is the
    /// published one, word for word.
    #[test]
    fn the_adapters_fallback_ctx_reduce_is_the_published_one() {
        let specs = mc_search_core::tools::specs();
        let reduce = specs.iter().find(|s| s.name == "ctx_reduce").unwrap();
        let drop = &reduce.input_schema["properties"]["drop"]["description"];
        let literals = [
            serde_json::to_string(reduce.description).unwrap(),
            drop.to_string(),
        ];
        for (adapter, text) in [
            ("the OpenCode plugin", OPENCODE_PLUGIN),
            ("the Pi extension", PI_EXTENSION.unwrap()),
        ] {
            for literal in &literals {
                assert!(
                    text.contains(literal.as_str()),
                    "{adapter} lacks {literal}: edit REDUCE_TOOL in adapters/source/core.js \
                     and run `npm run build` in adapters/"
                );
            }
        }
    }

    #[test]
    fn pi_is_detected_by_its_folder_or_variable_and_its_extension_goes_under_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut env = Env {
            home: dir.path().to_path_buf(),
            ..Env::default()
        };
        assert!(integration(&env, HarnessId::Pi).detected.is_none());
        std::fs::create_dir_all(dir.path().join(".pi/agent")).unwrap();
        let pi = integration(&env, HarnessId::Pi);
        assert!(pi.detected.unwrap().ends_with(".pi/agent exists"));
        assert_eq!(
            pi.pieces[0].path,
            dir.path().join(".pi/agent/extensions/mc.ts")
        );
        env.vars.insert(
            "PI_CODING_AGENT_DIR".into(),
            dir.path().join("elsewhere").display().to_string(),
        );
        let pi = integration(&env, HarnessId::Pi);
        assert_eq!(pi.detected.as_deref(), Some("PI_CODING_AGENT_DIR is set"));
        assert_eq!(
            pi.pieces[0].path,
            dir.path().join("elsewhere/extensions/mc.ts")
        );
        assert!(
            matches!(state(&pi.pieces[0]), State::Missing),
            "{:?}",
            state(&pi.pieces[0])
        );
    }

    #[test]
    fn hook_commands_match_by_program_subcommand_and_harness() {
        let ours = hook_group("mc-pin restore --harness claude-code");
        let theirs = json!({"hooks": [{"type": "command", "command": "/usr/local/bin/mc-pin restore --harness claude-code", "timeout": 30}]});
        assert!(same_item(&theirs, &ours));
        let other = hook_group("mc-pin restore --harness codex");
        assert!(!same_item(&other, &ours));
        assert!(!same_item(&json!("mcp__mc"), &json!("Bash(mc-pin:*)")));
    }
}

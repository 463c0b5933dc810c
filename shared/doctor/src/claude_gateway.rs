//! Claude Code through mc's gateway, as setup wires it: every `claude`,
//! whoever starts it, reads `env` of its user settings at start and applies
//! it over its own environment (observed in 2.1.197), so
//! `env.ANTHROPIC_BASE_URL` there sends each of its calls to the gateway;
//! its `SessionStart` and `UserPromptSubmit` hooks run
//! `mc-transform gateway --ensure`, which starts a gateway (detached) when
//! none answers, before the session's first call and before every prompt's.
//! A base URL the user had (in those settings, or in the environment setup
//! runs in) becomes `gateway.anthropic_upstream` in mc's user config, so the
//! gateway forwards where Claude Code went before; uninstall puts both back.
//!
//! The Codex counterpart is [`super::codex_gateway`] (it shares the hook);
//! the checks of the gateway itself are in [`super::checks`].

use std::path::Path;

use serde_json::{Value, json};

use super::Env;
use super::harness::{Action, Piece};
use mc_base::config;
use mc_base::error::{Error, Result};

/// The hook command that makes sure a gateway answers.
pub const ENSURE: &str = "mc-transform gateway --ensure";

/// The variable Claude Code takes its provider's base URL from.
pub const BASE_URL: &str = "ANTHROPIC_BASE_URL";

/// `http://` + `gateway.listen` of mc's config: what Claude Code is pointed at.
pub fn gateway_url(env: &Env) -> String {
    format!("http://{}", config::load(&env.layers).config.gateway.listen)
}

fn keys(path: &str) -> Vec<String> {
    path.split('.').map(str::to_string).collect()
}

/// The hook group running [`ENSURE`] (Claude Code's and Codex's alike).
pub(crate) fn ensure_hook() -> Value {
    json!({"hooks": [{"type": "command", "command": ENSURE, "timeout": 10}]})
}

/// The pieces in Claude Code's user settings (`settings`): the base URL and
/// the two hooks.
pub fn pieces(env: &Env, settings: &Path) -> Vec<Piece> {
    vec![
        Piece {
            id: "gateway.base_url",
            label: "Claude Code's calls through mc's gateway (env.ANTHROPIC_BASE_URL)".into(),
            path: settings.to_path_buf(),
            action: Action::JsonSet {
                keys: keys("env.ANTHROPIC_BASE_URL"),
                value: json!(gateway_url(env)),
            },
        },
        Piece {
            id: "hook.SessionStart.gateway",
            label: "the SessionStart hook (mc-transform gateway --ensure)".into(),
            path: settings.to_path_buf(),
            action: Action::JsonItem {
                keys: keys("hooks.SessionStart"),
                item: ensure_hook(),
            },
        },
        Piece {
            id: "hook.UserPromptSubmit.gateway",
            label: "the UserPromptSubmit hook (mc-transform gateway --ensure)".into(),
            path: settings.to_path_buf(),
            action: Action::JsonItem {
                keys: keys("hooks.UserPromptSubmit"),
                item: ensure_hook(),
            },
        },
    ]
}

/// The base URL Claude Code used before setup: `env.ANTHROPIC_BASE_URL` of
/// its user settings (which wins in Claude Code), else the variable in the
/// environment setup runs in; never the gateway itself. `Err` when the
/// settings cannot be read.
pub fn previous_base_url(env: &Env, settings: &Path) -> Result<Option<String>> {
    let what = settings.display().to_string();
    let from_settings = match super::harness::read(settings).map_err(Error::Input)? {
        Some(text) => super::edit::json_value(&text, &what)?
            .get("env")
            .and_then(|e| e.get(BASE_URL))
            .and_then(Value::as_str)
            .map(str::to_string),
        None => None,
    };
    let own = gateway_url(env);
    Ok(from_settings
        .or_else(|| env.var(BASE_URL).map(str::to_string))
        .map(|url| url.trim().to_string())
        .filter(|url| !url.is_empty())
        .filter(|url| url.trim_end_matches('/') != own.trim_end_matches('/')))
}

/// The piece that keeps the user's own base URL as the gateway's upstream,
/// when they had one.
pub fn upstream_piece(env: &Env, settings: &Path) -> Result<Option<Piece>> {
    let Some(url) = previous_base_url(env, settings)? else {
        return Ok(None);
    };
    Ok(Some(Piece {
        id: "gateway.upstream",
        label: format!("the gateway's upstream: your base URL {url}"),
        path: env.user_config(),
        action: Action::JsonSet {
            keys: keys("gateway.anthropic_upstream"),
            value: json!(url),
        },
    }))
}

/// Whether Claude Code's user settings send its calls to the gateway.
pub fn wired(env: &Env, settings: &Path) -> bool {
    let Ok(Some(text)) = super::harness::read(settings) else {
        return false;
    };
    let Ok(root) = super::edit::json_value(&text, "") else {
        return false;
    };
    root.get("env")
        .and_then(|e| e.get(BASE_URL))
        .and_then(Value::as_str)
        .is_some_and(|url| url.trim_end_matches('/') == gateway_url(env))
}

/// The newest turn of any Claude Code session: the session (its
/// transcript's name) and when its last assistant message was written.
pub fn last_turn(env: &Env) -> Option<(String, i64)> {
    let projects = super::harness::claude_dir(env).join("projects");
    let mut newest: Option<(std::time::SystemTime, std::path::PathBuf)> = None;
    for folder in std::fs::read_dir(projects).ok()?.flatten() {
        let Ok(files) = std::fs::read_dir(folder.path()) else {
            continue;
        };
        for file in files.flatten() {
            let path = file.path();
            if path.extension().is_none_or(|e| e != "jsonl") {
                continue;
            }
            let Ok(modified) = file.metadata().and_then(|m| m.modified()) else {
                continue;
            };
            if newest.as_ref().is_none_or(|(t, _)| modified > *t) {
                newest = Some((modified, path));
            }
        }
    }
    let (_, path) = newest?;
    let session = path.file_stem()?.to_string_lossy().into_owned();
    let tail = read_tail(&path, 512 * 1024)?;
    let at = tail.lines().rev().find_map(|line| {
        let entry: Value = serde_json::from_str(line).ok()?;
        if entry.get("type").and_then(Value::as_str) != Some("assistant") {
            return None;
        }
        mc_base::codec::claude::parse_timestamp(entry.get("timestamp")?.as_str()?)
    })?;
    Some((session, at))
}

/// The last `limit` bytes of a file, from its first whole line.
pub(crate) fn read_tail(path: &Path, limit: u64) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let start = len.saturating_sub(limit);
    file.seek(SeekFrom::Start(start)).ok()?;
    let mut bytes = Vec::new();
    file.take(limit).read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Some(if start > 0 {
        text.split_once('\n')
            .map_or(String::new(), |(_, rest)| rest.to_string())
    } else {
        text
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::HarnessId;
    use crate::setup::{self, Request};

    fn env_in(dir: &Path) -> Env {
        Env {
            home: dir.to_path_buf(),
            now_ms: 1_796_000_000_000,
            ..Env::default()
        }
    }

    #[test]
    fn the_users_base_url_becomes_the_upstream_once_and_uninstall_gives_the_bytes_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut env = env_in(dir.path());
        let settings = dir.path().join(".claude/settings.json");
        std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
        let before =
            "{\"env\": {\"ANTHROPIC_BASE_URL\": \"https://proxy.example\"}, \"model\": \"opus\"}\n";
        std::fs::write(&settings, before).unwrap();
        // The shell's variable loses to the settings, as in Claude Code.
        env.vars
            .insert(BASE_URL.into(), "https://shell.example".into());
        assert_eq!(
            previous_base_url(&env, &settings).unwrap().as_deref(),
            Some("https://proxy.example")
        );
        let request = Request {
            harnesses: vec![HarnessId::ClaudeCode],
            ..Request::default()
        };
        setup::setup(&env, &request).unwrap();
        assert!(wired(&env, &settings));
        let config = std::fs::read_to_string(env.user_config()).unwrap();
        assert!(
            config.contains("\"anthropic_upstream\": \"https://proxy.example\""),
            "{config}"
        );
        // A second run: the settings now name the gateway, which is no upstream.
        assert_eq!(previous_base_url(&env, &settings).unwrap(), None);
        let again = setup::setup(&env, &request).unwrap();
        assert!(again.changes.is_empty(), "{again:?}");
        setup::uninstall(&env, &[HarnessId::ClaudeCode], false).unwrap();
        assert_eq!(std::fs::read_to_string(&settings).unwrap(), before);
        assert!(!env.user_config().exists(), "the config setup created goes");
        assert!(!wired(&env, &settings));
    }

    #[test]
    fn a_file_edited_since_setup_keeps_the_edit_through_uninstall() {
        let dir = tempfile::tempdir().unwrap();
        let env = env_in(dir.path());
        let settings = dir.path().join(".claude/settings.json");
        std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
        std::fs::write(&settings, "{\"model\": \"opus\"}").unwrap();
        let request = Request {
            harnesses: vec![HarnessId::ClaudeCode],
            ..Request::default()
        };
        setup::setup(&env, &request).unwrap();
        let text = std::fs::read_to_string(&settings).unwrap();
        std::fs::write(&settings, text.replace("opus", "sonnet")).unwrap();
        setup::uninstall(&env, &[HarnessId::ClaudeCode], false).unwrap();
        let after = std::fs::read_to_string(&settings).unwrap();
        assert!(
            after.contains("sonnet") && !after.contains("ANTHROPIC_BASE_URL"),
            "{after}"
        );
        assert!(!after.contains("mc-transform"), "{after}");
    }
}

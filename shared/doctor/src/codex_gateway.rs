//! Codex through mc's gateway, as setup wires it: a model provider of mc's,
//! `[model_providers.mc-gateway]` (`wire_api = "responses"`, its base URL
//! the gateway's `/openai`), selected by `model_provider` in Codex's
//! `config.toml`, so every `codex`, whoever starts it, calls the gateway.
//! The provider is a copy of the one the user had selected (its key
//! variable, headers, query, `requires_openai_auth`) with only its name and
//! base URL changed, and that provider's base URL becomes
//! `gateway.openai_upstream` in mc's user config, so the gateway forwards
//! where Codex went before, with the same credential.
//!
//! **A stopped gateway.** Codex 0.169.0 never gives up on a provider that
//! refuses the connection: "Reconnecting... waiting for network", its
//! retries growing (`request_max_retries` and `stream_max_retries` do not
//! bound it). So its `SessionStart` and `UserPromptSubmit` hooks run
//! `mc-transform gateway --ensure` (shared with Claude Code's wiring,
//! [`super::claude_gateway::ENSURE`]): before a session's first call and
//! before each prompt's a gateway answers, started then if need be; one
//! that cannot be had is said by the hook, and a gateway started while
//! Codex waits is found by its next retry. Uninstall takes both files back.

use std::path::Path;

use serde_json::{Map, Value, json};

use super::Env;
use super::claude_gateway::{ensure_hook, gateway_url};
use super::harness::{Action, Piece};
use mc_base::config;
use mc_base::error::{Error, Result};

/// The id of mc's provider in Codex's config (the launcher's too).
pub const PROVIDER: &str = "mc-gateway";

/// Codex's own provider when `model_provider` names none.
const BUILT_IN: &str = "openai";

/// What the gateway's provider is pointed at: `http://` + `gateway.listen` + `/openai`.
pub fn provider_url(env: &Env) -> String {
    format!("{}{}", gateway_url(env), mc_gateway::OPENAI_PREFIX)
}

fn keys(path: &str) -> Vec<String> {
    path.split('.').map(str::to_string).collect()
}

/// The provider Codex's config selects: its id and its table (`None` for a
/// built-in one, or when the config cannot be read).
fn selected(config_toml: &Path) -> (String, Option<Map<String, Value>>) {
    let what = config_toml.display().to_string();
    let Ok(Some(text)) = super::harness::read(config_toml) else {
        return (BUILT_IN.into(), None);
    };
    let id = super::edit::toml_get(&text, &keys("model_provider"), &what)
        .ok()
        .flatten()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| BUILT_IN.into());
    let table = super::edit::toml_get(&text, &["model_providers".into(), id.clone()], &what)
        .ok()
        .flatten()
        .and_then(|v| match v {
            Value::Object(map) => Some(map),
            _ => None,
        });
    (id, table)
}

/// mc's provider: the selected one's table (once mc's is selected, itself)
/// with mc's name, the gateway's URL and the Responses wire; Codex's
/// built-in OpenAI provider becomes its login (`requires_openai_auth`).
/// Never WebSockets: the gateway speaks HTTP.
pub fn provider_value(env: &Env, config_toml: &Path) -> Value {
    let (id, table) = selected(config_toml);
    let mut provider = match table {
        Some(table) => table,
        None if id == BUILT_IN => {
            let mut map = Map::new();
            map.insert("requires_openai_auth".into(), json!(true));
            map
        }
        None => Map::new(),
    };
    provider.remove("supports_websockets");
    provider.insert("name".into(), json!("mc gateway"));
    provider.insert("base_url".into(), json!(provider_url(env)));
    provider.insert("wire_api".into(), json!("responses"));
    Value::Object(provider)
}

/// The pieces: mc's provider and its selection in `config.toml`, the two
/// hooks in `hooks.json`.
pub fn pieces(env: &Env, config_toml: &Path, hooks: &Path) -> Vec<Piece> {
    vec![
        Piece {
            id: "gateway.provider",
            label: format!("mc's model provider ([model_providers.{PROVIDER}], the gateway)"),
            path: config_toml.to_path_buf(),
            action: Action::TomlSet {
                keys: vec!["model_providers".into(), PROVIDER.into()],
                value: provider_value(env, config_toml),
            },
        },
        Piece {
            id: "gateway.selected",
            label: format!("Codex's calls through mc's gateway (model_provider = \"{PROVIDER}\")"),
            path: config_toml.to_path_buf(),
            action: Action::TomlSet {
                keys: keys("model_provider"),
                value: json!(PROVIDER),
            },
        },
        Piece {
            id: "hook.SessionStart.gateway",
            label: "the SessionStart hook (mc-transform gateway --ensure)".into(),
            path: hooks.to_path_buf(),
            action: Action::JsonItem {
                keys: keys("hooks.SessionStart"),
                item: ensure_hook(),
            },
        },
        Piece {
            id: "hook.UserPromptSubmit.gateway",
            label: "the UserPromptSubmit hook (mc-transform gateway --ensure)".into(),
            path: hooks.to_path_buf(),
            action: Action::JsonItem {
                keys: keys("hooks.UserPromptSubmit"),
                item: ensure_hook(),
            },
        },
    ]
}

/// Whether a ChatGPT login (not an API key) is what Codex signs in with:
/// `auth_mode` of `auth.json`, else tokens without a key. Only those two
/// fields are looked at; nothing of it is kept or shown.
fn chatgpt_login(env: &Env) -> bool {
    let path = super::harness::codex_dir(env).join("auth.json");
    let Ok(Some(text)) = super::harness::read(&path) else {
        return false;
    };
    let Ok(auth) = serde_json::from_str::<Value>(&text) else {
        return false;
    };
    match auth.get("auth_mode").and_then(Value::as_str) {
        Some(mode) => mode.eq_ignore_ascii_case("chatgpt"),
        None => {
            auth.get("tokens").is_some_and(Value::is_object)
                && !auth.get("OPENAI_API_KEY").is_some_and(Value::is_string)
        }
    }
}

/// Where Codex sent its calls before setup: the selected provider's base
/// URL; for its built-in OpenAI provider `OPENAI_BASE_URL`, else the
/// ChatGPT backend's Codex route with a ChatGPT login, else the OpenAI API
/// (the gateway's default). `None` once mc's provider is the selected one.
pub fn previous_upstream(env: &Env, config_toml: &Path) -> Option<String> {
    let (id, table) = selected(config_toml);
    if id == PROVIDER {
        return None;
    }
    let from_table = table
        .as_ref()
        .and_then(|t| t.get("base_url"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let url = match (from_table, id == BUILT_IN) {
        (Some(url), _) => url,
        (None, true) => match env.var("OPENAI_BASE_URL") {
            Some(url) => url.to_string(),
            None if chatgpt_login(env) => "https://chatgpt.com/backend-api/codex".into(),
            None => "https://api.openai.com/v1".into(),
        },
        (None, false) => return None,
    };
    let url = url.trim().to_string();
    let own = provider_url(env);
    (!url.is_empty() && url.trim_end_matches('/') != own.trim_end_matches('/')).then_some(url)
}

/// The piece that keeps the user's own provider as the gateway's upstream,
/// when it is not already what the gateway forwards to.
pub fn upstream_piece(env: &Env, config_toml: &Path) -> Result<Option<Piece>> {
    // A config Codex cannot read is said now, before anything is written.
    if let Some(text) = super::harness::read(config_toml).map_err(Error::Input)? {
        super::edit::toml_get(
            &text,
            &keys("model_provider"),
            &config_toml.display().to_string(),
        )?;
    }
    let Some(url) = previous_upstream(env, config_toml) else {
        return Ok(None);
    };
    let current = config::load(&env.layers).config.gateway.openai_upstream;
    if current.trim_end_matches('/') == url.trim_end_matches('/') {
        return Ok(None);
    }
    Ok(Some(Piece {
        id: "gateway.openai_upstream",
        label: format!("the gateway's upstream for Codex: your provider's {url}"),
        path: env.user_config(),
        action: Action::JsonSet {
            keys: keys("gateway.openai_upstream"),
            value: json!(url),
        },
    }))
}

/// Whether Codex's config sends its calls to the gateway.
pub fn wired(env: &Env, config_toml: &Path) -> bool {
    let (id, table) = selected(config_toml);
    id == PROVIDER
        && table
            .as_ref()
            .and_then(|t| t.get("base_url"))
            .and_then(Value::as_str)
            .is_some_and(|url| url.trim_end_matches('/') == provider_url(env))
}

/// The newest turn of any Codex session: the session (its rollout's thread
/// id) and when the model's last item of it was written.
pub fn last_turn(env: &Env) -> Option<(String, i64)> {
    let home = super::harness::codex_dir(env);
    let (session, path) = mc_pin_core::locate::codex_newest_anywhere(&home)?;
    let tail = super::claude_gateway::read_tail(&path, 512 * 1024)?;
    let at = tail.lines().rev().find_map(|line| {
        let entry: Value = serde_json::from_str(line).ok()?;
        let item = entry.get("payload")?;
        let model = match item.get("type").and_then(Value::as_str)? {
            "message" => item.get("role").and_then(Value::as_str) == Some("assistant"),
            kind => kind == "reasoning" || kind.ends_with("_call"),
        };
        (entry.get("type").and_then(Value::as_str) == Some("response_item") && model)
            .then(|| mc_base::codec::claude::parse_timestamp(entry.get("timestamp")?.as_str()?))
            .flatten()
    })?;
    Some((session, at))
}

/// When mc's pass last recorded a call of Codex session `session` (the
/// per-call record: every call the gateway ran the pass on).
pub fn last_recorded(db: &Path, session: &str) -> Option<i64> {
    let conn = rusqlite::Connection::open_with_flags(
        db,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .ok()?;
    conn.query_row(
        "SELECT MAX(c.at_ms) FROM calls c JOIN sessions s ON s.id = c.session \
         WHERE s.harness = 'codex' AND s.session_id = ?1",
        [session],
        |r| r.get::<_, Option<i64>>(0),
    )
    .ok()
    .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::{self, HarnessId};
    use crate::setup::{self, Request};

    fn env_in(dir: &Path) -> Env {
        Env {
            home: dir.to_path_buf(),
            now_ms: 1_796_000_000_000,
            ..Env::default()
        }
    }

    const MINE: &str = "# my Codex\nmodel = \"gpt-5-codex\"\nmodel_provider = \"corp\"\n\n\
        [model_providers.corp]\nname = \"Corp\"\nbase_url = \"https://llm.corp.example/v1\"\n\
        wire_api = \"responses\"\nenv_key = \"CORP_KEY\"\nquery_params = { api-version = \"7\" }\n";

    #[test]
    fn the_users_provider_becomes_mcs_upstream_and_uninstall_gives_the_bytes_back() {
        let dir = tempfile::tempdir().unwrap();
        let env = env_in(dir.path());
        let codex = harness::codex_dir(&env);
        std::fs::create_dir_all(&codex).unwrap();
        let config_toml = codex.join("config.toml");
        std::fs::write(&config_toml, MINE).unwrap();
        assert_eq!(
            previous_upstream(&env, &config_toml).as_deref(),
            Some("https://llm.corp.example/v1")
        );
        let request = Request {
            harnesses: vec![HarnessId::Codex],
            ..Request::default()
        };
        setup::setup(&env, &request).unwrap();
        assert!(wired(&env, &config_toml));
        let text = std::fs::read_to_string(&config_toml).unwrap();
        let provider =
            crate::edit::toml_get(&text, &["model_providers".into(), PROVIDER.into()], "")
                .unwrap()
                .unwrap();
        // The user's key variable and query go with the calls; only the
        // name and the address are mc's.
        assert_eq!(provider["env_key"], "CORP_KEY");
        assert_eq!(provider["query_params"]["api-version"], "7");
        assert_eq!(provider["wire_api"], "responses");
        assert_eq!(provider["base_url"], provider_url(&env));
        assert!(text.contains("[model_providers.corp]"), "{text}");
        let config = std::fs::read_to_string(env.user_config()).unwrap();
        assert!(
            config.contains("\"openai_upstream\": \"https://llm.corp.example/v1\""),
            "{config}"
        );
        let hooks = std::fs::read_to_string(codex.join("hooks.json")).unwrap();
        assert_eq!(hooks.matches("mc-transform gateway --ensure").count(), 2);
        // Again: everything in place, mc's provider is no upstream.
        assert_eq!(previous_upstream(&env, &config_toml), None);
        let again = setup::setup(&env, &request).unwrap();
        assert!(again.changes.is_empty(), "{again:?}");
        setup::uninstall(&env, &[HarnessId::Codex], false).unwrap();
        assert_eq!(std::fs::read_to_string(&config_toml).unwrap(), MINE);
        assert!(!env.user_config().exists(), "the config setup created goes");
        assert!(!codex.join("hooks.json").exists());
        assert!(!wired(&env, &config_toml));
    }

    #[test]
    fn codexs_own_provider_becomes_its_login_through_the_gateway() {
        let dir = tempfile::tempdir().unwrap();
        let mut env = env_in(dir.path());
        let codex = harness::codex_dir(&env);
        std::fs::create_dir_all(&codex).unwrap();
        let config_toml = codex.join("config.toml");
        // No config at all: the built-in provider, an API key's upstream
        // (the gateway's default, nothing to write).
        let provider = provider_value(&env, &config_toml);
        assert_eq!(provider["requires_openai_auth"], true);
        assert!(upstream_piece(&env, &config_toml).unwrap().is_none());
        // A ChatGPT login goes to ChatGPT's Codex route.
        std::fs::write(
            codex.join("auth.json"),
            r#"{"auth_mode": "chatgpt", "tokens": {}}"#,
        )
        .unwrap();
        assert_eq!(
            previous_upstream(&env, &config_toml).as_deref(),
            Some("https://chatgpt.com/backend-api/codex")
        );
        // `OPENAI_BASE_URL` is where the built-in provider went.
        env.vars
            .insert("OPENAI_BASE_URL".into(), "https://proxy.example/v1".into());
        assert_eq!(
            previous_upstream(&env, &config_toml).as_deref(),
            Some("https://proxy.example/v1")
        );
    }
}

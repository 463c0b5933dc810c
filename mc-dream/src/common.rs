//! What the subcommands share: the project folder, the config and store, the
//! dreamer's model and settings, the project's registration, JSON output.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, anyhow};

use mc_base::config::Config;
use mc_base::store::Store;
use mc_cli::{Failure, write_json};
use mc_dream_core::{self as dream, Embedder, Settings, lease};
use mc_llm::{self as llm, Client, Model};

use crate::args::{Args, NAME};

/// The folder a command is about: `--project`, else the working directory.
pub(crate) fn project_dir(flag: Option<&Path>) -> Result<PathBuf, Failure> {
    let dir = flag
        .map(Path::to_path_buf)
        .or_else(mc_cli::working_dir)
        .ok_or_else(|| Failure::input(anyhow!("no project folder: pass --project DIR")))?;
    if !dir.is_dir() {
        return Err(Failure::input(anyhow!("{} is not a folder", dir.display())));
    }
    Ok(dir.canonicalize().unwrap_or(dir))
}

pub(crate) fn setup(args: &Args, dir: Option<&Path>) -> Result<(Config, Store), Failure> {
    let config = args.global.load_config(NAME, dir);
    let path = mc_cli::db_path(args.global.db.as_deref())?;
    let store = mc_cli::open_store(Some(&path), &config)
        .with_context(|| format!("opening {}", path.display()))?;
    Ok((config, store))
}

/// The dreamer's model chain, with each provider's key read from the
/// variable the user config names; `Err`: why there is none.
pub(crate) fn client(config: &Config) -> Result<Client, String> {
    let chain = config.dream.chain();
    if chain.is_empty() {
        return Err(
            "no dream.model configured (set dream.model to \"provider/model\" in the user config)"
                .into(),
        );
    }
    let keys = mc_cli::keys::chain_keys(&chain, &config.providers);
    let options = llm::Options {
        connect_timeout: Duration::from_secs(10),
        timeout: Duration::from_millis(config.dream.timeout_ms),
        retries: config.dream.retries,
        backoff: Duration::from_secs(2),
        proxy: mc_cli::proxy_env(),
        sleep: llm::Sleeper::new(std::thread::sleep),
    };
    Client::new(&config.providers, &chain, &keys, options).map_err(|e| e.to_string())
}

/// This machine's name, for lease liveness.
pub(crate) fn host() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

pub(crate) fn show_progress(line: &str) {
    eprintln!("{NAME}: {line}");
}

pub(crate) fn no_progress(_: &str) {}

/// Run `f` with the settings a tick or a run needs.
pub(crate) fn with_settings<T>(config: &Config, f: impl FnOnce(&Settings<'_>) -> T) -> T {
    let client = client(config);
    let (model, problem): (Option<&dyn Model>, Option<String>) = match &client {
        Ok(c) => (Some(c), None),
        Err(problem) => (None, Some(problem.clone())),
    };
    let lease = match &client {
        Ok(c) => c.options().worst_case(c.chain().len()) + Duration::from_secs(60),
        Err(_) => Duration::from_secs(600),
    };
    let host = host();
    let holder = lease::holder_name(
        &host,
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    let now = mc_cli::now_ms;
    let terminal = std::io::stderr().is_terminal();
    let models = mc_base::paths::models_dir(&mc_cli::env_paths());
    let provider = mc_search_core::embed::Provider::from_config(
        config,
        &|var| std::env::var(var).ok(),
        models.as_deref(),
    )
    .map_err(|e| e.to_string())
    .and_then(|p| p.ok_or_else(|| "no embeddings.model configured".to_string()))
    .and_then(|p| match p.local().map(|m| m.state()) {
        Some(mc_search_core::embed::local::State::Missing) => Err(format!(
            "the local model of {} is not fetched yet (mc-doctor setup, or mc-search index              --embeddings)",
            p.name
        )),
        _ => Ok(p),
    });
    let sleep = std::thread::sleep;
    let settings = Settings {
        dream: &config.dream,
        model,
        model_problem: problem,
        tz: jiff::tz::TimeZone::system(),
        host,
        holder,
        lease_ms: i64::try_from(lease.as_millis()).unwrap_or(i64::MAX),
        now: &now,
        progress: if terminal {
            &show_progress
        } else {
            &no_progress
        },
        embeddings: provider
            .as_ref()
            .map_err(Clone::clone)
            .map(|provider| Embedder {
                provider,
                sleep: &sleep,
            }),
    };
    f(&settings)
}

pub(crate) fn print(value: &impl serde::Serialize, pretty: bool) -> Result<(), Failure> {
    write_json(
        &serde_json::to_value(value).map_err(anyhow::Error::from)?,
        pretty,
    )?;
    Ok(())
}

/// The project of `dir`, registered with its folder, and the folder's top.
pub(crate) fn project_of(store: &mut Store, dir: &Path) -> Result<(String, PathBuf), Failure> {
    let known = dream::register(store, dir, mc_cli::now_ms())?;
    let root = known.dir.clone().unwrap_or_else(|| dir.to_path_buf());
    Ok((known.project, root))
}

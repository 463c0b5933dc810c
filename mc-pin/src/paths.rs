//! Where the database, the config layers and the OpenCode server are: the
//! environment is read here, the rules are `mc_core::paths`.

use std::path::{Path, PathBuf};

use mc_core::config::Layer;
use mc_core::paths::{self, EnvPaths};

fn env() -> EnvPaths {
    EnvPaths::from_lookup(&|name| std::env::var_os(name), working_dir())
}

/// `--db`, else `MC_DB`, else `$XDG_DATA_HOME/mc/context.db`.
pub fn db_path(flag: Option<&Path>) -> anyhow::Result<PathBuf> {
    Ok(paths::db_path(flag, &env())?)
}

/// `OPENCODE_URL`: the OpenCode server, when no flag names one.
pub fn opencode_url_from_env() -> Option<String> {
    std::env::var("OPENCODE_URL")
        .ok()
        .filter(|v| !v.trim().is_empty())
}

/// The working directory: the project a new session row is attributed to
/// when nothing better names one.
pub fn working_dir() -> Option<PathBuf> {
    std::env::current_dir().ok()
}

/// Config layers, lowest first: user, project (of the working directory),
/// then `--config` or `MC_CONFIG`.
pub fn config_layers(flag: Option<&Path>) -> Vec<Layer> {
    paths::config_layers(flag, None, &env())
}

//! Where the database and the config layers live: the environment is read
//! here, the rules are `mc_core::paths`.

use std::path::{Path, PathBuf};

use mc_core::config::Layer;
use mc_core::paths::{self, EnvPaths};

fn env() -> EnvPaths {
    EnvPaths::from_lookup(&|name| std::env::var_os(name), std::env::current_dir().ok())
}

/// `--db`, else `MC_DB`, else `$XDG_DATA_HOME/mc/context.db`.
pub fn db_path(flag: Option<&Path>) -> anyhow::Result<PathBuf> {
    Ok(paths::db_path(flag, &env())?)
}

/// Config layers, lowest first: user, project, then `--config` or `MC_CONFIG`.
pub fn config_layers(flag: Option<&Path>, project_dir: Option<&Path>) -> Vec<Layer> {
    paths::config_layers(flag, project_dir, &env())
}

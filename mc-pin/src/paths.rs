//! Where the database, the config layers and the OpenCode server are. The
//! only place that reads the environment.

use std::path::{Path, PathBuf};

use mc_core::config::{Layer, Tier};

fn env_value(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

fn home() -> Option<PathBuf> {
    env_path("HOME")
}

/// `--db`, else `MC_DB`, else `$XDG_DATA_HOME/mc/context.db`.
pub fn db_path(flag: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(path) = flag {
        return Ok(path.to_path_buf());
    }
    if let Some(path) = env_path("MC_DB") {
        return Ok(path);
    }
    mc_core::store::default_db_path(env_path("XDG_DATA_HOME").as_deref(), home().as_deref())
        .ok_or_else(|| {
            anyhow::anyhow!("no database path: set HOME, XDG_DATA_HOME or MC_DB, or pass --db")
        })
}

/// `OPENCODE_URL`: the OpenCode server, when no flag names one.
pub fn opencode_url_from_env() -> Option<String> {
    env_value("OPENCODE_URL")
}

/// The working directory: the project a new session row is attributed to
/// when nothing better names one.
pub fn working_dir() -> Option<PathBuf> {
    std::env::current_dir().ok()
}

/// The folder whose `.mc/config.jsonc` is the project tier: the nearest
/// ancestor holding `.git`, else the folder itself.
fn project_root(dir: &Path) -> PathBuf {
    dir.ancestors()
        .find(|d| d.join(".git").exists())
        .unwrap_or(dir)
        .to_path_buf()
}

/// Config layers, lowest first: user, project (of the working directory),
/// then `--config` or `MC_CONFIG`.
pub fn config_layers(flag: Option<&Path>) -> Vec<Layer> {
    let mut layers = Vec::new();
    let user_base = env_path("XDG_CONFIG_HOME")
        .filter(|p| p.is_absolute())
        .or_else(|| home().map(|h| h.join(".config")));
    if let Some(base) = user_base {
        layers.push(Layer {
            tier: Tier::User,
            path: base.join("mc").join("config.jsonc"),
        });
    }
    if let Some(dir) = working_dir() {
        layers.push(Layer {
            tier: Tier::Project,
            path: project_root(&dir).join(".mc").join("config.jsonc"),
        });
    }
    if let Some(path) = flag
        .map(Path::to_path_buf)
        .or_else(|| env_path("MC_CONFIG"))
    {
        layers.push(Layer {
            tier: Tier::Override,
            path,
        });
    }
    layers
}

//! Where the database and the config layers live. The only place that reads
//! the environment for them.

use std::path::{Path, PathBuf};

use mc_core::config::{Layer, Tier};

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

/// The folder whose `.mc/config.jsonc` is the project tier: the nearest
/// ancestor holding `.git`, else the folder itself.
fn project_root(dir: &Path) -> PathBuf {
    dir.ancestors()
        .find(|d| d.join(".git").exists())
        .unwrap_or(dir)
        .to_path_buf()
}

/// Config layers, lowest first: user, project, then `--config` or `MC_CONFIG`.
pub fn config_layers(flag: Option<&Path>, project_dir: Option<&Path>) -> Vec<Layer> {
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
    let cwd = std::env::current_dir().ok();
    if let Some(dir) = project_dir.map(Path::to_path_buf).or(cwd) {
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

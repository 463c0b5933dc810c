//! Where the database and the config layers live.
//!
//! Pure functions of environment values: the binaries read the environment
//! (through [`EnvPaths::from_lookup`], handing it `std::env::var_os`) and pass
//! the result in, so every mc tool resolves paths the same way and tests can
//! drive the rules with made-up values.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::config::{Layer, Tier};
use crate::error::{Error, Result};

/// The environment values path resolution reads. Empty values count as unset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvPaths {
    pub home: Option<PathBuf>,
    pub xdg_config_home: Option<PathBuf>,
    pub xdg_data_home: Option<PathBuf>,
    pub xdg_cache_home: Option<PathBuf>,
    /// `MC_DB`: the database file.
    pub mc_db: Option<PathBuf>,
    /// `MC_CONFIG`: an override config file.
    pub mc_config: Option<PathBuf>,
    /// The working directory, the project folder when nothing names one.
    pub cwd: Option<PathBuf>,
}

impl EnvPaths {
    /// Collect the values through `lookup` (normally `std::env::var_os`);
    /// `cwd` is the process's working directory, if known.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<OsString>, cwd: Option<PathBuf>) -> Self {
        let path = |name: &str| lookup(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        EnvPaths {
            home: path("HOME"),
            xdg_config_home: path("XDG_CONFIG_HOME"),
            xdg_data_home: path("XDG_DATA_HOME"),
            xdg_cache_home: path("XDG_CACHE_HOME"),
            mc_db: path("MC_DB"),
            mc_config: path("MC_CONFIG"),
            cwd,
        }
    }
}

/// `--db`, else `MC_DB`, else `$XDG_DATA_HOME/mc/context.db`
/// (`~/.local/share/mc/context.db`).
pub fn db_path(flag: Option<&Path>, env: &EnvPaths) -> Result<PathBuf> {
    if let Some(path) = flag {
        return Ok(path.to_path_buf());
    }
    if let Some(path) = &env.mc_db {
        return Ok(path.clone());
    }
    crate::store::default_db_path(env.xdg_data_home.as_deref(), env.home.as_deref()).ok_or_else(
        || {
            Error::Config("no database path: none of --db, MC_DB, XDG_DATA_HOME, HOME".into())
                .with_hint("pass --db, or set MC_DB, XDG_DATA_HOME or HOME")
        },
    )
}

/// Where local embedding models are kept: `$XDG_CACHE_HOME/mc/models`
/// (`~/.cache/mc/models`); None when neither is set.
pub fn models_dir(env: &EnvPaths) -> Option<PathBuf> {
    env.xdg_cache_home
        .clone()
        .or_else(|| env.home.as_ref().map(|h| h.join(".cache")))
        .map(|base| base.join("mc").join("models"))
}

/// The folder whose `.mc/config.jsonc` is the project tier: the nearest
/// ancestor holding `.git`, else the folder itself.
fn project_root(dir: &Path) -> PathBuf {
    dir.ancestors()
        .find(|d| d.join(".git").exists())
        .unwrap_or(dir)
        .to_path_buf()
}

/// Config layers, lowest first: the user file
/// (`$XDG_CONFIG_HOME/mc/config.jsonc`, `~/.config/mc/config.jsonc`), the
/// project file (`<repo>/.mc/config.jsonc` of `project_dir`, else of the
/// working directory), then `--config` or `MC_CONFIG`.
pub fn config_layers(
    flag: Option<&Path>,
    project_dir: Option<&Path>,
    env: &EnvPaths,
) -> Vec<Layer> {
    let mut layers = Vec::new();
    let user_base = env
        .xdg_config_home
        .clone()
        .filter(|p| p.is_absolute())
        .or_else(|| env.home.as_ref().map(|h| h.join(".config")));
    if let Some(base) = user_base {
        layers.push(Layer::new(Tier::User, base.join("mc").join("config.jsonc")));
    }
    if let Some(dir) = project_dir.or(env.cwd.as_deref()) {
        layers.push(Layer::new(
            Tier::Project,
            project_root(dir).join(".mc").join("config.jsonc"),
        ));
    }
    if let Some(path) = flag
        .map(Path::to_path_buf)
        .or_else(|| env.mc_config.clone())
    {
        layers.push(Layer::new(Tier::Override, path));
    }
    layers
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> EnvPaths {
        let owned: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        EnvPaths::from_lookup(
            &|name| {
                owned
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| OsString::from(v))
            },
            Some(PathBuf::from("/srv/cwd")),
        )
    }

    #[test]
    fn db_path_precedence() {
        let e = env(&[("HOME", "/h"), ("MC_DB", "/x/db"), ("XDG_DATA_HOME", "/d")]);
        assert_eq!(
            db_path(Some(Path::new("/flag.db")), &e).unwrap(),
            PathBuf::from("/flag.db")
        );
        assert_eq!(db_path(None, &e).unwrap(), PathBuf::from("/x/db"));
        let e = env(&[("HOME", "/h"), ("MC_DB", ""), ("XDG_DATA_HOME", "/d")]);
        assert_eq!(
            db_path(None, &e).unwrap(),
            PathBuf::from("/d/mc/context.db")
        );
        let e = env(&[("HOME", "/h")]);
        assert_eq!(
            db_path(None, &e).unwrap(),
            PathBuf::from("/h/.local/share/mc/context.db")
        );
        let none = db_path(None, &env(&[])).unwrap_err();
        assert_eq!(none.kind(), crate::error::ErrorKind::Config);
        assert!(none.hints()[0].contains("--db"), "{:?}", none.hints());
    }

    #[test]
    fn config_layers_in_tier_order() {
        let e = env(&[("HOME", "/h"), ("MC_CONFIG", "/o.jsonc")]);
        let layers = config_layers(None, Some(Path::new("/nonexistent/p")), &e);
        assert_eq!(
            layers,
            vec![
                Layer::new(Tier::User, "/h/.config/mc/config.jsonc"),
                Layer::new(Tier::Project, "/nonexistent/p/.mc/config.jsonc"),
                Layer::new(Tier::Override, "/o.jsonc"),
            ]
        );
        // A relative XDG_CONFIG_HOME is ignored; the flag beats MC_CONFIG; the
        // working directory stands in for a missing project dir.
        let e = env(&[
            ("HOME", "/h"),
            ("XDG_CONFIG_HOME", "rel"),
            ("MC_CONFIG", "/o"),
        ]);
        let layers = config_layers(Some(Path::new("/f.jsonc")), None, &e);
        assert_eq!(layers[0].path, PathBuf::from("/h/.config/mc/config.jsonc"));
        assert_eq!(layers[1].path, PathBuf::from("/srv/cwd/.mc/config.jsonc"));
        assert_eq!(layers[2].path, PathBuf::from("/f.jsonc"));
    }
}

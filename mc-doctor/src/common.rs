//! What the commands share: the environment as the core sees it, and output
//! (colour only on a terminal).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use mc_cli::Failure;
use mc_doctor_core::Env;

use crate::args::Args;

/// The environment, as the doctor's core sees it.
pub(crate) fn environment(args: &Args) -> Result<Env, Failure> {
    let env_paths = mc_cli::env_paths();
    let db = mc_cli::db_path(args.db.as_deref()).map_err(Failure::from)?;
    let layers = mc_base::paths::config_layers(args.config.as_deref(), None, &env_paths);
    let abs = |p: Option<PathBuf>| p.filter(|p| p.is_absolute());
    Ok(Env {
        home: env_paths.home.clone().unwrap_or_default(),
        xdg_config_home: abs(env_paths.xdg_config_home.clone()),
        xdg_data_home: abs(env_paths.xdg_data_home.clone()),
        models_dir: mc_base::paths::models_dir(&env_paths).filter(|p| p.is_absolute()),
        path: std::env::var_os("PATH").unwrap_or_default(),
        vars: std::env::vars().collect(),
        cwd: env_paths.cwd.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        db,
        layers,
        now_ms: mc_cli::now_ms(),
    })
}

pub(crate) fn color() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

pub(crate) fn print(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

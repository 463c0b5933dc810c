//! What the subcommands share: the scope (project, harness, session) from a
//! command's fields, the folder as hooks name it, the embeddings model.

use std::path::{Path, PathBuf};

use anyhow::anyhow;
use serde_json::{Map, Value};

use mc_base::identity::project_identity;
use mc_cli::Failure;
use mc_search_core::{self as search, Scope};

pub(crate) fn field<'a>(fields: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    fields
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The project folder: the field, else the working directory.
pub(crate) fn project_dir(fields: &Map<String, Value>) -> Result<PathBuf, Failure> {
    field(fields, "project_dir")
        .map(PathBuf::from)
        .or_else(mc_cli::working_dir)
        .ok_or_else(|| Failure::input(anyhow!("no project folder: pass --project-dir")))
}

/// The project folder of `--project-dir`, else the working directory.
pub(crate) fn project_dir_flag(args: &crate::args::Args) -> Result<PathBuf, Failure> {
    args.at
        .project_dir
        .clone()
        .or_else(mc_cli::working_dir)
        .ok_or_else(|| Failure::input(anyhow!("no project folder: pass --project-dir")))
}

pub(crate) fn scope_of(fields: &Map<String, Value>, dir: &Path) -> Scope {
    Scope {
        project: project_identity(dir),
        harness: field(fields, "harness").unwrap_or("opencode").to_string(),
        session_id: field(fields, "session_id").map(str::to_string),
    }
}

/// The folder as the hooks and the server both name it.
pub(crate) fn canonical(dir: &Path) -> String {
    std::fs::canonicalize(dir)
        .unwrap_or_else(|_| dir.to_path_buf())
        .display()
        .to_string()
}

/// The configured embeddings provider (its key read from the environment),
/// or why it cannot be used; None when none is configured.
pub(crate) fn embeddings_of(
    config: &mc_base::config::Config,
) -> Option<Result<search::embed::Provider, String>> {
    let models = mc_base::paths::models_dir(&mc_cli::env_paths());
    search::embed::Provider::for_search(config, &|var| std::env::var(var).ok(), models.as_deref())
}

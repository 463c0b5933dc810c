//! `private`: a memory marked private (never exported) or shareable again.

use std::path::Path;
use std::process::ExitCode;

use serde_json::json;

use mc_cli::{Failure, write_json};
use mc_dream_core as dream;

use crate::args::Args;
use crate::common::{project_dir, project_of, setup};

pub(crate) fn private(
    args: &Args,
    id: i64,
    private: bool,
    project: Option<&Path>,
) -> Result<ExitCode, Failure> {
    let dir = project_dir(project)?;
    let (_config, mut store) = setup(args, Some(&dir))?;
    let (project, _) = project_of(&mut store, &dir)?;
    dream::set_private(&mut store, &project, id, private)?;
    write_json(&json!({"id": id, "private": private}), args.global.pretty)?;
    Ok(ExitCode::SUCCESS)
}

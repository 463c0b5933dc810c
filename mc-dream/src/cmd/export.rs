//! `export`: the project's memories written to `<repo>/.mc/memory/<CATEGORY>.md`.

use std::path::Path;
use std::process::ExitCode;

use mc_cli::Failure;
use mc_dream_core::team;

use crate::args::{Args, NAME};
use crate::common::{print, project_dir, project_of, setup};

pub(crate) fn export(
    args: &Args,
    project: Option<&Path>,
    force: bool,
) -> Result<ExitCode, Failure> {
    let dir = project_dir(project)?;
    let (_config, mut store) = setup(args, Some(&dir))?;
    let (project, root) = project_of(&mut store, &dir)?;
    let report = team::export(&mut store, &project, &root, force)?;
    for refused in &report.refused {
        eprintln!(
            "{NAME}: warning: memory {} ({}) was not exported: {}",
            refused.id, refused.category, refused.reason
        );
    }
    print(&report, args.global.pretty)?;
    Ok(ExitCode::SUCCESS)
}

//! `import`: `<repo>/.mc/memory/*.md` read into the project's memories.

use std::path::Path;
use std::process::ExitCode;

use mc_cli::Failure;
use mc_dream_core::team;

use crate::args::{Args, NAME};
use crate::common::{print, project_dir, project_of, setup};

pub(crate) fn import(args: &Args, project: Option<&Path>) -> Result<ExitCode, Failure> {
    let dir = project_dir(project)?;
    let (_config, mut store) = setup(args, Some(&dir))?;
    let (project, root) = project_of(&mut store, &dir)?;
    let report = team::import(&mut store, &project, &root, mc_cli::now_ms())?;
    for refused in &report.refused {
        eprintln!(
            "{NAME}: warning: entry {} of {}.md was not imported: {}",
            refused.id, refused.category, refused.reason
        );
    }
    print(&report, args.global.pretty)?;
    Ok(ExitCode::SUCCESS)
}

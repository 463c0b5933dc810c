//! `status`: per project and task, the schedule, last run and result, next
//! due and lease.

use std::path::Path;
use std::process::ExitCode;

use mc_base::identity::project_identity;
use mc_cli::Failure;
use mc_dream_core as dream;

use crate::args::Args;
use crate::common::{print, project_dir, setup, with_settings};

pub(crate) fn status(args: &Args, project: Option<&Path>) -> Result<ExitCode, Failure> {
    let dir = project.map(|p| project_dir(Some(p))).transpose()?;
    let (config, mut store) = setup(args, dir.as_deref())?;
    let only = dir.as_deref().map(|d| {
        project_identity(&mc_dream_core::gitlog::toplevel(d).unwrap_or_else(|| d.to_path_buf()))
    });
    let mut report = with_settings(&config, |settings| {
        dream::status(&mut store, settings, only.as_deref())
    })?;
    report.model = config.dream.model.clone();
    print(&report, args.global.pretty)?;
    Ok(ExitCode::SUCCESS)
}

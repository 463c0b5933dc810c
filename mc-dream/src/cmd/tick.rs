//! `tick`: every due task of every known project, then exit (for cron).

use std::process::ExitCode;

use mc_cli::Failure;
use mc_dream_core as dream;

use crate::args::{Args, NAME};
use crate::common::{print, setup, with_settings};

pub(crate) fn tick(args: &Args) -> Result<ExitCode, Failure> {
    let (config, mut store) = setup(args, None)?;
    let report = with_settings(&config, |settings| dream::tick(&mut store, settings))?;
    for project in &report.projects {
        for task in project.tasks.iter().filter(|t| t.outcome == "failed") {
            if let Some(failure) = &task.failure {
                eprintln!(
                    "{NAME}: warning: {} {} failed: {}",
                    project.project, task.task, failure.message
                );
                mc_cli::hint(NAME, &failure.hints);
            }
        }
    }
    print(&report, args.global.pretty)?;
    Ok(ExitCode::SUCCESS)
}

//! `run`: one task now, in one project.

use std::path::Path;
use std::process::ExitCode;

use anyhow::anyhow;

use mc_cli::Failure;
use mc_dream_core::{self as dream, Task};

use crate::args::{Args, NAME};
use crate::common::{print, project_dir, setup, with_settings};

pub(crate) fn parse_task(name: &str) -> Result<Task, Failure> {
    Task::parse(name).ok_or_else(|| {
        Failure::input(anyhow!(
            "unknown task {name:?} (one of {})",
            Task::ALL.map(Task::name).join(", ")
        ))
    })
}

pub(crate) fn run(args: &Args, task: &str, project: Option<&Path>) -> Result<ExitCode, Failure> {
    let task = parse_task(task)?;
    let dir = project_dir(project)?;
    let (config, mut store) = setup(args, Some(&dir))?;
    let report = with_settings(&config, |settings| {
        dream::run_now(&mut store, settings, &dir, task)
    })?;
    print(&report, args.global.pretty)?;
    let failed = report.tasks.iter().find_map(|t| t.failure.as_ref());
    if let Some(failure) = failed {
        eprintln!("{NAME}: error: {} failed: {}", task.name(), failure.message);
        mc_cli::hint(NAME, &failure.hints);
        return Ok(ExitCode::from(1));
    }
    if let Some(reason) = report
        .tasks
        .iter()
        .find(|t| t.outcome == "skipped")
        .and_then(|t| t.reason.as_ref())
    {
        eprintln!("{NAME}: warning: {} skipped: {reason}", task.name());
    }
    Ok(ExitCode::SUCCESS)
}

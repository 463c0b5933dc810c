//! The checks (no subcommand): each PASS/WARN/FAIL, `--fix`, `--issue`,
//! `--json`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::anyhow;
use serde_json::{Value, json};

use mc_cli::Failure;
use mc_doctor_core::{self as doctor, Check, Env, checks, issue, setup};

use crate::args::Args;
use crate::common::{color, print};

pub(crate) fn check_options(args: &Args) -> checks::Options {
    checks::Options {
        probes: !args.no_probe,
        probe_timeout: Duration::from_millis(args.probe_timeout_ms.max(1)),
        crontab: std::env::var_os("MC_CRONTAB")
            .filter(|v| !v.is_empty())
            .map_or_else(|| PathBuf::from("crontab"), PathBuf::from),
        ..checks::Options::default()
    }
}

/// The checks (no subcommand): `--fix`, `--issue`, `--json`.
pub(crate) fn run(args: &Args, env: &Env) -> Result<ExitCode, Failure> {
    let options = check_options(args);
    let before = checks::run(env, &options);
    if let Some(file) = &args.issue {
        // `--issue` alone: the default name, in the working folder.
        let file = file
            .clone()
            .unwrap_or_else(|| PathBuf::from(issue::file_name(env.now_ms)));
        let state = std::env::var_os("XDG_STATE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| env.home.join(".local/state"));
        let logs = vec![state.join("mc").join("dream.log")];
        let text = issue::report(env, &before, &logs);
        std::fs::write(&file, text)
            .map_err(|e| Failure::runtime(anyhow!("cannot write {}: {e}", file.display())))?;
        if args.json {
            mc_cli::write_json(&json!({"issue": file.display().to_string()}), true)?;
        } else {
            print(&format!(
                "Wrote {} (home paths and secrets redacted; read it before you share it; nothing was sent).\n",
                file.display()
            ))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    if !args.fix {
        return report(args, &before, None);
    }
    let fixed = setup::fix(env, &before);
    let after = checks::run(env, &options);
    if !args.json {
        let mut text = String::new();
        for change in &fixed.changes {
            text.push_str(&change.diff);
        }
        for line in &fixed.repaired {
            text.push_str(&format!("FIXED  {line}\n"));
        }
        for line in &fixed.failed {
            text.push_str(&format!("NOT FIXED  {line}\n"));
        }
        if fixed.repaired.is_empty() && fixed.failed.is_empty() {
            text.push_str("Nothing --fix can repair.\n");
        }
        text.push_str("\nAfter the repairs:\n");
        print(&text)?;
    }
    report(args, &after, Some((&before, &fixed)))
}

pub(crate) fn report(
    args: &Args,
    checks: &[Check],
    fixed: Option<(&[Check], &setup::Fixed)>,
) -> Result<ExitCode, Failure> {
    let summary = doctor::summary(checks);
    if args.json {
        let mut doc = json!({
            "version": env!("CARGO_PKG_VERSION"),
            "checks": checks,
            "summary": summary,
        });
        if let Some((before, fixed)) = fixed {
            doc["before"] = json!({"checks": before, "summary": doctor::summary(before)});
            doc["fixed"] = serde_json::to_value(fixed).unwrap_or(Value::Null);
        }
        mc_cli::write_json(&doc, true)?;
    } else {
        print(&doctor::render(checks, color()))?;
    }
    Ok(if summary.fail > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

//! `setup`: mc wired into the chosen harnesses (the wizard on a terminal).

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::anyhow;
use serde_json::{Value, json};

use mc_cli::Failure;
use mc_doctor_core::harness::HarnessId;
use mc_doctor_core::{Env, setup};

use crate::args::{Args, SetupArgs};
use crate::common::print;
use crate::outcome::outcome_text;

pub(crate) fn parse_harnesses(names: &[String]) -> Result<Vec<HarnessId>, Failure> {
    let mut out = Vec::new();
    for name in names.iter().filter(|n| !n.trim().is_empty()) {
        let id = HarnessId::parse(name).ok_or_else(|| {
            Failure::input(anyhow!(
                "unknown harness {name:?} (opencode, claude-code, codex, pi)"
            ))
        })?;
        if !out.contains(&id) {
            out.push(id);
        }
    }
    Ok(out)
}

pub(crate) fn historian_choice(a: &SetupArgs) -> Result<Option<setup::Historian>, Failure> {
    let Some(model) = &a.historian_model else {
        if a.historian_command.is_some() || a.historian_kind.is_some() {
            return Err(Failure::input(anyhow!(
                "--historian-kind/--historian-command need --historian-model PROVIDER/MODEL"
            )));
        }
        return Ok(None);
    };
    Ok(Some(setup::Historian {
        model: model.clone(),
        kind: a.historian_kind.clone(),
        base_url: a.historian_base_url.clone(),
        key_env: a.historian_key_env.clone(),
        command: a
            .historian_command
            .as_ref()
            .map(|c| c.split_whitespace().map(str::to_string).collect()),
    }))
}

pub(crate) fn detected(env: &Env) -> Vec<HarnessId> {
    mc_doctor_core::harness::integrations(env)
        .into_iter()
        .filter(|i| i.detected.is_some())
        .map(|i| i.id)
        .collect()
}

pub(crate) fn run_setup(args: &Args, a: &SetupArgs, env: &Env) -> Result<ExitCode, Failure> {
    let mut harnesses = parse_harnesses(&a.harness)?;
    if a.uninstall {
        let outcome = setup::uninstall(env, &harnesses, a.dry_run).map_err(Failure::from)?;
        return show_outcome(args, &outcome, a.dry_run, None);
    }
    let interactive = !a.yes && !a.dry_run;
    if interactive {
        if !std::io::stdin().is_terminal() {
            return Err(Failure::input(anyhow!(
                "setup asks before it writes: run it on a terminal, or pass --yes (or --dry-run)"
            )));
        }
        let preselected = if harnesses.is_empty() {
            detected(env)
        } else {
            harnesses
        };
        return crate::wizard::run(env, preselected);
    }
    if harnesses.is_empty() {
        harnesses = detected(env);
        if harnesses.is_empty() && a.historian_model.is_none() && !a.embeddings {
            return Err(Failure::input(anyhow!(
                "no harness found (opencode, claude, codex or pi on PATH, or their folders): name one with --harness"
            )));
        }
    }
    let request = setup::Request {
        harnesses,
        historian: historian_choice(a)?,
        dry_run: a.dry_run,
    };
    let mut outcome = setup::setup(env, &request).map_err(Failure::from)?;
    if a.embeddings {
        outcome.notes.push(fetch_embeddings(env, a.dry_run)?);
    }
    let cron = if a.cron {
        Some(setup::install_cron(env, a.dry_run).map_err(Failure::from)?)
    } else {
        None
    };
    show_outcome(args, &outcome, a.dry_run, cron)
}

/// `--embeddings`: the local model fetched (or, dry, what would be).
/// `MC_MODELS_URL` replaces its download address (tests serve the files
/// from 127.0.0.1; the checksums are the same).
pub(crate) fn fetch_embeddings(env: &Env, dry_run: bool) -> Result<String, Failure> {
    let Some(model) = setup::embeddings_to_fetch(env) else {
        return Ok(
            "embeddings: nothing to fetch (the local model is in place, or \
                   embeddings.model names no local model)"
                .into(),
        );
    };
    if dry_run {
        return Ok(format!(
            "embeddings: would fetch the local model {} into {}",
            model.spec.name,
            model.dir.display()
        ));
    }
    let base = std::env::var("MC_MODELS_URL")
        .ok()
        .filter(|u| !u.is_empty());
    setup::fetch_embeddings(&model, base, &std::thread::sleep).map_err(Failure::from)
}

pub(crate) fn show_outcome(
    args: &Args,
    outcome: &setup::Outcome,
    dry_run: bool,
    cron: Option<String>,
) -> Result<ExitCode, Failure> {
    if args.json {
        let mut doc = serde_json::to_value(outcome).unwrap_or(Value::Null);
        doc["dry_run"] = json!(dry_run);
        if let Some(cron) = cron {
            doc["cron"] = json!(cron);
        }
        mc_cli::write_json(&doc, true)?;
        return Ok(ExitCode::SUCCESS);
    }
    print(&outcome_text(outcome, dry_run, cron.as_deref()))?;
    Ok(ExitCode::SUCCESS)
}

//! `cron`: the crontab line for this install; `--install` adds it to the
//! user's crontab (once), `--uninstall` removes it (through `MC_CRONTAB`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command as Process, ExitCode, Stdio};

use anyhow::{Context, anyhow};
use serde_json::{Value, json};

use mc_cli::{Failure, write_json};
use mc_dream_core::crontab;
use mc_llm as llm;

use crate::args::{Args, NAME};

/// The `crontab` program: `MC_CRONTAB` when set (tests point it at a fake),
/// else `crontab` on PATH.
pub(crate) fn crontab_program() -> PathBuf {
    std::env::var_os("MC_CRONTAB")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("crontab"), PathBuf::from)
}

/// The user's crontab text (empty when they have none).
pub(crate) fn read_crontab(program: &Path) -> Result<String, Failure> {
    let out = Process::new(program)
        .arg("-l")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", program.display()))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("no crontab") {
        return Ok(String::new());
    }
    Err(Failure::runtime(anyhow!(
        "{} -l failed ({}): {}",
        program.display(),
        out.status,
        err.trim()
    )))
}

pub(crate) fn write_crontab(program: &Path, text: &str) -> Result<(), Failure> {
    let mut child = Process::new(program)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {}", program.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(text.as_bytes())
            .context("writing the crontab")?;
    }
    let out = child.wait_with_output().context("writing the crontab")?;
    if !out.status.success() {
        return Err(Failure::runtime(anyhow!(
            "{} - failed ({}): {}",
            program.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

pub(crate) fn cron(args: &Args, install: bool, uninstall: bool) -> Result<ExitCode, Failure> {
    let binary = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .context("cannot find the path of mc-dream")?;
    // What cron must set: cron starts a job with almost no environment.
    let mut env: Vec<(String, String)> = Vec::new();
    let bin_dir = binary.parent().map(Path::to_path_buf).unwrap_or_default();
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    let path = if std::env::split_paths(&path).any(|p| p == bin_dir) {
        path
    } else {
        format!("{}:{path}", bin_dir.display())
    };
    env.push(("PATH".into(), path));
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    if let Some(db) = &args.global.db {
        env.push(("MC_DB".into(), absolute(db).display().to_string()));
    }
    if let Some(config) = &args.global.config {
        env.push(("MC_CONFIG".into(), absolute(config).display().to_string()));
    }
    for name in [
        "MC_DB",
        "MC_CONFIG",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "XDG_STATE_HOME",
        "TZ",
    ] {
        if env.iter().any(|(n, _)| n == name) {
            continue;
        }
        if let Ok(value) = std::env::var(name)
            && !value.is_empty()
        {
            env.push((name.into(), value));
        }
    }
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")));
    let log = state.map(|s| s.join("mc").join("dream.log"));
    let line = crontab::line(&crontab::LineSpec {
        binary: &binary,
        env: &env,
        log: log.as_deref(),
    });
    // Keys live in the environment of a shell; cron does not have them.
    let config = args.global.load_config(NAME, None);
    let mut notes: Vec<String> = Vec::new();
    for name in config.dream.chain() {
        if let Some(var) = llm::ModelRef::parse(&name)
            .and_then(|m| config.providers.get(&m.provider))
            .and_then(|p| p.api_key_env.clone())
            && !notes.iter().any(|n| n.contains(&var))
        {
            notes.push(format!(
                "{var} (the key of {name}) is read from the environment, which cron does not \
                 pass on: add a line `{var}=…` above mc-dream's line in your crontab"
            ));
        }
    }
    let program = crontab_program();
    let mut answer = json!({"line": line, "log": log.as_ref().map(|l| l.display().to_string())});
    if install || uninstall {
        let existing = read_crontab(&program)?;
        let (text, changed) = if install {
            crontab::install(&existing, &line)
        } else {
            crontab::uninstall(&existing)
        };
        if changed {
            if let Some(dir) = log.as_deref().and_then(Path::parent).filter(|_| install) {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
            }
            write_crontab(&program, &text)?;
        }
        answer["installed"] = Value::Bool(crontab::installed(&text));
        answer["changed"] = Value::Bool(changed);
    } else {
        let existing = read_crontab(&program).ok();
        answer["installed"] = existing.map_or(Value::Null, |t| Value::Bool(crontab::installed(&t)));
    }
    if !notes.is_empty() {
        answer["notes"] = json!(notes);
        for note in &notes {
            eprintln!("{NAME}: note: {note}");
        }
    }
    write_json(&answer, args.global.pretty)?;
    Ok(ExitCode::SUCCESS)
}

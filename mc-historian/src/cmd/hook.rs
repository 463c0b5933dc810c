//! `hook`: a Claude Code or Codex hook: when `check` says a run is due for
//! its transcript, `mc-historian run` in the background; always exits 0.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::anyhow;
use serde_json::Value;

use mc_cli::Failure;
use mc_history::historian::{self};

use crate::args::{Args, HookArgs, NAME, Source};
use crate::input::{load_input, session_setup};
use crate::model::{choose, client, client_failure};

/// `mc-historian hook`: never fails the hook; what went wrong is a warning.
pub(crate) fn run_hook(args: &Args, hook: &HookArgs) -> ExitCode {
    if let Err(failure) = hook_inner(args, hook) {
        let text = failure
            .error
            .chain()
            .map(|c| c.to_string())
            .collect::<Vec<_>>();
        mc_cli::warn(NAME, &[format!("hook: {}", text.join(": "))]);
    }
    ExitCode::SUCCESS
}

pub(crate) fn hook_inner(args: &Args, hook: &HookArgs) -> Result<(), Failure> {
    let text = mc_cli::read_stdin("expected a hook input (JSON) on stdin")?;
    if mc_cli::inside_historian_child() {
        // The historian's own model call ending: nothing of the user's to fold.
        return Ok(());
    }
    let input = mc_cli::parse_json(&text, "the hook input")?;
    let field = |key: &str| {
        input
            .get(key)
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
    };
    let Some(transcript) = field("transcript_path") else {
        return Err(Failure::input(anyhow!(
            "the hook input names no transcript_path: nothing to fold"
        )));
    };
    let transcript = PathBuf::from(transcript);
    if !transcript.is_file() {
        // Claude Code writes the transcript after the first prompt.
        return Ok(());
    }
    let source = Source {
        transcript: Some(transcript.clone()),
        harness: hook.harness.clone(),
        opencode_url: None,
        session: field("session_id").map(str::to_string),
        project_dir: field("cwd").map(PathBuf::from),
        context_limit: hook.context_limit,
        now_ms: None,
    };
    let mut loaded = load_input(args, &source)?;
    let (config, store) = session_setup(args, &mut loaded)?;
    // A model must be configured, or the harness's own usable, or there is
    // nothing a run could do.
    let choice = choose(&config, &source, &loaded, &store);
    client(&config, &choice, &source, &loaded.input).map_err(client_failure)?;
    let report = historian::check(store.conn(), &loaded.input, &config.transform)?;
    if !report.due.due {
        return Ok(());
    }
    // After a failure, wait before the next try (5 minutes), as the OpenCode
    // plugin backs off.
    if let Some(session) = mc_base::domain::sessions::find_session(
        store.conn(),
        &loaded.input.harness,
        &loaded.input.session_id,
    )?
    .map(|s| s.id)
        && let Some(status) = historian::status(store.conn(), session)?
        && let Some(failed) = status.last_failure
        && status.failures_since_success > 0
        && mc_cli::now_ms().saturating_sub(failed.started_ms) < HOOK_BACKOFF_MS
    {
        return Ok(());
    }
    drop(store);
    let exe = std::env::current_exe().map_err(|e| Failure::runtime(e.into()))?;
    let mut run = std::process::Command::new(exe);
    if let Some(db) = &args.global.db {
        run.arg("--db").arg(db);
    }
    if let Some(config) = &args.global.config {
        run.arg("--config").arg(config);
    }
    run.args([
        "run",
        "--harness",
        loaded.input.harness.as_str(),
        "--transcript",
    ])
    .arg(&transcript)
    .args(["--session", loaded.input.session_id.as_str()]);
    if let Some(dir) = &loaded.input.project_dir {
        run.arg("--project-dir").arg(dir);
    }
    if let Some(limit) = loaded.input.model.context_limit {
        run.args(["--context-limit", &limit.to_string()]);
    }
    run.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    if hook.wait {
        run.status().map_err(|e| Failure::runtime(e.into()))?;
        return Ok(());
    }
    // Its own process group: the harness may end the hook's group when the
    // hook returns or times out; the run outlives it.
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut run, 0);
    run.spawn().map_err(|e| Failure::runtime(e.into()))?;
    Ok(())
}

/// How long `hook` waits after a failed run before starting another.
pub(crate) const HOOK_BACKOFF_MS: i64 = 5 * 60 * 1000;

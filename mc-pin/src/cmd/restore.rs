//! `restore`: the pins (and the head) after a compaction, by hand or as a
//! Claude Code / Codex hook.

use std::path::Path;

use anyhow::anyhow;
use serde_json::Value;

use mc_cli::{Failure, Wait, now_ms, write_json};
use mc_pin_core::{self as pin, Event, Harness, NothingReason, RestoreReport, hook, opencode};

use crate::args::{Args, NAME, RestoreArgs};
use crate::common::{canonical, open_store, read_stdin, warn};
use crate::paths;

pub(crate) fn run_restore(args: &Args, flags: &RestoreArgs) -> Result<(), Failure> {
    let harness = flags.harness.as_deref().map(Harness::parse).transpose()?;
    let hook_harness = matches!(harness, Some(Harness::ClaudeCode | Harness::Codex));
    let result = restore(args, flags, harness);
    match result {
        // A SessionStart hook's exit 2 would only show an error: never use it there.
        Err(mut failure) if failure.code == 2 && hook_harness => {
            failure.code = 1;
            Err(failure)
        }
        other => other,
    }
}

pub(crate) fn restore(
    args: &Args,
    flags: &RestoreArgs,
    harness: Option<Harness>,
) -> Result<(), Failure> {
    let text = read_stdin("one event")?;
    let value = mc_cli::parse_json(&text, "the event on stdin")?;
    let looks_like_hook = value.get("hook_event_name").is_some();
    let event = match pin::classify(&value) {
        Ok(event) => event,
        // A hook input is never answered with exit 2 (it would only show an error).
        Err(e) if looks_like_hook => {
            return Err(Failure::runtime(e.into()));
        }
        Err(e) => return Err(e.into()),
    };
    match event {
        Event::OtherHook { .. } => Ok(()),
        Event::OtherEvent { kind } => {
            let report = RestoreReport::none(NothingReason::NotACompaction, None);
            let mut value = serde_json::to_value(&report).map_err(anyhow::Error::from)?;
            value["event"] = Value::String(kind);
            write_json(&value, args.global.pretty)?;
            Ok(())
        }
        Event::Compacted(compacted) => {
            if harness.is_some_and(|h| h != Harness::OpenCode) {
                return Err(Failure::input(anyhow!(
                    "a session.compacted event is an OpenCode event, not {}",
                    harness.map_or("", Harness::as_str)
                )));
            }
            let url = flags
                .opencode_url
                .clone()
                .or_else(paths::opencode_url_from_env)
                .ok_or_else(|| {
                    Failure::input(anyhow!(
                        "restoring after an OpenCode compaction needs the OpenCode server"
                    ))
                    .with_hints(["pass --opencode-url URL or set OPENCODE_URL".to_string()])
                })?;
            let mut api = mc_cli::opencode(&url);
            if flags.directory.is_some() {
                api = api.with_directory(flags.directory.as_deref());
            }
            let options = opencode::RestoreOptions {
                dry_run: flags.dry_run,
                reply: flags.reply,
            };
            // The claim that makes this restorer the only one lives in mc's database.
            let mut store = open_store(args, &args.global.load_config(NAME, None))?;
            let report = opencode::restore(&mut store, &api, &compacted, options, now_ms())?;
            warn(&report.warnings);
            write_json(
                &serde_json::to_value(&report).map_err(anyhow::Error::from)?,
                args.global.pretty,
            )?;
            Ok(())
        }
        // The historian's own `claude -p` / `codex exec`: no record, no pins, and
        // not the folder's current session.
        Event::SessionStart(_) if mc_cli::inside_historian_child() => Ok(()),
        Event::SessionStart(input) => {
            // The transcript tells Codex's rollouts apart; the flag says otherwise.
            let harness = match harness {
                Some(h @ (Harness::ClaudeCode | Harness::Codex | Harness::Pi)) => h,
                _ => Harness::ClaudeCode,
            };
            restore_hook(args, flags, harness, &input).map_err(|mut f| {
                f.code = 1;
                f
            })
        }
    }
}

/// Whether the harness's calls go through mc's gateway (`http://` +
/// `gateway.listen`): Claude Code's `ANTHROPIC_BASE_URL` (the settings'
/// `env` is in the hook's environment) is it; Codex runs under
/// `mc-transform codex` (which names the gateway's `/openai` in
/// `MC_CODEX_GATEWAY` for the run), or its `config.toml` selects a provider
/// whose base URL that is (what `mc-doctor setup --harness codex` writes).
fn through_gateway(config: &mc_base::config::Config, harness: Harness) -> bool {
    let own = format!("http://{}", config.gateway.listen);
    let is = |url: &str, want: &str| url.trim_end_matches('/') == want;
    match harness {
        Harness::ClaudeCode => std::env::var("ANTHROPIC_BASE_URL").is_ok_and(|url| is(&url, &own)),
        Harness::Codex => {
            let url = format!("{own}{}", mc_gateway::OPENAI_PREFIX);
            std::env::var("MC_CODEX_GATEWAY").is_ok_and(|u| is(&u, &url))
                || mc_cli::codex_config()
                    .is_some_and(|text| pin::codex_config::selects_gateway(&text, &url))
        }
        _ => false,
    }
}

pub(crate) fn restore_hook(
    args: &Args,
    flags: &RestoreArgs,
    harness: Harness,
    input: &pin::HookInput,
) -> Result<(), Failure> {
    let project = input.cwd.as_deref().map(Path::new);
    let config = args.global.load_config(NAME, project);
    // A hook the harness waits on: at most the hook's wait for a sibling's
    // lock. The pins are read without the write lock; a claim that cannot
    // take it within that wait is kept beside the database (`pin::aside`).
    let mut store = mc_cli::open_store_waiting(args.global.db.as_deref(), &config, Wait::Hook)?;
    // Through mc's gateway the head goes first in every call and carries the
    // project's memory and the profile from the session's first call on (the
    // session learns its project here: a request names no folder), and the
    // historian's compartments from mc's next busting call on — the first
    // call after a Claude Code compaction is one when the head has a fold to
    // show — so the record is the pins alone: the fold in both would be
    // shown twice until the harness compacts again. Codex through the
    // gateway the same.
    let gateway = through_gateway(&config, harness);
    if gateway
        && !flags.dry_run
        && let Some(dir) = &input.cwd
        && let Err(e) = pin::local::ensure_project(
            &mut store,
            harness.as_str(),
            &input.session_id,
            Path::new(&canonical(Path::new(dir))),
            now_ms(),
        )
    {
        warn(&[format!("could not record the session's project: {e}")]);
    }
    let options = hook::HookOptions {
        transcript: flags.transcript.as_deref().map(Path::new),
        max_transcript_bytes: config.transcript.max_bytes,
        dry_run: flags.dry_run,
        history: !flags.pins_only && !gateway,
        memory: !gateway,
        dates: config.transform.temporal_awareness,
        wait: std::time::Duration::from_millis(config.sqlite.hook_busy_timeout_ms),
    };
    let report = hook::restore(&mut store, harness, input, options, now_ms())?;
    warn(&report.warnings);
    if report
        .pending
        .as_ref()
        .is_some_and(hook::Pending::locked_out)
    {
        // Waited once already: what is left to record does not wait again.
        store.set_busy_timeout(std::time::Duration::ZERO)?;
    }
    if !flags.dry_run
        && let Some(dir) = &input.cwd
    {
        // The folder's current session, as `mc-search session-start` records
        // it: what an MCP server there and `mc-pin` run inside the session read.
        let transcript = input.transcript_path.as_deref().and_then(Path::to_str);
        let recorded = store.write(|tx| {
            mc_base::domain::sessions::record_current(
                tx,
                harness.as_str(),
                &canonical(Path::new(dir)),
                &input.session_id,
                transcript,
                now_ms(),
            )
        });
        if let Err(e) = recorded {
            warn(&[format!(
                "could not record the folder's current session: {e}"
            )]);
        }
    }
    let Some(output) = &report.hook_output else {
        return Ok(());
    };
    if let Err(e) = write_json(output, args.global.pretty) {
        // Not out: give the compaction back so the next event can restore it.
        if let Err(release) = hook::release(&mut store, &report) {
            warn(&[format!(
                "the pins could not be printed, and the claim on this compaction could not \
                 be given back: {release}"
            )]);
        }
        return Err(e.into());
    }
    // The context is out; only now does the claim finish and the cursor move.
    match hook::commit(&mut store, &report, now_ms()) {
        Ok(None) => {}
        Ok(Some(warning)) => warn(&[warning]),
        Err(e) => warn(&[format!(
            "the pins were restored, but mc could not record it: {e}"
        )]),
    }
    Ok(())
}

//! `pin`, `unpin` and `list`: the request from flags, stdin and the
//! session's environment, then the core against OpenCode or mc's database.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::anyhow;

use mc_base::config::Config;
use mc_cli::{Failure, now_ms, write_json};
use mc_pin_core::{
    self as pin, Action, Harness, PinOutcome, PinRequest, RequestFields, Target, local, opencode,
};

use crate::args::{Args, NAME, TargetArgs};
use crate::common::{homes, open_store, read_stdin, warn};
use crate::paths;

/// The request from the flags, completed from JSON on stdin when `--session`
/// is not given; and the server URL, if the session is an OpenCode one.
pub(crate) fn request_of(
    action: Action,
    flags: &TargetArgs,
    config: &Config,
) -> Result<(PinRequest, Option<String>, Option<String>), Failure> {
    let fields = if flags.session.is_none() && !std::io::stdin().is_terminal() {
        let text = read_stdin("the request (or pass --session)")?;
        if text.trim().is_empty() {
            RequestFields::default()
        } else {
            let value = mc_cli::parse_json(&text, "the request on stdin")?;
            RequestFields::from_value(&value)?
        }
    } else {
        RequestFields::default()
    };
    let env = mc_cli::session::SessionEnv::from_env();
    let harness_name = flags
        .harness
        .clone()
        .or(fields.harness)
        // Run from inside a session (a `!` command, the agent's shell): the
        // harness says so in the environment.
        .or_else(|| env.harness().map(str::to_string))
        .unwrap_or_else(|| "opencode".into());
    let harness = Harness::parse(&harness_name)?;
    let homes = homes();
    let cwd = mc_cli::working_dir();
    let mut located = None;
    let session_id = flags
        .session
        .clone()
        .or(fields.session_id)
        .filter(|s| !s.is_empty())
        .or_else(|| match harness {
            Harness::ClaudeCode | Harness::Codex => env.session(harness.as_str()),
            // A Pi session file names its session in its first line.
            Harness::Pi => flags
                .transcript
                .as_deref()
                .or(fields.transcript.as_deref().map(Path::new))
                .and_then(mc_cli::session::pi_session_of),
            Harness::OpenCode => None,
        })
        .or_else(|| {
            // The session most recently written in this folder.
            let (id, path) = pin::locate::newest_session(&homes, harness, cwd.as_deref()?)?;
            located = Some(path);
            Some(id)
        })
        .ok_or_else(|| {
            Failure::input(anyhow!("no session given")).with_hints([
                "pass --session ID, or \"session_id\" in the JSON on stdin".to_string(),
            ])
        })?;
    let target = match (&flags.message, &flags.last, fields.message_id, fields.last) {
        (Some(id), _, _, _) => Some(Target::Id(id.clone())),
        (None, Some(role), _, _) => Some(Target::Last(pin::check_role(role)?)),
        (None, None, Some(id), _) => Some(Target::Id(id)),
        (None, None, None, Some(role)) => Some(Target::Last(pin::check_role(&role)?)),
        (None, None, None, None) => None,
    };
    match (action, &target) {
        (Action::Pin, None) => {
            return Err(Failure::input(anyhow!(
                "pin needs --message ID or --last user|assistant"
            )));
        }
        (Action::Unpin, None | Some(Target::Last(_))) => {
            return Err(Failure::input(anyhow!("unpin needs --message ID")));
        }
        _ => {}
    }
    let explicit_url = flags.opencode_url.clone().or(fields.opencode_url);
    let url = match harness {
        Harness::OpenCode => explicit_url.or_else(paths::opencode_url_from_env),
        _ if explicit_url.is_some() => {
            return Err(Failure::input(anyhow!(
                "--opencode-url is for OpenCode sessions; {} pins live in mc's database",
                harness.as_str()
            )));
        }
        _ => None,
    };
    let transcript_path = flags
        .transcript
        .clone()
        .or(fields.transcript.map(PathBuf::from))
        .or(located)
        .or_else(|| {
            // Where the harness keeps the session's transcript (read only
            // when the command needs it).
            pin::locate::transcript(&homes, harness, &session_id, cwd.as_deref())
        });
    let request = PinRequest {
        harness,
        session_id,
        target,
        role: flags.role.clone().or(fields.role),
        created_at: flags.created_at.or(fields.created_at),
        transcript: transcript_path,
        max_transcript_bytes: config.transcript.max_bytes,
    };
    Ok((request, url, flags.directory.clone().or(fields.directory)))
}

pub(crate) fn run_pins(args: &Args, action: Action, flags: &TargetArgs) -> Result<(), Failure> {
    let config = args.global.load_config(NAME, None);
    let (request, url, directory) = request_of(action, flags, &config)?;
    let mut store = open_store(args, &config)?;
    let cwd = mc_cli::working_dir();
    let outcome: PinOutcome = match url {
        Some(url) => {
            let api = mc_cli::opencode(&url).with_directory(directory.as_deref());
            opencode::run(
                &mut store,
                &api,
                action,
                &request,
                flags.dry_run,
                now_ms(),
                cwd.as_deref(),
            )?
        }
        None => local::run(
            &mut store,
            action,
            &request,
            flags.dry_run,
            now_ms(),
            cwd.as_deref(),
        )?,
    };
    warn(&outcome.warnings);
    write_json(
        &serde_json::to_value(&outcome).map_err(anyhow::Error::from)?,
        args.global.pretty,
    )?;
    Ok(())
}

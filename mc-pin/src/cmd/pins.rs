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

/// How long a pin run from inside a session waits for the harness to write
/// the session's transcript: Claude Code writes it in the background, so a
/// command the agent runs at once after the session's first prompt can
/// start before the file is there.
const TRANSCRIPT_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// `find()` until it finds something, for at most `limit`.
fn wait_for<T>(limit: std::time::Duration, find: impl Fn() -> Option<T>) -> Option<T> {
    let start = std::time::Instant::now();
    loop {
        if let Some(found) = find() {
            return Some(found);
        }
        if start.elapsed() >= limit {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

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
    let mut from_env = false;
    let session_id = flags
        .session
        .clone()
        .or(fields.session_id)
        .filter(|s| !s.is_empty())
        .or_else(|| match harness {
            Harness::ClaudeCode | Harness::Codex => {
                let session = env.session(harness.as_str());
                from_env = session.is_some();
                session
            }
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
            let find = || pin::locate::transcript(&homes, harness, &session_id, cwd.as_deref());
            match action {
                // Run by the session itself right after its first prompt:
                // the harness may not have written its transcript yet.
                Action::Pin if from_env => wait_for(TRANSCRIPT_WAIT, find),
                _ => find(),
            }
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

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::time::Duration;

    use super::wait_for;

    #[test]
    fn waiting_for_a_transcript_ends_when_it_is_there_or_at_the_limit() {
        let tries = Cell::new(0);
        let found = wait_for(Duration::from_secs(5), || {
            tries.set(tries.get() + 1);
            (tries.get() == 3).then_some("transcript")
        });
        assert_eq!((found, tries.get()), (Some("transcript"), 3));
        let start = std::time::Instant::now();
        assert_eq!(wait_for(Duration::from_millis(120), || None::<()>), None);
        assert!(start.elapsed() >= Duration::from_millis(120));
    }
}

//! Argument parsing and the commands.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::anyhow;
use clap::{Args as ClapArgs, Parser, Subcommand};
use serde_json::Value;

use mc_base::config::Config;
use mc_base::store::Store;
use mc_cli::{Failure, GlobalArgs, Wait, now_ms, write_json};
use mc_pin_core::{
    self as pin, Action, Event, Harness, PinOutcome, PinRequest, RequestFields, RestoreReport,
    Target, hook, local, opencode,
};

use crate::paths;

const NAME: &str = "mc-pin";

const ABOUT: &str = "Pinned messages survive every compaction.

`pin`, `unpin` and `list` answer the session's full pin list as
{\"pins\": [{\"id\", \"created_at\", \"role\"}]}. For OpenCode with a server
(--opencode-url or OPENCODE_URL) the list lives in the session metadata,
shared with OpenChamber, and is mirrored into mc's database, which the
transform reads to keep pinned messages out of every drop. Without a server,
and for Claude Code and Codex, mc's database is the only store.

`restore` reads one event on stdin: after an OpenCode `session.compacted` it
sends the pinned messages back through prompt_async. As a Claude Code or Codex
SessionStart hook (every source) it prints, after a compaction, the pinned
messages the harness did not keep and mc's record of the session (compartments,
project memory), and at startup or resume that record once per context, as
additionalContext. Any other event does nothing.

Run from inside a Claude Code or Codex session without --session, `pin`,
`unpin` and `list` find the harness, the session and its transcript by
themselves.";

#[derive(Parser, Debug)]
#[command(name = "mc-pin", version, about = ABOUT)]
struct Args {
    #[command(flatten)]
    global: GlobalArgs,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Pin a message so it survives every compaction (pinning it again is a no-op).
    ///
    /// Without --session, reads the same fields as JSON on stdin:
    /// {"harness", "session_id", "message_id" | "last", "role", "created_at",
    /// "transcript", "opencode_url", "directory"}.
    Pin(TargetArgs),
    /// Unpin a message (unpinning one that is not pinned is a no-op).
    Unpin(TargetArgs),
    /// The session's pins, oldest first.
    List(TargetArgs),
    /// Read one event on stdin and restore the pins if it is a compaction.
    ///
    /// An OpenCode `session.compacted` event (bare, or as {"directory", "payload"}
    /// from /global/event): the compaction claimed in mc's database (of restorers
    /// racing for it, one sends), one prompt_async with the pinned messages, then
    /// the cursor in the session metadata. A Claude Code or Codex SessionStart hook
    /// input: {"hookSpecificOutput": {"hookEventName": "SessionStart",
    /// "additionalContext": …}} on stdout (at most 10,000 characters) when there
    /// is something to add: after a compaction the pins the harness did not keep
    /// and mc's record, else that record once per context. Anything else: no
    /// work, no request, exit 0.
    Restore(RestoreArgs),
}

#[derive(ClapArgs, Debug)]
struct TargetArgs {
    /// Harness of the session: opencode, claude-code, codex or pi [default: the one
    /// running this command (CLAUDECODE, CODEX_SESSION_ID), else opencode]
    #[arg(long)]
    harness: Option<String>,
    /// Session id [default: stdin's JSON; inside Claude Code or Codex, the
    /// session the harness names in the environment, else the folder's newest]
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// The message: an OpenCode message id, a Claude Code transcript line uuid, a Codex item
    /// id, a Pi entry id
    #[arg(long, value_name = "ID", conflicts_with = "last")]
    message: Option<String>,
    /// Pin the newest message of this role that has text
    #[arg(long, value_name = "ROLE", value_parser = ["user", "assistant"])]
    last: Option<String>,
    /// The message's role, when no server or transcript can tell it
    #[arg(long, value_parser = ["user", "assistant"])]
    role: Option<String>,
    /// The message's creation time in epoch milliseconds, when no server or transcript can tell it
    #[arg(long, value_name = "MS")]
    created_at: Option<i64>,
    /// The session's transcript (Claude Code JSONL, Codex rollout, Pi session
    /// file) [default: where Claude Code or Codex keeps it]
    #[arg(long, value_name = "FILE")]
    transcript: Option<PathBuf>,
    /// The OpenCode server [default: $OPENCODE_URL]
    #[arg(long, value_name = "URL")]
    opencode_url: Option<String>,
    /// The folder of the OpenCode instance (sent as ?directory=)
    #[arg(long, value_name = "DIR")]
    directory: Option<String>,
    /// Print what would change and the request(s) it would send; change nothing
    #[arg(long)]
    dry_run: bool,
}

#[derive(ClapArgs, Debug)]
struct RestoreArgs {
    /// The harness the event comes from [default: from the event]; claude-code
    /// or codex also means the hook never exits 2
    #[arg(long)]
    harness: Option<String>,
    /// The OpenCode server [default: $OPENCODE_URL]
    #[arg(long, value_name = "URL")]
    opencode_url: Option<String>,
    /// The folder of the OpenCode instance [default: from the event]
    #[arg(long, value_name = "DIR")]
    directory: Option<String>,
    /// Read the pinned texts from this transcript instead of the hook's transcript_path
    #[arg(long, value_name = "FILE")]
    transcript: Option<PathBuf>,
    /// Print the request(s) or hook output it would produce; send nothing, advance no cursor
    #[arg(long)]
    dry_run: bool,
    /// OpenCode: let the restoration start a model turn (as OpenChamber does)
    /// instead of waiting for the next one
    #[arg(long)]
    reply: bool,
    /// A SessionStart hook: print the pins only, not mc's record of the
    /// session (compartments, project memory)
    #[arg(long)]
    pins_only: bool,
}

/// Where Claude Code and Codex keep their sessions.
fn homes() -> pin::locate::Homes {
    let homes = mc_cli::session::HarnessHomes::from_env();
    pin::locate::Homes {
        claude: homes.claude,
        codex: homes.codex,
    }
}

/// The folder as hooks and MCP servers both name it.
fn canonical(dir: &Path) -> String {
    std::fs::canonicalize(dir)
        .unwrap_or_else(|_| dir.to_path_buf())
        .display()
        .to_string()
}

pub fn main() -> ExitCode {
    let args = Args::parse();
    let result = match &args.command {
        Command::Pin(target) => run_pins(&args, Action::Pin, target),
        Command::Unpin(target) => run_pins(&args, Action::Unpin, target),
        Command::List(target) => run_pins(&args, Action::List, target),
        Command::Restore(restore) => run_restore(&args, restore),
    };
    mc_cli::finish_with(NAME, result, describe)
}

/// The error and its causes on one line; a cause that only repeats the text
/// before it (a wrapped I/O error says the same thing twice) is left out.
fn describe(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.ends_with(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

fn warn(warnings: &[String]) {
    mc_cli::warn(NAME, warnings);
}

fn read_stdin(what: &str) -> Result<String, Failure> {
    mc_cli::read_stdin(&format!(
        "expected {what} as JSON on stdin (see mc-pin --help)"
    ))
}

fn open_store(args: &Args, config: &Config) -> anyhow::Result<Store> {
    mc_cli::open_store(args.global.db.as_deref(), config)
}

/// The request from the flags, completed from JSON on stdin when `--session`
/// is not given; and the server URL, if the session is an OpenCode one.
fn request_of(
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

fn run_pins(args: &Args, action: Action, flags: &TargetArgs) -> Result<(), Failure> {
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

fn run_restore(args: &Args, flags: &RestoreArgs) -> Result<(), Failure> {
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

fn restore(args: &Args, flags: &RestoreArgs, harness: Option<Harness>) -> Result<(), Failure> {
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
            let report = RestoreReport::none("not_a_compaction", None);
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

fn restore_hook(
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
    let options = hook::HookOptions {
        transcript: flags.transcript.as_deref().map(Path::new),
        max_transcript_bytes: config.transcript.max_bytes,
        dry_run: flags.dry_run,
        history: !flags.pins_only,
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

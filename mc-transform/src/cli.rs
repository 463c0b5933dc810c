//! Argument parsing and the commands.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::anyhow;
use clap::{Parser, Subcommand};
use serde_json::{Value, json};

use mc_cli::{Failure, GlobalArgs, SessionSetup, Stores, Wait, now_ms, write_json};
use mc_history::historian::choice;
use mc_transform_core::render::ForNextPass;
use mc_transform_core::{
    self as transform, Envelope, OverflowRequest, PassReport, ReduceRequest, Resident,
    SystemRequest,
};

pub(crate) const NAME: &str = "mc-transform";

const ABOUT: &str = "Per-call context transform for coding agents.

With no subcommand, reads one envelope (JSON) on stdin — the harness's messages plus
model, usage and session — and writes {\"messages\", \"system\", \"pass\"} on stdout.
Every message and tool output is tagged §N§; drops the agent queued with `reduce`
and age-based cleanup are applied only on passes that bust the prompt cache anyway,
and replayed byte-for-byte on every other pass.

The pass fails open: on any internal error it prints the input messages unchanged
with \"decision\": \"passthrough\" and exits 0. Input that is not JSON or has no
\"messages\" exits 2.";

#[derive(Parser, Debug)]
#[command(name = "mc-transform", version, about = ABOUT)]
struct Args {
    #[command(flatten)]
    global: GlobalArgs,

    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one pass (the default): envelope on stdin, transformed messages on stdout
    Pass,
    /// Queue tags for dropping (the agent's ctx_reduce). Nothing changes on the
    /// wire until a pass that busts the cache anyway.
    ///
    /// Answers {"queued", "protected", "unknown", "already"}. Protected tags (the
    /// newest ones) are queued too but wait until they leave the protected window.
    /// Without flags, reads {"harness", "session_id", "drop"} on stdin.
    Reduce {
        /// Session id
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// Tags to drop, e.g. 3-5,12 (§ signs are ignored)
        #[arg(long, value_name = "SPEC")]
        drop: Option<String>,
        /// Harness of the session
        #[arg(long, default_value = "opencode")]
        harness: String,
    },
    /// Show what the store knows about a session: tags, tokens, pending drops,
    /// last decision and bust, pass counts
    Status {
        /// Session id
        #[arg(long, value_name = "ID")]
        session: String,
        /// Harness of the session
        #[arg(long, default_value = "opencode")]
        harness: String,
    },
    /// Replace estimated token counts with exact ones for the parts of the
    /// envelope on stdin (loads the tokenizer: run it off the per-call path)
    Recount,
    /// Render one call's system prompt, for harnesses that hand it to a hook of
    /// its own after the messages pass (OpenCode's experimental.chat.system.transform)
    ///
    /// Reads {"harness", "session_id", "system": ["..."]} and writes {"system",
    /// "known_session", "guidance", "today"}: the guidance about §N§ tags appended
    /// once, and the `Today's date:` line frozen until a pass that busts the cache
    /// anyway. A session no pass has seen comes back unchanged. Fails open like
    /// the pass: on an internal error the input parts come back with a warning.
    System,
    /// Learn from a provider's context-overflow error (the harness's session
    /// error event): reads {"harness", "session_id", "model": {"provider", "id"},
    /// "error": <the error text or object>}
    ///
    /// Recognises the wordings of Anthropic ("prompt is too long: N tokens > M
    /// maximum"), OpenAI-compatible servers ("maximum context length is M
    /// tokens", context_length_exceeded) and GitHub Copilot ("prompt token
    /// count of N exceeds the limit of M"). Stores the limit for the model (every
    /// later pass on it uses at most that) and makes the session's next pass an
    /// emergency. Answers {"recognised": false} for anything else, also exit 0.
    Overflow,
    /// Stay resident: read one request per line on stdin, write one answer per
    /// line on stdout, until stdin ends or the parent process goes away
    ///
    /// A request is what a command reads on stdin, as one JSON line, with
    /// "kind": "pass" (the default), "system", "reduce", "status" (with
    /// "session_id" and "harness"), "recount" or "overflow"; its answer is
    /// exactly the line that command prints. A failure, or a line that is no
    /// request, is answered {"error": {"code", "message", "exit"?, "hints"?}}
    /// and the process stays up. A pass request may carry "incremental" (see
    /// the README): then it is answered relative to the previous call.
    Serve {
        /// Longest request line read; a longer one is skipped and answered
        /// with an error
        #[arg(long, value_name = "BYTES", default_value_t = mc_cli::serve::DEFAULT_MAX_REQUEST_BYTES)]
        max_request_bytes: usize,
        /// Sessions whose incremental baselines are kept (least recently used dropped)
        #[arg(long, value_name = "N", default_value_t = mc_transform_core::incremental::DEFAULT_SESSIONS)]
        sessions: usize,
    },
}

pub fn main() -> ExitCode {
    let args = Args::parse();
    let mut stores = Stores::default();
    let mut ctx = Ctx {
        global: &args.global,
        stores: &mut stores,
    };
    let result = match &args.command {
        None | Some(Command::Pass) => one_shot_pass(&mut ctx),
        Some(Command::Reduce {
            session,
            drop,
            harness,
        }) => reduce_request(session.as_deref(), drop.as_deref(), harness)
            .and_then(|request| reduce(&mut ctx, &request)),
        Some(Command::Status { session, harness }) => status(&mut ctx, harness, session),
        Some(Command::Recount) => read_json().and_then(|value| recount(&mut ctx, value)),
        Some(Command::System) => read_json().and_then(|value| system(&mut ctx, value)),
        Some(Command::Overflow) => read_json().and_then(|value| overflow(&mut ctx, value)),
        Some(Command::Serve {
            max_request_bytes,
            sessions,
        }) => {
            return mc_cli::finish(
                NAME,
                crate::serve::run(&args.global, *max_request_bytes, *sessions),
            );
        }
    };
    let written = result.and_then(|value| Ok(write_json(&value, args.global.pretty)?));
    mc_cli::finish(NAME, written)
}

/// What a command needs from its process: the global flags, and the store a
/// resident process keeps between requests.
pub(crate) struct Ctx<'a> {
    pub global: &'a GlobalArgs,
    pub stores: &'a mut Stores,
}

fn read_stdin() -> Result<String, Failure> {
    mc_cli::read_stdin("expected JSON on stdin (see mc-transform --help)")
}

pub(crate) fn parse_json(text: &str) -> Result<Value, Failure> {
    mc_cli::parse_json(text, "input")
}

fn read_json() -> Result<Value, Failure> {
    parse_json(&read_stdin()?)
}

fn session_setup(
    ctx: &mut Ctx<'_>,
    session: Option<(&str, &str)>,
    project_dir: Option<&Path>,
    wait: Wait,
) -> SessionSetup {
    mc_cli::session_setup_in(ctx.stores, NAME, ctx.global, session, project_dir, wait)
}

/// The one-shot pass: the envelope on stdin.
fn one_shot_pass(ctx: &mut Ctx<'_>) -> Result<Value, Failure> {
    let started = Instant::now();
    let text = read_stdin()?;
    let value = parse_json(&text)?;
    pass(
        ctx,
        value,
        Resident::default(),
        || parse_json(&text).unwrap_or(Value::Null),
        started,
    )
    .map(|(answer, _)| answer)
}

/// One pass over the envelope `value`, with what a resident process brings
/// (`Resident`: messages it decoded while waiting, the renderings it kept);
/// the answer, and what the pass left for the next when it says. `original`
/// gives the input document again for a passthrough (its messages and
/// system, unchanged). `started` is when the call began: a passthrough is
/// recorded within what is left of the hook's wait since then.
pub(crate) fn pass(
    ctx: &mut Ctx<'_>,
    value: Value,
    resident: Resident,
    original: impl FnOnce() -> Value,
    started: Instant,
) -> Result<(Value, Option<ForNextPass>), Failure> {
    let mut envelope =
        Envelope::from_value(value).map_err(|e| Failure::input(anyhow::Error::from(e)))?;
    let now = envelope.now_ms.unwrap_or_else(now_ms);
    let harness = envelope.harness.clone();
    let session_id = envelope.session_hint();
    let setup = session_setup(
        ctx,
        session_id.as_deref().map(|id| (harness.as_str(), id)),
        envelope.project_dir.as_deref(),
        Wait::Hook,
    );
    envelope.project_dir = setup.project_dir.clone();
    let config = setup.config;
    let mut store = setup.store;
    let result = mc_cli::catch_panic(|| {
        let store = store.as_mut().map_err(|e| anyhow!("{e:#}"))?;
        Ok(transform::run_pass_on(
            store,
            envelope,
            resident,
            &config.transform,
            now,
        )?)
    });
    let output = match result {
        Ok(mut output) => {
            output.pass.warnings.extend(setup.warnings);
            let for_next = output.for_next.take();
            (output.into_value(), for_next)
        }
        Err(error) => {
            // Fail open: the agent's prompt loop must never stop because of mc.
            let message = format!("{error:#}");
            eprintln!("mc-transform: warning: passthrough: {message}");
            mc_cli::hint(NAME, &hints_of(&store, &error));
            let mut warnings = setup.warnings;
            if let (Ok(store), Some(session)) = (store.as_mut(), session_id.as_deref()) {
                // Within what is left of the hook's wait, never a second full one.
                let left = Wait::Hook
                    .timeout(&config)
                    .saturating_sub(started.elapsed());
                let recorded = store.set_busy_timeout(left).and_then(|()| {
                    transform::record_passthrough(store, &harness, session, &message, now)
                });
                if let Err(e) = recorded {
                    warnings.push(format!("passthrough not recorded in the database: {e}"));
                }
            }
            (passthrough(original(), message, warnings), None)
        }
    };
    ctx.stores.keep_result(store);
    Ok(output)
}

/// The hints for a command that failed open: the store's when it could not be
/// opened (the error then only carries its text), else the error's.
fn hints_of<T>(store: &anyhow::Result<T>, error: &anyhow::Error) -> Vec<String> {
    match store {
        Err(opening) => mc_cli::hints(opening),
        Ok(_) => mc_cli::hints(error),
    }
}

/// The input's messages and system, unchanged, with a passthrough report.
fn passthrough(mut original: Value, error: String, extra_warnings: Vec<String>) -> Value {
    let mut report = PassReport::passthrough(error);
    report.warnings.extend(extra_warnings);
    let mut out = serde_json::Map::new();
    out.insert("messages".into(), original["messages"].take());
    if let Some(system) = original
        .get_mut("system")
        .map(Value::take)
        .filter(|v| !v.is_null())
    {
        out.insert("system".into(), system);
    }
    out.insert(
        "pass".into(),
        serde_json::to_value(report).unwrap_or(Value::Null),
    );
    Value::Object(out)
}

/// The reduce request of the flags, else of stdin.
fn reduce_request(
    session: Option<&str>,
    drop: Option<&str>,
    harness: &str,
) -> Result<ReduceRequest, Failure> {
    match (session, drop) {
        (Some(session), Some(drop)) => Ok(ReduceRequest {
            harness: harness.to_string(),
            session_id: session.to_string(),
            drop: transform::reduce::parse_drop(drop).map_err(|e| Failure::input(e.into()))?,
        }),
        (None, None) => {
            ReduceRequest::from_value(read_json()?).map_err(|e| Failure::input(e.into()))
        }
        _ => Err(Failure::input(anyhow!(
            "reduce needs both --session and --drop, or JSON on stdin"
        ))),
    }
}

pub(crate) fn reduce(ctx: &mut Ctx<'_>, request: &ReduceRequest) -> Result<Value, Failure> {
    let setup = session_setup(
        ctx,
        Some((&request.harness, &request.session_id)),
        None,
        Wait::Hook,
    );
    let mut store = setup.store?;
    let result = transform::reduce(&mut store, request, &setup.config.transform, now_ms());
    ctx.stores.keep(store);
    let result = result.map_err(anyhow::Error::from)?;
    Ok(serde_json::to_value(result).map_err(anyhow::Error::from)?)
}

pub(crate) fn status(ctx: &mut Ctx<'_>, harness: &str, session: &str) -> Result<Value, Failure> {
    let setup = session_setup(ctx, Some((harness, session)), None, Wait::Background);
    let store = setup.store?;
    let report = transform::status(&store, harness, session);
    let path = store.path().display().to_string();
    ctx.stores.keep(store);
    match report.map_err(anyhow::Error::from)? {
        Some(mut report) => {
            // The model a historian run would use: no server is at hand here,
            // so an OpenCode session's is the one mc's plugin would pass.
            let model = report
                .model
                .as_deref()
                .map(choice::model_from_key)
                .unwrap_or_default();
            let config = &setup.config;
            let env = mc_cli::harness_env(None, true);
            report.historian_model = Some(
                choice::choose(&config.historian, &config.providers, harness, &model, &env)
                    .report(),
            );
            Ok(serde_json::to_value(report).map_err(anyhow::Error::from)?)
        }
        None => Err(Failure::runtime(anyhow!(
            "no session {session:?} for harness {harness:?} in {path} (no pass has seen it yet)"
        ))),
    }
}

pub(crate) fn system(ctx: &mut Ctx<'_>, value: Value) -> Result<Value, Failure> {
    let request = SystemRequest::from_value(value).map_err(|e| Failure::input(e.into()))?;
    let setup = session_setup(
        ctx,
        Some((&request.harness, &request.session_id)),
        None,
        Wait::Hook,
    );
    let mut warnings = setup.warnings;
    let config = setup.config;
    let mut store = setup.store;
    let result = mc_cli::catch_panic(|| {
        let store = store.as_mut().map_err(|e| anyhow!("{e:#}"))?;
        Ok(transform::system_hook(store, &request, &config.transform)?)
    });
    let mut output = match result {
        Ok(output) => serde_json::to_value(output).map_err(anyhow::Error::from)?,
        Err(error) => {
            // Fail open, as the pass does: the model call must go on.
            let message = format!("{error:#}");
            eprintln!("mc-transform: warning: system left unchanged: {message}");
            mc_cli::hint(NAME, &hints_of(&store, &error));
            warnings.push(message);
            json!({"system": request.system, "known_session": false, "guidance": false, "today": null})
        }
    };
    ctx.stores.keep_result(store);
    output["warnings"] = json!(warnings);
    Ok(output)
}

pub(crate) fn recount(ctx: &mut Ctx<'_>, value: Value) -> Result<Value, Failure> {
    let envelope = Envelope::from_value(value).map_err(|e| Failure::input(e.into()))?;
    let session_id = envelope.session_hint();
    let setup = session_setup(
        ctx,
        session_id
            .as_deref()
            .map(|id| (envelope.harness.as_str(), id)),
        envelope.project_dir.as_deref(),
        Wait::Background,
    );
    let mut store = setup.store?;
    let result = transform::recount::recount(&mut store, envelope);
    ctx.stores.keep(store);
    Ok(json!(result.map_err(anyhow::Error::from)?))
}

pub(crate) fn overflow(ctx: &mut Ctx<'_>, value: Value) -> Result<Value, Failure> {
    let request = OverflowRequest::from_value(value).map_err(|e| Failure::input(e.into()))?;
    // Sent from an error event, not on the model call's path: the long wait.
    let session = request.session_id.as_deref();
    let setup = session_setup(
        ctx,
        session.map(|id| (request.harness.as_str(), id)),
        None,
        Wait::Background,
    );
    let mut store = setup.store?;
    let answer = transform::overflow::report(&mut store, &request, now_ms());
    ctx.stores.keep(store);
    Ok(answer.map_err(anyhow::Error::from)?.into_value())
}

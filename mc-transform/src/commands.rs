//! The commands: an input value in, the answer out. The one-shot process
//! (`cli.rs`) and the resident one (`serve.rs`) call the same functions.

use std::path::Path;
use std::time::Instant;

use anyhow::anyhow;
use serde_json::{Value, json};

use mc_cli::{Failure, GlobalArgs, SessionSetup, Stores, Wait, now_ms};
use mc_history::historian::choice;
use mc_transform_core::render::ForNextPass;
use mc_transform_core::{
    self as transform, Envelope, OverflowRequest, PassReport, ReduceRequest, Resident,
    SystemRequest,
};

pub(crate) const NAME: &str = "mc-transform";

/// What a command needs from its process: the global flags, and the store a
/// resident process keeps between requests.
pub(crate) struct Ctx<'a> {
    pub global: &'a GlobalArgs,
    pub stores: &'a mut Stores,
}

pub(crate) fn read_stdin() -> Result<String, Failure> {
    mc_cli::read_stdin("expected JSON on stdin (see mc-transform --help)")
}

pub(crate) fn parse_json(text: &str) -> Result<Value, Failure> {
    mc_cli::parse_json(text, "input")
}

pub(crate) fn read_json() -> Result<Value, Failure> {
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
pub(crate) fn one_shot_pass(ctx: &mut Ctx<'_>) -> Result<Value, Failure> {
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
pub(crate) fn reduce_request(
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

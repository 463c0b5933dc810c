//! The pass (the default command): the envelope in, the transformed messages
//! out, failing open.
use std::sync::Arc;
use std::time::Instant;

use anyhow::anyhow;
use serde_json::Value;

use mc_base::codec::PI;
use mc_base::codec::opencode::{self, encode_all};
use mc_base::domain::measure;
use mc_cli::{Failure, Wait, now_ms};
use mc_search_core::recall::Search;
use mc_transform_core::fallback::{self, Fallback};
use mc_transform_core::render::ForNextPass;
use mc_transform_core::{self as transform, Envelope, PassOutput, PassReport, Resident};

use crate::common::{Ctx, NAME, hints_of, parse_envelope, parse_json, read_stdin, session_setup};

/// The one-shot pass: the envelope on stdin. Its OpenCode messages are
/// decoded as they are read and written out as they come from the render,
/// with no JSON tree of the envelope or the answer in between.
pub(crate) fn one_shot_pass(ctx: &mut Ctx<'_>) -> Result<Answer, Failure> {
    let started = Instant::now();
    let text = read_stdin()?;
    let (value, decoded) = parse_envelope(&text)?;
    let resident = Resident {
        decoded,
        unencoded: true,
        ..Resident::default()
    };
    pass(
        ctx,
        value,
        resident,
        || parse_json(&text).unwrap_or(Value::Null),
        started,
    )
    .map(|(answer, _)| answer)
}

/// A pass's answer: the document, or the pass's output to write as it.
pub(crate) enum Answer {
    Value(Value),
    Output(Box<PassOutput>),
}

impl Answer {
    pub(crate) fn into_value(self) -> Value {
        match self {
            Answer::Value(value) => value,
            Answer::Output(output) => output.into_value(),
        }
    }

    /// The answer on stdout (the same bytes as its value's `write_json`).
    pub(crate) fn write(self, pretty: bool) -> anyhow::Result<()> {
        match self {
            Answer::Output(output) if !pretty => {
                mc_cli::write_json_with(|out| output.write_document(out))
            }
            answer => mc_cli::write_json(&answer.into_value(), pretty),
        }
    }
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
) -> Result<(Answer, Option<ForNextPass>), Failure> {
    let mut envelope =
        Envelope::from_value(value).map_err(|e| Failure::input(anyhow::Error::from(e)))?;
    let mut resident = resident;
    if envelope.harness == PI
        && let Some(decoded) = resident.decoded.take()
    {
        // Pi's codec reads the messages as values (OpenCode's shape, here).
        envelope.messages = encode_all(decoded);
    }
    let now = envelope.now_ms.unwrap_or_else(now_ms);
    let harness = envelope.harness.clone();
    let session_id = envelope
        .session_hint()
        .or_else(|| resident.decoded.as_deref().and_then(opencode::session_hint));
    // A failed pass sends the raw messages only if they fit this window.
    let window = envelope
        .model
        .context_limit
        .filter(|&limit| limit > 0)
        .map(|_| measure::usable_window(&envelope.model));
    let setup = session_setup(
        ctx,
        session_id.as_deref().map(|id| (harness.as_str(), id)),
        envelope.project_dir.as_deref(),
        Wait::Hook,
    );
    envelope.project_dir = setup.project_dir.clone();
    let config = setup.config;
    let mut store = setup.store;
    // Recall hints search through mc-search (the core stays below it).
    resident.recall.get_or_insert_with(|| Arc::new(Search));
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
            (Answer::Output(Box::new(output)), for_next)
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
            let fit = |messages| match (messages, window) {
                (Value::Array(values), Some(window)) => {
                    let (values, fallback) =
                        fallback::fit_raw(&harness, session_id.as_deref(), values, window);
                    (Value::Array(values), Some(fallback))
                }
                (messages, _) => (messages, None),
            };
            let answer = passthrough(original(), fit, message, warnings);
            (Answer::Value(answer), None)
        }
    };
    ctx.stores.keep_result(store);
    Ok(output)
}

/// The input's messages (as `fit` makes them fit the window) and system,
/// with a passthrough report that says how they went out (`fallback`).
fn passthrough(
    mut original: Value,
    fit: impl FnOnce(Value) -> (Value, Option<Fallback>),
    error: String,
    extra_warnings: Vec<String>,
) -> Value {
    let mut report = PassReport::passthrough(error);
    report.warnings.extend(extra_warnings);
    let (messages, fallback) = fit(original["messages"].take());
    let mut out = serde_json::Map::new();
    out.insert("messages".into(), messages);
    if let Some(system) = original
        .get_mut("system")
        .map(Value::take)
        .filter(|v| !v.is_null())
    {
        out.insert("system".into(), system);
    }
    let mut report = serde_json::to_value(report).unwrap_or(Value::Null);
    if let (Value::Object(report), Some(fallback)) = (&mut report, fallback) {
        report.insert(
            "fallback".into(),
            serde_json::to_value(fallback).unwrap_or(Value::Null),
        );
    }
    out.insert("pass".into(), report);
    Value::Object(out)
}

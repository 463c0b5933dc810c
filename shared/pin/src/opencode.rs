//! Pins of an OpenCode session with its server running: the list lives in the
//! session metadata (OpenChamber's shape, shared with its UI) and is mirrored
//! into mc's database; restoration after `session.compacted` goes through
//! `prompt_async`, once the compaction is claimed in mc's database.

use std::path::Path;

use serde_json::{Value, json};

use mc_base::codec::opencode::boundary_base_of_value;
use mc_base::error::{Error, Result, ServerFailure};
use mc_base::store::Store;
use mc_llm::opencode_api::OpenCode;

use super::claim::{self, Found, Outcome};
use super::{
    Action, CompactedEvent, Harness, Method, NothingReason, Pin, PinOutcome, PinRequest,
    PinnedText, PlannedRequest, RestoreAction, RestoreReport, Target, check_role, local,
    message_text, metadata, newest_pinnable, text,
};

/// How many of the newest messages are searched for the compaction summary
/// (it is written right before the event, so it is among the last few).
pub const MESSAGE_WINDOW: usize = 50;

/// The pin a message describes: its role and creation time come from the message.
fn pin_of(message: &Value, wanted: &str) -> Result<Pin> {
    let info = &message["info"];
    let id = info["id"].as_str().unwrap_or(wanted);
    let role = info["role"].as_str().unwrap_or("unknown");
    let role = check_role(role).map_err(|_| {
        Error::input(format!(
            "message {id:?} is a {role} message; only user and assistant messages are pinned"
        ))
    })?;
    let created_at = info
        .pointer("/time/created")
        .and_then(Value::as_i64)
        .ok_or_else(|| {
            Error::input(format!(
                "message {id:?} has no time.created; it cannot be pinned"
            ))
        })?;
    Ok(Pin {
        id: id.to_string(),
        created_at,
        role: role.to_string(),
    })
}

/// `pin`, `unpin` or `list` with the server: a fresh-read merge of the
/// session metadata (GET the session, change our key, PATCH the whole object),
/// then the resulting list mirrored into mc's database. A no-op change sends
/// no PATCH. `project_dir` is the folder a new session row is attributed to
/// when the session does not name one.
pub fn run(
    store: &mut Store,
    api: &OpenCode,
    action: Action,
    request: &PinRequest,
    dry_run: bool,
    now_ms: i64,
    project_dir: Option<&Path>,
) -> Result<PinOutcome> {
    let session_id = request.session_id.as_str();
    // Resolve the message first, so the metadata read is as fresh as it can be.
    let pin = match (action, &request.target) {
        (Action::Pin, Some(Target::Id(id))) => {
            let message = api.get_message(session_id, id)?.ok_or_else(|| {
                Error::input(format!(
                    "OpenCode session {session_id:?} has no message {id:?}"
                ))
            })?;
            Some(pin_of(&message, id)?)
        }
        (Action::Pin, Some(Target::Last(role))) => {
            let messages = api.list_messages(session_id)?;
            let message = newest_pinnable(&messages, role).ok_or_else(|| {
                Error::input(format!(
                    "OpenCode session {session_id:?} has no {role} message with text"
                ))
            })?;
            Some(pin_of(message, "")?)
        }
        (Action::Pin, None) => {
            return Err(Error::input(
                "pin needs --message ID or --last user|assistant",
            ));
        }
        (Action::Unpin, Some(Target::Id(_))) | (Action::List, _) => None,
        (Action::Unpin, _) => {
            return Err(Error::input(
                "unpin needs the id of the message (--message)",
            ));
        }
    };

    let session = api.get_session(session_id)?;
    let current = metadata::of_session(&session);
    let changed = match (action, &pin, &request.target) {
        (Action::Pin, Some(pin), _) => metadata::with_pin(&current, pin)?,
        (Action::Unpin, _, Some(Target::Id(id))) => metadata::without_pin(&current, id)?,
        _ => None,
    };
    let mut requests = Vec::new();
    let after = match changed {
        Some(merged) if dry_run => {
            requests.push(PlannedRequest {
                method: Method::Patch,
                url: api.session_url(session_id),
                body: json!({ "metadata": merged }),
            });
            merged
        }
        Some(merged) => {
            api.patch_session_metadata(session_id, &merged)?;
            merged
        }
        None => current,
    };
    let mut pins = metadata::pins(&after);
    super::sort_chronologically(&mut pins);

    let mut warnings = Vec::new();
    if !dry_run {
        let dir = session
            .get("directory")
            .and_then(Value::as_str)
            .map(Path::new)
            .or(project_dir);
        let harness = Harness::OpenCode.as_str();
        let row = local::ensure_session(store, harness, session_id, dir, now_ms)?;
        let mirrored = store.write(|tx| local::mirror(tx, row, &pins))?;
        if !mirrored.removed.is_empty() {
            warnings.push(format!(
                "removed {} pin(s) from mc's database that the session metadata does not list: {}",
                mirrored.removed.len(),
                mirrored.removed.join(", ")
            ));
        }
    }
    Ok(PinOutcome {
        pins,
        dry_run,
        requests,
        warnings,
    })
}

/// How `restore` sends the restoration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RestoreOptions {
    /// Print what would be sent; send nothing, advance no cursor.
    pub dry_run: bool,
    /// Ask OpenCode to run a model turn on the restoration (OpenChamber's way).
    pub reply: bool,
}

/// The compaction summary a `session.compacted` event is about: the newest
/// `summary: true` assistant message — if it is finished and error-free.
/// mc's own compaction boundary is no harness compaction: it is skipped.
fn newest_summary(messages: &[Value]) -> std::result::Result<&Value, NothingReason> {
    let summary = messages
        .iter()
        .rev()
        .find(|m| {
            m.pointer("/info/role").and_then(Value::as_str) == Some("assistant")
                && m.pointer("/info/summary").and_then(Value::as_bool) == Some(true)
                && boundary_base_of_value(m).is_none()
        })
        .ok_or(NothingReason::NoSummary)?;
    let field = |path: &str| summary.pointer(path).unwrap_or(&Value::Null);
    let finished = field("/info/id").is_string()
        && field("/info/time/completed").is_number()
        && field("/info/error").is_null();
    if finished {
        Ok(summary)
    } else {
        Err(NothingReason::SummaryUnfinished)
    }
}

/// The model and agent the restoration message is stored under, so the next
/// turn keeps the session's model and agent: those of the newest assistant
/// reply that is not a summary, else of the newest user message.
fn model_and_agent(messages: &[Value]) -> (Option<Value>, Option<String>) {
    for m in messages.iter().rev() {
        let info = &m["info"];
        if info["role"] == "assistant"
            && info["summary"] != true
            && let (Some(provider), Some(model)) =
                (info["providerID"].as_str(), info["modelID"].as_str())
        {
            let agent = info["agent"].as_str().or(info["mode"].as_str());
            return (
                Some(json!({"providerID": provider, "modelID": model})),
                agent.map(str::to_string),
            );
        }
    }
    for m in messages.iter().rev() {
        let field = |path: &str| m.pointer(path).unwrap_or(&Value::Null);
        if field("/info/role") == "user" && field("/info/model/providerID").is_string() {
            let model = json!({"providerID": field("/info/model/providerID"),
                               "modelID": field("/info/model/modelID")});
            return (
                Some(model),
                field("/info/agent").as_str().map(str::to_string),
            );
        }
    }
    (None, None)
}

/// A runtime failure from the server; a 404 on the session is not the
/// caller's fault here (the event named it).
fn server_error(error: Error) -> Error {
    match error {
        Error::OpenCode {
            failure: ServerFailure::NoSession,
            base,
            message,
        } => Error::OpenCode {
            failure: ServerFailure::Status(404),
            base,
            message,
        },
        other => other,
    }
}

/// Restore the pins of the session an OpenCode `session.compacted` event is
/// about: skip child sessions; find the newest finished summary; do nothing
/// if the metadata cursor or a claim in mc's database already answers it;
/// fetch each pin by id (missing ones are skipped); claim the compaction (one
/// row only one restorer can insert: the others answer `already_restored` or
/// `in_progress` and send nothing); send ONE `prompt_async` with a synthetic
/// text part; then mark the claim done and merge-write the cursor into freshly
/// read metadata (OpenChamber reads it). A failed send gives the claim back.
pub fn restore(
    store: &mut Store,
    api: &OpenCode,
    event: &CompactedEvent,
    options: RestoreOptions,
    now_ms: i64,
) -> Result<RestoreReport> {
    let api = match api.directory() {
        Some(_) => api.clone(),
        None => api.clone().with_directory(event.directory.as_deref()),
    };
    let sid = event.session_id.as_str();
    let none = |reason| Ok(RestoreReport::none(reason, Some(sid)));

    let session = api.get_session(sid).map_err(server_error)?;
    if session
        .get("parentID")
        .and_then(Value::as_str)
        .is_some_and(|p| !p.is_empty())
    {
        return none(NothingReason::ChildSession);
    }
    let meta = metadata::of_session(&session);
    let pins = metadata::pins(&meta);
    if pins.is_empty() {
        return none(NothingReason::NoPins);
    }
    let recent = api.list_recent_messages(sid, MESSAGE_WINDOW)?;
    let summary = match newest_summary(&recent) {
        Ok(summary) => summary,
        Err(reason) => return none(reason),
    };
    let summary_id = summary
        .pointer("/info/id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let harness = Harness::OpenCode.as_str();
    let answered = |outcome: Outcome| {
        let mut report = match outcome {
            Outcome::Done(_) => RestoreReport::none(NothingReason::AlreadyRestored, Some(sid)),
            Outcome::InProgress | Outcome::Won(_) => {
                RestoreReport::none(NothingReason::InProgress, Some(sid))
            }
        };
        report.compaction = Some(summary_id.clone());
        Ok(report)
    };
    if metadata::cursor(&meta) == Some(summary_id.as_str()) {
        return answered(Outcome::Done(summary_id.clone()));
    }
    match claim::find(store.conn(), harness, sid, &summary_id, now_ms, |_| false)? {
        Found::Done(key) => return answered(Outcome::Done(key)),
        Found::InProgress => return answered(Outcome::InProgress),
        Found::Free { .. } => {}
    }

    let (mut found, missing, warnings) = fetch_pins(&api, sid, &pins);
    let mut report = RestoreReport::none(NothingReason::NothingToSend, Some(sid));
    report.compaction = Some(summary_id.clone());
    report.missing = missing;
    report.warnings = warnings;
    if found.is_empty() {
        return Ok(report);
    }
    text::sort(&mut found);

    let body = restoration_body(&found, &recent, options);

    report.reason = None;
    report.restored = found.iter().map(|p| p.id.clone()).collect();

    if options.dry_run {
        report.action = RestoreAction::DryRun;
        report.requests = vec![
            PlannedRequest {
                method: Method::Post,
                url: api.prompt_async_url(sid),
                body,
            },
            PlannedRequest {
                method: Method::Patch,
                url: api.session_url(sid),
                body: json!({"metadata": metadata::with_cursor(&meta, &summary_id)?}),
            },
        ];
        return Ok(report);
    }

    // The claim: of the restorers racing for this compaction, exactly one
    // inserts its row and sends.
    let claimed =
        store.write(|tx| claim::take(tx, harness, sid, &summary_id, now_ms, |_| false))?;
    let claim = match claimed {
        Outcome::Won(claim) => claim,
        other => {
            let mut lost = answered(other)?;
            lost.warnings = report.warnings;
            return Ok(lost);
        }
    };
    send_claimed(
        store,
        &api,
        sid,
        &claim,
        &body,
        now_ms,
        &mut report.warnings,
    )?;
    report.action = RestoreAction::Restored;
    Ok(report)
}

/// Each pin's text, fetched by id: `(found, missing, warnings)`. A pin
/// whose message is gone, empty or unreadable is missing (a read error also
/// says why in a warning).
fn fetch_pins(
    api: &OpenCode,
    sid: &str,
    pins: &[Pin],
) -> (Vec<PinnedText>, Vec<String>, Vec<String>) {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    let mut warnings = Vec::new();
    for pin in pins {
        match api.get_message(sid, &pin.id) {
            Ok(Some(message)) => {
                let text = message_text(&message);
                if text.is_empty() {
                    missing.push(pin.id.clone());
                } else {
                    found.push(PinnedText {
                        id: pin.id.clone(),
                        role: pin.role.clone(),
                        created_at: pin.created_at,
                        text,
                    });
                }
            }
            Ok(None) => missing.push(pin.id.clone()),
            Err(e) => {
                warnings.push(format!("skipped pinned message {}: {e}", pin.id));
                missing.push(pin.id.clone());
            }
        }
    }
    (found, missing, warnings)
}

/// The one `prompt_async` body that restores `found`: a synthetic text part,
/// in the model and agent of the session's latest turn.
fn restoration_body(found: &[PinnedText], recent: &[Value], options: RestoreOptions) -> Value {
    let mut body = json!({
        "parts": [{"type": "text", "text": text::restoration(found), "synthetic": true}],
        // noReply: by default the restoration is stored without starting a model
        // turn of its own. OpenCode runs its own continuation after an automatic
        // compaction, and a turn already running reads new messages at its next
        // step, so the pins are in context for all the work that follows; after a
        // manual /compact the pins wait for the user's next prompt instead of
        // making the agent talk unprompted (and paying for that turn). `--reply`
        // asks for a turn, as OpenChamber does.
        "noReply": !options.reply,
    });
    let (model, agent) = model_and_agent(recent);
    if let Some(fields) = body.as_object_mut() {
        if let Some(model) = model {
            fields.insert("model".into(), model);
        }
        if let Some(agent) = agent {
            fields.insert("agent".into(), json!(agent));
        }
    }

    body
}

/// Send the restoration under `claim` (won by this restorer), then record
/// it: the claim marked done, the cursor merged into freshly read metadata.
/// A failed send gives the claim back, so the next event can restore it.
fn send_claimed(
    store: &mut Store,
    api: &OpenCode,
    sid: &str,
    claim: &claim::Claim,
    body: &Value,
    now_ms: i64,
    warnings: &mut Vec<String>,
) -> Result<()> {
    let summary_id = claim.compaction.as_str();
    if let Err(e) = api.prompt_async(sid, body) {
        // Not sent: give the compaction back so the next event can restore it.
        if let Err(release) = store.write(|tx| claim::release(tx, claim)) {
            return Err(e.context(format!(
                "the pins were not sent, and the claim on compaction {summary_id} could not be \
                 given back ({release}), so no restorer will retry it for {} minutes",
                claim::CLAIM_TIMEOUT_MS / 60_000
            )));
        }
        return Err(e);
    }
    // Sent: from now on no restorer of mc sends it again.
    let finished = store.write(|tx| claim::finish(tx, claim, now_ms));
    // The cursor in the metadata is for OpenChamber (and older mc); re-read so
    // concurrent edits of other keys survive.
    let saved = api
        .get_session(sid)
        .map_err(server_error)
        .and_then(|fresh| metadata::with_cursor(&metadata::of_session(&fresh), summary_id))
        .and_then(|merged| api.patch_session_metadata(sid, &merged));
    match (finished, saved) {
        (Ok(true), Ok(_)) => {}
        (Ok(false), Ok(_)) => warnings.push(format!(
            "the claim on compaction {summary_id} had expired before the pins were sent; \
             another restorer may have sent them too"
        )),
        (Err(e), _) => {
            return Err(e.context(
                "the pinned messages were sent, but mc could not record it (a replay of this \
                 event after the claim expires would send them again)",
            ));
        }
        (Ok(_), Err(e)) => {
            return Err(e.context(
                "the pinned messages were sent and mc recorded it, but the cursor in the \
                 session metadata could not be saved (OpenChamber may send them again)",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_must_be_finished_and_error_free() {
        let user = json!({"info": {"id": "u", "role": "user"}, "parts": []});
        let done = json!({"info": {"id": "s1", "role": "assistant", "summary": true,
                                   "time": {"created": 1, "completed": 2}}, "parts": []});
        let streaming = json!({"info": {"id": "s2", "role": "assistant", "summary": true,
                                        "time": {"created": 3}}, "parts": []});
        let failed = json!({"info": {"id": "s3", "role": "assistant", "summary": true,
                                     "time": {"created": 3, "completed": 4},
                                     "error": {"name": "ProviderAuthError"}}, "parts": []});
        let after = json!({"info": {"id": "a", "role": "assistant", "time": {"created": 5, "completed": 6}}, "parts": []});
        assert_eq!(
            newest_summary(std::slice::from_ref(&user)).unwrap_err(),
            NothingReason::NoSummary
        );
        assert_eq!(
            newest_summary(&[user.clone(), done.clone(), after.clone()]).unwrap()["info"]["id"],
            "s1"
        );
        assert_eq!(
            newest_summary(&[done.clone(), streaming]).unwrap_err(),
            NothingReason::SummaryUnfinished
        );
        assert_eq!(
            newest_summary(&[done, failed]).unwrap_err(),
            NothingReason::SummaryUnfinished
        );
    }

    #[test]
    fn the_restoration_keeps_the_sessions_model_and_agent() {
        let messages = vec![
            json!({"info": {"role": "user", "agent": "plan", "model": {"providerID": "p0", "modelID": "m0"}}}),
            json!({"info": {"role": "assistant", "providerID": "p1", "modelID": "m1", "mode": "plan"}}),
            json!({"info": {"role": "assistant", "summary": true, "providerID": "p2", "modelID": "m2", "agent": "compaction"}}),
        ];
        let (model, agent) = model_and_agent(&messages);
        assert_eq!(model.unwrap(), json!({"providerID": "p1", "modelID": "m1"}));
        assert_eq!(agent.as_deref(), Some("plan"));
        let (model, agent) = model_and_agent(&messages[..1]);
        assert_eq!(model.unwrap(), json!({"providerID": "p0", "modelID": "m0"}));
        assert_eq!(agent.as_deref(), Some("plan"));
        assert_eq!(model_and_agent(&[]), (None, None));
    }

    #[test]
    fn a_pin_takes_role_and_time_from_the_message() {
        let m = json!({"info": {"id": "msg_1", "role": "assistant", "time": {"created": 42}}, "parts": []});
        assert_eq!(
            pin_of(&m, "msg_1").unwrap(),
            Pin {
                id: "msg_1".into(),
                created_at: 42,
                role: "assistant".into()
            }
        );
        let no_time = json!({"info": {"id": "m", "role": "user", "time": {}}});
        assert!(matches!(pin_of(&no_time, "m"), Err(Error::Input(_))));
        let odd = json!({"info": {"id": "m", "role": "system", "time": {"created": 1}}});
        assert!(matches!(pin_of(&odd, "m"), Err(Error::Input(_))));
    }
}

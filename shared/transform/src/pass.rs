//! One transform pass: bind every part to its tag, let the scheduler decide,
//! decide whether the head (m[0]) must be rebuilt, first-apply mutations only
//! when this pass busts the cache anyway, then replay everything stored.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use rusqlite::{Transaction, params};
use rustc_hash::FxHashMap;
use serde_json::Value;

use mc_base::codec::{Decoded, Message, Part, PartKind, Role, Wire};
use mc_base::config::TransformConfig;
use mc_base::error::Result;
use mc_base::identity::project_identity;
use mc_base::store::Store;
use mc_history::head::PinnedText;
use mc_history::store as history;
use mc_history::trigger::{self, Due, Pressure, message_text};

use super::head::{self as heads, HardSignals, HeadContext, HeadRow, Markers};
use super::render::{
    Bindings, ForNextPass, Head, RENDER_VERSION, RenderState, Replay, Slot, age_tags, render,
    render_replaying,
};
use super::report::{Bust, Decision, PassOutput, PassReport};
use super::scheduler::{self, Schedule, SchedulerInput};
use super::state;
use super::{
    calls, caveman, emergency, nudge, overflow, reasoning, recall, smart_drops, system, temporal,
    todo,
};
use mc_base::domain::content;
use mc_base::domain::envelope::{Envelope, ModelInfo, Usage};
use mc_base::domain::measure;
use mc_base::domain::messages::{self, session_from_messages};
use mc_base::domain::sessions::{self, SessionRow};
use mc_base::domain::tags::{
    self, DropMode, NewTag, TagKind, TagRow, measure_part, part_identity_into,
};

/// The newest this-many tool tags (any status) are dropped as skeletons; older ones go whole.
pub const SKELETON_WINDOW: u32 = 20;

/// Run one pass. `now_ms` is the envelope's clock or the caller's.
pub fn run_pass(
    store: &mut Store,
    envelope: Envelope,
    config: &TransformConfig,
    now_ms: i64,
) -> Result<PassOutput> {
    run_pass_on(store, envelope, Resident::default(), config, now_ms)
}

/// What a resident process (`mc-transform serve`) brings to a pass besides
/// the envelope.
#[derive(Debug, Default)]
pub struct Resident {
    /// OpenCode messages as `codec::opencode::decode_all` decodes the
    /// envelope's (which are then not read): the process decoded most of
    /// them while it waited.
    pub decoded: Option<Vec<Message>>,
    /// What the process knows of the previous pass's render. When given
    /// (even empty) and the input is OpenCode's, each output message whose
    /// render is the same again is the previous output's index instead of
    /// the message (see `render::render_replaying`), and the output says
    /// what the next pass may replay ([`PassOutput::for_next`]).
    pub replay: Option<Replay>,
    /// The harness's system prompt and tool set as the caller read them
    /// (the gateway, from the request), for the per-call record.
    pub prompt: Option<calls::Prompt>,
    /// The harness rewrote its history from the start since the previous
    /// call (Claude Code's own compaction, seen by the gateway): every byte
    /// after the head is new anyway, so a head that has not shown the
    /// newest fold yet takes it now (reason `history_rewritten`).
    pub history_rewritten: bool,
    /// The search behind recall hints (`transform.recall_hints`): without
    /// one, no new prompt gets a hint (stored ones still render).
    pub recall: Option<Arc<dyn recall::Recall>>,
    /// Answer OpenCode's rendered messages still decoded
    /// ([`PassOutput::unencoded`], without `replay`): a caller that only
    /// writes them out ([`PassOutput::write_document`]) builds no JSON tree.
    pub unencoded: bool,
}

/// [`run_pass`] with what a resident process brings ([`Resident`]).
pub fn run_pass_on(
    store: &mut Store,
    envelope: Envelope,
    resident: Resident,
    config: &TransformConfig,
    now_ms: i64,
) -> Result<PassOutput> {
    let Resident {
        decoded,
        replay,
        prompt,
        history_rewritten,
        recall,
        unencoded,
    } = resident;
    let Envelope {
        harness,
        session_id,
        project_dir,
        model,
        usage,
        subagent,
        wait_for_fold,
        system,
        messages,
        ..
    } = envelope;
    let Decoded {
        messages,
        wire,
        boundary,
    } = match decoded {
        Some(decoded) => Decoded::opencode(decoded),
        None => Wire::decode(&harness, session_id.as_deref(), messages)?,
    };
    let session_id = session_id.or_else(|| session_from_messages(&messages));
    let Some(session_id) = session_id else {
        let mut report = PassReport::passthrough(
            "no session id: the envelope has no session_id and no message carries info.sessionID"
                .into(),
        );
        report.reason = "no_session";
        return Ok(PassOutput {
            messages: wire.encode(messages),
            unencoded: None,
            for_next: None,
            system,
            pass: report,
            call: None,
        });
    };

    // Project identity is derived once per session (it may run git).
    let identity = if sessions::find_session(store.conn(), &harness, &session_id)?.is_none() {
        project_dir.as_deref().map(project_identity)
    } else {
        None
    };

    // Earlier overflows: the limit a provider stated for this model caps the
    // harness's, and an overflow this session has not recovered from makes
    // this pass an emergency.
    let recovery = overflow::Recovery::load(store.conn(), &harness, &session_id, &model)?;
    let mut facts = InputFacts::read(&messages, &recovery.model(&model), usage, config, &recovery);
    facts.wait_for_fold = wait_for_fold;
    facts.history_rewritten = history_rewritten;
    facts.sample = usage;

    let key = SessionKey {
        harness: &harness,
        session_id: &session_id,
        subagent,
        identity: identity.as_deref(),
        project_dir: project_dir.as_deref(),
        system: system.as_ref(),
        boundary: boundary.as_deref(),
        prompt: prompt.as_ref(),
        recall: recall.as_deref(),
    };
    let applied = store.write_or_roll_back(|tx| {
        let applied = apply(tx, &key, &facts, &messages, config, now_ms)?;
        let keep = matches!(applied, Applied::Pass(_));
        Ok((applied, keep))
    })?;
    let outcome = match applied {
        Applied::Pass(outcome) => *outcome,
        // Nothing was kept: the adapter runs the historian, then the pass again.
        Applied::Wait(due) => {
            return Ok(PassOutput {
                messages: wire.encode(messages),
                unencoded: None,
                for_next: None,
                system,
                pass: PassReport::wait(facts.usage_percent, due.reason),
                call: None,
            });
        }
    };

    let (messages, for_next, fold_boundary) = render_outcome(
        messages,
        &outcome,
        &session_id,
        Render {
            replay,
            unencoded,
            wire,
        },
        config,
    );
    let (messages, unencoded) = match messages {
        Rendered::Values(values) => (values, None),
        Rendered::Decoded(messages) => (Vec::new(), Some(messages)),
    };
    let mut warnings = Vec::new();
    if outcome.schedule.emergency {
        warnings.push(format!(
            "context at {:.1}% of the usable window: emergency band (≥ {}%)",
            facts.usage_percent,
            measure::EMERGENCY_PERCENT
        ));
    }
    warnings.extend(recovery.warning(facts.window));
    Ok(PassOutput {
        messages,
        unencoded,
        for_next,
        system: outcome.system,
        call: Some(outcome.call),
        pass: PassReport {
            decision: outcome.schedule.decision,
            reason: outcome.schedule.reason,
            bust: outcome.bust,
            usage_percent: (facts.usage_percent * 10.0).round() / 10.0,
            tags: outcome.bindings.iter().flatten().flatten().count() as u64,
            dropped: outcome.first_dropped,
            materialized: outcome.materialized.is_some(),
            materialize_reason: outcome.materialized,
            historian_due: outcome.due.due,
            historian_reason: outcome.due.reason,
            blocking: outcome.due.blocking,
            warnings,
            fold_boundary,
            recall: recall::reported(outcome.recall),
        },
    })
}

/// How the caller wants the rendered messages ([`Resident`]).
struct Render {
    replay: Option<Replay>,
    unencoded: bool,
    wire: Wire,
}

/// The rendered messages: as JSON, or still decoded ([`Resident::unencoded`]).
enum Rendered {
    Values(Vec<Value>),
    Decoded(Vec<Message>),
}

/// The pass's messages as the harness gets them: `outcome` rendered over the
/// input (replaying what the previous pass sent when the caller kept it),
/// with the fold's boundary when the pass busts.
fn render_outcome(
    messages: Vec<Message>,
    outcome: &Outcome,
    session_id: &str,
    how: Render,
    config: &TransformConfig,
) -> (Rendered, Option<ForNextPass>, Option<String>) {
    let Render {
        replay,
        unencoded,
        wire,
    } = how;
    let markers = if config.temporal_awareness {
        temporal::markers(&messages)
    } else {
        vec![None; messages.len()]
    };
    let state = RenderState {
        tags: &outcome.tags,
        bindings: &outcome.bindings,
        prefixes: outcome.prefixes,
        reasoning_cleared_through: outcome.reasoning_cleared_through,
        keep_reasoning: &outcome.keep_reasoning,
        ordinals: &outcome.ordinals,
        covered_through: outcome.head.as_ref().map_or(0, |h| h.covered_through),
        markers: &markers,
        head: outcome.head.as_ref().map(|h| Head {
            session_id,
            m0: &h.m0,
            m1: &h.m1,
        }),
        nudge2: &outcome.nudge2,
        todo: outcome.todo.as_ref(),
        hints: &outcome.hints,
    };
    let fold_boundary = if outcome.bust == Bust::None {
        None
    } else {
        fold_boundary(&messages, &outcome.ordinals, state.covered_through)
    };
    // Pi's codec writes back by position: only OpenCode's output is replayed.
    let (messages, for_next) = match (replay, &wire) {
        (Some(replay), Wire::OpenCode) => {
            let (slots, for_next) = render_replaying(messages, &state, &replay);
            let messages = slots
                .into_iter()
                .map(|slot| match slot {
                    Slot::Fresh(message) => message.encode(),
                    Slot::Again(index) => Value::from(index),
                })
                .collect();
            (Rendered::Values(messages), Some(for_next))
        }
        (None, Wire::OpenCode) if unencoded => (Rendered::Decoded(render(messages, &state)), None),
        _ => (
            Rendered::Values(wire.encode(render(messages, &state))),
            None,
        ),
    };
    (messages, for_next, fold_boundary)
}

/// The newest message of the run of oldest messages the head covers (the
/// render takes them all off the wire), if a message the head does not
/// cover follows it.
fn fold_boundary(
    messages: &[Message],
    ordinals: &[Option<i64>],
    covered_through: i64,
) -> Option<String> {
    let covered = ordinals
        .iter()
        .take_while(|o| o.is_some_and(|o| o <= covered_through))
        .count();
    if covered == 0 || covered >= messages.len() {
        return None;
    }
    messages.get(covered - 1)?.id().map(str::to_string)
}

/// What the pass reads off the input once.
struct InputFacts {
    /// What the historian trigger reads too.
    pressure: Pressure,
    usage_percent: f64,
    prompt_tokens: u64,
    window: u64,
    mid_turn: bool,
    /// Newest time the provider answered, per the messages.
    response_ms: i64,
    /// The newest real user message: heuristics run once per such turn.
    turn_id: Option<String>,
    model_key: Option<String>,
    /// Rendered session history may use this many tokens.
    history_budget: u64,
    /// Tokens the execute threshold stands for (the emergency ceiling).
    ceiling: u64,
    /// The provider rejected the session's last request as too long: this
    /// pass recovers (usage raised, emergency drop, reason `overflow`).
    overflow: Option<overflow::Pending>,
    /// The adapter can wait for a blocking fold (the envelope's `wait_for_fold`).
    wait_for_fold: bool,
    /// The envelope's usage sample (the previous call's answer).
    sample: Option<Usage>,
    /// [`Resident::history_rewritten`].
    history_rewritten: bool,
}

impl InputFacts {
    fn read(
        messages: &[Message],
        model: &ModelInfo,
        usage: Option<Usage>,
        config: &TransformConfig,
        recovery: &overflow::Recovery,
    ) -> InputFacts {
        let mut pressure = trigger::pressure(model, usage, messages);
        recovery.raise(&mut pressure);
        let window = pressure.window;
        let response_ms = messages
            .iter()
            .filter(|m| m.role() == Role::Assistant)
            .filter_map(|m| m.completed_ms().or(m.created_ms()))
            .max()
            .unwrap_or(0);
        let threshold = config
            .execute_threshold_percentage
            .min(measure::MAX_THRESHOLD_PERCENT);
        let ceiling = (window as f64 * threshold / 100.0).floor() as u64;
        InputFacts {
            pressure,
            usage_percent: pressure.usage_percent,
            prompt_tokens: pressure.prompt_tokens,
            window,
            mid_turn: scheduler::is_mid_turn(messages),
            response_ms,
            turn_id: messages
                .iter()
                .rev()
                .find(|m| m.is_real_user())
                .and_then(|m| m.id().map(str::to_string)),
            model_key: model.key(),
            history_budget: (ceiling as f64 * config.history_budget_percentage).floor() as u64,
            ceiling,
            overflow: recovery.pending,
            wait_for_fold: false,
            sample: None,
            history_rewritten: false,
        }
    }
}

/// The head as the render sees it.
struct HeadOut {
    m0: String,
    m1: String,
    covered_through: i64,
}

/// What the transaction made of the pass.
enum Applied {
    Pass(Box<Outcome>),
    /// A blocking fold is due and the adapter can wait: roll everything back.
    Wait(Due),
}

struct Outcome {
    tags: Vec<TagRow>,
    bindings: Bindings,
    ordinals: Vec<Option<i64>>,
    keep_reasoning: Vec<bool>,
    prefixes: bool,
    reasoning_cleared_through: i64,
    schedule: Schedule,
    bust: Bust,
    first_dropped: Vec<i64>,
    head: Option<HeadOut>,
    materialized: Option<&'static str>,
    system: Option<Value>,
    due: Due,
    /// Channel 2 reminders: the message each follows, and its text.
    nudge2: BTreeMap<String, String>,
    /// The frozen synthetic todo call, after the head.
    todo: Option<Message>,
    /// The session's recall hints by the prompt each rides on.
    hints: BTreeMap<String, String>,
    /// How this pass decided a new prompt's hint, when it did.
    recall: Option<recall::Outcome>,
    /// The pass's row of the per-call record.
    call: i64,
}

/// Is `ctx_reduce` callable, per the first user message's tool allow-list?
fn reduce_callable(messages: &[Message]) -> Option<bool> {
    let first_user = messages.iter().find(|m| m.role() == Role::User)?;
    let Some(tools) = first_user.tools() else {
        return Some(true);
    };
    let named = tools
        .iter()
        .find(|(name, _)| name.as_str() == "ctx_reduce" || name.ends_with("_ctx_reduce"));
    Some(match named {
        Some((_, allowed)) => allowed.as_bool().unwrap_or(true),
        None => tools.get("*").and_then(Value::as_bool).unwrap_or(true),
    })
}

struct SessionKey<'a> {
    harness: &'a str,
    session_id: &'a str,
    subagent: bool,
    /// Project identity, computed only when the session is new.
    identity: Option<&'a str>,
    project_dir: Option<&'a Path>,
    system: Option<&'a Value>,
    /// The message mc's compaction boundary follows, when the input had one:
    /// the harness no longer sends it or anything before it.
    boundary: Option<&'a str>,
    /// What the caller read of the harness's prompt (else the envelope's `system`).
    prompt: Option<&'a calls::Prompt>,
    /// The search behind recall hints, when the caller brought one.
    recall: Option<&'a dyn recall::Recall>,
}

fn apply(
    tx: &Transaction<'_>,
    key: &SessionKey<'_>,
    facts: &InputFacts,
    messages: &[Message],
    config: &TransformConfig,
    now_ms: i64,
) -> Result<Applied> {
    // 1. Observe.
    let Observed {
        mut session,
        subagent,
        prefixes,
        ordinals,
        mut keep_reasoning,
        mut tags,
        bindings,
        counter_before,
        pinned_ids,
        pinned_texts,
        hidden_pins,
        cache,
        markers,
    } = observe(tx, key, messages, now_ms)?;
    if key.harness == todo::HARNESS && !subagent {
        todo::capture(tx, session.id, messages, now_ms)?;
    }
    let pass = Pass {
        tx,
        key,
        facts,
        messages,
        config,
        now_ms,
    };

    // 2. Plan: a pure function of what was observed.
    let plan = plan(
        &PlanInput {
            session: &session,
            subagent,
            prefixes,
            markers: &markers,
            facts,
            config,
            system: key.system,
            now_ms,
        },
        cache,
    );
    session.today_line = plan.today_line.clone();

    // 3. Mutate: first application of drops and cleanup, busting passes only.
    let mutated = mutate(
        &pass,
        &plan,
        &mut session,
        &Seen {
            subagent,
            bindings: &bindings,
            ordinals: &ordinals,
            pinned_ids: &pinned_ids,
        },
        &mut tags,
        &mut keep_reasoning,
    )?;

    // Historian due? Measured on the raw tail the head does not cover yet,
    // by the same functions `mc-historian check` uses.
    let tail = trigger::Tail {
        messages,
        ordinals: &ordinals,
        covered_through: markers.covered_through,
    };
    let due = trigger::historian_due(&trigger::trigger_input(
        tx,
        Some(session.id),
        &facts.pressure,
        config.execute_threshold_percentage,
        subagent,
        &tail,
        0,
    )?);
    // An adapter that can wait hears of a blocking fold now, as the pass
    // would report it (after this pass's drops), and before the head and the
    // render: it runs the historian, then this pass once more.
    if facts.wait_for_fold && due.blocking {
        return Ok(Applied::Wait(due));
    }

    // The head: rebuilt on HARD, m[1] refreshed on other busting passes, else replayed.
    let ordinal_of = |id: &str| -> Option<i64> {
        messages
            .iter()
            .zip(&ordinals)
            .find(|(m, _)| m.id() == Some(id))
            .and_then(|(_, o)| *o)
            .or_else(|| hidden_pins.get(id).copied())
    };
    let ctx = HeadContext {
        session: session.id,
        project: session.project_identity.as_deref(),
        project_dir: key.project_dir,
        model_key: facts.model_key.as_deref(),
        system_hash: plan.system_hash.as_deref(),
        render_key: plan.render_key.clone(),
        history_budget: facts.history_budget,
        memory_budget: u64::from(config.memory_budget_tokens),
        dates: config.temporal_awareness,
        now_ms,
        pinned: &pinned_texts,
    };
    let head_move = calls_head_move(&plan.head);
    let head = build_head(tx, plan.head, &ctx, &markers, &ordinal_of)?;

    // Reduce nudges, on content the provider has not cached yet.
    if prefixes {
        let tail = Tail {
            messages,
            bindings: &bindings,
            ordinals: &ordinals,
            covered: head.now.as_ref().map_or(0, |h| h.covered_through),
            pinned: &pinned_ids,
            new_after: counter_before,
        };
        nudges(tx, &mut session, &tail, &mut tags, config, now_ms)?;
    }

    // What the provider had cached and this pass changed, byte for byte.
    let bust = if head.m0_changed() {
        Bust::Hard
    } else if mutated.visible_change || head.m1_changed() || plan.render_outdated {
        Bust::Soft
    } else {
        Bust::None
    };

    // 4. Save.
    save(
        &pass,
        &plan.schedule,
        plan.last_response_ms,
        &mut session,
        (bust, head.materialized.is_some()),
    )?;
    let call = record_call(
        &pass,
        &plan.schedule,
        &session,
        (bust, head_move, &head),
        (&bindings, &ordinals, &tags),
        mutated.first_dropped.len(),
    )?;

    Ok(Applied::Pass(Box::new(Outcome {
        tags,
        bindings,
        ordinals,
        keep_reasoning,
        prefixes,
        reasoning_cleared_through: session.reasoning_cleared_through,
        schedule: plan.schedule,
        bust,
        first_dropped: mutated.first_dropped,
        materialized: head.materialized,
        head: head.now.map(|h| HeadOut {
            m0: h.m0,
            m1: h.m1,
            covered_through: h.covered_through,
        }),
        system: plan.system.or_else(|| key.system.cloned()),
        due,
        nudge2: state::load_reminders(tx, session.id)?,
        todo: todo::frozen(tx, session.id)?,
        recall: recall_hint(&pass, &session, subagent)?,
        hints: recall::load(tx, session.id)?,
        call,
    })))
}

/// Decide the recall hint of the input's new prompt, if it has one no pass
/// decided yet: with `transform.recall_hints` on, a search brought, the
/// session's project known, and not in a subagent.
fn recall_hint(
    pass: &Pass<'_, '_>,
    session: &SessionRow,
    subagent: bool,
) -> Result<Option<recall::Outcome>> {
    let (Some(search), Some(project)) = (pass.key.recall, session.project_identity.as_deref())
    else {
        return Ok(None);
    };
    if !pass.config.recall_hints || subagent {
        return Ok(None);
    }
    let Some(message) = recall::undecided(pass.tx, session.id, pass.messages)? else {
        return Ok(None);
    };
    let prompt = recall::Prompt {
        session: session.id,
        project,
        harness: pass.key.harness,
        session_id: pass.key.session_id,
        message,
        now_ms: pass.now_ms,
    };
    recall::decide(pass.tx, &prompt, search).map(Some)
}

/// What [`apply`] was called with, for its phases.
struct Pass<'a, 't> {
    tx: &'a Transaction<'t>,
    key: &'a SessionKey<'a>,
    facts: &'a InputFacts,
    messages: &'a [Message],
    config: &'a TransformConfig,
    now_ms: i64,
}

/// What phase 3 reads of what was observed.
struct Seen<'a> {
    subagent: bool,
    bindings: &'a Bindings,
    ordinals: &'a [Option<i64>],
    pinned_ids: &'a HashSet<String>,
}

/// What phase 3 changed.
#[derive(Default)]
struct Mutated {
    /// Tags dropped for the first time on this pass.
    first_dropped: Vec<i64>,
    /// A byte on the wire changed (a drop, a clear, a reclaim, caveman).
    visible_change: bool,
}

/// Phase 3: the first application of queued drops, the emergency drop and
/// the heuristics, on a busting pass only (`plan.mutations`); the session's
/// watermarks move with them. A deferred pass mid-turn only notes that an
/// execute is owed.
fn mutate(
    pass: &Pass<'_, '_>,
    plan: &Plan,
    session: &mut SessionRow,
    seen: &Seen<'_>,
    tags: &mut Vec<TagRow>,
    keep_reasoning: &mut [bool],
) -> Result<Mutated> {
    let Pass {
        tx,
        facts,
        messages,
        config,
        now_ms,
        ..
    } = *pass;
    let mut mutated = Mutated::default();
    let Some(mutations) = &plan.mutations else {
        if plan.schedule.deferred_mid_turn && session.deferred_execute_ms.is_none() {
            session.deferred_execute_ms = Some(now_ms);
        }
        return Ok(mutated);
    };
    let covered_now = plan.covered_now;
    let mut mutation = Mutation {
        tx,
        session: session.id,
        messages,
        bindings: seen.bindings,
        tags,
        config,
        now_ms,
        first_dropped: &mut mutated.first_dropped,
        visible_change: &mut mutated.visible_change,
        positions: tag_positions(seen.bindings),
        pinned: seen.pinned_ids,
        visible: seen
            .ordinals
            .iter()
            .map(|o| o.is_none_or(|o| o > covered_now))
            .collect(),
    };
    mutation.apply_pending()?;
    if config.smart_drops {
        mutation.smart_drops()?;
    }
    if let Some(sample) = mutations.emergency_sample {
        let min_saving = if facts.overflow.is_some() {
            0
        } else {
            emergency::MIN_SAVING
        };
        // Relief (no force band, no overflow) keeps no reserve beyond the
        // protected window: see `emergency::Reserve`.
        let keep = if plan.schedule.force_band || facts.overflow.is_some() {
            emergency::Reserve::Newest
        } else {
            emergency::Reserve::None
        };
        mutation.emergency_drop(facts.prompt_tokens, facts.ceiling, min_saving, keep)?;
        session.last_emergency_sample = Some(sample);
    }
    if mutations.heuristics {
        let watermark = session.reasoning_cleared_through;
        if let Some(through) = mutation.clear_reasoning(watermark, keep_reasoning)? {
            session.reasoning_cleared_through = through;
        }
        if config.tool_reclaim && !plan.schedule.force_band {
            mutation.reclaim_old_tools(session.tool_reclaim_watermark)?;
        }
        if config.caveman && !seen.subagent {
            mutation.caveman()?;
        }
        session.heuristics_turn_id = facts.turn_id.clone();
    }
    if pass.key.harness == todo::HARNESS && !seen.subagent {
        let on_wire = mutation.newest_todo_on_wire();
        let enabled = config.todo;
        if todo::refreeze(
            tx,
            session.id,
            pass.key.session_id,
            messages,
            on_wire,
            enabled,
        )? {
            *mutation.visible_change = true;
        }
    }
    session.tool_reclaim_watermark = session.tag_counter;
    session.deferred_execute_ms = None;
    session.last_execute_ms = now_ms;
    if let Some(seen) = &facts.overflow {
        overflow::clear(tx, session.id, seen)?;
    }
    Ok(mutated)
}

/// Phase 4: the session row and the pass's record. `last_response_ms` is
/// the provider's newest answer as the plan measured it; `(bust,
/// materialized)` what the pass did to the cached bytes.
fn save(
    pass: &Pass<'_, '_>,
    schedule: &Schedule,
    last_response_ms: i64,
    session: &mut SessionRow,
    (bust, materialized): (Bust, bool),
) -> Result<()> {
    let Pass {
        tx,
        key,
        facts,
        now_ms,
        ..
    } = *pass;
    // After an execute, this idle window's later passes should defer.
    session.last_response_ms = if schedule.decision == Decision::Execute {
        last_response_ms.max(now_ms)
    } else {
        last_response_ms
    };
    if facts.model_key.is_some() {
        session.last_model_key = facts.model_key.clone();
    }
    if session.project_dir.is_none() {
        session.project_dir = key.project_dir.and_then(Path::to_str).map(str::to_string);
    }
    session.render_version = RENDER_VERSION;
    sessions::save(tx, session, now_ms)?;
    record_pass(
        tx,
        &PassRecord {
            session: session.id,
            // The harness's numbers may exceed i64: stored saturated, never negative.
            input_tokens: i64::try_from(facts.prompt_tokens).unwrap_or(i64::MAX),
            usage_percent: facts.usage_percent,
            context_limit: i64::try_from(facts.window).unwrap_or(i64::MAX),
            decision: schedule.decision,
            reason: schedule.reason,
            bust,
            materialized,
            now_ms,
        },
    )
}

/// Phase 1: the session and what is stored about it that the pass reads.
/// Its only writes are the bookkeeping every pass does alike: the session
/// row on first sight, ordinals and tags for content seen for the first time.
struct Observed {
    session: SessionRow,
    subagent: bool,
    /// Show `§N§` prefixes (the agent can call ctx_reduce; frozen on first sight).
    prefixes: bool,
    ordinals: Vec<Option<i64>>,
    keep_reasoning: Vec<bool>,
    tags: Vec<TagRow>,
    bindings: Bindings,
    /// Tags numbered above this were created on this pass.
    counter_before: i64,
    pinned_ids: HashSet<String>,
    /// Pinned messages the input carries, with their text.
    pinned_texts: Vec<PinnedText>,
    /// Pinned messages behind mc's compaction boundary, by id: their ordinals.
    hidden_pins: BTreeMap<String, i64>,
    /// The cached head (never for a subagent: its prompt has no head).
    cache: Option<HeadRow>,
    /// What the store holds now, to compare with the cached head's markers.
    markers: Markers,
}

fn observe(
    tx: &Transaction<'_>,
    key: &SessionKey<'_>,
    messages: &[Message],
    now_ms: i64,
) -> Result<Observed> {
    let mut session = match sessions::find_session(tx, key.harness, key.session_id)? {
        Some(row) => row,
        None => sessions::create_session(
            tx,
            key.harness,
            key.session_id,
            key.subagent,
            key.identity,
            now_ms,
        )?,
    };
    let subagent = key.subagent || session.is_subagent;
    if session.reduce_callable.is_none() {
        // Frozen on first sight of a user message so the prefixes never flap.
        session.reduce_callable = reduce_callable(messages);
    }
    let prefixes = session.reduce_callable.unwrap_or(true);

    let (ordinals, keep_reasoning) = messages::register_messages(tx, &mut session, messages)?;
    let counter_before = session.tag_counter;
    let (tags, bindings) = bind_tags(tx, &mut session, messages, &ordinals, now_ms)?;

    let pins = history::pins(tx, session.id)?;
    // Pins behind mc's compaction boundary are no longer in the input: their
    // text comes from the raw content mc kept when a pass saw them.
    let hidden_through = match key.boundary {
        Some(id) if !pins.is_empty() => messages::ordinal_of(tx, session.id, id)?,
        _ => None,
    };
    let mut hidden_pins = BTreeMap::new();
    let mut pinned_texts = Vec::with_capacity(pins.len());
    for p in &pins {
        let text = match messages.iter().find(|m| m.id() == Some(p.id.as_str())) {
            Some(message) => message_text(message),
            None => {
                let Some(through) = hidden_through else {
                    continue;
                };
                let Some(ordinal) =
                    messages::ordinal_of(tx, session.id, &p.id)?.filter(|o| *o <= through)
                else {
                    continue;
                };
                hidden_pins.insert(p.id.clone(), ordinal);
                content::message_text(tx, session.id, ordinal)?
            }
        };
        if !text.is_empty() {
            pinned_texts.push(PinnedText {
                id: p.id.clone(),
                role: p.role.clone(),
                created_ms: p.created_at,
                text,
            });
        }
    }
    let pinned_ids = pins.into_iter().map(|p| p.id).collect();
    let cache = if subagent {
        None
    } else {
        heads::load_head(tx, session.id)?
    };
    let markers = heads::current_markers(tx, session.id, session.project_identity.as_deref())?;
    Ok(Observed {
        session,
        subagent,
        prefixes,
        ordinals,
        keep_reasoning,
        tags,
        bindings,
        counter_before,
        pinned_ids,
        pinned_texts,
        hidden_pins,
        cache,
        markers,
    })
}

/// What the head does on this pass. Each variant carries the cached head it
/// needs, so no later step has to assume one exists.
#[derive(Debug, Clone, PartialEq)]
enum HeadPlan {
    /// A subagent's prompt has no head.
    Off,
    /// Rebuild m[0] (a HARD trigger); `old` is what the provider may have cached.
    Materialize {
        reason: &'static str,
        old: Option<HeadRow>,
    },
    /// A busting pass without a HARD trigger: refresh m[1] from the cached markers.
    Refresh(HeadRow),
    /// A defer pass: the cached bytes again.
    Replay(HeadRow),
}

/// Everything [`plan`] reads.
struct PlanInput<'a> {
    session: &'a SessionRow,
    subagent: bool,
    prefixes: bool,
    markers: &'a Markers,
    facts: &'a InputFacts,
    config: &'a TransformConfig,
    /// The system prompt as the input carries it.
    system: Option<&'a Value>,
    now_ms: i64,
}

/// First application of mutations, on a busting pass.
#[derive(Debug, Clone, PartialEq)]
struct Mutations {
    /// Run the tiered drop for this usage sample (force band, relief, overflow).
    emergency_sample: Option<i64>,
    /// Reasoning clearing, age reclaim and caveman: once per user turn.
    heuristics: bool,
}

/// Phase 2: what this pass does, decided before anything changes.
#[derive(Debug, Clone, PartialEq)]
struct Plan {
    schedule: Schedule,
    head: HeadPlan,
    /// The render rules changed since the session's last pass.
    render_outdated: bool,
    /// The system prompt to send, and the `Today's date:` line it keeps.
    system: Option<Value>,
    today_line: Option<String>,
    system_hash: Option<String>,
    render_key: String,
    /// Raw messages up to this ordinal are covered by the head and leave the wire.
    covered_now: i64,
    /// The provider's newest answer, as the scheduler measured the cache's age.
    last_response_ms: i64,
    /// `Some` exactly when the pass busts (decision `execute`).
    mutations: Option<Mutations>,
}

/// The harness rewrote its history (its own compaction): what follows the
/// head misses the cache anyway, so a fold the head does not cover yet
/// comes in now rather than at mc's next bust.
fn bust_for_a_rewrite(
    schedule: &mut Schedule,
    rewritten: bool,
    cache: Option<&HeadRow>,
    markers: &Markers,
) {
    if rewritten
        && schedule.decision == Decision::Defer
        && cache.is_some_and(|c| c.covered_through < markers.covered_through)
    {
        schedule.decision = Decision::Execute;
        schedule.reason = "history_rewritten";
        schedule.deferred_mid_turn = false;
    }
}

/// A scheduled defer becomes an execute for `reason` (an execute stays as
/// it is).
fn execute_instead(schedule: &mut Schedule, reason: &'static str) {
    if schedule.decision == Decision::Defer {
        schedule.decision = Decision::Execute;
        schedule.reason = reason;
        schedule.deferred_mid_turn = false;
    }
}

/// Phase 2: a pure function of what the pass observed.
fn plan(input: &PlanInput<'_>, cache: Option<HeadRow>) -> Plan {
    let PlanInput {
        session,
        subagent,
        prefixes,
        markers,
        facts,
        config,
        system: input_system,
        now_ms,
    } = *input;
    let model_changed = matches!(
        (&session.last_model_key, &facts.model_key),
        (Some(old), Some(new)) if old != new
    );
    let last_response_ms = session.last_response_ms.max(facts.response_ms);
    let mut schedule = scheduler::decide(&SchedulerInput {
        usage_percent: facts.usage_percent,
        last_response_ms,
        now_ms,
        ttl: config.cache_ttl,
        threshold: config.execute_threshold_percentage,
        mid_turn: facts.mid_turn,
        subagent,
        deferred_owed: session.deferred_execute_ms.is_some(),
        model_changed,
    });
    if facts.overflow.is_some() && schedule.decision == Decision::Execute {
        schedule.reason = "overflow";
    }

    // The system prompt with the frozen date, and whether m[0] must be rebuilt.
    let guidance = system::guidance_for(config, subagent, prefixes);
    // Where the system prompt comes through a hook of its own after this pass
    // (OpenCode), the date that hook saw last stands in for the input's.
    let input_today = input_system
        .and_then(system::today_line)
        .or_else(|| session.seen_today_line.clone());
    let frozen_today = session.today_line.clone().or_else(|| input_today.clone());
    let frozen_system = input_system.map(|s| {
        system::render(
            s,
            guidance.as_deref(),
            config
                .system_prompt_guidance
                .then_some(frozen_today.as_deref())
                .flatten(),
        )
    });
    let render_key = format!(
        "e{RENDER_VERSION}-h{}-m{}-d{}",
        facts.history_budget, config.memory_budget_tokens, config.temporal_awareness as u8
    );
    let frozen_hash = frozen_system.as_ref().map(system::hash);
    let head_enabled = !subagent;
    let mut hard = if head_enabled {
        heads::must_materialize(
            cache.as_ref(),
            &HardSignals {
                model_key: facts.model_key.as_deref(),
                system_hash: frozen_hash.as_deref(),
                render_key: &render_key,
                project: session.project_identity.as_deref(),
                ttl: config.cache_ttl,
                last_response_ms,
                now_ms,
            },
            markers,
        )
    } else {
        None
    };
    // In the force band, fold whatever arrived since m[0] (compartments,
    // memories, profile) into a re-tiered baseline; a head with nothing new
    // stays as it is.
    if hard.is_none()
        && schedule.force_band
        && cache.as_ref().is_some_and(|c| heads::has_news(c, markers))
    {
        hard = Some("force_band");
    }
    // New render rules change bytes anywhere in the prompt: once, declared.
    let render_outdated = session.render_version != RENDER_VERSION;
    if render_outdated && cache.is_some() {
        hard = Some("render_version");
    }
    if render_outdated && !head_enabled {
        execute_instead(&mut schedule, "render_version");
    }
    let rewritten = facts.history_rewritten && head_enabled && hard.is_none();
    bust_for_a_rewrite(&mut schedule, rewritten, cache.as_ref(), markers);
    // A HARD fold turns a scheduled defer into an execute.
    if let Some(reason) = hard {
        execute_instead(&mut schedule, reason);
    }
    let busting = schedule.decision == Decision::Execute;
    // Recomputed compartments replace m[0] on a pass that busts anyway.
    if head_enabled
        && busting
        && hard.is_none()
        && cache
            .as_ref()
            .is_some_and(|c| heads::recomputed_since(c, markers))
    {
        hard = Some("compartment_recompute");
    }

    // On a busting pass the date moves on; otherwise the frozen one stays.
    let (system, today_line) = if busting && config.system_prompt_guidance {
        let system =
            input_system.map(|s| system::render(s, guidance.as_deref(), input_today.as_deref()));
        (system, input_today.or(frozen_today))
    } else {
        (frozen_system, frozen_today)
    };
    let system_hash = system.as_ref().map(system::hash);

    let covered_now = if busting {
        markers.covered_through
    } else {
        cache.as_ref().map_or(0, |c| c.covered_through)
    };
    let mutations = busting.then(|| {
        // In the force band the tiered drop is the emergency drop; at the
        // threshold, on a pass that busts anyway, it buys headroom (relief), so
        // the next bust is many turns away. A pass whose cache is cold anyway
        // (idle past the TTL, another model or system prompt) rides it: from
        // half the threshold up it buys that headroom for nothing. Once per
        // usage sample, except that an overflow drops again.
        let over_threshold = facts.usage_percent >= config.execute_threshold_percentage;
        let riding = scheduler::cache_cold(schedule.reason)
            && facts.usage_percent >= config.execute_threshold_percentage * scheduler::RIDE_SHARE;
        let sample = i64::try_from(facts.prompt_tokens).unwrap_or(i64::MAX);
        let emergency = (schedule.force_band || (config.relief_drop && (over_threshold || riding)))
            && (facts.overflow.is_some() || session.last_emergency_sample != Some(sample));
        Mutations {
            emergency_sample: emergency.then_some(sample),
            heuristics: subagent
                || schedule.force_band
                || hard.is_some()
                || session.heuristics_turn_id.is_none()
                || session.heuristics_turn_id != facts.turn_id,
        }
    });
    let head = match (head_enabled, hard, cache) {
        (false, _, _) => HeadPlan::Off,
        (true, Some(reason), old) => HeadPlan::Materialize { reason, old },
        // No HARD trigger means there is a cached head (its absence is one).
        (true, None, Some(cache)) if busting => HeadPlan::Refresh(cache),
        (true, None, Some(cache)) => HeadPlan::Replay(cache),
        (true, None, None) => HeadPlan::Materialize {
            reason: "first_render",
            old: None,
        },
    };
    Plan {
        schedule,
        head,
        render_outdated,
        system,
        today_line,
        system_hash,
        render_key,
        covered_now,
        last_response_ms,
        mutations,
    }
}

/// The head before and after this pass, and why m[0] was rebuilt.
struct HeadDone {
    before: Option<HeadRow>,
    now: Option<HeadRow>,
    materialized: Option<&'static str>,
}

impl HeadDone {
    fn m0_changed(&self) -> bool {
        match (&self.before, &self.now) {
            (Some(old), Some(new)) => old.m0 != new.m0,
            (None, Some(_)) => true,
            _ => false,
        }
    }

    fn m1_changed(&self) -> bool {
        match (&self.before, &self.now) {
            (Some(old), Some(new)) => {
                old.m1 != new.m1 || old.covered_through != new.covered_through
            }
            _ => false,
        }
    }
}

/// Carry out the head's plan.
fn build_head(
    tx: &Transaction<'_>,
    plan: HeadPlan,
    ctx: &HeadContext<'_>,
    markers: &Markers,
    ordinal_of: &dyn Fn(&str) -> Option<i64>,
) -> Result<HeadDone> {
    Ok(match plan {
        HeadPlan::Off => HeadDone {
            before: None,
            now: None,
            materialized: None,
        },
        HeadPlan::Materialize { reason, old } => HeadDone {
            now: Some(heads::materialize(tx, ctx, markers, reason, ordinal_of)?),
            before: old,
            materialized: Some(reason),
        },
        HeadPlan::Refresh(cache) => {
            let (row, backstop) = heads::refresh_m1(tx, ctx, &cache, markers, ordinal_of)?;
            if backstop {
                let reason = "pressure_backstop";
                HeadDone {
                    now: Some(heads::materialize(tx, ctx, markers, reason, ordinal_of)?),
                    before: Some(cache),
                    materialized: Some(reason),
                }
            } else {
                HeadDone {
                    now: Some(row),
                    before: Some(cache),
                    materialized: None,
                }
            }
        }
        HeadPlan::Replay(cache) => HeadDone {
            now: Some(cache.clone()),
            before: Some(cache),
            materialized: None,
        },
    })
}

/// The pass's own numbers on the session row, for `status`.
struct PassRecord {
    session: i64,
    input_tokens: i64,
    usage_percent: f64,
    context_limit: i64,
    decision: Decision,
    reason: &'static str,
    bust: Bust,
    materialized: bool,
    now_ms: i64,
}

fn record_pass(tx: &Transaction<'_>, r: &PassRecord) -> Result<()> {
    tx.prepare_cached(
        "UPDATE sessions SET
            last_input_tokens = :input_tokens, last_usage_percent = :usage_percent,
            last_context_limit = :context_limit,
            last_decision = :decision, last_reason = :reason,
            last_bust = CASE WHEN :bust = 'none' THEN last_bust ELSE :bust END,
            last_bust_cause = CASE WHEN :bust = 'none' THEN last_bust_cause ELSE :reason END,
            last_bust_ms = CASE WHEN :bust = 'none' THEN last_bust_ms ELSE :now END,
            passes_defer = passes_defer + (:decision = 'defer'),
            passes_execute = passes_execute + (:decision = 'execute'),
            passes_materialized = passes_materialized + :materialized,
            last_error = NULL
         WHERE id = :id",
    )?
    .execute(rusqlite::named_params! {
        ":id": r.session,
        ":input_tokens": r.input_tokens,
        ":usage_percent": r.usage_percent,
        ":context_limit": r.context_limit,
        ":decision": r.decision.as_str(),
        ":reason": r.reason,
        ":bust": r.bust.as_str(),
        ":materialized": i64::from(r.materialized),
        ":now": r.now_ms,
    })?;
    Ok(())
}

/// What the head plan does, as the per-call record names it.
fn calls_head_move(plan: &HeadPlan) -> calls::HeadMove {
    match plan {
        HeadPlan::Off => calls::HeadMove::Off,
        HeadPlan::Materialize { .. } => calls::HeadMove::Rebuilt,
        HeadPlan::Refresh(_) => calls::HeadMove::Refreshed,
        HeadPlan::Replay(_) => calls::HeadMove::Replayed,
    }
}

/// The pass's row of the per-call record (`calls::record`): its id.
fn record_call(
    pass: &Pass<'_, '_>,
    schedule: &Schedule,
    session: &SessionRow,
    (bust, head_move, head): (Bust, calls::HeadMove, &HeadDone),
    (bindings, ordinals, tags): (&Bindings, &[Option<i64>], &[TagRow]),
    drops: usize,
) -> Result<i64> {
    let Pass {
        tx,
        key,
        facts,
        messages,
        config,
        now_ms,
    } = *pass;
    let shown = head.now.as_ref();
    let sources = calls::Sources::measure(
        bindings,
        ordinals,
        tags,
        shown.map_or(0, |h| h.covered_through),
        shown.map(|h| (h.m0.as_str(), h.m1.as_str(), h.m0_tokens + h.m1_tokens)),
    );
    let prompt = match key.prompt {
        Some(prompt) => prompt.clone(),
        None => calls::Prompt {
            system: key.system.map(calls::PromptPart::of_value),
            tools: None,
        },
    };
    let head_move = if head.materialized.is_some() {
        calls::HeadMove::Rebuilt
    } else {
        head_move
    };
    calls::record(
        tx,
        &calls::NewCall {
            session: session.id,
            at_ms: now_ms,
            decision: schedule.decision,
            reason: schedule.reason,
            bust,
            head: head_move,
            head_reason: head.materialized,
            usage_percent: facts.usage_percent,
            context_window: facts.window,
            model: facts.model_key.as_deref(),
            prompt,
            messages: messages.len(),
            first_message: messages.first().and_then(Message::id),
            sources,
            drops,
            sample: facts.sample,
        },
        calls::Keep::of(config),
    )
}

/// The live tail as the nudges measure it.
struct Tail<'a> {
    messages: &'a [Message],
    bindings: &'a Bindings,
    ordinals: &'a [Option<i64>],
    /// Messages up to this ordinal are in the head, not the tail.
    covered: i64,
    pinned: &'a HashSet<String>,
    /// Tags numbered above this were created on this pass.
    new_after: i64,
}

/// Measure the live tail (T: all active tagged tokens; U: the part ctx_reduce
/// could drop) and place Channel 1 / Channel 2 reminders on new content.
fn nudges(
    tx: &Transaction<'_>,
    session: &mut SessionRow,
    tail: &Tail<'_>,
    tags: &mut [TagRow],
    config: &TransformConfig,
    now_ms: i64,
) -> Result<()> {
    let Tail {
        messages,
        bindings,
        ordinals,
        covered,
        pinned,
        new_after,
    } = *tail;
    let floor = tags::protected_floor(tx, session.id, config.protected_tags)?;
    let mut total = 0u64;
    let mut reducible = 0u64;
    let mut oldest: Vec<(i64, String)> = Vec::new();
    let mut seen = HashSet::new();
    for ((message, parts), ordinal) in messages.iter().zip(bindings).zip(ordinals) {
        if ordinal.is_some_and(|o| o <= covered) {
            continue;
        }
        let is_pinned = message.id().is_some_and(|id| pinned.contains(id));
        for &i in parts.iter().flatten() {
            let Some(tag) = tags.get(i) else { continue };
            if tag.dropped.is_some() || !seen.insert(tag.number) {
                continue;
            }
            let mass = (tag.tokens + tag.input_tokens).max(0) as u64;
            total += mass;
            if !is_pinned && floor.is_none_or(|f| tag.number < f) {
                reducible += mass;
                if tag.kind == TagKind::Tool && oldest.len() < 5 {
                    oldest.push((
                        tag.number,
                        tag.tool_name.clone().unwrap_or_else(|| "tool".into()),
                    ));
                }
            }
        }
    }
    // Channel 1: on the newest tool output first seen on this pass.
    let newest_new_tool = tags
        .iter()
        .enumerate()
        .filter(|(_, t)| t.kind == TagKind::Tool && t.number > new_after)
        .max_by_key(|(_, t)| t.number)
        .map(|(i, _)| i);
    let level = nudge::channel1_level(total, reducible);
    if let Some(tag) = newest_new_tool.and_then(|i| tags.get_mut(i))
        && nudge::channel1_fires(
            level,
            session.nudge1_level,
            total,
            reducible,
            session.nudge1_reducible,
        )
    {
        let text = nudge::channel1_text(level, reducible, &oldest);
        tags::set_nudge(tx, session.id, tag.number, &text)?;
        tag.nudge = Some(text);
        session.nudge1_level = i64::from(level);
        session.nudge1_reducible = reducible as i64;
    }
    // Channel 2: once, after a finished step, until the reducible mass falls
    // away. Each reminder stays where it was placed (stored, replayed).
    if reducible < nudge::REARM_BELOW {
        session.nudge2_armed = true;
        session.nudge1_level = 0;
        session.nudge1_reducible = 0;
    }
    let last = messages.last();
    let at_boundary = last.is_some_and(|m| {
        m.role() == Role::Assistant && matches!(m.finish(), Some("tool-calls" | "stop"))
    });
    if session.nudge2_armed
        && at_boundary
        && nudge::channel2_due(total, reducible)
        && let Some(id) = last.and_then(Message::id)
    {
        state::add_reminder(tx, session.id, id, &nudge::channel2_text(reducible), now_ms)?;
        session.nudge2_armed = false;
    }
    Ok(())
}

/// Bind each part to its existing tag, creating tags for content seen for the
/// first time. Token counts are estimated here, once; later passes never
/// re-tokenize (the exact count replaces the estimate off the hot path).
fn bind_tags(
    tx: &Transaction<'_>,
    session: &mut SessionRow,
    messages: &[Message],
    ordinals: &[Option<i64>],
    now_ms: i64,
) -> Result<(Vec<TagRow>, Bindings)> {
    let from = ordinals.iter().flatten().min().copied().unwrap_or(i64::MAX);
    // At most a tag a part: exact when every part is tagged.
    let parts: usize = messages.iter().map(|m| m.parts.len()).sum();
    let loaded = tags::load_tags_from_ordinal(tx, session.id, from, parts)?;
    // The loaded tags by identity, borrowed; the tags this pass creates go
    // to `fresh` (their index: after the loaded ones), by identity in `created`.
    let by_identity: FxHashMap<&str, usize> = loaded
        .iter()
        .enumerate()
        .map(|(i, t)| (t.identity.as_str(), i))
        .collect();
    // The same beyond those loaded: exact on a first pass.
    let mut fresh: Vec<TagRow> = Vec::with_capacity(parts.saturating_sub(loaded.len()));
    let mut created = Created::default();
    let mut identity = String::new();

    let mut bindings = Vec::with_capacity(messages.len());
    for (message, ordinal) in messages.iter().zip(ordinals) {
        let (Some(message_id), Some(ordinal)) = (message.id(), *ordinal) else {
            bindings.push(vec![None; message.parts.len()]);
            continue;
        };
        let reasoning_bytes: i64 = message
            .parts
            .iter()
            .filter(|p| p.kind == PartKind::Reasoning)
            .map(|p| p.text().map_or(0, str::len) as i64)
            .sum();
        let mut first_text = true;
        let mut row = Vec::with_capacity(message.parts.len());
        for (part_index, part) in message.parts.iter().enumerate() {
            let Some(kind) = part_identity_into(message_id, part_index, part, &mut identity) else {
                row.push(None);
                continue;
            };
            if let Some(&existing) = by_identity
                .get(identity.as_str())
                .or_else(|| created.get(&identity, &fresh, loaded.len()))
            {
                row.push(Some(existing));
                continue;
            }
            // Only finished tool calls get a tag; open ones bind to nothing yet.
            if kind == TagKind::Tool && part.tool_output().is_none() {
                row.push(None);
                continue;
            }
            let (byte_size, tokens, input_bytes, input_tokens) = measure_part(kind, part);
            let reasoning = if kind == TagKind::Message && first_text {
                first_text = false;
                reasoning_bytes
            } else {
                0
            };
            session.tag_counter += 1;
            let number = session.tag_counter;
            let tool_name = part.tool_name().filter(|_| kind == TagKind::Tool);
            tags::insert_tag(
                tx,
                session.id,
                &NewTag {
                    number,
                    kind,
                    identity: &identity,
                    message_id,
                    ordinal,
                    tool_name,
                    byte_size,
                    tokens,
                    input_bytes,
                    input_tokens,
                    reasoning_bytes: reasoning,
                    created_ms: now_ms,
                },
            )?;
            content::record_part(tx, session.id, &identity, ordinal, part_index, kind, part)?;
            fresh.push(TagRow {
                number,
                kind,
                identity: identity.clone(),
                dropped: None,
                tool_name: tool_name.map(str::to_string),
                tokens,
                input_tokens,
                bytes: byte_size + input_bytes + reasoning,
                caveman_depth: 0,
                nudge: None,
            });
            let index = loaded.len() + fresh.len() - 1;
            created.insert(&identity, index);
            row.push(Some(index));
        }
        bindings.push(row);
    }
    drop(by_identity);
    // On a first pass every tag is fresh: no copy of them all.
    if loaded.is_empty() {
        return Ok((fresh, bindings));
    }
    let mut tags = loaded;
    tags.extend(fresh);
    Ok((tags, bindings))
}

/// The tags [`bind_tags`] creates, by identity, without a second copy of
/// each identity (its tag row holds it): a hash of the identity names the
/// first tag made with that hash; an identity whose hash an earlier one
/// took goes to `collided` by its text.
#[derive(Default)]
struct Created {
    by_hash: FxHashMap<u64, usize>,
    collided: FxHashMap<String, usize>,
}

impl Created {
    fn hash(identity: &str) -> u64 {
        use std::hash::BuildHasher;
        rustc_hash::FxBuildHasher.hash_one(identity)
    }

    /// The index of the tag made for `identity`: `fresh` holds the tags
    /// made so far, numbered from `offset`.
    fn get(&self, identity: &str, fresh: &[TagRow], offset: usize) -> Option<&usize> {
        let index = self.by_hash.get(&Self::hash(identity))?;
        let same = index
            .checked_sub(offset)
            .and_then(|i| fresh.get(i))
            .is_some_and(|tag| tag.identity == identity);
        if same {
            Some(index)
        } else {
            self.collided.get(identity)
        }
    }

    fn insert(&mut self, identity: &str, index: usize) {
        match self.by_hash.entry(Self::hash(identity)) {
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(index);
            }
            std::collections::hash_map::Entry::Occupied(_) => {
                self.collided.insert(identity.to_string(), index);
            }
        }
    }
}

fn tag_positions(bindings: &[Vec<Option<usize>>]) -> HashMap<usize, (usize, usize)> {
    let mut positions = HashMap::new();
    for (m, parts) in bindings.iter().enumerate() {
        for (p, binding) in parts.iter().enumerate() {
            if let Some(i) = binding {
                positions.entry(*i).or_insert((m, p));
            }
        }
    }
    positions
}

/// First application of mutations on a pass that busts anyway.
struct Mutation<'a, 't> {
    tx: &'a Transaction<'t>,
    session: i64,
    messages: &'a [Message],
    bindings: &'a [Vec<Option<usize>>],
    tags: &'a mut Vec<TagRow>,
    config: &'a TransformConfig,
    now_ms: i64,
    first_dropped: &'a mut Vec<i64>,
    visible_change: &'a mut bool,
    /// Where each visible tag sits: (message index, part index).
    positions: HashMap<usize, (usize, usize)>,
    /// Pinned message ids: their tags are never dropped or compressed.
    pinned: &'a HashSet<String>,
    /// Per message: still on the wire (not covered by the head).
    visible: Vec<bool>,
}

impl Mutation<'_, '_> {
    fn position_of(&self, tag_index: usize) -> Option<(usize, usize)> {
        self.positions.get(&tag_index).copied()
    }

    /// A tag of this pass by index (the indices come from `bindings`).
    fn tag(&self, index: usize) -> Option<&TagRow> {
        self.tags.get(index)
    }

    fn part_at(&self, (message, part): (usize, usize)) -> Option<&Part> {
        self.messages.get(message)?.parts.get(part)
    }

    /// The message is still on the wire (not covered by the head).
    fn on_wire(&self, message: usize) -> bool {
        self.visible.get(message).copied().unwrap_or(false)
    }

    fn is_pinned(&self, tag_index: usize) -> bool {
        self.position_of(tag_index)
            .and_then(|(m, _)| self.messages.get(m)?.id())
            .is_some_and(|id| self.pinned.contains(id))
    }

    /// Visible on the wire, closed if a tool call, and not pinned: dropping it reclaims bytes now.
    fn reclaimable(&self, tag_index: usize) -> bool {
        let (Some(position), Some(tag)) = (self.position_of(tag_index), self.tag(tag_index)) else {
            return false;
        };
        self.on_wire(position.0)
            && !self.is_pinned(tag_index)
            && (tag.kind != TagKind::Tool
                || self.part_at(position).is_some_and(Part::tool_is_closed))
    }

    fn protected_floor(&self) -> Result<Option<i64>> {
        tags::protected_floor(self.tx, self.session, self.config.protected_tags)
    }

    /// Drop a tag now, freezing its mode: recent tool calls keep a skeleton.
    fn drop_tag(
        &mut self,
        number: i64,
        kind: TagKind,
        visible: Option<usize>,
        cause: &str,
    ) -> Result<()> {
        self.drop_tag_as(number, kind, visible, cause, None)
    }

    /// [`Self::drop_tag`] in `mode` when given.
    fn drop_tag_as(
        &mut self,
        number: i64,
        kind: TagKind,
        visible: Option<usize>,
        cause: &str,
        mode: Option<DropMode>,
    ) -> Result<()> {
        let mode = if let Some(mode) = mode {
            mode
        } else if kind == TagKind::Tool {
            let floor = tags::newest_tool_floor(self.tx, self.session, SKELETON_WINDOW)?;
            if floor.is_some_and(|f| number >= f) {
                DropMode::Skeleton
            } else {
                DropMode::Full
            }
        } else {
            DropMode::Full
        };
        tags::mark_dropped(self.tx, self.session, number, mode, cause, self.now_ms)?;
        if let Some(index) = visible {
            if let Some(tag) = self.tags.get_mut(index) {
                tag.dropped = Some(mode);
            }
            if self
                .position_of(index)
                .is_some_and(|(m, _)| self.on_wire(m))
            {
                *self.visible_change = true;
            }
        }
        self.first_dropped.push(number);
        Ok(())
    }

    /// Drops the agent queued with ctx_reduce.
    fn apply_pending(&mut self) -> Result<()> {
        let pending = tags::pending_drops(self.tx, self.session)?;
        if pending.is_empty() {
            return Ok(());
        }
        let floor = self.protected_floor()?;
        let visible: HashMap<i64, usize> = self
            .tags
            .iter()
            .enumerate()
            .map(|(i, t)| (t.number, i))
            .collect();
        let stored = tags::load_tags_by_numbers(
            self.tx,
            self.session,
            &pending
                .iter()
                .copied()
                .filter(|n| !visible.contains_key(n))
                .collect::<Vec<_>>(),
        )?;
        for number in pending {
            let here = visible
                .get(&number)
                .and_then(|&i| Some((i, self.tag(i)?)))
                .map(|(i, t)| (t.kind, t.dropped.is_some(), Some(i)));
            let (kind, dropped, index) = match here {
                Some(found) => found,
                None => match stored.iter().find(|t| t.number == number) {
                    Some(t) => (t.kind, t.dropped.is_some(), None),
                    None => {
                        tags::delete_pending(self.tx, self.session, number)?;
                        continue;
                    }
                },
            };
            if dropped {
                tags::delete_pending(self.tx, self.session, number)?;
                continue;
            }
            if floor.is_some_and(|f| number >= f) {
                continue; // protected: waits until it leaves the window
            }
            if let Some(i) = index {
                if self.is_pinned(i) {
                    continue; // pinned: never dropped while pinned
                }
                if kind == TagKind::Tool
                    && let Some(position) = self.position_of(i)
                    && !self.part_at(position).is_some_and(Part::tool_is_closed)
                {
                    continue; // an open arc is never dropped
                }
            }
            self.drop_tag(number, kind, index, "reduce")?;
            tags::delete_pending(self.tx, self.session, number)?;
        }
        Ok(())
    }

    /// Advance the reasoning watermark to `newest tag − clear_reasoning_age`,
    /// or further to where `keep_reasoning_tokens` runs out (`reasoning`);
    /// pinned messages it passes keep their reasoning. Returns the new watermark.
    fn clear_reasoning(&mut self, old: i64, keep: &mut [bool]) -> Result<Option<i64>> {
        let newest = self.tags.iter().map(|t| t.number).max().unwrap_or(0);
        let ages = age_tags(self.tags, self.bindings);
        let by_age = newest - i64::from(self.config.clear_reasoning_age);
        let by_budget =
            reasoning::budget_watermark(self.messages, &ages, self.config.keep_reasoning_tokens);
        let cutoff = by_age.max(by_budget);
        if cutoff <= old {
            return Ok(None);
        }
        for (index, (message, &age)) in self.messages.iter().zip(&ages).enumerate() {
            if age <= old || age > cutoff || keep.get(index).copied().unwrap_or(false) {
                continue;
            }
            if !message.parts.iter().any(|p| p.kind == PartKind::Reasoning) {
                continue;
            }
            match message.id() {
                Some(id) if self.pinned.contains(id) => {
                    messages::set_keep_reasoning(self.tx, self.session, id)?;
                    if let Some(kept) = keep.get_mut(index) {
                        *kept = true;
                    }
                }
                _ if self.on_wire(index) => *self.visible_change = true,
                _ => {}
            }
        }
        Ok(Some(cutoff))
    }

    /// Age-based reclaim: tool outputs already present at the previous execute
    /// pass, outside the protected window and not tiny, are dropped.
    fn reclaim_old_tools(&mut self, watermark: i64) -> Result<()> {
        let floor = self.protected_floor()?;
        let min_tokens = i64::from(self.config.tool_reclaim_min_tokens);
        let tools = self.visible_tools();
        let exempt = self.exempt_tools(&tools);
        for index in tools {
            let Some(tag) = self.tag(index) else { continue };
            if tag.dropped.is_some()
                || tag.number > watermark
                || floor.is_some_and(|f| tag.number >= f)
                || tag.tokens + tag.input_tokens < min_tokens
                || exempt.contains(&tag.number)
                || !self.reclaimable(index)
            {
                continue;
            }
            let number = tag.number;
            self.drop_tag(number, TagKind::Tool, Some(index), "age")?;
        }
        Ok(())
    }

    /// Visible tool tags, oldest first.
    fn visible_tools(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .bindings
            .iter()
            .flatten()
            .flatten()
            .copied()
            .filter(|&i| self.tag(i).is_some_and(|t| t.kind == TagKind::Tool))
            .collect();
        v.sort_by_key(|&i| self.tag(i).map_or(0, |t| t.number));
        v.dedup();
        v
    }

    /// The newest todowrite and the newest few ctx_reduce results stay.
    fn exempt_tools(&self, tools: &[usize]) -> Vec<i64> {
        let tagged: Vec<&TagRow> = tools.iter().filter_map(|&i| self.tag(i)).collect();
        let named = |t: &&&TagRow, f: &dyn Fn(&str) -> bool| t.tool_name.as_deref().is_some_and(f);
        let mut exempt: Vec<i64> = Vec::new();
        if let Some(t) = tagged
            .iter()
            .rev()
            .find(|t| named(t, &smart_drops::is_todo))
        {
            exempt.push(t.number);
        }
        exempt.extend(
            tagged
                .iter()
                .rev()
                .filter(|t| named(t, &smart_drops::is_ctx_reduce))
                .take(smart_drops::CTX_REDUCE_KEEP)
                .map(|t| t.number),
        );
        exempt
    }

    /// The input's newest todo call is on the wire, its output intact.
    fn newest_todo_on_wire(&self) -> bool {
        let is_todo = |i: usize| {
            self.tag(i)
                .and_then(|t| t.tool_name.as_deref())
                .is_some_and(smart_drops::is_todo)
        };
        self.visible_tools()
            .into_iter()
            .rev()
            .find(|&i| is_todo(i))
            .is_some_and(|i| {
                self.tag(i).is_some_and(|t| t.dropped.is_none())
                    && self.position_of(i).is_some_and(|(m, _)| self.on_wire(m))
            })
    }

    /// Smart drops: superseded edits become markers, spent control-plane
    /// outputs go (`smart_drops::select`), inside the same bounds as every
    /// other drop (protected window, pins, open calls, on the wire).
    fn smart_drops(&mut self) -> Result<()> {
        let floor = self.protected_floor()?;
        let tools = self.visible_tools();
        let picked = {
            let calls: Vec<smart_drops::Call<'_>> = tools
                .iter()
                .filter_map(|&i| {
                    let tag = self.tag(i)?;
                    let part = self.part_at(self.position_of(i)?)?;
                    Some(smart_drops::Call {
                        number: tag.number,
                        tool: tag.tool_name.as_deref()?,
                        input: part.tool_input(),
                        droppable: tag.dropped.is_none()
                            && floor.is_none_or(|f| tag.number < f)
                            && self.reclaimable(i),
                    })
                })
                .collect();
            smart_drops::select(&calls)
        };
        let index_of: HashMap<i64, usize> = tools
            .iter()
            .filter_map(|&i| Some((self.tag(i)?.number, i)))
            .collect();
        for (number, choice) in picked {
            let (cause, mode) = match choice {
                smart_drops::Choice::Marker => ("edit", Some(DropMode::Marker)),
                smart_drops::Choice::Drop => ("smart", None),
            };
            let index = index_of.get(&number).copied();
            self.drop_tag_as(number, TagKind::Tool, index, cause, mode)?;
        }
        Ok(())
    }

    /// The tiered emergency drop, at or above the force band.
    fn emergency_drop(
        &mut self,
        current: u64,
        ceiling: u64,
        min_saving: u64,
        keep: emergency::Reserve,
    ) -> Result<()> {
        if ceiling == 0 {
            return Ok(());
        }
        let tagged: i64 = self
            .tx
            .prepare_cached(
                "SELECT coalesce(sum(byte_size + input_bytes + reasoning_bytes), 0) FROM tags
                 WHERE session = ?1 AND status = 'active'",
            )?
            .query_row(params![self.session], |r| r.get(0))?;
        // Bounded relief (`transform.relief_window_percentage` under 100)
        // reclaims every output outside the window it keeps: what it leaves
        // is re-sent after this bust and is where the context grows back
        // from, so a target short of that only brings the next bust nearer.
        let relief = keep == emergency::Reserve::None && self.config.relief_window_percentage < 100;
        let needed = if relief {
            u64::MAX
        } else {
            emergency::reclaim_needed(current, (tagged.max(0) as u64).div_ceil(4), ceiling)
        };
        if needed == 0 {
            return Ok(());
        }
        let tools = self.visible_tools();
        let exempt = self.exempt_tools(&tools);
        let protected = self.protected_floor()?;
        let floor = if relief {
            self.relief_floor(protected, ceiling, &tools, &exempt)
        } else {
            protected
        };
        let candidates: Vec<emergency::Candidate> = tools
            .iter()
            .filter_map(|&i| Some((i, self.tag(i)?)))
            .filter(|&(i, t)| {
                t.dropped.is_none()
                    && floor.is_none_or(|f| t.number < f)
                    && !exempt.contains(&t.number)
                    && self.reclaimable(i)
            })
            .map(|(_, t)| emergency::Candidate {
                number: t.number,
                tool_name: t.tool_name.clone(),
                reclaim: (t.bytes.max(0) as u64).div_ceil(4),
            })
            .collect();
        let index_of: HashMap<i64, usize> = tools
            .iter()
            .filter_map(|&i| Some((self.tag(i)?.number, i)))
            .collect();
        for number in emergency::plan_with(&candidates, needed, min_saving, keep) {
            self.drop_tag(
                number,
                TagKind::Tool,
                index_of.get(&number).copied(),
                "emergency",
            )?;
        }
        Ok(())
    }

    /// The window relief keeps: the protected tags, less their older tool
    /// outputs beyond `transform.relief_window_percentage` of the ceiling
    /// ([`emergency::relief_floor`]).
    fn relief_floor(
        &self,
        protected: Option<i64>,
        ceiling: u64,
        tools: &[usize],
        exempt: &[i64],
    ) -> Option<i64> {
        let protected = protected?;
        let inside: Vec<(i64, u64)> = tools
            .iter()
            .filter_map(|&i| Some((i, self.tag(i)?)))
            .filter(|&(i, t)| {
                t.dropped.is_none()
                    && t.number >= protected
                    && !exempt.contains(&t.number)
                    && self.reclaimable(i)
            })
            .map(|(_, t)| (t.number, (t.bytes.max(0) as u64).div_ceil(4)))
            .collect();
        let budget = ceiling.saturating_mul(u64::from(self.config.relief_window_percentage)) / 100;
        Some(emergency::relief_floor(&inside, budget).map_or(protected, |f| f.max(protected)))
    }

    /// Caveman compression of old long prose: depth by age, only ever deeper.
    fn caveman(&mut self) -> Result<()> {
        let floor = self.protected_floor()?;
        let min = i64::from(self.config.caveman_min_chars);
        let mut eligible: Vec<(i64, usize)> = self
            .tags
            .iter()
            .enumerate()
            .filter(|&(i, t)| {
                t.kind == TagKind::Message
                    && t.dropped.is_none()
                    && floor.is_none_or(|f| t.number < f)
                    && self.position_of(i).is_some_and(|position| {
                        self.on_wire(position.0)
                            && self
                                .part_at(position)
                                .and_then(Part::text)
                                .is_some_and(|s| s.len() as i64 >= min)
                    })
                    && !self.is_pinned(i)
            })
            .map(|(i, t)| (t.number, i))
            .collect();
        eligible.sort_unstable();
        let count = eligible.len();
        for (position, (number, index)) in eligible.into_iter().enumerate() {
            let depth = caveman::depth_for(position, count);
            let Some(tag) = self.tags.get_mut(index) else {
                continue;
            };
            if depth > tag.caveman_depth {
                tag.caveman_depth = depth;
                tags::set_caveman_depth(self.tx, self.session, number, depth)?;
                *self.visible_change = true;
            }
        }
        Ok(())
    }
}

/// Record a passthrough (best effort) so `status` can count them.
pub fn record_passthrough(
    store: &mut Store,
    harness: &str,
    session_id: &str,
    error: &str,
    now_ms: i64,
) -> Result<()> {
    store.write(|tx| {
        tx.execute(
            "UPDATE sessions SET passes_passthrough = passes_passthrough + 1, last_decision = 'passthrough',
                                 last_error = ?3, updated_ms = ?4
             WHERE harness = ?1 AND session_id = ?2",
            params![harness, session_id, error, now_ms],
        )?;
        Ok(())
    })
}

#[cfg(test)]
mod created_tests {
    use super::*;

    fn tag(identity: &str) -> TagRow {
        TagRow {
            number: 1,
            kind: TagKind::Message,
            identity: identity.into(),
            dropped: None,
            tool_name: None,
            tokens: 1,
            input_tokens: 0,
            bytes: 4,
            caveman_depth: 0,
            nudge: None,
        }
    }

    #[test]
    fn created_tags_are_found_by_identity_even_when_two_identities_share_a_hash() {
        // Three loaded tags come before the fresh ones.
        let fresh = vec![tag("m1:p0"), tag("c1@m2")];
        let mut created = Created::default();
        created.insert("m1:p0", 3);
        created.insert("c1@m2", 4);
        assert_eq!(created.get("m1:p0", &fresh, 3), Some(&3));
        assert_eq!(created.get("c1@m2", &fresh, 3), Some(&4));
        assert_eq!(created.get("m9:p0", &fresh, 3), None);
        // A hash taken by another identity: "m3:p0" as if it hashed as
        // "m1:p0" does. It is kept by its text and found by it, not taken
        // for the tag that holds its hash.
        let mut collided = Created::default();
        collided.insert("m1:p0", 3);
        let taken = Created::hash("m1:p0");
        collided.by_hash.remove(&taken);
        collided.by_hash.insert(Created::hash("m3:p0"), 3);
        let fresh = vec![tag("m1:p0"), tag("m3:p0")];
        collided.insert("m3:p0", 4);
        assert_eq!(collided.get("m3:p0", &fresh, 3), Some(&4));
    }
}

/// The plan alone: no store, no messages, only values.
#[cfg(test)]
mod plan_tests {
    use serde_json::json;

    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    fn facts(percent: f64) -> InputFacts {
        let window = 100_000;
        let prompt_tokens = (window as f64 * percent / 100.0) as u64;
        InputFacts {
            pressure: Pressure {
                prompt_tokens,
                sampled: true,
                window,
                usage_percent: percent,
            },
            usage_percent: percent,
            prompt_tokens,
            window,
            mid_turn: false,
            response_ms: NOW - 1_000,
            turn_id: Some("msg_u1".into()),
            model_key: Some("anthropic/m".into()),
            history_budget: 9_750,
            ceiling: 65_000,
            overflow: None,
            wait_for_fold: false,
            sample: None,
            history_rewritten: false,
        }
    }

    fn session() -> SessionRow {
        SessionRow {
            id: 1,
            last_model_key: Some("anthropic/m".into()),
            heuristics_turn_id: Some("msg_u1".into()),
            render_version: RENDER_VERSION,
            ..SessionRow::default()
        }
    }

    fn input<'a>(
        session: &'a SessionRow,
        facts: &'a InputFacts,
        config: &'a TransformConfig,
        markers: &'a Markers,
        system: Option<&'a Value>,
    ) -> PlanInput<'a> {
        PlanInput {
            session,
            subagent: false,
            prefixes: true,
            markers,
            facts,
            config,
            system,
            now_ms: NOW,
        }
    }

    /// The head a first pass of `session` would have cached.
    fn cached(session: &SessionRow, facts: &InputFacts, config: &TransformConfig) -> HeadRow {
        let markers = Markers::default();
        let first = plan(&input(session, facts, config, &markers, None), None);
        HeadRow {
            m0: "<session-history></session-history>".into(),
            render_key: first.render_key,
            model_key: facts.model_key.clone(),
            materialized_ms: NOW - 60_000,
            ..HeadRow::default()
        }
    }

    #[test]
    fn a_session_without_a_head_materializes_it_first() {
        let (session, facts, config) = (session(), facts(20.0), TransformConfig::default());
        let markers = Markers::default();
        let plan = plan(&input(&session, &facts, &config, &markers, None), None);
        assert_eq!(plan.schedule.decision, Decision::Execute);
        assert_eq!(plan.schedule.reason, "first_render");
        assert_eq!(
            plan.head,
            HeadPlan::Materialize {
                reason: "first_render",
                old: None
            }
        );
        assert!(plan.mutations.is_some());
    }

    #[test]
    fn a_warm_cache_below_the_threshold_replays_and_mutates_nothing() {
        let (session, facts, config) = (session(), facts(20.0), TransformConfig::default());
        let cache = cached(&session, &facts, &config);
        let markers = Markers::default();
        let plan = plan(
            &input(&session, &facts, &config, &markers, None),
            Some(cache.clone()),
        );
        assert_eq!(plan.schedule.decision, Decision::Defer);
        assert_eq!(plan.head, HeadPlan::Replay(cache));
        assert_eq!(plan.mutations, None);
        assert!(!plan.render_outdated);
    }

    #[test]
    fn at_the_threshold_m1_is_refreshed_and_heuristics_wait_for_a_new_turn() {
        let (session, facts, config) = (session(), facts(70.0), TransformConfig::default());
        let cache = cached(&session, &facts, &config);
        let markers = Markers::default();
        let plan = plan(
            &input(&session, &facts, &config, &markers, None),
            Some(cache.clone()),
        );
        assert_eq!(plan.schedule.decision, Decision::Execute);
        assert_eq!(plan.head, HeadPlan::Refresh(cache));
        // Same user turn as the last heuristics run; relief drops at the threshold.
        assert_eq!(
            plan.mutations,
            Some(Mutations {
                emergency_sample: Some(70_000),
                heuristics: false
            })
        );
    }

    #[test]
    fn new_render_rules_rebuild_the_head_once_declared() {
        let (mut session, facts, config) = (session(), facts(20.0), TransformConfig::default());
        let cache = cached(&session, &facts, &config);
        session.render_version = RENDER_VERSION - 1;
        let markers = Markers::default();
        let plan = plan(
            &input(&session, &facts, &config, &markers, None),
            Some(cache.clone()),
        );
        assert!(plan.render_outdated);
        assert_eq!(plan.schedule.reason, "render_version");
        assert_eq!(
            plan.head,
            HeadPlan::Materialize {
                reason: "render_version",
                old: Some(cache)
            }
        );
        // A subagent has no head, yet its bytes change too: an execute all the same.
        let sub = PlanInput {
            subagent: true,
            ..input(&session, &facts, &config, &markers, None)
        };
        let plan = super::plan(&sub, None);
        assert_eq!(plan.head, HeadPlan::Off);
        assert_eq!(plan.schedule.decision, Decision::Execute);
        assert_eq!(plan.schedule.reason, "render_version");
    }

    #[test]
    fn the_emergency_drop_runs_once_per_sample_unless_an_overflow_came_back() {
        let (mut session, mut facts, config) = (session(), facts(96.0), TransformConfig::default());
        let cache = cached(&session, &facts, &config);
        let markers = Markers::default();
        session.last_emergency_sample = Some(96_000);
        let latched = plan(
            &input(&session, &facts, &config, &markers, None),
            Some(cache.clone()),
        );
        assert!(latched.schedule.force_band);
        assert_eq!(latched.mutations.unwrap().emergency_sample, None);
        facts.overflow = Some(overflow::Pending {
            since_ms: NOW - 10,
            tokens: Some(96_000),
        });
        let again = plan(
            &input(&session, &facts, &config, &markers, None),
            Some(cache),
        );
        assert_eq!(again.schedule.reason, "overflow");
        assert_eq!(again.mutations.unwrap().emergency_sample, Some(96_000));
    }

    #[test]
    fn the_date_moves_only_on_a_busting_pass() {
        let mut session = session();
        session.today_line = Some("Today's date: Mon Nov 30 2026".into());
        let config = TransformConfig::default();
        let system = json!(["You are an agent.\nToday's date: Tue Dec 01 2026"]);
        let markers = Markers::default();
        let calm = facts(20.0);
        let cache = cached(&session, &calm, &config);
        // The cached head was built with the system prompt as it stood then.
        let guidance = system::guidance_for(&config, false, true);
        let then = system::render(&system, guidance.as_deref(), session.today_line.as_deref());
        let cache = HeadRow {
            system_hash: Some(system::hash(&then)),
            ..cache
        };
        let defer = plan(
            &input(&session, &calm, &config, &markers, Some(&system)),
            Some(cache.clone()),
        );
        assert_eq!(
            defer.schedule.decision,
            Decision::Defer,
            "{:?}",
            defer.schedule
        );
        assert!(
            defer
                .system
                .unwrap()
                .to_string()
                .contains("Mon Nov 30 2026")
        );
        assert_eq!(
            defer.today_line.as_deref(),
            Some("Today's date: Mon Nov 30 2026")
        );
        let busy = facts(70.0);
        let execute = plan(
            &input(&session, &busy, &config, &markers, Some(&system)),
            Some(cache),
        );
        assert_eq!(execute.schedule.decision, Decision::Execute);
        assert!(
            execute
                .system
                .unwrap()
                .to_string()
                .contains("Tue Dec 01 2026")
        );
        assert_eq!(
            execute.today_line.as_deref(),
            Some("Today's date: Tue Dec 01 2026")
        );
    }
}

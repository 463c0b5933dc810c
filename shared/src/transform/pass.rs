//! One transform pass: bind every part to its tag, let the scheduler decide,
//! decide whether the head (m[0]) must be rebuilt, first-apply mutations only
//! when this pass busts the cache anyway, then replay everything stored.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use rusqlite::{Transaction, params};
use serde_json::Value;

use crate::codec::opencode::{decode_all, encode_all};
use crate::codec::{Message, PartKind, Role};
use crate::config::TransformConfig;
use crate::error::Result;
use crate::history::head::PinnedText;
use crate::history::store as history;
use crate::history::trigger::{self, Due, Pressure, message_text};
use crate::identity::project_identity;
use crate::store::Store;

use super::head::{self as heads, HardSignals, HeadContext, HeadRow};
use super::render::{Bindings, Head, RENDER_VERSION, RenderState, age_tags, render};
use super::report::{Bust, Decision, PassOutput, PassReport};
use super::scheduler::{self, Schedule, SchedulerInput};
use super::state;
use super::{caveman, emergency, nudge, overflow, system, temporal};
use crate::domain::envelope::{Envelope, ModelInfo, Usage};
use crate::domain::measure;
use crate::domain::messages::{self, session_from_messages};
use crate::domain::sessions::{self, SessionRow};
use crate::domain::tags::{self, DropMode, NewTag, TagKind, TagRow, measure_part, part_identity};

/// The newest this-many tool tags (any status) are dropped as skeletons; older ones go whole.
pub const SKELETON_WINDOW: u32 = 20;
/// The newest this-many `ctx_reduce` results stay, as examples for the agent.
const CTX_REDUCE_KEEP: usize = 3;

/// Run one pass. `now_ms` is the envelope's clock or the caller's.
pub fn run_pass(
    store: &mut Store,
    envelope: Envelope,
    config: &TransformConfig,
    now_ms: i64,
) -> Result<PassOutput> {
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
    let mut messages = decode_all(messages)?;
    let session_id = session_id.or_else(|| session_from_messages(&messages));
    let Some(session_id) = session_id else {
        let mut report = PassReport::passthrough(
            "no session id: the envelope has no session_id and no message carries info.sessionID"
                .into(),
        );
        report.reason = "no_session";
        return Ok(PassOutput {
            messages: encode_all(messages),
            system,
            pass: report,
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

    let key = SessionKey {
        harness: &harness,
        session_id: &session_id,
        subagent,
        identity: identity.as_deref(),
        project_dir: project_dir.as_deref(),
        system: system.as_ref(),
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
                messages: encode_all(messages),
                system,
                pass: PassReport::wait(facts.usage_percent, due.reason),
            });
        }
    };

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
            session_id: &session_id,
            m0: &h.m0,
            m1: &h.m1,
        }),
        nudge2: &outcome.nudge2,
    };
    messages = render(messages, &state);
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
        messages: encode_all(messages),
        system: outcome.system,
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
        },
    })
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
}

fn apply(
    tx: &Transaction<'_>,
    key: &SessionKey<'_>,
    facts: &InputFacts,
    messages: &[Message],
    config: &TransformConfig,
    now_ms: i64,
) -> Result<Applied> {
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

    let (ordinals, mut keep_reasoning) = messages::register_messages(tx, &mut session, messages)?;
    let counter_before = session.tag_counter;
    let (mut tags, bindings) = bind_tags(tx, &mut session, messages, &ordinals, now_ms)?;

    let pins = history::pins(tx, session.id)?;
    let pinned_ids: HashSet<&str> = pins.iter().map(|p| p.id.as_str()).collect();
    let pinned_texts: Vec<PinnedText> = pins
        .iter()
        .filter_map(|p| {
            let message = messages.iter().find(|m| m.id() == Some(p.id.as_str()))?;
            Some(PinnedText {
                id: p.id.clone(),
                role: p.role.clone(),
                created_ms: p.created_at,
                text: message_text(message),
            })
        })
        .filter(|p| !p.text.is_empty())
        .collect();

    let model_changed = matches!(
        (&session.last_model_key, &facts.model_key),
        (Some(old), Some(new)) if old != new
    );
    let last_response_before = session.last_response_ms.max(facts.response_ms);
    let mut schedule = scheduler::decide(&SchedulerInput {
        usage_percent: facts.usage_percent,
        last_response_ms: last_response_before,
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
    let input_today = key
        .system
        .and_then(system::today_line)
        .or_else(|| session.seen_today_line.clone());
    let frozen_today = session.today_line.clone().or_else(|| input_today.clone());
    let frozen_system = key.system.map(|s| {
        system::render(
            s,
            guidance.as_deref(),
            config
                .system_prompt_guidance
                .then_some(frozen_today.as_deref())
                .flatten(),
        )
    });
    let project = session.project_identity.clone();
    let head_enabled = !subagent;
    let cache = if head_enabled {
        heads::load_head(tx, session.id)?
    } else {
        None
    };
    let markers = heads::current_markers(tx, session.id, project.as_deref())?;
    let render_key = format!(
        "e{RENDER_VERSION}-h{}-m{}-d{}",
        facts.history_budget, config.memory_budget_tokens, config.temporal_awareness as u8
    );
    let frozen_hash = frozen_system.as_ref().map(system::hash);
    let mut hard = if head_enabled {
        heads::must_materialize(
            cache.as_ref(),
            &HardSignals {
                model_key: facts.model_key.as_deref(),
                system_hash: frozen_hash.as_deref(),
                render_key: &render_key,
                project: project.as_deref(),
                ttl: config.cache_ttl,
                last_response_ms: last_response_before,
                now_ms,
            },
            &markers,
        )
    } else {
        None
    };
    // In the force band, fold whatever arrived since m[0] (compartments,
    // memories, profile) into a re-tiered baseline; a head with nothing new
    // stays as it is.
    if hard.is_none()
        && head_enabled
        && schedule.force_band
        && cache.as_ref().is_some_and(|c| heads::has_news(c, &markers))
    {
        hard = Some("force_band");
    }
    // New render rules change bytes anywhere in the prompt: once, declared.
    let render_outdated = session.render_version != RENDER_VERSION;
    if render_outdated && head_enabled && cache.is_some() {
        hard = Some("render_version");
    }
    if render_outdated && !head_enabled && schedule.decision == Decision::Defer {
        schedule.decision = Decision::Execute;
        schedule.reason = "render_version";
        schedule.deferred_mid_turn = false;
    }
    if let Some(reason) = hard
        && schedule.decision == Decision::Defer
    {
        schedule.decision = Decision::Execute;
        schedule.reason = reason;
        schedule.deferred_mid_turn = false;
    }
    let busting = schedule.decision == Decision::Execute;

    // On a busting pass the date moves on; otherwise the frozen one stays.
    let (out_system, today) = if busting && config.system_prompt_guidance {
        let system = key
            .system
            .map(|s| system::render(s, guidance.as_deref(), input_today.as_deref()));
        (system, input_today.clone().or(frozen_today))
    } else {
        (frozen_system, frozen_today)
    };
    let system_hash = out_system.as_ref().map(system::hash);
    session.today_line = today;

    // Raw messages up to this ordinal are covered by the head and leave the wire.
    let covered_now = if busting {
        markers.covered_through
    } else {
        cache.as_ref().map_or(0, |c| c.covered_through)
    };
    let visible = |ordinal: Option<i64>| ordinal.is_none_or(|o| o > covered_now);

    let mut first_dropped = Vec::new();
    let mut visible_change = false;
    if busting {
        let mut mutation = Mutation {
            tx,
            session: session.clone(),
            messages,
            bindings: &bindings,
            tags: &mut tags,
            config,
            now_ms,
            first_dropped: &mut first_dropped,
            visible_change: &mut visible_change,
            positions: tag_positions(&bindings),
            pinned: &pinned_ids,
            visible: bindings
                .iter()
                .zip(&ordinals)
                .map(|(_, o)| visible(*o))
                .collect(),
        };
        mutation.apply_pending()?;
        // In the force band this is the emergency drop. At the threshold, when
        // this pass busts anyway, the same tiered drop buys headroom (relief),
        // so the next bust is many turns away instead of on the next turn.
        let over_threshold = facts.usage_percent >= config.execute_threshold_percentage;
        if schedule.force_band || (config.relief_drop && over_threshold) {
            let sample = i64::try_from(facts.prompt_tokens).unwrap_or(i64::MAX);
            // An overflow drops again even on a sample already acted on.
            if facts.overflow.is_some() || session.last_emergency_sample != Some(sample) {
                mutation.emergency_drop(facts.prompt_tokens, facts.ceiling)?;
                session.last_emergency_sample = Some(sample);
            }
        }
        let heuristics_due = subagent
            || schedule.force_band
            || hard.is_some()
            || session.heuristics_turn_id.is_none()
            || session.heuristics_turn_id != facts.turn_id;
        if heuristics_due {
            if let Some(through) = mutation.clear_reasoning(&mut keep_reasoning)? {
                session.reasoning_cleared_through = through;
            }
            if config.tool_reclaim && !schedule.force_band {
                mutation.reclaim_old_tools()?;
            }
            if config.caveman && !subagent {
                mutation.caveman()?;
            }
            session.heuristics_turn_id = facts.turn_id.clone();
        }
        session.tool_reclaim_watermark = session.tag_counter;
        session.deferred_execute_ms = None;
        session.last_execute_ms = now_ms;
        if let Some(seen) = &facts.overflow {
            overflow::clear(tx, session.id, seen)?;
        }
    } else if schedule.deferred_mid_turn && session.deferred_execute_ms.is_none() {
        session.deferred_execute_ms = Some(now_ms);
    }

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
    };
    let ctx = HeadContext {
        session: session.id,
        project: project.as_deref(),
        project_dir: key.project_dir,
        model_key: facts.model_key.as_deref(),
        system_hash: system_hash.as_deref(),
        render_key: render_key.clone(),
        history_budget: facts.history_budget,
        memory_budget: u64::from(config.memory_budget_tokens),
        dates: config.temporal_awareness,
        now_ms,
        pinned: &pinned_texts,
    };
    let mut materialized = None;
    let mut m1_changed = false;
    let head: Option<HeadRow> = if !head_enabled {
        None
    } else if let Some(reason) = hard {
        materialized = Some(reason);
        Some(heads::materialize(tx, &ctx, &markers, reason, &ordinal_of)?)
    } else if busting {
        let cache = cache
            .as_ref()
            .expect("no HARD trigger means a cached head exists");
        let (row, backstop) = heads::refresh_m1(tx, &ctx, cache, &markers, &ordinal_of)?;
        if backstop {
            materialized = Some("pressure_backstop");
            Some(heads::materialize(
                tx,
                &ctx,
                &markers,
                "pressure_backstop",
                &ordinal_of,
            )?)
        } else {
            Some(row)
        }
    } else {
        cache.clone()
    };
    // What the provider had cached and this pass changed, byte for byte.
    let head_changed = match (&cache, &head) {
        (Some(old), Some(new)) => old.m0 != new.m0,
        (None, Some(_)) => true,
        _ => false,
    };
    if materialized.is_some() {
        tx.execute(
            "UPDATE sessions SET passes_materialized = passes_materialized + 1 WHERE id = ?1",
            params![session.id],
        )?;
    }

    // Reduce nudges, on content the provider has not cached yet.
    let covered_final = head.as_ref().map_or(0, |h| h.covered_through);
    if prefixes {
        let tail = Tail {
            messages,
            bindings: &bindings,
            ordinals: &ordinals,
            covered: covered_final,
            pinned: &pinned_ids,
            new_after: counter_before,
        };
        nudges(tx, &mut session, &tail, &mut tags, config, now_ms)?;
    }

    if let (Some(old), Some(new)) = (&cache, &head) {
        m1_changed = old.m1 != new.m1 || old.covered_through != new.covered_through;
    }
    let bust = if head_changed {
        Bust::Hard
    } else if visible_change || m1_changed || render_outdated {
        Bust::Soft
    } else {
        Bust::None
    };

    // After an execute, this idle window's later passes should defer.
    let mut last_response = last_response_before;
    if busting {
        last_response = last_response.max(now_ms);
    }
    tx.prepare_cached(
        "UPDATE sessions SET
            reduce_callable = ?2, tag_counter = ?3, ordinal_counter = ?4,
            last_response_ms = ?5, last_execute_ms = ?6, last_input_tokens = ?7,
            last_usage_percent = ?8, last_context_limit = ?9,
            last_model_key = coalesce(?10, last_model_key),
            heuristics_turn_id = ?11, tool_reclaim_watermark = ?12,
            reasoning_cleared_through = ?13, deferred_execute_ms = ?14,
            last_decision = ?15, last_reason = ?16,
            last_bust = CASE WHEN ?17 = 'none' THEN last_bust ELSE ?17 END,
            last_bust_cause = CASE WHEN ?17 = 'none' THEN last_bust_cause ELSE ?16 END,
            last_bust_ms = CASE WHEN ?17 = 'none' THEN last_bust_ms ELSE ?18 END,
            passes_defer = passes_defer + (?15 = 'defer'),
            passes_execute = passes_execute + (?15 = 'execute'),
            today_line = ?19, last_emergency_sample = ?20,
            nudge2_armed = ?21, nudge1_level = ?22, nudge1_reducible = ?23,
            project_dir = coalesce(project_dir, ?24), render_version = ?25,
            last_error = NULL, updated_ms = ?18
         WHERE id = ?1",
    )?
    .execute(params![
        session.id,
        session.reduce_callable,
        session.tag_counter,
        session.ordinal_counter,
        last_response,
        session.last_execute_ms,
        // The harness's numbers may exceed i64: stored saturated, never negative.
        i64::try_from(facts.prompt_tokens).unwrap_or(i64::MAX),
        facts.usage_percent,
        i64::try_from(facts.window).unwrap_or(i64::MAX),
        facts.model_key,
        session.heuristics_turn_id,
        session.tool_reclaim_watermark,
        session.reasoning_cleared_through,
        session.deferred_execute_ms,
        schedule.decision.as_str(),
        schedule.reason,
        bust.as_str(),
        now_ms,
        session.today_line,
        session.last_emergency_sample,
        session.nudge2_armed,
        session.nudge1_level,
        session.nudge1_reducible,
        key.project_dir.and_then(Path::to_str),
        RENDER_VERSION,
    ])?;

    let nudge2 = state::load_reminders(tx, session.id)?;
    Ok(Applied::Pass(Box::new(Outcome {
        tags,
        bindings,
        ordinals,
        keep_reasoning,
        prefixes,
        reasoning_cleared_through: session.reasoning_cleared_through,
        schedule,
        bust,
        first_dropped,
        head: head.map(|h| HeadOut {
            m0: h.m0,
            m1: h.m1,
            covered_through: h.covered_through,
        }),
        materialized,
        system: out_system.or_else(|| key.system.cloned()),
        due,
        nudge2,
    })))
}

/// The live tail as the nudges measure it.
struct Tail<'a> {
    messages: &'a [Message],
    bindings: &'a Bindings,
    ordinals: &'a [Option<i64>],
    /// Messages up to this ordinal are in the head, not the tail.
    covered: i64,
    pinned: &'a HashSet<&'a str>,
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
            let tag = &tags[i];
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
    if let Some(i) = newest_new_tool
        && nudge::channel1_fires(
            level,
            session.nudge1_level,
            total,
            reducible,
            session.nudge1_reducible,
        )
    {
        let text = nudge::channel1_text(level, reducible, &oldest);
        tags::set_nudge(tx, session.id, tags[i].number, &text)?;
        tags[i].nudge = Some(text);
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
    let mut tags = tags::load_tags_from_ordinal(tx, session.id, from)?;
    let mut by_identity: HashMap<String, usize> = tags
        .iter()
        .enumerate()
        .map(|(i, t)| (t.identity.clone(), i))
        .collect();

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
            let Some((kind, identity)) = part_identity(message_id, part_index, part) else {
                row.push(None);
                continue;
            };
            if let Some(&existing) = by_identity.get(&identity) {
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
            tags.push(TagRow {
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
            by_identity.insert(identity, tags.len() - 1);
            row.push(Some(tags.len() - 1));
        }
        bindings.push(row);
    }
    Ok((tags, bindings))
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
    session: SessionRow,
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
    pinned: &'a HashSet<&'a str>,
    /// Per message: still on the wire (not covered by the head).
    visible: Vec<bool>,
}

impl Mutation<'_, '_> {
    fn position_of(&self, tag_index: usize) -> Option<(usize, usize)> {
        self.positions.get(&tag_index).copied()
    }

    fn is_pinned(&self, tag_index: usize) -> bool {
        self.position_of(tag_index)
            .and_then(|(m, _)| self.messages[m].id())
            .is_some_and(|id| self.pinned.contains(id))
    }

    /// Visible on the wire, closed if a tool call, and not pinned: dropping it reclaims bytes now.
    fn reclaimable(&self, tag_index: usize) -> bool {
        let Some((m, p)) = self.position_of(tag_index) else {
            return false;
        };
        self.visible[m]
            && !self.is_pinned(tag_index)
            && (self.tags[tag_index].kind != TagKind::Tool
                || self.messages[m].parts[p].tool_is_closed())
    }

    fn protected_floor(&self) -> Result<Option<i64>> {
        tags::protected_floor(self.tx, self.session.id, self.config.protected_tags)
    }

    /// Drop a tag now, freezing its mode: recent tool calls keep a skeleton.
    fn drop_tag(
        &mut self,
        number: i64,
        kind: TagKind,
        visible: Option<usize>,
        cause: &str,
    ) -> Result<()> {
        let mode = if kind == TagKind::Tool {
            let floor = tags::newest_tool_floor(self.tx, self.session.id, SKELETON_WINDOW)?;
            if floor.is_some_and(|f| number >= f) {
                DropMode::Skeleton
            } else {
                DropMode::Full
            }
        } else {
            DropMode::Full
        };
        tags::mark_dropped(self.tx, self.session.id, number, mode, cause, self.now_ms)?;
        if let Some(index) = visible {
            self.tags[index].dropped = Some(mode);
            if self
                .position_of(index)
                .is_some_and(|(m, _)| self.visible[m])
            {
                *self.visible_change = true;
            }
        }
        self.first_dropped.push(number);
        Ok(())
    }

    /// Drops the agent queued with ctx_reduce.
    fn apply_pending(&mut self) -> Result<()> {
        let pending = tags::pending_drops(self.tx, self.session.id)?;
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
            self.session.id,
            &pending
                .iter()
                .copied()
                .filter(|n| !visible.contains_key(n))
                .collect::<Vec<_>>(),
        )?;
        for number in pending {
            let (kind, dropped, index) = match visible.get(&number) {
                Some(&i) => (self.tags[i].kind, self.tags[i].dropped.is_some(), Some(i)),
                None => match stored.iter().find(|t| t.number == number) {
                    Some(t) => (t.kind, t.dropped.is_some(), None),
                    None => {
                        tags::delete_pending(self.tx, self.session.id, number)?;
                        continue;
                    }
                },
            };
            if dropped {
                tags::delete_pending(self.tx, self.session.id, number)?;
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
                    && let Some((m, p)) = self.position_of(i)
                    && !self.messages[m].parts[p].tool_is_closed()
                {
                    continue; // an open arc is never dropped
                }
            }
            self.drop_tag(number, kind, index, "reduce")?;
            tags::delete_pending(self.tx, self.session.id, number)?;
        }
        Ok(())
    }

    /// Advance the reasoning watermark to `newest tag − clear_reasoning_age`;
    /// pinned messages it passes keep their reasoning. Returns the new watermark.
    fn clear_reasoning(&mut self, keep: &mut [bool]) -> Result<Option<i64>> {
        let newest = self.tags.iter().map(|t| t.number).max().unwrap_or(0);
        let cutoff = newest - i64::from(self.config.clear_reasoning_age);
        let old = self.session.reasoning_cleared_through;
        if cutoff <= old {
            return Ok(None);
        }
        let ages = age_tags(self.tags, self.bindings);
        for (index, message) in self.messages.iter().enumerate() {
            let age = ages[index];
            if age <= old || age > cutoff || keep[index] {
                continue;
            }
            if !message.parts.iter().any(|p| p.kind == PartKind::Reasoning) {
                continue;
            }
            match message.id() {
                Some(id) if self.pinned.contains(id) => {
                    messages::set_keep_reasoning(self.tx, self.session.id, id)?;
                    keep[index] = true;
                }
                _ if self.visible[index] => *self.visible_change = true,
                _ => {}
            }
        }
        Ok(Some(cutoff))
    }

    /// Age-based reclaim: tool outputs already present at the previous execute
    /// pass, outside the protected window and not tiny, are dropped.
    fn reclaim_old_tools(&mut self) -> Result<()> {
        let watermark = self.session.tool_reclaim_watermark;
        let floor = self.protected_floor()?;
        let min_tokens = i64::from(self.config.tool_reclaim_min_tokens);
        let tools = self.visible_tools();
        let exempt = self.exempt_tools(&tools);
        for index in tools {
            let tag = &self.tags[index];
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
            .filter(|&i| self.tags[i].kind == TagKind::Tool)
            .collect();
        v.sort_by_key(|&i| self.tags[i].number);
        v.dedup();
        v
    }

    /// The newest todowrite and the newest few ctx_reduce results stay.
    fn exempt_tools(&self, tools: &[usize]) -> Vec<i64> {
        let named =
            |i: &usize, f: &dyn Fn(&str) -> bool| self.tags[*i].tool_name.as_deref().is_some_and(f);
        let mut exempt: Vec<i64> = Vec::new();
        if let Some(&i) = tools.iter().rev().find(|i| named(i, &|n| n == "todowrite")) {
            exempt.push(self.tags[i].number);
        }
        exempt.extend(
            tools
                .iter()
                .rev()
                .filter(|i| named(i, &|n| n == "ctx_reduce" || n.ends_with("_ctx_reduce")))
                .take(CTX_REDUCE_KEEP)
                .map(|&i| self.tags[i].number),
        );
        exempt
    }

    /// The tiered emergency drop, at or above the force band.
    fn emergency_drop(&mut self, current: u64, ceiling: u64) -> Result<()> {
        if ceiling == 0 {
            return Ok(());
        }
        let tagged: i64 = self
            .tx
            .prepare_cached(
                "SELECT coalesce(sum(byte_size + input_bytes + reasoning_bytes), 0) FROM tags
                 WHERE session = ?1 AND status = 'active'",
            )?
            .query_row(params![self.session.id], |r| r.get(0))?;
        let needed =
            emergency::reclaim_needed(current, (tagged.max(0) as u64).div_ceil(4), ceiling);
        if needed == 0 {
            return Ok(());
        }
        let floor = self.protected_floor()?;
        let tools = self.visible_tools();
        let exempt = self.exempt_tools(&tools);
        let candidates: Vec<emergency::Candidate> = tools
            .iter()
            .copied()
            .filter(|&i| {
                let t = &self.tags[i];
                t.dropped.is_none()
                    && floor.is_none_or(|f| t.number < f)
                    && !exempt.contains(&t.number)
                    && self.reclaimable(i)
            })
            .map(|i| emergency::Candidate {
                number: self.tags[i].number,
                tool_name: self.tags[i].tool_name.clone(),
                reclaim: (self.tags[i].bytes.max(0) as u64).div_ceil(4),
            })
            .collect();
        let index_of: HashMap<i64, usize> =
            tools.iter().map(|&i| (self.tags[i].number, i)).collect();
        for number in emergency::plan(&candidates, needed) {
            self.drop_tag(
                number,
                TagKind::Tool,
                index_of.get(&number).copied(),
                "emergency",
            )?;
        }
        Ok(())
    }

    /// Caveman compression of old long prose: depth by age, only ever deeper.
    fn caveman(&mut self) -> Result<()> {
        let floor = self.protected_floor()?;
        let min = i64::from(self.config.caveman_min_chars);
        let mut eligible: Vec<usize> = (0..self.tags.len())
            .filter(|&i| {
                let t = &self.tags[i];
                t.kind == TagKind::Message
                    && t.dropped.is_none()
                    && floor.is_none_or(|f| t.number < f)
                    && self.position_of(i).is_some_and(|(m, p)| {
                        self.visible[m]
                            && self.messages[m].parts[p]
                                .text()
                                .is_some_and(|s| s.len() as i64 >= min)
                    })
                    && !self.is_pinned(i)
            })
            .collect();
        eligible.sort_by_key(|&i| self.tags[i].number);
        let count = eligible.len();
        for (position, index) in eligible.into_iter().enumerate() {
            let depth = caveman::depth_for(position, count);
            if depth > self.tags[index].caveman_depth {
                tags::set_caveman_depth(self.tx, self.session.id, self.tags[index].number, depth)?;
                self.tags[index].caveman_depth = depth;
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

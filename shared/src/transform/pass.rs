//! One transform pass: bind every part to its tag, let the scheduler decide,
//! first-apply mutations only when this pass busts the cache anyway, then
//! replay everything stored (render).

use std::collections::HashMap;

use rusqlite::{Transaction, params};
use serde_json::Value;

use crate::codec::opencode::{decode_all, encode_all};
use crate::codec::{Message, PartKind, Role};
use crate::config::TransformConfig;
use crate::error::Result;
use crate::identity::project_identity;
use crate::store::Store;
use crate::tokens;

use super::envelope::{Bust, Decision, Envelope, ModelInfo, PassOutput, PassReport, Usage};
use super::notation::strip_leading_tags;
use super::render::{Bindings, RenderState, age_tags, render};
use super::scheduler::{self, Schedule, SchedulerInput};
use super::state::{self, DropMode, NewTag, SessionRow, TagKind, TagRow};

/// The newest this-many tool tags (any status) are dropped as skeletons; older ones go whole.
pub const SKELETON_WINDOW: u32 = 20;
/// The newest this-many `ctx_reduce` results stay, as examples for the agent.
const CTX_REDUCE_KEEP: usize = 3;
/// Token estimate for an inline image (a data: URL's length says nothing useful).
const IMAGE_TOKENS: i64 = 1600;

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
    let identity = if state::find_session(store.conn(), &harness, &session_id)?.is_none() {
        project_dir.as_deref().map(project_identity)
    } else {
        None
    };

    let facts = InputFacts::read(&messages, &model, usage);
    let key = SessionKey {
        harness: &harness,
        session_id: &session_id,
        subagent,
        identity: identity.as_deref(),
    };
    let outcome = store.write(|tx| apply(tx, &key, &facts, &messages, config, now_ms))?;

    let state = RenderState {
        tags: &outcome.tags,
        bindings: &outcome.bindings,
        prefixes: outcome.prefixes,
        reasoning_cleared_through: outcome.reasoning_cleared_through,
    };
    messages = render(messages, &state);
    let mut warnings = Vec::new();
    if outcome.schedule.emergency {
        warnings.push(format!(
            "context at {:.1}% of the usable window: emergency band (≥ {}%)",
            facts.usage_percent,
            scheduler::EMERGENCY_PERCENT
        ));
    }
    Ok(PassOutput {
        messages: encode_all(messages),
        system,
        pass: PassReport {
            decision: outcome.schedule.decision,
            reason: outcome.schedule.reason,
            bust: outcome.bust,
            usage_percent: (facts.usage_percent * 10.0).round() / 10.0,
            tags: outcome.bindings.iter().flatten().flatten().count() as u64,
            dropped: outcome.first_dropped,
            materialized: false,
            historian_due: false,
            warnings,
        },
    })
}

/// The session id of the newest user message that has one, else of any message.
pub fn session_from_messages(messages: &[Message]) -> Option<String> {
    messages
        .iter()
        .rev()
        .filter(|m| m.role() == Role::User)
        .chain(messages.iter().rev())
        .find_map(|m| m.session_id().map(str::to_string))
}

/// What the pass reads off the input once.
struct InputFacts {
    usage_percent: f64,
    prompt_tokens: u64,
    window: u64,
    mid_turn: bool,
    /// Newest time the provider answered, per the messages.
    response_ms: i64,
    /// The newest real user message: heuristics run once per such turn.
    turn_id: Option<String>,
    model_key: Option<String>,
}

impl InputFacts {
    fn read(messages: &[Message], model: &ModelInfo, usage: Option<Usage>) -> InputFacts {
        let window = scheduler::usable_window(model);
        let prompt_tokens = usage.map(|u| u.prompt_tokens()).or_else(|| {
            messages
                .iter()
                .rev()
                .filter(|m| m.role() == Role::Assistant)
                .find_map(Message::usage_input_tokens)
        });
        let response_ms = messages
            .iter()
            .filter(|m| m.role() == Role::Assistant)
            .filter_map(|m| m.completed_ms().or(m.created_ms()))
            .max()
            .unwrap_or(0);
        InputFacts {
            usage_percent: scheduler::usage_percent(prompt_tokens.unwrap_or(0), window),
            prompt_tokens: prompt_tokens.unwrap_or(0),
            window,
            mid_turn: scheduler::is_mid_turn(messages),
            response_ms,
            turn_id: messages
                .iter()
                .rev()
                .find(|m| m.is_real_user())
                .and_then(|m| m.id().map(str::to_string)),
            model_key: model.key(),
        }
    }
}

struct Outcome {
    tags: Vec<TagRow>,
    bindings: Bindings,
    prefixes: bool,
    reasoning_cleared_through: i64,
    schedule: Schedule,
    bust: Bust,
    first_dropped: Vec<i64>,
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
}

fn apply(
    tx: &Transaction<'_>,
    key: &SessionKey<'_>,
    facts: &InputFacts,
    messages: &[Message],
    config: &TransformConfig,
    now_ms: i64,
) -> Result<Outcome> {
    let mut session = match state::find_session(tx, key.harness, key.session_id)? {
        Some(row) => row,
        None => state::create_session(
            tx,
            key.harness,
            key.session_id,
            key.subagent,
            key.identity,
            now_ms,
        )?,
    };
    if session.reduce_callable.is_none() {
        // Frozen on first sight of a user message so the prefixes never flap.
        session.reduce_callable = reduce_callable(messages);
    }
    let prefixes = session.reduce_callable.unwrap_or(true);

    let ordinals = register_messages(tx, &mut session, messages)?;
    let (mut tags, bindings) = bind_tags(tx, &mut session, messages, &ordinals, now_ms)?;

    let model_changed = matches!(
        (&session.last_model_key, &facts.model_key),
        (Some(old), Some(new)) if old != new
    );
    let schedule = scheduler::decide(&SchedulerInput {
        usage_percent: facts.usage_percent,
        last_response_ms: session.last_response_ms.max(facts.response_ms),
        now_ms,
        ttl: config.cache_ttl,
        threshold: config.execute_threshold_percentage,
        mid_turn: facts.mid_turn,
        subagent: key.subagent,
        deferred_owed: session.deferred_execute_ms.is_some(),
        model_changed,
    });

    let mut first_dropped = Vec::new();
    let mut visible_change = false;
    if schedule.decision == Decision::Execute {
        let mut mutation = Mutation {
            tx,
            session: &session,
            messages,
            bindings: &bindings,
            tags: &mut tags,
            config,
            now_ms,
            first_dropped: &mut first_dropped,
            visible_change: &mut visible_change,
            positions: tag_positions(&bindings),
        };
        mutation.apply_pending()?;
        let heuristics_due = key.subagent
            || schedule.force_band
            || session.heuristics_turn_id.is_none()
            || session.heuristics_turn_id != facts.turn_id;
        if heuristics_due {
            let cleared = mutation.clear_reasoning()?;
            if config.tool_reclaim {
                mutation.reclaim_old_tools()?;
            }
            if let Some(through) = cleared {
                session.reasoning_cleared_through = through;
            }
            session.heuristics_turn_id = facts.turn_id.clone();
        }
        session.tool_reclaim_watermark = session.tag_counter;
        session.deferred_execute_ms = None;
        session.last_execute_ms = now_ms;
    } else if schedule.deferred_mid_turn && session.deferred_execute_ms.is_none() {
        session.deferred_execute_ms = Some(now_ms);
    }
    let bust = if visible_change {
        Bust::Soft
    } else {
        Bust::None
    };

    // After an execute, this idle window's later passes should defer.
    let mut last_response = session.last_response_ms.max(facts.response_ms);
    if schedule.decision == Decision::Execute {
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
        facts.prompt_tokens as i64,
        facts.usage_percent,
        facts.window as i64,
        facts.model_key,
        session.heuristics_turn_id,
        session.tool_reclaim_watermark,
        session.reasoning_cleared_through,
        session.deferred_execute_ms,
        schedule.decision.as_str(),
        schedule.reason,
        bust.as_str(),
        now_ms,
    ])?;

    Ok(Outcome {
        tags,
        bindings,
        prefixes,
        reasoning_cleared_through: session.reasoning_cleared_through,
        schedule,
        bust,
        first_dropped,
    })
}

/// Give every message with an id a stable ordinal (assigned on first sight).
fn register_messages(
    tx: &Transaction<'_>,
    session: &mut SessionRow,
    messages: &[Message],
) -> Result<Vec<Option<i64>>> {
    // Load the known window in one range scan, starting from the first visible
    // message we have seen before (probe a few, in case the head is new).
    let mut from = None;
    for id in messages.iter().filter_map(Message::id).take(8) {
        if let Some(ordinal) = state::message_ordinal(tx, session.id, id)? {
            from = Some(ordinal);
            break;
        }
    }
    let mut known = match from {
        Some(ordinal) => state::load_message_ordinals(tx, session.id, ordinal)?,
        None => HashMap::new(),
    };
    let mut ordinals = Vec::with_capacity(messages.len());
    for message in messages {
        let Some(id) = message.id() else {
            ordinals.push(None);
            continue;
        };
        let ordinal = match known.get(id) {
            Some(&o) => o,
            None => match state::message_ordinal(tx, session.id, id)? {
                Some(o) => o,
                None => {
                    session.ordinal_counter += 1;
                    let o = session.ordinal_counter;
                    state::insert_message(
                        tx,
                        session.id,
                        id,
                        o,
                        message.role().as_str(),
                        message.created_ms(),
                    )?;
                    known.insert(id.to_string(), o);
                    o
                }
            },
        };
        ordinals.push(Some(ordinal));
    }
    Ok(ordinals)
}

/// The identity of a taggable part, or `None` for parts that never get a tag.
pub(crate) fn part_identity(
    message_id: &str,
    part_index: usize,
    part: &crate::codec::Part,
) -> Option<(TagKind, String)> {
    match part.kind {
        PartKind::Text
            if !part.is_ignored() && part.text().is_some_and(|t| !t.trim().is_empty()) =>
        {
            Some((TagKind::Message, format!("{message_id}:p{part_index}")))
        }
        PartKind::File if part.file_url().is_some() => {
            Some((TagKind::File, format!("{message_id}:file{part_index}")))
        }
        // Tool identity is (call id, owning message): harnesses reuse call ids.
        PartKind::Tool => part
            .call_id()
            .map(|c| (TagKind::Tool, format!("{c}@{message_id}"))),
        _ => None,
    }
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
    let mut tags = state::load_tags_from_ordinal(tx, session.id, from)?;
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
            let (byte_size, tokens, input_bytes, input_tokens) = measure(kind, part);
            let reasoning = if kind == TagKind::Message && first_text {
                first_text = false;
                reasoning_bytes
            } else {
                0
            };
            session.tag_counter += 1;
            let number = session.tag_counter;
            state::insert_tag(
                tx,
                session.id,
                &NewTag {
                    number,
                    kind,
                    identity: &identity,
                    message_id,
                    ordinal,
                    tool_name: part.tool_name().filter(|_| kind == TagKind::Tool),
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
                tool_name: part
                    .tool_name()
                    .filter(|_| kind == TagKind::Tool)
                    .map(str::to_string),
                tokens,
                input_tokens,
            });
            by_identity.insert(identity, tags.len() - 1);
            row.push(Some(tags.len() - 1));
        }
        bindings.push(row);
    }
    Ok((tags, bindings))
}

/// (bytes, estimated tokens, input bytes, estimated input tokens) of a part.
fn measure(kind: TagKind, part: &crate::codec::Part) -> (i64, i64, i64, i64) {
    match kind {
        TagKind::Message => {
            let text = strip_leading_tags(part.text().unwrap_or_default());
            (text.len() as i64, tokens::estimate(text) as i64, 0, 0)
        }
        TagKind::File => {
            let url = part.file_url().unwrap_or_default();
            let tokens = if url.starts_with("data:image/") {
                IMAGE_TOKENS
            } else {
                tokens::estimate(url) as i64
            };
            (url.len() as i64, tokens, 0, 0)
        }
        TagKind::Tool => {
            let output = strip_leading_tags(part.tool_output().unwrap_or_default());
            let input = part
                .tool_input()
                .map(|v| serde_json::to_string(v).unwrap_or_default())
                .unwrap_or_default();
            (
                output.len() as i64,
                tokens::estimate(output) as i64,
                input.len() as i64,
                tokens::estimate(&input) as i64,
            )
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
    session: &'a SessionRow,
    messages: &'a [Message],
    bindings: &'a [Vec<Option<usize>>],
    tags: &'a mut Vec<TagRow>,
    config: &'a TransformConfig,
    now_ms: i64,
    first_dropped: &'a mut Vec<i64>,
    visible_change: &'a mut bool,
    /// Where each visible tag sits: (message index, part index).
    positions: HashMap<usize, (usize, usize)>,
}

impl Mutation<'_, '_> {
    fn position_of(&self, tag_index: usize) -> Option<(usize, usize)> {
        self.positions.get(&tag_index).copied()
    }

    fn protected_floor(&self) -> Result<Option<i64>> {
        state::protected_floor(self.tx, self.session.id, self.config.protected_tags)
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
            let floor = state::newest_tool_floor(self.tx, self.session.id, SKELETON_WINDOW)?;
            if floor.is_some_and(|f| number >= f) {
                DropMode::Skeleton
            } else {
                DropMode::Full
            }
        } else {
            DropMode::Full
        };
        state::mark_dropped(self.tx, self.session.id, number, mode, cause, self.now_ms)?;
        if let Some(index) = visible {
            self.tags[index].dropped = Some(mode);
            *self.visible_change = true;
        }
        self.first_dropped.push(number);
        Ok(())
    }

    /// Drops the agent queued with ctx_reduce.
    fn apply_pending(&mut self) -> Result<()> {
        let pending = state::pending_drops(self.tx, self.session.id)?;
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
        let stored = state::load_tags_by_numbers(
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
                        state::delete_pending(self.tx, self.session.id, number)?;
                        continue;
                    }
                },
            };
            if dropped {
                state::delete_pending(self.tx, self.session.id, number)?;
                continue;
            }
            if floor.is_some_and(|f| number >= f) {
                continue; // protected: waits until it leaves the window
            }
            if let Some(i) = index
                && kind == TagKind::Tool
                && let Some((m, p)) = self.position_of(i)
                && !self.messages[m].parts[p].tool_is_closed()
            {
                continue; // an open arc is never dropped
            }
            self.drop_tag(number, kind, index, "reduce")?;
            state::delete_pending(self.tx, self.session.id, number)?;
        }
        Ok(())
    }

    /// Advance the reasoning watermark to `newest tag − clear_reasoning_age`.
    /// Returns the new watermark when it moved.
    fn clear_reasoning(&mut self) -> Result<Option<i64>> {
        let newest = self.tags.iter().map(|t| t.number).max().unwrap_or(0);
        let cutoff = newest - i64::from(self.config.clear_reasoning_age);
        let old = self.session.reasoning_cleared_through;
        if cutoff <= old {
            return Ok(None);
        }
        let ages = age_tags(self.tags, self.bindings);
        let touches_visible = self.messages.iter().zip(&ages).any(|(m, &age)| {
            age > old && age <= cutoff && m.parts.iter().any(|p| p.kind == PartKind::Reasoning)
        });
        if touches_visible {
            *self.visible_change = true;
        }
        Ok(Some(cutoff))
    }

    /// Age-based reclaim: tool outputs already present at the previous execute
    /// pass, outside the protected window and not tiny, are dropped.
    fn reclaim_old_tools(&mut self) -> Result<()> {
        let watermark = self.session.tool_reclaim_watermark;
        let floor = self.protected_floor()?;
        let min_tokens = i64::from(self.config.tool_reclaim_min_tokens);
        let visible_tools: Vec<usize> = {
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
        };
        // Keep the newest todowrite and the newest few ctx_reduce results.
        let mut exempt: Vec<i64> = Vec::new();
        let named =
            |i: &usize, f: &dyn Fn(&str) -> bool| self.tags[*i].tool_name.as_deref().is_some_and(f);
        if let Some(&i) = visible_tools
            .iter()
            .rev()
            .find(|i| named(i, &|n| n == "todowrite"))
        {
            exempt.push(self.tags[i].number);
        }
        exempt.extend(
            visible_tools
                .iter()
                .rev()
                .filter(|i| named(i, &|n| n == "ctx_reduce" || n.ends_with("_ctx_reduce")))
                .take(CTX_REDUCE_KEEP)
                .map(|&i| self.tags[i].number),
        );
        for index in visible_tools {
            let tag = &self.tags[index];
            if tag.dropped.is_some()
                || tag.number > watermark
                || floor.is_some_and(|f| tag.number >= f)
                || tag.tokens + tag.input_tokens < min_tokens
                || exempt.contains(&tag.number)
            {
                continue;
            }
            let closed = self
                .position_of(index)
                .is_some_and(|(m, p)| self.messages[m].parts[p].tool_is_closed());
            if closed {
                let number = tag.number;
                self.drop_tag(number, TagKind::Tool, Some(index), "age")?;
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

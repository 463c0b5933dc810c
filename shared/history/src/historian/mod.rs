//! The historian: folds old conversation into compartments and facts.
//!
//! Three entry points, one per `mc-historian` command:
//!
//! - [`check`]: is a run due, and why — the transform's own trigger
//!   ([`crate::trigger::historian_due`]) over the same measurements
//!   (read-only, no model call);
//! - [`prompt`]: the exact request a run would send first (read-only);
//! - [`run`]: register the messages, plan a chunk of the eligible range above
//!   the last compartment ([`transcript`]), take the session's lease, ask the
//!   model ([`prompt`](self::prompt)), parse and validate the answer
//!   ([`parse`], [`validate`]), ask once more with the error if it is
//!   rejected, and publish the compartments and facts in one transaction
//!   ([`publish`]). Up to `historian.max_chunks` chunks per run, each
//!   published on its own; every run is recorded, failures with their cause.
//!
//! A run does one of three [`Job`]s: the routine fold (the eligible range
//! the trigger measures), a wrap-up ([`wrapup`]: all but the newest N raw
//! messages, now) or a recompute ([`recomp`]: the folded range again, the
//! old compartments replaced whole).

pub mod choice;
pub mod failure;
pub mod parse;
pub mod prompt;
pub mod publish;
pub mod recomp;
pub mod transcript;
pub mod validate;
pub mod wrapup;

use std::collections::HashMap;
use std::path::PathBuf;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use serde_json::Value;

use crate::store::{self, NewCompartment};
use crate::trigger::{self, Due, MIN_CHUNK_TOKENS, Pressure};
use mc_base::codec::opencode::{decode_all, take_boundary};
use mc_base::codec::{Message, anthropic};
use mc_base::config::{HistorianConfig, TransformConfig};
use mc_base::domain::content;
use mc_base::domain::envelope::{Envelope, ModelInfo, Usage};
use mc_base::domain::measure;
use mc_base::domain::messages::{self, session_from_messages};
use mc_base::domain::models;
use mc_base::domain::sessions::{self, SessionRow};
use mc_base::error::{Error, Result};
use mc_base::identity::project_identity;
use mc_base::store::Store;
use mc_llm::{self as llm, Completion, Model, Prompt};

use self::failure::RunFailure;
use self::transcript::{Chunk, TailMessage};
use self::validate::{ChunkView, Folded, Validated};

/// The harness name Claude Code sessions are stored under.
pub const CLAUDE_CODE: &str = "claude-code";
/// The harness name Codex sessions are stored under.
pub const CODEX: &str = "codex";

/// A session to fold, wherever it came from: an envelope, a Claude Code
/// transcript, an OpenCode server.
#[derive(Debug, Clone)]
pub struct Input {
    pub harness: String,
    pub session_id: String,
    /// The project the session works in (its memories get the facts).
    pub project_dir: Option<PathBuf>,
    pub model: ModelInfo,
    /// The newest usage sample; else the newest assistant message's.
    pub usage: Option<Usage>,
    pub subagent: bool,
    pub messages: Vec<Message>,
}

impl Input {
    /// From the transform's envelope.
    pub fn from_envelope(envelope: Envelope) -> Result<Input> {
        let messages = mc_base::codec::Wire::decode(
            &envelope.harness,
            envelope.session_id.as_deref(),
            envelope.messages,
        )?
        .messages;
        let session_id = envelope
            .session_id
            .or_else(|| session_from_messages(&messages))
            .ok_or_else(|| {
                Error::input(
                    "no session id: the envelope has no session_id and no message carries \
                     info.sessionID",
                )
            })?;
        Ok(Input {
            harness: envelope.harness,
            session_id,
            project_dir: envelope.project_dir,
            model: envelope.model,
            usage: envelope.usage,
            subagent: envelope.subagent,
            messages,
        })
    }

    /// From OpenCode-shaped `{info, parts}` values (an OpenCode server's
    /// message list, or a transcript converted by a codec).
    pub fn from_messages(harness: &str, session_id: &str, messages: Vec<Value>) -> Result<Input> {
        // mc's compaction boundary is mc's own bookkeeping, not conversation.
        let mut messages = decode_all(messages)?;
        take_boundary(&mut messages);
        Ok(Input {
            harness: harness.to_string(),
            session_id: session_id.to_string(),
            project_dir: None,
            model: ModelInfo::default(),
            usage: None,
            subagent: false,
            messages,
        })
    }
}

impl Input {
    /// Fold mc's own record of a Claude Code session instead of its
    /// transcript when Claude Code's calls went through mc's gateway: the
    /// gateway's messages (ids [`anthropic::ID_PREFIX`], rebuilt from their
    /// rows and kept parts) are what its pass tags, drops and covers with
    /// the head, so the historian's compartments must count their ordinals,
    /// and the transcript's messages (other ids, another shape) would be a
    /// second copy of the same conversation. A message only the transcript
    /// has yet (the newest reply) is folded once the gateway sees it in the
    /// next call. The transcript still gives the usage. Text parts that are
    /// Claude Code's own reminders (`<system-reminder>`) are left out: the
    /// transcript never had them. `false` (nothing changed) for another
    /// harness or a session the gateway never served.
    pub fn adopt_gateway_record(&mut self, conn: &Connection) -> Result<bool> {
        if self.harness != CLAUDE_CODE {
            return Ok(false);
        }
        let Some(session) = sessions::find_session(conn, &self.harness, &self.session_id)? else {
            return Ok(false);
        };
        let recorded = content::recorded_messages(
            conn,
            (session.id, &self.session_id),
            anthropic::ID_PREFIX,
            |text| text.trim_start().starts_with("<system-reminder>"),
        )?;
        if recorded.is_empty() {
            return Ok(false);
        }
        if self.usage.is_none() {
            self.usage = self
                .messages
                .iter()
                .rev()
                .filter(|m| m.role() == mc_base::codec::Role::Assistant)
                .find_map(Message::usage_input_tokens)
                .map(|input| Usage {
                    input,
                    ..Usage::default()
                });
        }
        self.messages = recorded;
        Ok(true)
    }
}

/// The settings a historian command reads.
#[derive(Debug, Clone, Copy)]
pub struct Settings<'a> {
    pub historian: &'a HistorianConfig,
    pub transform: &'a TransformConfig,
}

// ---------------------------------------------------------------------------
// check

/// `mc-historian check`: the trigger's answer and what it measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckReport {
    pub harness: String,
    pub session_id: String,
    #[serde(flatten)]
    pub due: Due,
    pub usage_percent: f64,
    /// The usable input window, tokens.
    pub window: u64,
    pub threshold: f64,
    pub force_band: f64,
    /// Unfolded tokens above the last compartment (what the trigger reads).
    pub tail_tokens: u64,
    /// The newest tokens no run folds.
    pub protected_tail: u64,
    pub commit_clusters: usize,
    /// Messages up to this ordinal are folded already.
    pub covered_through: i64,
    pub subagent: bool,
    /// Whether any mc tool has seen the session before.
    pub known_session: bool,
    /// The model a run would use and why (`model`, `model_source`,
    /// `model_reason`), when the caller chose one ([`choice`]).
    #[serde(flatten)]
    pub model: Option<choice::ModelReport>,
}

/// The model as the input describes it; without a context limit (a
/// transcript, an OpenCode server's list), the usable window the transform
/// last measured for the session, so a run the transform asked for uses the
/// window the transform saw. A context limit learned from the provider's
/// overflow error caps it.
fn known_model(conn: &Connection, session: Option<i64>, input: &Input) -> Result<ModelInfo> {
    let mut model = input.model.clone();
    if model.context_limit.is_none()
        && let Some(id) = session
    {
        let window: i64 = conn.query_row(
            "SELECT last_context_limit FROM sessions WHERE id = ?1",
            params![id],
            |r| r.get(0),
        )?;
        if window > 0 {
            model.context_limit = Some(window as u64);
            model.output_limit = None;
        }
    }
    // A limit a provider stated for the model caps it, as in the pass.
    if let Some(key) = model.key() {
        model = models::cap(&model, models::learned_limit(conn, &key)?.as_ref());
    }
    Ok(model)
}

/// Is a run due? Uses the transform's trigger over the same measurements a
/// pass makes, so a pass and `check` on one envelope agree. Writes nothing.
pub fn check(conn: &Connection, input: &Input, transform: &TransformConfig) -> Result<CheckReport> {
    let session = sessions::find_session(conn, &input.harness, &input.session_id)?;
    let ordinals = messages::preview_ordinals(conn, session.as_ref(), &input.messages)?;
    let covered = match &session {
        Some(s) => publish::covered_through(conn, s.id)?,
        None => 0,
    };
    let id = session.as_ref().map(|s| s.id);
    let model = known_model(conn, id, input)?;
    let pressure = trigger::pressure(&model, input.usage, &input.messages);
    let subagent = input.subagent || session.as_ref().is_some_and(|s| s.is_subagent);
    let tail = trigger::Tail {
        messages: &input.messages,
        ordinals: &ordinals,
        covered_through: covered,
    };
    let untagged = trigger::untagged_tokens(conn, id, &tail)?;
    let threshold = transform.execute_threshold_percentage;
    let trigger_input =
        trigger::trigger_input(conn, id, &pressure, threshold, subagent, &tail, untagged)?;
    Ok(CheckReport {
        harness: input.harness.clone(),
        session_id: input.session_id.clone(),
        due: trigger::historian_due(&trigger_input),
        usage_percent: (pressure.usage_percent * 10.0).round() / 10.0,
        window: pressure.window,
        threshold,
        force_band: trigger_input.force_band,
        tail_tokens: trigger_input.tail_tokens,
        protected_tail: trigger::protected_tail(pressure.window),
        commit_clusters: trigger_input.commit_clusters,
        covered_through: covered,
        subagent,
        known_session: session.is_some(),
        model: None,
    })
}

// ---------------------------------------------------------------------------
// planning

/// What a run folds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "job")]
pub enum Job {
    /// The eligible range above the last compartment, as the trigger sees it.
    #[default]
    Fold,
    /// Everything above the last compartment but the newest `keep` raw
    /// messages, whatever the pressure.
    Wrapup { keep: usize },
    /// The range the compartments cover, folded again into new ones.
    Recomp,
}

/// Where a chunk's plan starts and what it may take.
#[derive(Debug, Clone, Copy)]
enum Range {
    /// Above the stored compartments, the eligible range the trigger measures.
    Fold,
    /// Above the stored compartments, all but the newest `keep` messages.
    Wrapup { keep: usize },
    /// A recompute: above `covered` (its own new compartments) up to `through`.
    Rebuild { covered: i64, through: i64 },
}

/// The next chunk of a session, or why there is none.
struct Plan<'a> {
    covered: i64,
    pressure: Pressure,
    /// The unfolded tail, oldest first.
    tail: Vec<TailMessage<'a>>,
    chunk: Option<Chunk>,
    /// Why there is no chunk: nothing_new | protected | nothing_to_show.
    reason: Option<Idle>,
}

fn plan<'a>(
    conn: &Connection,
    session: Option<i64>,
    input: &'a Input,
    ordinals: &[Option<i64>],
    settings: &Settings<'_>,
    range: Range,
) -> Result<Plan<'a>> {
    let covered = match (range, session) {
        (Range::Rebuild { covered, .. }, _) => covered,
        (_, Some(id)) => publish::covered_through(conn, id)?,
        (_, None) => 0,
    };
    let stored = stored_tokens(conn, session, covered)?;
    let mut tail: Vec<TailMessage<'a>> = input
        .messages
        .iter()
        .zip(ordinals)
        .filter_map(|(message, ordinal)| {
            let ordinal = ordinal.filter(|&o| o > covered)?;
            Some(TailMessage {
                ordinal,
                message,
                tokens: transcript::message_tokens(message, &stored),
            })
        })
        .collect();
    tail.sort_by_key(|t| t.ordinal);
    tail.dedup_by_key(|t| t.ordinal);
    let model = known_model(conn, session, input)?;
    let pressure = trigger::pressure(&model, input.usage, &input.messages);
    let threshold = settings.transform.execute_threshold_percentage;
    let live_floor = pressure.usage_percent < measure::force_band(threshold);
    let end = match range {
        Range::Fold => {
            transcript::eligible(&tail, trigger::protected_tail(pressure.window), live_floor).end
        }
        Range::Wrapup { keep } => wrapup::eligible_end(&tail, keep),
        Range::Rebuild { through, .. } => tail.iter().take_while(|t| t.ordinal <= through).count(),
    };
    let messages: Vec<(i64, &Message)> = tail
        .iter()
        .take(end)
        .map(|t| (t.ordinal, t.message))
        .collect();
    let budget = u64::from(settings.historian.chunk_tokens);
    let blocks = transcript::blocks(&messages, (budget / 4).max(500));
    let chunk = transcript::first_chunk(&blocks, budget);
    let reason = if chunk.is_some() {
        None
    } else if tail.is_empty() {
        Some(Idle::NothingNew)
    } else if end == 0 {
        Some(Idle::Protected)
    } else {
        Some(Idle::NothingToShow)
    };
    Ok(Plan {
        covered,
        pressure,
        tail,
        chunk,
        reason,
    })
}

/// Stored tag tokens above `covered`, by identity (`None`: dropped).
fn stored_tokens(
    conn: &Connection,
    session: Option<i64>,
    covered: i64,
) -> Result<HashMap<String, Option<u64>>> {
    let Some(session) = session else {
        return Ok(HashMap::new());
    };
    let mut stmt = conn.prepare_cached(
        "SELECT identity, tokens + input_tokens, status = 'active' FROM tags
         WHERE session = ?1 AND ordinal > ?2",
    )?;
    let rows = stmt.query_map(params![session, covered], |r| {
        let tokens: i64 = r.get(1)?;
        let active: bool = r.get(2)?;
        Ok((r.get(0)?, active.then_some(tokens.max(0) as u64)))
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Where a chunk sits, for reports and progress.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChunkInfo {
    pub first: i64,
    pub last: i64,
    pub messages: usize,
    /// Transcript tokens of the chunk.
    pub tokens: u64,
    /// Transcript tokens of the whole eligible range left (this chunk included).
    pub eligible_tokens: u64,
    /// Whether the model is shown what follows the chunk.
    pub lookahead: bool,
}

impl ChunkInfo {
    fn of(chunk: &Chunk) -> ChunkInfo {
        ChunkInfo {
            first: chunk.first(),
            last: chunk.last(),
            messages: chunk.ordinals.len(),
            tokens: chunk.tokens,
            eligible_tokens: chunk.remaining_tokens,
            lookahead: !chunk.lookahead.is_empty(),
        }
    }
}

fn context(
    conn: &Connection,
    session: Option<i64>,
    project: Option<&str>,
    now_ms: i64,
) -> Result<(Vec<store::StoredCompartment>, Vec<store::Memory>)> {
    let earlier = match session {
        Some(id) => store::load_compartments(conn, id)?,
        None => Vec::new(),
    };
    let memories = match project {
        Some(project) => store::live_memories(conn, project, now_ms)?,
        None => Vec::new(),
    };
    Ok((earlier, memories))
}

/// Why a prompt or a run has nothing to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Idle {
    /// No message after the last compartment.
    NothingNew,
    /// The whole unfolded tail is in the protected live tail.
    Protected,
    /// The eligible messages hold nothing a chunk shows.
    NothingToShow,
    /// Subagents have no historian.
    Subagent,
    /// Another historian holds the session's lease.
    LeaseHeld,
    /// A recompute of a session without compartments.
    NothingFolded,
}

// ---------------------------------------------------------------------------
// prompt

/// Whether `prompt` built a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptStatus {
    Ready,
    NothingToDo,
}

/// `mc-historian prompt`: the request a run would send first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PromptReport {
    pub status: PromptStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Idle>,
    pub harness: String,
    pub session_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunk: Option<ChunkInfo>,
    /// The primary model (`provider/model`), when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Where the model comes from, and why ([`choice`]; set by the caller).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_source: Option<choice::ModelSource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_reason: Option<String>,
    /// The exact request (API keys replaced by `<$VARIABLE>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<Value>,
    /// The prompt itself, for when no model is configured or to read it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// Build the first request of a run without sending it (or writing anything).
pub fn prompt(
    conn: &Connection,
    input: &Input,
    settings: &Settings<'_>,
    client: Option<&llm::Client>,
    now_ms: i64,
) -> Result<PromptReport> {
    let session = sessions::find_session(conn, &input.harness, &input.session_id)?;
    let ordinals = messages::preview_ordinals(conn, session.as_ref(), &input.messages)?;
    let mut report = PromptReport {
        status: PromptStatus::NothingToDo,
        reason: None,
        harness: input.harness.clone(),
        session_id: input.session_id.clone(),
        chunk: None,
        model: client.and_then(|c| c.chain().first().map(ToString::to_string)),
        model_source: None,
        model_reason: None,
        request: None,
        system: None,
        user: None,
    };
    if input.subagent || session.as_ref().is_some_and(|s| s.is_subagent) {
        report.reason = Some(Idle::Subagent);
        return Ok(report);
    }
    let id = session.as_ref().map(|s| s.id);
    let plan = plan(conn, id, input, &ordinals, settings, Range::Fold)?;
    let Some(chunk) = plan.chunk else {
        report.reason = plan.reason;
        return Ok(report);
    };
    let project = match &session {
        Some(s) => s.project_identity.clone(),
        None => input.project_dir.as_deref().map(project_identity),
    };
    let (earlier, memories) = context(conn, id, project.as_deref(), now_ms)?;
    let request = prompt::prompt(
        &chunk,
        &earlier,
        &memories,
        settings.historian.max_output_tokens,
    );
    report.status = PromptStatus::Ready;
    report.chunk = Some(ChunkInfo::of(&chunk));
    report.request = client.map(|c| c.describe(&request));
    report.system = Some(request.system);
    report.user = Some(request.user);
    Ok(report)
}

// ---------------------------------------------------------------------------
// run

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Published,
    NothingToDo,
    Failed,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Published => "published",
            RunStatus::NothingToDo => "nothing_to_do",
            RunStatus::Failed => "failed",
        }
    }
}

/// A compartment a run wrote.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WrittenCompartment {
    pub sequence: i64,
    pub start: i64,
    pub end: i64,
    pub title: String,
    pub importance: i64,
    pub episode: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TokenCount {
    pub input: u64,
    pub output: u64,
}

/// A compartment left for the next run (it reached the chunk edge unseen).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeldBack {
    pub start: i64,
    pub end: i64,
    pub title: String,
}

/// `mc-historian run`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    pub status: RunStatus,
    /// What the run folded: `fold`, `wrapup` (with `keep`) or `recomp`.
    #[serde(flatten)]
    pub job: Job,
    /// Why nothing was done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Idle>,
    pub harness: String,
    pub session_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<i64>,
    /// The model that answered last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Where the run's models come from ([`choice`]; set by the caller).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_source: Option<choice::ModelSource>,
    pub compartments: Vec<WrittenCompartment>,
    /// A recompute: how many old compartments the new ones replaced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaced: Option<usize>,
    /// Facts newly added to the project's memory.
    pub facts_promoted: usize,
    /// Every fact of the answers, new or already known.
    pub facts: Vec<publish::PromotedFact>,
    pub tokens: TokenCount,
    pub chunks: Vec<ChunkInfo>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub held_back: Vec<HeldBack>,
    /// Who holds the lease, when that stopped this run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<publish::Lease>,
    /// Why the run failed (also recorded with the run): shown as `error`,
    /// `error_class` and `error_hints`.
    #[serde(flatten)]
    pub failure: Option<RunFailure>,
    pub warnings: Vec<String>,
}

/// What a run reports as it goes (the binary draws it on a terminal).
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// Chunk `index` (from 1) is about to go to the model.
    Chunk { index: usize, info: ChunkInfo },
    /// A model call, a retry or a fallback.
    Llm(llm::Event),
    /// An answer arrived.
    Answer {
        model: String,
        tokens_in: u64,
        tokens_out: u64,
    },
    /// The answer was rejected; the model is asked once more.
    Repair { problem: String },
    /// The chunk's compartments were published.
    Published {
        compartments: usize,
        held_back: bool,
    },
}

/// How a run is carried out.
pub struct RunParams<'a> {
    pub settings: Settings<'a>,
    pub job: Job,
    /// The lease's lifetime: longer than the longest model call with retries.
    pub lease_ms: i64,
    /// This run's name in the lease (unique per process).
    pub holder: String,
    /// The clock (fixed in tests).
    pub now: &'a dyn Fn() -> i64,
}

/// Fold the session's eligible history. Model and validation failures are a
/// `failed` report (and a failed run record); `Err` is for the store failing.
pub fn run(
    store: &mut Store,
    input: &Input,
    model: &dyn Model,
    params: &RunParams<'_>,
    progress: &mut dyn FnMut(Progress),
) -> Result<RunReport> {
    let now = params.now;
    let mut report = RunReport {
        status: RunStatus::NothingToDo,
        job: params.job,
        reason: None,
        harness: input.harness.clone(),
        session_id: input.session_id.clone(),
        run_id: None,
        model: None,
        model_source: None,
        compartments: Vec::new(),
        replaced: None,
        facts_promoted: 0,
        facts: Vec::new(),
        tokens: TokenCount::default(),
        chunks: Vec::new(),
        held_back: Vec::new(),
        lease: None,
        failure: None,
        warnings: Vec::new(),
    };
    if input.subagent {
        report.reason = Some(Idle::Subagent);
        return Ok(report);
    }
    // Project identity may run git: outside the transaction, only when new.
    let identity = match sessions::find_session(store.conn(), &input.harness, &input.session_id)? {
        None => input.project_dir.as_deref().map(project_identity),
        Some(_) => None,
    };
    let started = now();
    let (session, ordinals) = store.write(|tx| {
        let mut session = match sessions::find_session(tx, &input.harness, &input.session_id)? {
            Some(row) => row,
            None => sessions::create_session(
                tx,
                &input.harness,
                &input.session_id,
                input.subagent,
                identity.as_deref(),
                started,
            )?,
        };
        let (ordinals, _) = messages::register_messages(tx, &mut session, &input.messages)?;
        // Harnesses without a transform pass (Claude Code, Codex) keep their
        // raw content here, so ctx_expand can open what the historian folds.
        content::record_messages(tx, session.id, &input.messages, &ordinals)?;
        sessions::save(tx, &session, started)?;
        Ok((session, ordinals))
    })?;
    if session.is_subagent {
        report.reason = Some(Idle::Subagent);
        return Ok(report);
    }
    let staged = match params.job {
        Job::Recomp => {
            let through = publish::covered_through(store.conn(), session.id)?;
            if through == 0 {
                report.reason = Some(Idle::NothingFolded);
                return Ok(report);
            }
            Some(recomp::Staged::new(through))
        }
        _ => None,
    };
    let first = plan(
        store.conn(),
        Some(session.id),
        input,
        &ordinals,
        &params.settings,
        range(params.job, staged.as_ref()),
    )?;
    if first.chunk.is_none() {
        report.reason = first.reason;
        return Ok(report);
    }
    drop(first);

    // The lease and the run record.
    let holder = params.holder.as_str();
    let acquired = store.write(|tx| {
        match publish::acquire_lease(tx, session.id, holder, now(), params.lease_ms)? {
            Ok(()) => Ok(Ok(publish::start_run(tx, session.id, now())?)),
            Err(lease) => Ok(Err(lease)),
        }
    })?;
    let run_id = match acquired {
        Ok(id) => id,
        Err(lease) => {
            report.reason = Some(Idle::LeaseHeld);
            report.lease = Some(lease);
            return Ok(report);
        }
    };
    report.run_id = Some(run_id);

    let mut runner = Runner {
        store: &mut *store,
        input,
        session: &session,
        ordinals: &ordinals,
        model,
        params,
        report: &mut report,
        progress,
        staged,
    };
    let failure = match runner.fold_chunks().and_then(|failure| match failure {
        None => runner.replace_staged(),
        some => Ok(some),
    }) {
        Ok(failure) => failure,
        // The store failed mid-run: record it if the store still lets us.
        Err(error) => Some(RunFailure::store(&error)),
    };
    report.status = if !report.compartments.is_empty() {
        RunStatus::Published
    } else if failure.is_some() {
        RunStatus::Failed
    } else {
        RunStatus::NothingToDo
    };
    let record = failure.as_ref().map(RunFailure::record);
    report.failure = failure;
    let outcome = publish::RunOutcome {
        status: report.status.as_str(),
        model: report.model.as_deref(),
        tokens_in: report.tokens.input,
        tokens_out: report.tokens.output,
        compartments: report.compartments.len(),
        facts: report.facts_promoted,
        failure: record.as_ref(),
    };
    store.write(|tx| {
        publish::finish_run(tx, run_id, &outcome, now())?;
        publish::release_lease(tx, session.id, holder)
    })?;
    Ok(report)
}

/// The range the next chunk is planned in.
fn range(job: Job, staged: Option<&recomp::Staged>) -> Range {
    match (job, staged) {
        (_, Some(staged)) => Range::Rebuild {
            covered: staged.covered(),
            through: staged.through,
        },
        (Job::Wrapup { keep }, None) => Range::Wrapup { keep },
        _ => Range::Fold,
    }
}

/// One run's state while it folds chunks.
struct Runner<'r, 'p> {
    store: &'r mut Store,
    input: &'r Input,
    session: &'r SessionRow,
    ordinals: &'r [Option<i64>],
    model: &'r dyn Model,
    params: &'r RunParams<'p>,
    report: &'r mut RunReport,
    progress: &'r mut dyn FnMut(Progress),
    /// A recompute's new compartments, published only when whole.
    staged: Option<recomp::Staged>,
}

impl Runner<'_, '_> {
    /// The chunk loop. Returns the failure that stopped it, if any.
    fn fold_chunks(&mut self) -> Result<Option<RunFailure>> {
        let now = self.params.now;
        let settings = self.params.settings;
        let project = self.session.project_identity.clone();
        let job = self.params.job;
        // A routine run takes a few chunks; a wrap-up or a recompute goes
        // on until its range is folded (each chunk moves it forward).
        let chunks = match job {
            Job::Fold => settings.historian.max_chunks as usize,
            Job::Wrapup { .. } | Job::Recomp => usize::MAX,
        };
        for index in 1..=chunks {
            let plan = plan(
                self.store.conn(),
                Some(self.session.id),
                self.input,
                self.ordinals,
                &settings,
                range(job, self.staged.as_ref()),
            )?;
            let Some(chunk) = plan.chunk else { break };
            if job == Job::Fold && index > 1 && chunk.remaining_tokens < MIN_CHUNK_TOKENS {
                break;
            }
            let info = ChunkInfo::of(&chunk);
            self.report.chunks.push(info.clone());
            (self.progress)(Progress::Chunk { index, info });
            let (mut earlier, memories) = context(
                self.store.conn(),
                Some(self.session.id),
                project.as_deref(),
                now(),
            )?;
            if let Some(staged) = &self.staged {
                earlier = staged.earlier();
            }
            let request = prompt::prompt(
                &chunk,
                &earlier,
                &memories,
                settings.historian.max_output_tokens,
            );
            let emergency = plan.pressure.usage_percent >= trigger::BLOCKING_PERCENT;
            let view = ChunkView {
                ordinals: chunk.ordinals.clone(),
                tool_only: chunk.tool_only.clone(),
                next_shown: chunk.next_shown(),
                // A wrap-up or a recompute folds its range to the end.
                hold_back: job == Job::Fold && chunk.lookahead.is_empty() && !emergency,
            };
            let validated = match self.ask(&request, &chunk, &view)? {
                Ok(v) => v,
                Err(failure) => return Ok(Some(self.chunk_failure(index, failure))),
            };
            let by_ordinal: HashMap<i64, &Message> =
                plan.tail.iter().map(|t| (t.ordinal, t.message)).collect();
            let new: Vec<NewCompartment> = validated
                .compartments
                .iter()
                .map(|c| new_compartment(c, &by_ordinal))
                .collect();
            if new.is_empty() {
                break;
            }
            if let Some(staged) = &mut self.staged {
                // A recompute keeps no facts: memory stays as curated.
                staged.compartments.extend(new);
                (self.progress)(Progress::Published {
                    compartments: validated.compartments.len(),
                    held_back: false,
                });
                if chunk.lookahead.is_empty() {
                    break;
                }
                continue;
            }
            let publication = publish::Publication {
                session: self.session.id,
                holder: &self.params.holder,
                covered_before: plan.covered,
                compartments: &new,
                facts: &validated.facts,
                project: project.as_deref(),
                now_ms: now(),
            };
            let published = match self.store.write(|tx| publish::publish(tx, &publication))? {
                Ok(published) => published,
                Err(refusal) => {
                    return Ok(Some(
                        self.chunk_failure(index, RunFailure::Refused(refusal)),
                    ));
                }
            };
            self.record(&validated, published, project.is_some());
            // A chunk that ended the eligible range leaves nothing new to read.
            if chunk.lookahead.is_empty() {
                break;
            }
        }
        Ok(None)
    }

    /// A recompute that folded its range: the new compartments replace the
    /// old in one transaction. Returns the failure that stopped it, if any.
    fn replace_staged(&mut self) -> Result<Option<RunFailure>> {
        let Some(staged) = &self.staged else {
            return Ok(None);
        };
        let (session, holder, now) = (self.session.id, &self.params.holder, self.params.now);
        let old = store::load_compartments(self.store.conn(), session)?.len();
        let replaced = self
            .store
            .write(|tx| recomp::replace(tx, session, holder, staged, now()))?;
        let sequences = match replaced {
            Ok(sequences) => sequences,
            Err(refusal) => return Ok(Some(RunFailure::Refused(refusal))),
        };
        for (c, sequence) in staged.compartments.iter().zip(sequences) {
            self.report.compartments.push(WrittenCompartment {
                sequence,
                start: c.start_ordinal,
                end: c.end_ordinal,
                title: c.title.clone(),
                importance: c.importance,
                episode: c.episode.clone().unwrap_or_default(),
            });
        }
        self.report.replaced = Some(old);
        Ok(None)
    }

    /// Note a published chunk in the report.
    fn record(&mut self, validated: &Validated, published: publish::Published, has_project: bool) {
        let report = &mut *self.report;
        if !has_project && !validated.facts.is_empty() {
            report.warnings.push(format!(
                "{} facts not kept: the session has no project (no project_dir)",
                validated.facts.len()
            ));
        }
        for (c, sequence) in validated.compartments.iter().zip(&published.sequences) {
            report.compartments.push(WrittenCompartment {
                sequence: *sequence,
                start: c.start,
                end: c.end,
                title: c.title.clone(),
                importance: c.importance,
                episode: c.episode.clone(),
            });
        }
        report.facts_promoted += published.facts.iter().filter(|f| f.created).count();
        report.facts.extend(published.facts);
        if let Some(held) = &validated.held_back {
            report.held_back.push(HeldBack {
                start: held.start,
                end: held.end,
                title: held.title.clone(),
            });
        }
        (self.progress)(Progress::Published {
            compartments: validated.compartments.len(),
            held_back: validated.held_back.is_some(),
        });
    }

    fn chunk_failure(&self, index: usize, failure: RunFailure) -> RunFailure {
        if self.report.compartments.is_empty() {
            failure
        } else {
            RunFailure::Chunk {
                index,
                failure: Box::new(failure),
            }
        }
    }

    /// One model call with the lease renewed first; tokens and warnings noted.
    fn call(&mut self, request: &Prompt) -> Result<std::result::Result<Completion, RunFailure>> {
        let (session, params) = (self.session.id, self.params);
        let renewed = self.store.write(|tx| {
            publish::renew_lease(tx, session, &params.holder, (params.now)(), params.lease_ms)
        })?;
        if !renewed {
            return Ok(Err(RunFailure::Refused(failure::Refusal::LeaseLost)));
        }
        let mut warnings = Vec::new();
        let progress = &mut *self.progress;
        let result = self.model.complete(request, &mut |event| {
            match &event {
                llm::Event::FallingBack { error, to, .. } => {
                    warnings.push(format!("{error}; trying {to}"));
                }
                llm::Event::Note { model, message } => warnings.push(format!("{model}: {message}")),
                _ => {}
            }
            progress(Progress::Llm(event));
        });
        self.report.warnings.extend(warnings);
        match result {
            Ok(completion) => {
                // Counts the provider reported: any u64, so they saturate.
                let tokens = &mut self.report.tokens;
                tokens.input = tokens.input.saturating_add(completion.tokens_in);
                tokens.output = tokens.output.saturating_add(completion.tokens_out);
                self.report.model = Some(completion.model.to_string());
                (self.progress)(Progress::Answer {
                    model: completion.model.to_string(),
                    tokens_in: completion.tokens_in,
                    tokens_out: completion.tokens_out,
                });
                Ok(Ok(completion))
            }
            Err(error) => Ok(Err(RunFailure::Model(error))),
        }
    }

    /// Ask, check, and on a rejected answer ask once more with the reason.
    fn ask(
        &mut self,
        request: &Prompt,
        chunk: &Chunk,
        view: &ChunkView,
    ) -> Result<std::result::Result<Validated, RunFailure>> {
        let first = match self.call(request)? {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        let problem = match check_answer(&first, view) {
            Ok(v) => return Ok(Ok(v)),
            Err(problem) => problem,
        };
        (self.progress)(Progress::Repair {
            problem: problem.clone(),
        });
        let repair = prompt::repair(request, chunk, &first.text, &problem, first.truncated);
        let second = match self.call(&repair)? {
            Ok(c) => c,
            Err(failure) => {
                return Ok(Err(RunFailure::RepairFailed {
                    problem,
                    failure: Box::new(failure),
                }));
            }
        };
        Ok(check_answer(&second, view).map_err(|again| RunFailure::Rejected { problem, again }))
    }
}

fn check_answer(
    completion: &Completion,
    view: &ChunkView,
) -> std::result::Result<Validated, String> {
    let answer = parse::parse(&completion.text).map_err(|problem| {
        if completion.truncated {
            format!(
                "{problem} (the provider stopped at the output limit, historian.max_output_tokens)"
            )
        } else {
            problem
        }
    })?;
    validate::validate(answer, view)
}

fn new_compartment(c: &Folded, by_ordinal: &HashMap<i64, &Message>) -> NewCompartment {
    let start = by_ordinal.get(&c.start);
    let end = by_ordinal.get(&c.end);
    NewCompartment {
        start_ordinal: c.start,
        end_ordinal: c.end,
        start_message_id: start.and_then(|m| m.id()).unwrap_or_default().to_string(),
        end_message_id: end.and_then(|m| m.id()).unwrap_or_default().to_string(),
        start_ms: start.and_then(|m| m.created_ms()),
        end_ms: end.and_then(|m| m.completed_ms().or(m.created_ms())),
        title: c.title.clone(),
        tiers: c.tiers.clone(),
        importance: c.importance,
        episode: Some(c.episode.clone()),
    }
}

/// What `mc-transform status` shows about the historian.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HistorianStatus {
    pub last_run: Option<publish::RunRecord>,
    /// The newest run that recorded an error, with its cause.
    pub last_failure: Option<publish::RunRecord>,
    pub failures_since_success: i64,
    /// Who holds the lease now, if anyone.
    pub lease: Option<publish::Lease>,
}

pub fn status(conn: &Connection, session: i64) -> Result<Option<HistorianStatus>> {
    let last_run = publish::last_run(conn, session)?;
    let lease = conn
        .query_row(
            "SELECT holder, expires_ms FROM historian_leases WHERE session = ?1",
            params![session],
            |r| {
                Ok(publish::Lease {
                    holder: r.get(0)?,
                    expires_ms: r.get(1)?,
                })
            },
        )
        .optional()?;
    if last_run.is_none() && lease.is_none() {
        return Ok(None);
    }
    Ok(Some(HistorianStatus {
        last_failure: publish::last_failure(conn, session)?,
        failures_since_success: publish::failures_since_success(conn, session)?,
        last_run,
        lease,
    }))
}

#[cfg(test)]
mod tests;

//! The dreamer: maintenance of project memory, run from cron.
//!
//! mc has no resident process, so `mc-dream tick` (every 15 minutes from the
//! user's crontab) runs every task that is due for every known project, then
//! exits. Each (project, task) has a cron expression (`dream.schedule.*`,
//! read in the local time zone) and a state row (`dream_tasks`): a task is
//! due at once if it never ran, at its back-off after a failure, else at the
//! schedule's next time after its last attempt. `last_run_ms` advances only
//! on success.
//!
//! A due task first passes its gates, none of which calls a model: a model
//! task needs `dream.model`; verify, git-index and sync need the project's
//! folder; a model task of a project with no new session, memory change or
//! commit since its last run is skipped (and its next time moves on); a model
//! task that no longer fits the tick's token budget waits for the next tick.
//! Then it takes its lease (`lease`: every memory-mutating task of a project
//! shares one), re-reads its state in the same transaction (another tick may
//! have just done it), opens a run record, and runs:
//!
//! - model tasks (`consolidate`, `verify`, `classify`, `archive_stale`) ask
//!   for one XML manifest (`manifest`), validate it against what they sent,
//!   and apply it in one transaction that first checks the lease is still
//!   theirs — through `search::memory`'s functions, so every change is in the
//!   mutation log and reaches prompts at the next natural bust, never a HARD
//!   fold. A malformed, truncated or unknown-id manifest applies nothing;
//! - `git_index` (`gitlog`) and `sync` (`team`) run no model.
//!
//! The outcome is recorded with the run (tokens, what changed, or the
//! failure and its back-off) and the lease released. A process killed
//! mid-task leaves an unfinished run record and its lease, which the next
//! tick takes over (its holder is gone); nothing of the task was applied.

// The I/O rule, enforced: no printing here (and `shared/clippy.toml` refuses the
// environment, stdin/stdout and ureq's environment-reading defaults).
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]
// Nothing reachable from outside input may panic: no expect, no indexing or
// slicing that can go out of range; the few proven invariants carry an
// `allow` with the reason on the smallest item.
#![cfg_attr(
    not(test),
    deny(clippy::expect_used, clippy::indexing_slicing, clippy::string_slice)
)]

pub mod classify;
pub mod consolidate;
pub mod crontab;
pub use mc_search_core::gitlog;
pub mod lease;
pub mod manifest;
pub mod schedule;
pub mod secrets;
pub mod similar;
pub mod stale;
pub mod state;
pub mod team;
pub mod usage;
pub mod verify;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use jiff::tz::TimeZone;
use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde::Serialize;
use serde_json::{Value, json};

use mc_base::config::DreamConfig;
use mc_base::error::{Error, Result};
use mc_base::identity::project_identity;
use mc_base::store::Store;
use mc_llm::{self as llm, Completion, Model, Prompt};

use self::lease::Lease;
use self::schedule::Schedule;
use self::state::{Ended, KnownProject, TaskState};

/// The tasks, in the order a tick runs them. Serialized by [`Task::name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Task {
    GitIndex,
    Consolidate,
    Verify,
    Classify,
    ArchiveStale,
    Sync,
    /// Last: vectors for what the memory tasks just wrote.
    Embed,
}

impl Task {
    pub const ALL: [Task; 7] = [
        Task::GitIndex,
        Task::Consolidate,
        Task::Verify,
        Task::Classify,
        Task::ArchiveStale,
        Task::Sync,
        Task::Embed,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Task::GitIndex => "git-index",
            Task::Consolidate => "consolidate",
            Task::Verify => "verify",
            Task::Classify => "classify",
            Task::ArchiveStale => "archive-stale",
            Task::Sync => "sync",
            Task::Embed => "embed",
        }
    }

    /// By name; `_` works for `-`.
    pub fn parse(name: &str) -> Option<Task> {
        let name = name.trim().replace('_', "-");
        Task::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Whether the task asks a model.
    pub fn uses_model(self) -> bool {
        matches!(
            self,
            Task::Consolidate | Task::Verify | Task::Classify | Task::ArchiveStale
        )
    }

    /// Whether it needs the project's folder.
    pub fn needs_folder(self) -> bool {
        matches!(self, Task::Verify | Task::GitIndex | Task::Sync)
    }

    /// The lease it takes: every task that changes memories shares `memory`.
    pub fn domain(self) -> &'static str {
        match self {
            Task::GitIndex => "git-index",
            Task::Embed => "embed",
            _ => "memory",
        }
    }

    /// Its cron expression (`None`: off).
    pub fn schedule(self, config: &DreamConfig) -> Option<&str> {
        let s = &config.schedule;
        match self {
            Task::GitIndex => s.git_index.as_deref(),
            Task::Consolidate => s.consolidate.as_deref(),
            Task::Verify => s.verify.as_deref(),
            Task::Classify => s.classify.as_deref(),
            Task::ArchiveStale => s.archive_stale.as_deref(),
            Task::Sync => s.sync.as_deref(),
            Task::Embed => s.embed.as_deref(),
        }
    }
}

/// What a tick or a run needs besides the store.
pub struct Settings<'a> {
    pub dream: &'a DreamConfig,
    /// The model chain; `None` when none is configured (model tasks skip).
    pub model: Option<&'a dyn Model>,
    /// Why there is no model (shown by skipped model tasks and `status`).
    pub model_problem: Option<String>,
    /// The zone the schedules are read in (the binary's local zone).
    pub tz: TimeZone,
    /// This machine's name (lease liveness is judged only on it).
    pub host: String,
    /// This process's lease name ([`lease::holder_name`]).
    pub holder: String,
    /// A lease's lifetime: longer than the longest model call with retries.
    pub lease_ms: i64,
    /// The clock (fixed in tests).
    pub now: &'a dyn Fn() -> i64,
    /// A line of progress (the binary shows it on a terminal).
    pub progress: &'a dyn Fn(&str),
    /// The embeddings provider the `embed` task fills vectors with, or why
    /// there is none (the task then skips with that reason).
    pub embeddings: std::result::Result<Embedder<'a>, String>,
}

/// What the `embed` task needs: the provider, and how to wait between retries.
#[derive(Clone, Copy)]
pub struct Embedder<'a> {
    pub provider: &'a mc_search_core::embed::Provider,
    pub sleep: &'a dyn Fn(std::time::Duration),
}

/// Model tokens, as the providers reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
}

impl Tokens {
    pub fn total(self) -> u64 {
        self.input.saturating_add(self.output)
    }

    fn add(&mut self, other: Tokens) {
        self.input = self.input.saturating_add(other.input);
        self.output = self.output.saturating_add(other.output);
    }
}

/// The kind of a task's failure (`error_class` in reports and `status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// The model call failed.
    Model,
    /// The manifest was malformed, truncated or named unknown ids: nothing applied.
    AnswerRejected,
    LeaseLost,
    /// The task's budget fits nothing.
    Budget,
    Git,
    Files,
    Store,
    /// The embeddings provider failed: what was embedded before is kept.
    Embeddings,
    /// What the task needs is not configured.
    Config,
}

impl FailureClass {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::Model => "model",
            FailureClass::AnswerRejected => "answer_rejected",
            FailureClass::LeaseLost => "lease_lost",
            FailureClass::Budget => "budget",
            FailureClass::Git => "git",
            FailureClass::Files => "files",
            FailureClass::Store => "store",
            FailureClass::Embeddings => "embeddings",
            FailureClass::Config => "config",
        }
    }
}

/// A class is its name: `failure.class == "model"`.
impl PartialEq<&str> for FailureClass {
    fn eq(&self, name: &&str) -> bool {
        self.as_str() == *name
    }
}

/// Why a task failed: the cause, a class, and what to do.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskFailure {
    #[serde(rename = "error")]
    pub message: String,
    #[serde(rename = "error_class")]
    pub class: FailureClass,
    #[serde(rename = "error_hints", skip_serializing_if = "Vec::is_empty")]
    pub hints: Vec<String>,
}

impl TaskFailure {
    fn new(class: FailureClass, message: impl Into<String>) -> TaskFailure {
        TaskFailure {
            message: message.into(),
            class,
            hints: Vec::new(),
        }
    }

    fn hint(mut self, hint: impl Into<String>) -> TaskFailure {
        self.hints.push(hint.into());
        self
    }

    fn rejected(problem: impl Into<String>) -> TaskFailure {
        TaskFailure::new(
            FailureClass::AnswerRejected,
            format!("the model's manifest was rejected, nothing applied: {}", problem.into()),
        )
        .hint("the task is tried again after its back-off; a model that keeps failing may be too small for the task")
    }
}

/// A store error inside a task. An input error there comes from applying
/// the manifest (a memory it names changed meanwhile): the transaction rolled
/// back and the answer counts as rejected.
impl From<Error> for TaskFailure {
    fn from(error: Error) -> TaskFailure {
        if error.kind() == mc_base::error::ErrorKind::Input {
            return TaskFailure::rejected(error.to_string());
        }
        TaskFailure {
            hints: error.hints(),
            message: error.to_string(),
            class: FailureClass::Store,
        }
    }
}

/// What a finished task did.
#[derive(Debug, Clone, PartialEq)]
pub struct Done {
    /// `Ok` (it changed something) or `Nothing`.
    pub result: Outcome,
    pub detail: Value,
    /// HEAD as the task saw it (the next run's commit gate).
    pub head: Option<String>,
}

impl Done {
    fn nothing(detail: Value) -> Done {
        Done {
            result: Outcome::Nothing,
            detail,
            head: None,
        }
    }
}

/// One running task: its project, lease, budget and spending.
pub struct Run<'s, 'a> {
    pub store: &'s mut Store,
    pub settings: &'s Settings<'a>,
    pub project: String,
    /// The project's folder (top of the work tree), when known.
    pub root: Option<PathBuf>,
    pub task: Task,
    /// Model tokens this run may spend.
    pub budget: u64,
    pub spent: Tokens,
    pub model_name: Option<String>,
    pub warnings: Vec<String>,
}

/// The system prompt every model task shares.
const SYSTEM: &str = "You maintain the project memory of a coding agent: short, durable facts \
about one software project (rules, architecture, constraints, config values, naming) that are \
shown to the agent at the start of every session. Keep memories true, terse and free of \
duplicates. Be conservative: change or archive a memory only when you are sure. Never repeat \
secrets. Answer with exactly one XML manifest in the format the task gives, and nothing else \
of substance.";

impl Run<'_, '_> {
    pub fn now(&self) -> i64 {
        (self.settings.now)()
    }

    /// The tokens a prompt with `user` would cost at most: the estimate of
    /// both prompts plus the answer's limit.
    pub fn cost(&self, user: &str) -> u64 {
        u64::from(mc_base::tokens::estimate(SYSTEM))
            + u64::from(mc_base::tokens::estimate(user))
            + u64::from(self.settings.dream.max_output_tokens)
    }

    /// Whether a prompt with `user` fits what is left of the budget.
    pub fn fits(&self, user: &str) -> bool {
        self.cost(user) <= self.budget.saturating_sub(self.spent.total())
    }

    /// The longest prefix of `items` whose prompt fits the budget and whose
    /// answer fits three quarters of the answer's limit: `part` is an item's
    /// share of the prompt, `answer` the most tokens its answer may take,
    /// `whole` the prompt of a selection. Counted item by item, then checked
    /// on the whole prompt.
    pub fn fill<'x, T>(
        &self,
        items: &[&'x T],
        part: impl Fn(&T) -> String,
        answer: impl Fn(&T) -> u64,
        whole: impl Fn(&[&'x T]) -> String,
    ) -> Vec<&'x T> {
        let left = self.budget.saturating_sub(self.spent.total());
        let answer_room = u64::from(self.settings.dream.max_output_tokens) * 3 / 4;
        let mut total = self.cost(&whole(&[]));
        let mut answers = 0u64;
        let mut chosen: Vec<&'x T> = Vec::new();
        for item in items {
            let more = u64::from(mc_base::tokens::estimate(&part(item))) + 2;
            let said = answer(item);
            if total + more > left || (!chosen.is_empty() && answers + said > answer_room) {
                break;
            }
            total += more;
            answers += said;
            chosen.push(item);
        }
        while !chosen.is_empty() && !self.fits(&whole(&chosen)) {
            chosen.pop();
        }
        chosen
    }

    /// Ask the model once (renewing the lease first): the answer's text,
    /// whole, or why there is none.
    pub fn ask(&mut self, user: &str) -> std::result::Result<String, TaskFailure> {
        let Some(model) = self.settings.model else {
            return Err(TaskFailure::new(
                FailureClass::Model,
                "no dream.model configured",
            ));
        };
        if !self.fits(user) {
            return Err(TaskFailure::new(
                FailureClass::Budget,
                format!(
                    "the prompt needs about {} tokens; the task may spend {} more",
                    self.cost(user),
                    self.budget.saturating_sub(self.spent.total())
                ),
            )
            .hint(
                "raise dream.task_token_budget (or dream.tick_token_budget) in the user config",
            ));
        }
        self.renew()?;
        (self.settings.progress)(&format!(
            "{} {}: asking the model",
            self.task.name(),
            self.project
        ));
        let prompt = Prompt {
            system: SYSTEM.to_string(),
            user: user.to_string(),
            max_tokens: self.settings.dream.max_output_tokens,
        };
        let mut warnings = Vec::new();
        let answer = model.complete(&prompt, &mut |event| {
            if let llm::Event::FallingBack { error, to, .. } = &event {
                warnings.push(format!("{error}; falling back to {to}"));
            }
        });
        self.warnings.extend(warnings);
        let completion: Completion = answer.map_err(|e| {
            // The client's hints name the historian's keys; the dreamer has
            // its own timeout (and a fixed connect timeout).
            let hints = e
                .hints
                .iter()
                .map(|h| {
                    h.replace(" (historian.connect_timeout_ms for connecting)", "")
                        .replace("historian.", "dream.")
                })
                .collect();
            TaskFailure {
                message: e.to_string(),
                class: FailureClass::Model,
                hints,
            }
        })?;
        self.spent.add(Tokens {
            input: completion.tokens_in,
            output: completion.tokens_out,
        });
        self.model_name = Some(completion.model.to_string());
        if completion.truncated {
            return Err(TaskFailure::new(
                FailureClass::AnswerRejected,
                "the model's answer was cut at dream.max_output_tokens: nothing applied",
            )
            .hint("raise dream.max_output_tokens, or lower dream.task_token_budget so each run sends less"));
        }
        Ok(completion.text)
    }

    /// Extend our lease; an error when it is no longer ours.
    fn renew(&mut self) -> std::result::Result<(), TaskFailure> {
        let (project, domain, holder) = (
            self.project.clone(),
            self.task.domain(),
            self.settings.holder.clone(),
        );
        let now = self.now();
        let ttl = self.settings.lease_ms;
        let ours = self
            .store
            .write(|tx| lease::renew(tx, &project, domain, &holder, now, ttl))?;
        if ours { Ok(()) } else { Err(lease_lost()) }
    }

    /// Apply in one transaction that first checks the lease is still ours.
    pub fn apply<T>(
        &mut self,
        f: impl FnOnce(&Transaction<'_>) -> Result<T>,
    ) -> std::result::Result<T, TaskFailure> {
        let (project, domain, holder) = (
            self.project.clone(),
            self.task.domain(),
            self.settings.holder.clone(),
        );
        let applied = self.store.write_or_roll_back(|tx| {
            if !lease::holds(tx, &project, domain, &holder)? {
                return Ok((None, false));
            }
            f(tx).map(|value| (Some(value), true))
        })?;
        applied.ok_or_else(lease_lost)
    }
}

fn lease_lost() -> TaskFailure {
    TaskFailure::new(
        FailureClass::LeaseLost,
        "another mc-dream took the project's lease (this run outlived it): nothing applied",
    )
    .hint("raise dream.timeout_ms only if model calls really take that long")
}

// ---------------------------------------------------------------------------
// tick and run

/// How a task was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// From `tick`: only when due, after the gates.
    Tick,
    /// `run TASK`: now, whatever the schedule and the activity gate say.
    Now,
}

/// How one (project, task) ended, as reports and `dream_runs.status` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The task changed something.
    Ok,
    /// The task ran and found nothing to change.
    Nothing,
    /// A gate stopped it (no model, no folder, nothing new).
    Skipped,
    /// The tick's token budget is spent.
    Deferred,
    /// Another process holds the lease, or just ran it.
    Busy,
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Nothing => "nothing",
            Outcome::Skipped => "skipped",
            Outcome::Deferred => "deferred",
            Outcome::Busy => "busy",
            Outcome::Failed => "failed",
        }
    }

    /// A finished task's result: `ok` when it changed something.
    pub(crate) fn of_change(changed: bool) -> Outcome {
        if changed {
            Outcome::Ok
        } else {
            Outcome::Nothing
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Display for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A task is its name: `report.task == "verify"`.
impl PartialEq<&str> for Task {
    fn eq(&self, name: &&str) -> bool {
        self.name() == *name
    }
}

/// An outcome is its name: `report.outcome == "ok"`.
impl PartialEq<&str> for Outcome {
    fn eq(&self, name: &&str) -> bool {
        self.as_str() == *name
    }
}

/// What happened to one (project, task) in a tick or a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskReport {
    pub task: Task,
    pub outcome: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Value::is_null")]
    pub detail: Value,
    #[serde(skip_serializing_if = "is_zero")]
    pub tokens: Tokens,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<Lease>,
    #[serde(flatten)]
    pub failure: Option<TaskFailure>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<i64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

fn is_zero(t: &Tokens) -> bool {
    t.total() == 0
}

impl TaskReport {
    fn new(task: Task, outcome: Outcome, reason: Option<String>) -> TaskReport {
        TaskReport {
            task,
            outcome,
            reason,
            detail: Value::Null,
            tokens: Tokens::default(),
            model: None,
            lease: None,
            failure: None,
            retry_after_ms: None,
            warnings: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProjectReport {
    pub project: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    pub tasks: Vec<TaskReport>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TickReport {
    pub now_ms: i64,
    /// Projects with a task that was due (the others had nothing to do).
    pub projects: Vec<ProjectReport>,
    pub tokens: Tokens,
    /// Whether a task failed.
    pub failed: bool,
}

/// One tick: every due task of every known project.
pub fn tick(store: &mut Store, settings: &Settings<'_>) -> Result<TickReport> {
    let now = (settings.now)();
    store.write(|tx| {
        state::refresh_projects(tx)?;
        correct_clock(tx, settings, now)
    })?;
    let projects = state::projects(store.conn())?;
    let mut left = settings.dream.tick_token_budget;
    let mut report = TickReport {
        now_ms: now,
        projects: Vec::new(),
        tokens: Tokens::default(),
        failed: false,
    };
    // Vectors belong to the database, not to a project: `embed` runs at most
    // once a tick, and not at all (silently, as if off) with no provider.
    let mut embed_tried = settings.embeddings.is_err();
    for project in &projects {
        let mut place = Place::new(project);
        let mut tasks = Vec::new();
        for task in Task::ALL {
            if task == Task::Embed && embed_tried {
                continue;
            }
            let Some(task_report) = attempt(
                store,
                settings,
                &mut place,
                task,
                Mode::Tick,
                Some(&mut left),
            )?
            else {
                continue;
            };
            embed_tried |= task == Task::Embed;
            report.tokens.add(task_report.tokens);
            report.failed |= task_report.outcome == "failed";
            tasks.push(task_report);
        }
        if !tasks.is_empty() {
            report.projects.push(ProjectReport {
                project: project.project.clone(),
                dir: project.dir.as_ref().map(|d| d.display().to_string()),
                tasks,
            });
        }
    }
    Ok(report)
}

/// `run TASK`: the task now for the project of `dir`, whatever its schedule.
pub fn run_now(
    store: &mut Store,
    settings: &Settings<'_>,
    dir: &Path,
    task: Task,
) -> Result<ProjectReport> {
    let known = register(store, dir, (settings.now)())?;
    let mut place = Place::new(&known);
    let report = attempt(store, settings, &mut place, task, Mode::Now, None)?
        .unwrap_or_else(|| TaskReport::new(task, Outcome::Skipped, Some("not run".into())));
    Ok(ProjectReport {
        project: known.project.clone(),
        dir: known.dir.as_ref().map(|d| d.display().to_string()),
        tasks: vec![report],
    })
}

/// The project of `dir` (its identity, recorded with the folder).
pub fn register(store: &mut Store, dir: &Path, now_ms: i64) -> Result<KnownProject> {
    let root = gitlog::toplevel(dir).unwrap_or_else(|| dir.to_path_buf());
    let identity = project_identity(&root);
    let text = root.display().to_string();
    store.write(|tx| state::note_project_dir(tx, &identity, &text, now_ms))?;
    state::projects(store.conn())?
        .into_iter()
        .find(|p| p.project == identity)
        .ok_or_else(|| Error::Internal(format!("project {identity} vanished")))
}

/// A project's folder as resolved once per tick (git runs only when a task
/// needs it).
struct Place<'p> {
    known: &'p KnownProject,
    resolved: Option<Option<PathBuf>>,
    head: Option<Option<String>>,
}

impl<'p> Place<'p> {
    fn new(known: &'p KnownProject) -> Place<'p> {
        Place {
            known,
            resolved: None,
            head: None,
        }
    }

    /// The top of the project's work tree, if its folder still holds it.
    fn root(&mut self) -> Option<PathBuf> {
        if let Some(root) = &self.resolved {
            return root.clone();
        }
        let root = self
            .known
            .dir
            .as_deref()
            .filter(|d| d.is_dir())
            .and_then(|dir| {
                let root = gitlog::toplevel(dir).unwrap_or_else(|| dir.to_path_buf());
                (project_identity(&root) == self.known.project).then_some(root)
            });
        self.resolved = Some(root.clone());
        root
    }

    fn head(&mut self) -> Option<String> {
        if let Some(head) = &self.head {
            return head.clone();
        }
        let head = match &self.known.dir {
            Some(dir) if self.known.project.starts_with("git:") && dir.is_dir() => {
                gitlog::head(dir)
            }
            _ => None,
        };
        self.head = Some(head.clone());
        head
    }
}

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// Tasks whose stored attempts put them more than one period ahead of `now`
/// (recorded while the clock ran ahead, then it was set back): their times
/// are brought back to now, so the stored state says what the schedule
/// re-derives ([`schedule::rederived`]) and the next attempt starts from it.
fn correct_clock(conn: &Connection, settings: &Settings<'_>, now: i64) -> Result<()> {
    for known in state::projects(conn)? {
        for task in Task::ALL {
            let Some(expression) = task.schedule(settings.dream) else {
                continue;
            };
            let schedule = Schedule::parse(expression)?;
            let stored = state::task_state(conn, &known.project, task.name())?;
            if let Some(next) =
                schedule::rederived(&schedule, &stored.attempts(), &settings.tz, now)
            {
                state::bring_back(conn, &known.project, task.name(), now, next)?;
            }
        }
    }
    Ok(())
}

/// Whether `task` is due for the project at `now`, and its state and
/// latest run id (for the re-check under the lease).
fn due(
    conn: &Connection,
    settings: &Settings<'_>,
    project: &str,
    task: Task,
    now: i64,
) -> Result<Option<(TaskState, i64)>> {
    let Some(expression) = task.schedule(settings.dream) else {
        return Ok(None);
    };
    let schedule = Schedule::parse(expression)?;
    let state = state::task_state(conn, project, task.name())?;
    let next = schedule::next_due(&schedule, &state.attempts(), &settings.tz, now);
    if next.is_none_or(|next| next > now) {
        return Ok(None);
    }
    let run = latest_run(conn, project, task)?;
    Ok(Some((state, run)))
}

fn latest_run(conn: &Connection, project: &str, task: Task) -> Result<i64> {
    Ok(conn
        .prepare_cached(
            "SELECT coalesce(max(id), 0) FROM dream_runs WHERE project = ?1 AND task = ?2",
        )?
        .query_row(params![project, task.name()], |r| r.get(0))?)
}

/// One (project, task): `None` when it is not due (tick) — nothing to report.
/// Four steps: the gates, the lease, the run, the record.
fn attempt(
    store: &mut Store,
    settings: &Settings<'_>,
    place: &mut Place<'_>,
    task: Task,
    mode: Mode,
    tick_left: Option<&mut u64>,
) -> Result<Option<TaskReport>> {
    let now = (settings.now)();
    let cleared = match gate(
        store,
        settings,
        place,
        task,
        mode,
        tick_left.as_deref(),
        now,
    )? {
        Gate::Closed(report) => return Ok(report),
        Gate::Open(cleared) => cleared,
    };
    let run_id = match lease(store, settings, &place.known.project, task, &cleared, now)? {
        Leased::Run(id) => id,
        Leased::Busy(report) => return Ok(Some(*report)),
    };
    (settings.progress)(&format!("{}: {}", place.known.project, task.name()));
    let ran = run(store, settings, place, task, &cleared);
    if let Some(left) = tick_left {
        *left = left.saturating_sub(ran.spent.total());
    }
    record(store, settings, place, task, &cleared, run_id, ran).map(Some)
}

/// What the gates let through: the task's state as read before the lease
/// (re-checked under it), the folder and the token budget.
struct Cleared {
    seen_state: TaskState,
    seen_run: i64,
    root: Option<PathBuf>,
    budget: u64,
}

enum Gate {
    /// Not due (`None`), or stopped by a gate with the report saying why.
    Closed(Option<TaskReport>),
    Open(Cleared),
}

/// The gates, cheapest first: due, a model, embeddings, the folder, the
/// activity since the last run (a tick only: a skip is recorded), the
/// tick's budget.
fn gate(
    store: &mut Store,
    settings: &Settings<'_>,
    place: &mut Place<'_>,
    task: Task,
    mode: Mode,
    tick_left: Option<&u64>,
    now: i64,
) -> Result<Gate> {
    let project = place.known.project.clone();
    let (seen_state, seen_run) = match mode {
        Mode::Tick => match due(store.conn(), settings, &project, task, now)? {
            Some(due) => due,
            None => return Ok(Gate::Closed(None)),
        },
        Mode::Now => (
            state::task_state(store.conn(), &project, task.name())?,
            latest_run(store.conn(), &project, task)?,
        ),
    };
    let skip = |reason: String| {
        Ok(Gate::Closed(Some(TaskReport::new(
            task,
            Outcome::Skipped,
            Some(reason),
        ))))
    };
    if task.uses_model() && settings.model.is_none() {
        return skip(
            settings
                .model_problem
                .clone()
                .unwrap_or_else(|| "no dream.model configured".into()),
        );
    }
    if task == Task::Embed
        && let Err(why) = &settings.embeddings
    {
        return skip(why.clone());
    }
    // The folder, for the tasks that read it.
    let root = if task.needs_folder() {
        if task == Task::GitIndex
            && place.known.git_state == "none"
            && place
                .known
                .git_probed_ms
                .is_some_and(|probed| now - probed < DAY_MS)
        {
            return skip(
                "not a git repository (parked; probed again a day after the last probe)".into(),
            );
        }
        match place.root() {
            Some(root) => Some(root),
            None => {
                return skip(match &place.known.dir {
                    None => {
                        "no folder known for this project (run `mc-dream run` in it once)".into()
                    }
                    Some(dir) => format!("{} no longer holds this project", dir.display()),
                });
            }
        }
    } else {
        place.root()
    };
    // The activity gate: nothing new since the last run, no model call.
    if mode == Mode::Tick
        && task.uses_model()
        && let Some(last) = seen_state.last_run_ms
    {
        let head = place.head();
        let activity = state::activity_since(
            store.conn(),
            &project,
            last,
            seen_state.head.as_deref(),
            head.as_deref(),
        )?;
        if activity.is_none() {
            let why = "nothing new since the last run (no session, memory or commit)";
            store.write(|tx| {
                state::record_attempt(tx, &project, task.name(), now, &Ended::Skipped { why })
            })?;
            return skip(why.into());
        }
    }
    // The tick's budget.
    let mut budget = settings.dream.task_token_budget;
    if task.uses_model()
        && let Some(&left) = tick_left
    {
        let least = u64::from(settings.dream.max_output_tokens) + 1_000;
        if left < least {
            return Ok(Gate::Closed(Some(TaskReport::new(
                task,
                Outcome::Deferred,
                Some(format!(
                    "the tick's token budget has {left} tokens left (dream.tick_token_budget)"
                )),
            ))));
        }
        budget = budget.min(left);
    }
    Ok(Gate::Open(Cleared {
        seen_state,
        seen_run,
        root,
        budget,
    }))
}

enum Leased {
    /// This process holds the lease; the id of the run it started.
    Run(i64),
    /// Another holds it, or just ran the task.
    Busy(Box<TaskReport>),
}

/// What the lease's transaction found.
enum Taken {
    Run(i64),
    Held(Lease),
    /// The task's state moved since the gates read it: another tick just ran it.
    JustRan,
}

/// The task domain's lease, and the re-check under it (another tick may
/// have just done this), in one transaction that also starts the run.
fn lease(
    store: &mut Store,
    settings: &Settings<'_>,
    project: &str,
    task: Task,
    cleared: &Cleared,
    now: i64,
) -> Result<Leased> {
    let holder = &settings.holder;
    let taken = store.write(|tx| {
        if let Err(held) = lease::acquire(
            tx,
            project,
            task.domain(),
            task.name(),
            holder,
            &settings.host,
            now,
            settings.lease_ms,
        )? {
            return Ok(Taken::Held(held));
        }
        let state_now = state::task_state(tx, project, task.name())?;
        if state_now != cleared.seen_state || latest_run(tx, project, task)? != cleared.seen_run {
            lease::release(tx, project, task.domain(), holder)?;
            return Ok(Taken::JustRan);
        }
        Ok(Taken::Run(state::start_run(tx, project, task.name(), now)?))
    })?;
    let held = match taken {
        Taken::Run(id) => return Ok(Leased::Run(id)),
        Taken::Held(held) => Some(held),
        Taken::JustRan => None,
    };
    let mut report = TaskReport::new(
        task,
        Outcome::Busy,
        Some(match &held {
            Some(l) => format!(
                "{} holds the project's {} lease ({})",
                l.holder,
                task.domain(),
                l.task
            ),
            None => "another mc-dream just ran it".into(),
        }),
    );
    report.lease = held;
    Ok(Leased::Busy(Box::new(report)))
}

/// What running the task gave.
struct Ran {
    outcome: std::result::Result<Done, TaskFailure>,
    spent: Tokens,
    model: Option<String>,
    warnings: Vec<String>,
}

/// Run the task itself, under the lease.
fn run(
    store: &mut Store,
    settings: &Settings<'_>,
    place: &Place<'_>,
    task: Task,
    cleared: &Cleared,
) -> Ran {
    let mut run = Run {
        store,
        settings,
        project: place.known.project.clone(),
        root: cleared.root.clone(),
        task,
        budget: cleared.budget,
        spent: Tokens::default(),
        model_name: None,
        warnings: Vec::new(),
    };
    let outcome = match task {
        Task::GitIndex => git_index(&mut run, place.known),
        Task::Consolidate => consolidate::run(&mut run),
        Task::Verify => verify::run(&mut run),
        Task::Classify => classify::run(&mut run),
        Task::ArchiveStale => stale::run(&mut run),
        Task::Sync => team::sync(&mut run),
        Task::Embed => embed(&mut run),
    };
    Ran {
        outcome,
        spent: run.spent,
        model: run.model_name.take(),
        warnings: std::mem::take(&mut run.warnings),
    }
}

/// The report, and the attempt, the run and the lease's release in one
/// transaction: a success records HEAD (the next run's commit gate), a
/// failure its back-off.
fn record(
    store: &mut Store,
    settings: &Settings<'_>,
    place: &mut Place<'_>,
    task: Task,
    cleared: &Cleared,
    run_id: i64,
    ran: Ran,
) -> Result<TaskReport> {
    let project = place.known.project.clone();
    let finished = (settings.now)();
    let Ran {
        outcome,
        spent,
        model,
        warnings,
    } = ran;
    let mut report = match &outcome {
        Ok(done) => {
            let mut r = TaskReport::new(task, done.result, None);
            r.detail = done.detail.clone();
            r
        }
        Err(failure) => {
            let mut r = TaskReport::new(task, Outcome::Failed, None);
            r.failure = Some(failure.clone());
            r
        }
    };
    report.tokens = spent;
    report.model = model.clone();
    report.warnings = warnings;
    let failures = cleared.seen_state.failures.saturating_add(1);
    let retry_after = finished.saturating_add(schedule::backoff_ms(failures));
    if outcome.is_err() {
        report.retry_after_ms = Some(retry_after);
    }
    // HEAD as of this success: the commit gate of the task's next run.
    let head = match &outcome {
        Ok(done) => done.head.clone().or_else(|| place.head()),
        Err(_) => None,
    };
    store.write(|tx| {
        let (status, detail) = match &outcome {
            Ok(done) => {
                state::record_attempt(
                    tx,
                    &project,
                    task.name(),
                    finished,
                    &Ended::Succeeded {
                        result: done.result.as_str(),
                        detail: &done.detail,
                        head: head.as_deref(),
                    },
                )?;
                (done.result, done.detail.to_string())
            }
            Err(failure) => {
                state::record_attempt(
                    tx,
                    &project,
                    task.name(),
                    finished,
                    &Ended::Failed {
                        error: &failure.message,
                        retry_after_ms: retry_after,
                    },
                )?;
                (
                    Outcome::Failed,
                    serde_json::to_string(failure).unwrap_or_default(),
                )
            }
        };
        state::finish_run(
            tx,
            run_id,
            status.as_str(),
            model.as_deref(),
            spent.input,
            spent.output,
            &detail,
            finished,
        )?;
        lease::release(tx, &project, task.domain(), &settings.holder)
    })?;
    Ok(report)
}

/// git-index: read HEAD's new commits into `git_commits`.
fn git_index(
    run: &mut Run<'_, '_>,
    known: &KnownProject,
) -> std::result::Result<Done, TaskFailure> {
    let now = run.now();
    let project = run.project.clone();
    let Some(root) = run.root.clone() else {
        return Err(TaskFailure::new(
            FailureClass::Files,
            "no folder for this project",
        ));
    };
    let Some(head) = gitlog::head(&root) else {
        run.apply(|tx| state::set_git_state(tx, &project, "none", now))?;
        return Ok(Done::nothing(json!({
            "git": "none",
            "note": "not a git repository (or no commit yet): parked, probed again in a day"
        })));
    };
    if known.git_state != "git" {
        run.apply(|tx| state::set_git_state(tx, &project, "git", now))?;
    }
    let last_head = state::task_state(run.store.conn(), &project, Task::GitIndex.name())?.head;
    if last_head.as_deref() == Some(head.as_str()) {
        return Ok(Done {
            result: Outcome::Nothing,
            detail: json!({"head": head, "note": "HEAD has not moved"}),
            head: Some(head),
        });
    }
    let commits = gitlog::new_commits(run.store.conn(), &project, &root, now)
        .map_err(|e| TaskFailure::new(FailureClass::Git, e.to_string()))?;
    let indexed = run.apply(|tx| gitlog::store_commits(tx, &project, &commits, now))?;
    let changed = indexed.added + indexed.updated + indexed.pruned > 0;
    Ok(Done {
        result: Outcome::of_change(changed),
        detail: json!({"head": head, "indexed": indexed}),
        head: Some(head),
    })
}

/// embed: vectors for every searchable text that has none under the
/// configured model (all projects share the vectors: a text is embedded once).
fn embed(run: &mut Run<'_, '_>) -> std::result::Result<Done, TaskFailure> {
    let Ok(embedder) = run.settings.embeddings else {
        return Err(TaskFailure::new(
            FailureClass::Config,
            "no embeddings provider",
        ));
    };
    let progress = run.settings.progress;
    let mut shown = |done: u64, total: u64| progress(&format!("embed: {done}/{total}"));
    let report =
        mc_search_core::embed::backfill(run.store, embedder.provider, &mut shown, embedder.sleep)
            .map_err(|e| {
            TaskFailure::new(FailureClass::Embeddings, e.to_string())
                .hint("the vectors stored so far are kept; the next run goes on from there")
        })?;
    let changed = report.embedded + report.pruned > 0;
    Ok(Done {
        result: Outcome::of_change(changed),
        detail: serde_json::to_value(&report).unwrap_or_default(),
        head: None,
    })
}

// ---------------------------------------------------------------------------
// status

/// One task of one project, as `status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskStatus {
    pub task: Task,
    /// The cron expression, or `off`.
    pub schedule: String,
    #[serde(flatten)]
    pub state: TaskState,
    /// What the last attempt did (its JSON), or the gate's reason.
    #[serde(skip_serializing_if = "Value::is_null")]
    pub last_detail: Value,
    /// When it is due next (`null`: off, or a schedule that never matches;
    /// a time in the past: due at the next tick).
    pub next_due_ms: Option<i64>,
    pub due: bool,
    /// Why a due run would not happen now (no model, no folder).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<Lease>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProjectStatus {
    pub project: String,
    pub dir: Option<String>,
    pub git: String,
    pub memories: i64,
    pub commits_indexed: i64,
    pub tasks: Vec<TaskStatus>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatusReport {
    pub now_ms: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_problem: Option<String>,
    pub projects: Vec<ProjectStatus>,
}

/// Every known project (or only `only`) and each of its tasks. Read-only
/// but for learning new projects from the sessions.
pub fn status(
    store: &mut Store,
    settings: &Settings<'_>,
    only: Option<&str>,
) -> Result<StatusReport> {
    let now = (settings.now)();
    store.write(|tx| state::refresh_projects(tx))?;
    let conn = store.conn();
    let mut projects = Vec::new();
    for known in state::projects(conn)? {
        if only.is_some_and(|p| p != known.project) {
            continue;
        }
        let mut leases: BTreeMap<&str, Option<Lease>> = BTreeMap::new();
        for domain in ["memory", "git-index"] {
            leases.insert(domain, lease::current(conn, &known.project, domain)?);
        }
        let mut tasks = Vec::new();
        for task in Task::ALL {
            let state = state::task_state(conn, &known.project, task.name())?;
            let expression = task.schedule(settings.dream);
            let next_due_ms = match expression {
                Some(e) => {
                    schedule::next_due(&Schedule::parse(e)?, &state.attempts(), &settings.tz, now)
                        .map(|n| n.max(0))
                }
                None => None,
            };
            let waiting = if task.uses_model() && settings.model.is_none() {
                Some(
                    settings
                        .model_problem
                        .clone()
                        .unwrap_or_else(|| "no dream.model configured".into()),
                )
            } else if let (Task::Embed, Err(why)) = (task, &settings.embeddings) {
                Some(why.clone())
            } else if task.needs_folder() && known.dir.is_none() {
                Some("no folder known for this project".into())
            } else {
                None
            };
            let last_detail = state
                .last_detail
                .as_deref()
                .map(|d| serde_json::from_str(d).unwrap_or_else(|_| Value::from(d)))
                .unwrap_or(Value::Null);
            tasks.push(TaskStatus {
                task,
                schedule: expression.unwrap_or("off").to_string(),
                last_detail,
                next_due_ms,
                due: next_due_ms.is_some_and(|n| n <= now),
                waiting,
                lease: leases
                    .get(task.domain())
                    .cloned()
                    .flatten()
                    .filter(|l| l.task == task.name() || task.domain() == "memory"),
                state,
            });
        }
        let memories: i64 = conn.query_row(
            "SELECT count(*) FROM memories WHERE project = ?1 AND status IN ('active', 'permanent')",
            params![known.project],
            |r| r.get(0),
        )?;
        let commits_indexed: i64 = conn.query_row(
            "SELECT count(*) FROM git_commits WHERE project = ?1",
            params![known.project],
            |r| r.get(0),
        )?;
        projects.push(ProjectStatus {
            project: known.project.clone(),
            dir: known.dir.as_ref().map(|d| d.display().to_string()),
            git: known.git_state.clone(),
            memories,
            commits_indexed,
            tasks,
        });
    }
    Ok(StatusReport {
        now_ms: now,
        model: None,
        model_problem: settings.model_problem.clone(),
        projects,
    })
}

/// The live memories of a project, as the model tasks read them.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveMemory {
    pub id: i64,
    pub category: String,
    pub content: String,
    pub status: String,
    pub importance: Option<i64>,
    pub scope: Option<String>,
    pub classified_key: Option<String>,
    pub verified_hash: Option<String>,
    pub last_used_ms: Option<i64>,
    pub expires_ms: Option<i64>,
    pub created_ms: i64,
    pub private: bool,
    pub team_id: Option<String>,
    pub team_key: Option<String>,
}

pub fn live_memories(conn: &Connection, project: &str) -> Result<Vec<LiveMemory>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, category, content, status, importance, scope, classified_key, verified_hash,
                last_used_ms, expires_ms, created_ms, private, team_id, team_key
         FROM memories WHERE project = ?1 AND status IN ('active', 'permanent') ORDER BY id",
    )?;
    let rows = stmt.query_map(params![project], |r| {
        Ok(LiveMemory {
            id: r.get(0)?,
            category: r.get(1)?,
            content: r.get(2)?,
            status: r.get(3)?,
            importance: r.get(4)?,
            scope: r.get(5)?,
            classified_key: r.get(6)?,
            verified_hash: r.get(7)?,
            last_used_ms: r.get(8)?,
            expires_ms: r.get(9)?,
            created_ms: r.get(10)?,
            private: r.get::<_, i64>(11)? != 0,
            team_id: r.get(12)?,
            team_key: r.get(13)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Mark a memory private (it never leaves the database) or not.
pub fn set_private(store: &mut Store, project: &str, id: i64, private: bool) -> Result<()> {
    store.write(|tx| {
        let owner: Option<String> = tx
            .query_row(
                "SELECT project FROM memories WHERE id = ?1",
                params![id],
                |r| r.get(0),
            )
            .optional()?;
        if owner.as_deref() != Some(project) {
            return Err(Error::input(format!("no memory #{id} in this project"))
                .with_hint("list the project's memories with `mc-search memory list`"));
        }
        tx.execute(
            "UPDATE memories SET private = ?2 WHERE id = ?1",
            params![id, private],
        )?;
        Ok(())
    })
}

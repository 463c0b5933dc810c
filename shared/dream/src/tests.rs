//! The dreamer against a scripted model, a temp store and temp folders:
//! schedules and gates, leases, budgets, every task's manifest applied whole
//! or not at all, team memory round trips, the commit index, and the pass
//! seeing a dreamer's edit only at the next natural bust.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::path::Path;
use std::process::Command;

use rusqlite::params;
use serde_json::json;

use mc_base::config::DreamConfig;
use mc_base::store::Store;
use mc_history::store;
use mc_llm::{CallFailure, Completion, Event, LlmError, Model, ModelRef, Prompt};
use mc_search_core::memory;

use super::*;

/// 2026-12-01 04:40:00 UTC.
const NOW: i64 = 1_796_100_000_000;
const MIN: i64 = 60_000;
const HOUR: i64 = 60 * MIN;
const DAY: i64 = 24 * HOUR;

type Reply = Box<dyn Fn(&Prompt) -> Result<Completion, LlmError>>;

/// A model that answers from a script and records every prompt.
#[derive(Default)]
struct Scripted {
    replies: RefCell<VecDeque<Reply>>,
    prompts: RefCell<Vec<Prompt>>,
}

fn completion(text: &str, truncated: bool) -> Completion {
    Completion {
        text: text.to_string(),
        model: ModelRef::parse("fake/dreamer").unwrap(),
        tokens_in: 1000,
        tokens_out: 100,
        truncated,
    }
}

impl Scripted {
    fn new() -> Scripted {
        Scripted::default()
    }

    fn text(self, text: &str) -> Scripted {
        let text = text.to_string();
        self.replies
            .borrow_mut()
            .push_back(Box::new(move |_| Ok(completion(&text, false))));
        self
    }

    fn with(self, f: impl Fn(&Prompt) -> String + 'static) -> Scripted {
        self.replies
            .borrow_mut()
            .push_back(Box::new(move |p| Ok(completion(&f(p), false))));
        self
    }

    fn reply(self, f: impl Fn(&Prompt) -> Result<Completion, LlmError> + 'static) -> Scripted {
        self.replies.borrow_mut().push_back(Box::new(f));
        self
    }

    fn asked(&self) -> usize {
        self.prompts.borrow().len()
    }

    fn last_prompt(&self) -> String {
        self.prompts
            .borrow()
            .last()
            .map(|p| p.user.clone())
            .unwrap_or_default()
    }
}

impl Model for Scripted {
    fn complete(
        &self,
        prompt: &Prompt,
        _events: &mut dyn FnMut(Event),
    ) -> Result<Completion, LlmError> {
        self.prompts.borrow_mut().push(prompt.clone());
        let reply =
            self.replies.borrow_mut().pop_front().unwrap_or_else(|| {
                panic!("the model was not expected to be asked:\n{}", prompt.user)
            });
        reply(prompt)
    }
}

fn config() -> DreamConfig {
    DreamConfig {
        model: Some("fake/dreamer".into()),
        ..DreamConfig::default()
    }
}

fn no_progress(_: &str) {}

fn settings<'a>(
    dream: &'a DreamConfig,
    model: Option<&'a dyn Model>,
    now: &'a dyn Fn() -> i64,
) -> Settings<'a> {
    Settings {
        dream,
        model,
        model_problem: model.is_none().then(|| "no dream.model configured".into()),
        tz: jiff::tz::TimeZone::UTC,
        host: "test-host".into(),
        holder: lease::holder_name("test-host", std::process::id(), 1),
        lease_ms: 10 * MIN,
        now,
        progress: &no_progress,
        embeddings: Err("no embeddings.model configured".into()),
    }
}

/// A temp folder that is its own project (`dir:` identity: no git needed),
/// with a store that knows it.
struct World {
    store: Store,
    dir: tempfile::TempDir,
    project: String,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open_in_memory().unwrap();
        let known = register(&mut store, dir.path(), NOW - DAY).unwrap();
        World {
            store,
            dir,
            project: known.project,
        }
    }

    fn write(&mut self, category: &str, content: &str) -> i64 {
        memory::write(
            &mut self.store,
            &self.project,
            category,
            content,
            "agent",
            NOW - 2 * DAY,
        )
        .unwrap()
        .id
    }

    fn live(&self) -> Vec<(i64, String)> {
        live_memories(self.store.conn(), &self.project)
            .unwrap()
            .into_iter()
            .map(|m| (m.id, m.content))
            .collect()
    }

    fn run(&mut self, model: &dyn Model, task: Task, now: i64) -> TaskReport {
        self.run_with(&config(), model, task, now)
    }

    fn run_with(
        &mut self,
        dream: &DreamConfig,
        model: &dyn Model,
        task: Task,
        now: i64,
    ) -> TaskReport {
        let clock = move || now;
        let s = settings(dream, Some(model), &clock);
        let dir = self.dir.path().to_path_buf();
        let mut report = run_now(&mut self.store, &s, &dir, task).unwrap();
        report.tasks.remove(0)
    }

    fn tick_with(&mut self, dream: &DreamConfig, model: &dyn Model, now: i64) -> TickReport {
        let clock = move || now;
        let s = settings(dream, Some(model), &clock);
        tick(&mut self.store, &s).unwrap()
    }

    fn state(&self, task: Task) -> state::TaskState {
        state::task_state(self.store.conn(), &self.project, task.name()).unwrap()
    }

    fn mutations(&self) -> Vec<(String, i64)> {
        store::mutations_since(self.store.conn(), &self.project, 0)
            .unwrap()
            .into_iter()
            .map(|m| (m.kind, m.memory))
            .collect()
    }
}

fn outcomes(report: &TickReport) -> Vec<(&'static str, &'static str)> {
    report
        .projects
        .iter()
        .flat_map(|p| p.tasks.iter().map(|t| (t.task.name(), t.outcome.as_str())))
        .collect()
}

/// Ids of the `<memory id="N">` elements of a prompt, in order.
fn sent_ids(prompt: &str) -> Vec<i64> {
    prompt
        .match_indices("<memory id=\"")
        .filter_map(|(i, m)| {
            let rest = prompt.get(i + m.len()..)?;
            rest.split('"').next()?.parse().ok()
        })
        .collect()
}

// ---------------------------------------------------------------------------
// consolidate

#[test]
fn consolidate_merges_through_the_mutation_log_and_never_bumps_the_epoch() {
    let mut w = World::new();
    let a = w.write("CONSTRAINTS", "Never log API keys.");
    let b = w.write("CONSTRAINTS", "API keys must never be logged.");
    let c = w.write("CONSTRAINTS", "Tests never touch the real home directory.");
    let model = Scripted::new().text(&format!(
        "Merging.\n<consolidate>\n<merge ids=\"{a},{b}\">Never log API keys, in any output.</merge>\n</consolidate>"
    ));
    let report = w.run(&model, Task::Consolidate, NOW);
    assert_eq!(report.outcome, "ok", "{report:?}");
    let prompt = model.last_prompt();
    assert_eq!(
        sent_ids(&prompt),
        [a, b],
        "only the close pair is sent:\n{prompt}"
    );
    let live = w.live();
    assert_eq!(live.len(), 2);
    assert_eq!(
        live[0],
        (c, "Tests never touch the real home directory.".into())
    );
    assert_eq!(live[1].1, "Never log API keys, in any output.");
    assert_eq!(
        w.mutations(),
        [("superseded".to_string(), a), ("superseded".to_string(), b)]
    );
    assert_eq!(store::memory_epoch(w.store.conn(), &w.project).unwrap(), 0);
    assert_eq!(
        report.tokens,
        Tokens {
            input: 1000,
            output: 100
        }
    );
    let st = w.state(Task::Consolidate);
    assert_eq!(
        (st.last_run_ms, st.last_result.as_deref()),
        (Some(NOW), Some("ok"))
    );
}

#[test]
fn consolidate_asks_no_model_when_nothing_is_close_or_was_judged_distinct() {
    let mut w = World::new();
    w.write("CONSTRAINTS", "Never log API keys.");
    w.write("NAMING", "Money is integer cents.");
    let model = Scripted::new();
    let report = w.run(&model, Task::Consolidate, NOW);
    assert_eq!((report.outcome.as_str(), model.asked()), ("nothing", 0));

    // A close pair the model declines to merge is not asked about again…
    let x = w.write(
        "PROJECT_RULES",
        "Run the linter before pushing to the main branch.",
    );
    let y = w.write(
        "PROJECT_RULES",
        "Run the linter before pushing to a release branch.",
    );
    let model = Scripted::new().text("<consolidate></consolidate>");
    let report = w.run(&model, Task::Consolidate, NOW + MIN);
    assert_eq!((report.outcome.as_str(), model.asked()), ("nothing", 1));
    assert_eq!(report.detail["judged_distinct"], 1);
    let model = Scripted::new();
    assert_eq!(
        w.run(&model, Task::Consolidate, NOW + 2 * MIN).outcome,
        "nothing"
    );
    assert_eq!(model.asked(), 0);
    // …until one of them changes.
    memory::update(
        &mut w.store,
        &w.project,
        y,
        "Run the linter before pushing to any release branch.",
        NOW,
    )
    .unwrap();
    let model = Scripted::new().text("<consolidate/>");
    w.run(&model, Task::Consolidate, NOW + 3 * MIN);
    assert_eq!(sent_ids(&model.last_prompt()), [x, y]);
}

#[test]
fn a_bad_manifest_applies_nothing_fails_and_backs_off() {
    let mut w = World::new();
    let a = w.write("CONSTRAINTS", "Never log API keys.");
    let b = w.write("CONSTRAINTS", "API keys must never be logged.");
    let c = w.write("NAMING", "Never log API keys.");
    let before = w.live();
    let not_in_group = format!("memory #{c} was not in any group");
    let cases: Vec<(String, bool, &str)> = vec![
        (
            "I think they are the same.".into(),
            false,
            "has no <consolidate> element",
        ),
        (
            format!("<consolidate><merge ids=\"{a},{b}\">Never log API keys.</merge>"),
            false,
            "truncated",
        ),
        (
            format!(
                "<consolidate><merge ids=\"{a},{b}\">Never log API keys.</merge></consolidate>"
            ),
            true,
            "cut at dream.max_output_tokens",
        ),
        (
            format!("<consolidate><merge ids=\"{a},999\">x</merge></consolidate>"),
            false,
            "memory #999 was not in any group",
        ),
        (
            format!("<consolidate><merge ids=\"{a},{c}\">x</merge></consolidate>"),
            false,
            &not_in_group,
        ),
        (
            format!(
                "<consolidate><merge ids=\"{a},{b}\">x</merge><merge ids=\"{b},{a}\">y</merge></consolidate>"
            ),
            false,
            "is merged twice",
        ),
        (
            format!(
                "<consolidate><merge ids=\"{a},{b}\">key sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv</merge></consolidate>"
            ),
            false,
            "would hold a token shaped like a credential",
        ),
        (
            format!("<consolidate><fact ids=\"{a},{b}\">x</fact></consolidate>"),
            false,
            "unexpected element",
        ),
    ];
    for (n, (answer, truncated, problem)) in cases.iter().enumerate() {
        let answer = answer.clone();
        let truncated = *truncated;
        let model = Scripted::new().reply(move |_| Ok(completion(&answer, truncated)));
        let report = w.run(&model, Task::Consolidate, NOW + n as i64 * MIN);
        assert_eq!(report.outcome, "failed", "{report:?}");
        let failure = report.failure.unwrap();
        assert_eq!(failure.class, "answer_rejected", "{failure:?}");
        assert!(
            failure.message.contains(problem),
            "{problem}: {}",
            failure.message
        );
        assert!(
            failure.message.contains("nothing applied"),
            "{}",
            failure.message
        );
        assert_eq!(w.live(), before, "case {n} applied something");
        assert!(w.mutations().is_empty());
        let st = w.state(Task::Consolidate);
        assert_eq!(st.failures, n as u32 + 1);
        assert_eq!(st.last_run_ms, None, "last_run_ms advances only on success");
        assert_eq!(
            report.retry_after_ms,
            Some(NOW + n as i64 * MIN + schedule::backoff_ms(n as u32 + 1))
        );
        assert!(st.last_error.unwrap().contains(problem));
    }
    // A model that fails (a 500 after its retries) is a failure too.
    let model = Scripted::new().reply(|_| {
        Err(LlmError::new(
            ModelRef::parse("fake/dreamer").as_ref(),
            CallFailure::Status(500),
            "HTTP 500: overloaded",
        ))
    });
    let report = w.run(&model, Task::Consolidate, NOW + HOUR);
    assert_eq!(report.failure.as_ref().unwrap().class, "model");
    assert_eq!(w.live(), before);
    // No lease is left behind by a failure.
    assert_eq!(
        lease::current(w.store.conn(), &w.project, "memory").unwrap(),
        None
    );
}

// ---------------------------------------------------------------------------
// schedule, gates, leases, budgets

#[test]
fn a_tick_runs_what_is_due_then_waits_for_the_schedule_and_skips_idle_projects() {
    let mut w = World::new();
    w.write("CONSTRAINTS", "Never log API keys.");
    let mut dream = config();
    dream.schedule.verify = None;
    dream.schedule.sync = None;
    dream.schedule.git_index = None;
    // First tick: everything never ran, so all is due; nothing is close, so
    // consolidate asks nothing; classify asks about the one memory.
    let model = Scripted::new().with(|p| {
        let ids = sent_ids(&p.user);
        let body: String = ids
            .iter()
            .map(|id| format!("<memory id=\"{id}\" importance=\"90\" scope=\"general\"/>\n"))
            .collect();
        format!("<classify>\n{body}</classify>")
    });
    let first = w.tick_with(&dream, &model, NOW);
    assert_eq!(
        outcomes(&first),
        [
            ("consolidate", "nothing"),
            ("classify", "ok"),
            ("archive-stale", "nothing")
        ]
    );
    assert_eq!(model.asked(), 1);
    // A minute later nothing is due: nothing to report, no model call.
    let model = Scripted::new();
    let idle = w.tick_with(&dream, &model, NOW + MIN);
    assert!(idle.projects.is_empty(), "{idle:?}");
    // Next night at 03:00 consolidate is due again; with nothing new since
    // its last run it is skipped without a model call, and waits a day more.
    let night = NOW - 100 * MIN + DAY;
    let skipped = w.tick_with(&dream, &model, night);
    assert_eq!(outcomes(&skipped), [("consolidate", "skipped")]);
    assert_eq!(model.asked(), 0);
    let st = w.state(Task::Consolidate);
    assert_eq!(
        (st.last_run_ms, st.last_attempt_ms),
        (Some(NOW), Some(night))
    );
    assert!(
        w.tick_with(&dream, &model, night + HOUR)
            .projects
            .iter()
            .all(|p| p.tasks.iter().all(|t| t.task != "consolidate"))
    );
    // A new memory is activity: the next night consolidate runs again.
    let project = w.project.clone();
    memory::write(
        &mut w.store,
        &project,
        "NAMING",
        "Money is integer cents.",
        "agent",
        night,
    )
    .unwrap();
    let model = Scripted::new();
    let ran = w.tick_with(&dream, &model, night + DAY);
    assert!(
        outcomes(&ran).contains(&("consolidate", "nothing")),
        "{ran:?}"
    );
}

#[test]
fn a_failed_task_is_retried_after_its_back_off_not_at_every_tick() {
    let mut w = World::new();
    w.write("CONSTRAINTS", "Never log API keys.");
    w.write("CONSTRAINTS", "API keys must never be logged.");
    let mut dream = config();
    for task in [
        Task::GitIndex,
        Task::Verify,
        Task::Classify,
        Task::ArchiveStale,
        Task::Sync,
    ] {
        match task {
            Task::GitIndex => dream.schedule.git_index = None,
            Task::Verify => dream.schedule.verify = None,
            Task::Classify => dream.schedule.classify = None,
            Task::ArchiveStale => dream.schedule.archive_stale = None,
            _ => dream.schedule.sync = None,
        }
    }
    let model = Scripted::new().text("garbage");
    assert_eq!(
        outcomes(&w.tick_with(&dream, &model, NOW)),
        [("consolidate", "failed")]
    );
    let model = Scripted::new();
    assert!(
        w.tick_with(&dream, &model, NOW + 14 * MIN)
            .projects
            .is_empty()
    );
    let model = Scripted::new().text("<consolidate/>");
    assert_eq!(
        outcomes(&w.tick_with(&dream, &model, NOW + 15 * MIN)),
        [("consolidate", "nothing")]
    );
    assert_eq!(w.state(Task::Consolidate).failures, 0);
}

#[test]
fn a_held_lease_makes_the_task_busy_and_a_dead_holder_is_taken_over() {
    let mut w = World::new();
    w.write("CONSTRAINTS", "Never log API keys.");
    let other = lease::holder_name("test-host", std::process::id(), 99);
    let project = w.project.clone();
    w.store
        .write(|tx| {
            lease::acquire(
                tx,
                &project,
                "memory",
                "verify",
                &other,
                "test-host",
                NOW,
                HOUR,
            )
        })
        .unwrap()
        .unwrap();
    let model = Scripted::new();
    let report = w.run(&model, Task::Classify, NOW + MIN);
    assert_eq!(report.outcome, "busy");
    assert_eq!(report.lease.as_ref().unwrap().task, "verify");
    assert_eq!(model.asked(), 0);
    // Its process is gone (a pid no process has): taken over at once.
    let dead = lease::holder_name("test-host", u32::MAX - 1, 1);
    w.store
        .write(|tx| {
            tx.execute("DELETE FROM dream_leases", [])?;
            lease::acquire(
                tx,
                &project,
                "memory",
                "verify",
                &dead,
                "test-host",
                NOW,
                HOUR,
            )
        })
        .unwrap()
        .unwrap();
    let model = Scripted::new().with(|p| {
        let id = sent_ids(&p.user)[0];
        format!("<classify><memory id=\"{id}\" importance=\"50\" scope=\"project\"/></classify>")
    });
    assert_eq!(w.run(&model, Task::Classify, NOW + MIN).outcome, "ok");
}

#[test]
fn budgets_bound_what_a_task_sends_and_what_a_tick_spends() {
    let mut w = World::new();
    for n in 0..40 {
        w.write("ARCHITECTURE", &format!("Module {n} owns its own table and talks to the store only through functions of its own module {n}."));
    }
    let mut dream = config();
    dream.task_token_budget = 5_000;
    dream.max_output_tokens = 4_000;
    let model = Scripted::new().with(|p| {
        let body: String = sent_ids(&p.user)
            .iter()
            .map(|id| format!("<memory id=\"{id}\" importance=\"40\" scope=\"project\"/>"))
            .collect();
        format!("<classify>{body}</classify>")
    });
    let report = w.run_with(&dream, &model, Task::Classify, NOW);
    let sent = sent_ids(&model.last_prompt()).len();
    assert!(sent > 0 && sent < 40, "{sent} of 40 sent");
    assert_eq!(report.detail["left_for_next_run"], 40 - sent);
    let cost = mc_base::tokens::estimate(&model.last_prompt()) as u64
        + mc_base::tokens::estimate(SYSTEM) as u64
        + 4_000;
    assert!(cost <= 5_000, "{cost}");

    // A budget that fits nothing fails, saying which setting to raise.
    dream.task_token_budget = 4_100;
    let model = Scripted::new();
    let report = w.run_with(&dream, &model, Task::Classify, NOW + MIN);
    let failure = report.failure.unwrap();
    assert_eq!(failure.class, "budget");
    assert!(failure.hints[0].contains("dream.task_token_budget"));

    // The tick's budget: once spent, model tasks wait for the next tick.
    let mut dream = config();
    dream.tick_token_budget = 5_500;
    dream.max_output_tokens = 4_000;
    dream.schedule.git_index = None;
    dream.schedule.verify = None;
    dream.schedule.sync = None;
    let mut fresh = World::new();
    fresh.write("CONSTRAINTS", "Never log API keys.");
    fresh.write("CONSTRAINTS", "API keys must never be logged.");
    let model = Scripted::new().text("<consolidate/>");
    let report = fresh.tick_with(&dream, &model, NOW);
    assert_eq!(
        outcomes(&report),
        [
            ("consolidate", "nothing"),
            ("classify", "deferred"),
            ("archive-stale", "deferred")
        ],
        "consolidate spent 1100 of 5500: 4400 left, less than the 5000 a call may need"
    );
}

// ---------------------------------------------------------------------------
// classify, archive-stale, verify

#[test]
fn classify_records_importance_and_scope_without_touching_the_log() {
    let mut w = World::new();
    let a = w.write("CONSTRAINTS", "Never log API keys.");
    let b = w.write("NAMING", "The user prefers short answers.");
    let model = Scripted::new().text(&format!(
        "<classify><memory id=\"{a}\" importance=\"95\" scope=\"project\"/>\
         <memory id=\"{b}\" importance=\"30\" scope=\"general\"/></classify>"
    ));
    assert_eq!(w.run(&model, Task::Classify, NOW).outcome, "ok");
    let rows: Vec<(Option<i64>, Option<String>)> = live_memories(w.store.conn(), &w.project)
        .unwrap()
        .into_iter()
        .map(|m| (m.importance, m.scope))
        .collect();
    assert_eq!(
        rows,
        [
            (Some(95), Some("project".into())),
            (Some(30), Some("general".into()))
        ]
    );
    assert!(w.mutations().is_empty());
    // Classified and unchanged: not sent again; changed: sent again.
    let model = Scripted::new();
    assert_eq!(w.run(&model, Task::Classify, NOW + MIN).outcome, "nothing");
    memory::update(
        &mut w.store,
        &w.project,
        b,
        "The user prefers terse answers.",
        NOW,
    )
    .unwrap();
    let model = Scripted::new().text(&format!(
        "<classify><memory id=\"{b}\" importance=\"30\" scope=\"general\"/></classify>"
    ));
    w.run(&model, Task::Classify, NOW + 2 * MIN);
    assert_eq!(sent_ids(&model.last_prompt()), [b]);
    // Every memory sent must be answered, once, within range.
    let model = Scripted::new().text("<classify></classify>");
    memory::update(
        &mut w.store,
        &w.project,
        b,
        "The user prefers very terse answers.",
        NOW,
    )
    .unwrap();
    let report = w.run(&model, Task::Classify, NOW + 3 * MIN);
    assert!(
        report
            .failure
            .unwrap()
            .message
            .contains(&format!("memory #{b} was not answered"))
    );
}

#[test]
fn archive_stale_archives_expired_without_a_model_and_asks_only_about_unused_ones() {
    let mut w = World::new();
    let expired = w.write("CONFIG_VALUES", "The beta flag is on until Friday.");
    let used = w.write("CONSTRAINTS", "Never log API keys.");
    let unused = w.write("ARCHITECTURE", "The old parser lived in parse_v1.rs.");
    let important = w.write("CONSTRAINTS", "Never push to main.");
    let project = w.project.clone();
    w.store
        .write(|tx| {
            tx.execute(
                "UPDATE memories SET expires_ms = ?1 WHERE id = ?2",
                params![NOW - 1, expired],
            )?;
            tx.execute(
                "UPDATE memories SET importance = 90 WHERE id = ?1",
                params![important],
            )?;
            store::mark_memories_used(tx, &project, &[used], NOW + 95 * DAY)
        })
        .unwrap();
    // 100 days on: `used` was used 5 days ago; the others never.
    let later = NOW + 100 * DAY;
    let mut dream = config();
    dream.stale_days = 90;
    let model = Scripted::new().text(&format!(
        "<archive_stale><memory id=\"{unused}\" verdict=\"archive\">the v1 parser is gone</memory></archive_stale>"
    ));
    let report = w.run_with(&dream, &model, Task::ArchiveStale, later);
    assert_eq!(report.outcome, "ok", "{report:?}");
    assert_eq!(
        sent_ids(&model.last_prompt()),
        [unused],
        "expired, recently used and important ones are not asked about"
    );
    let rows: Vec<(i64, String, Option<String>)> = w
        .store
        .conn()
        .prepare("SELECT id, status, archive_reason FROM memories ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(
        rows[0],
        (expired, "archived".into(), Some("expired".into()))
    );
    assert_eq!(
        rows[2],
        (
            unused,
            "archived".into(),
            Some("stale: the v1 parser is gone".into())
        )
    );
}

#[test]
fn archive_stale_keeps_what_the_model_keeps_and_does_not_ask_again_soon() {
    let mut w = World::new();
    let a = w.write("ARCHITECTURE", "The store uses WAL.");
    let later = NOW + 100 * DAY;
    let model = Scripted::new().text(&format!(
        "<archive_stale><memory id=\"{a}\" verdict=\"keep\"/></archive_stale>"
    ));
    assert_eq!(w.run(&model, Task::ArchiveStale, later).outcome, "nothing");
    let model = Scripted::new();
    assert_eq!(
        w.run(&model, Task::ArchiveStale, later + 30 * DAY).outcome,
        "nothing"
    );
    assert_eq!(
        model.asked(),
        0,
        "kept at `later`: not stale for another 90 days"
    );
    // A memory a head renders is used whenever its session runs.
    let b = w.write("ARCHITECTURE", "Heads cache m[0] and m[1].");
    let project = w.project.clone();
    w.store
        .write(|tx| {
            tx.execute(
                "INSERT INTO sessions (harness, session_id, project_identity, created_ms, updated_ms)
                 VALUES ('opencode', 's', ?1, ?2, ?2)",
                params![project, later + 200 * DAY],
            )?;
            tx.execute(
                "INSERT INTO heads (session, m0, m1, m0_tokens, m1_tokens, materialized_ms, reason,
                     render_key, project, memory_ids, max_memory_id)
                 VALUES (last_insert_rowid(), '', '', 0, 0, 0, 'x', 'k', ?1, ?2, ?3)",
                params![project, format!("[{b}]"), b],
            )?;
            Ok(())
        })
        .unwrap();
    let model = Scripted::new().text(&format!(
        "<archive_stale><memory id=\"{a}\" verdict=\"keep\"/></archive_stale>"
    ));
    w.run(&model, Task::ArchiveStale, later + 200 * DAY + 1);
    assert_eq!(
        sent_ids(&model.last_prompt()),
        [a],
        "#{b} was rendered by a head"
    );
}

#[test]
fn verify_checks_memories_whose_files_changed_and_never_reads_secrets() {
    let mut w = World::new();
    let root = w.dir.path().to_path_buf();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(
        root.join("src/store.rs"),
        "pub fn open() {}\nconst TIMEOUT_MS: u64 = 5000;\n",
    )
    .unwrap();
    std::fs::create_dir_all(root.join("config")).unwrap();
    std::fs::write(
        root.join("config/.env"),
        "API_KEY=sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv\n",
    )
    .unwrap();
    let a = w.write(
        "CONFIG_VALUES",
        "src/store.rs sets the busy timeout to 5000 ms.",
    );
    let b = w.write(
        "CONSTRAINTS",
        "The keys live in config/.env and never in the code.",
    );
    let c = w.write("ARCHITECTURE", "Parsing lives in src/parse.rs.");
    let plain = w.write("NAMING", "Money is integer cents.");
    let model = Scripted::new().with(move |p| {
        assert!(!p.user.contains("sk-ant"), "a secret reached the model");
        format!(
            "<verify><memory id=\"{a}\" verdict=\"verified\"/>\
             <memory id=\"{b}\" verdict=\"verified\"/>\
             <memory id=\"{c}\" verdict=\"archive\">src/parse.rs does not exist</memory></verify>"
        )
    });
    let report = w.run(&model, Task::Verify, NOW);
    assert_eq!(report.outcome, "ok", "{report:?}");
    let prompt = model.last_prompt();
    assert_eq!(sent_ids(&prompt), [a, b, c], "#{plain} points at nothing");
    assert!(
        prompt.contains("<file path=\"src/store.rs\">\npub fn open() {}"),
        "{prompt}"
    );
    assert!(
        prompt.contains("<file path=\"config/.env\" withheld=\"may hold secrets\"/>"),
        "{prompt}"
    );
    assert!(
        prompt.contains("<file path=\"src/parse.rs\" missing=\"true\"/>"),
        "{prompt}"
    );
    assert_eq!(w.mutations(), [("archive".to_string(), c)]);
    // Nothing changed on disk: nothing is asked.
    let model = Scripted::new();
    assert_eq!(w.run(&model, Task::Verify, NOW + MIN).outcome, "nothing");
    // The file changed: only the memory pointing at it is asked about; an
    // update goes through the log.
    std::fs::write(
        root.join("src/store.rs"),
        "pub fn open() {}\nconst TIMEOUT_MS: u64 = 7000;\n",
    )
    .unwrap();
    let model = Scripted::new().text(&format!(
        "<verify><memory id=\"{a}\" verdict=\"update\">src/store.rs sets the busy timeout to 7000 ms.</memory></verify>"
    ));
    assert_eq!(w.run(&model, Task::Verify, NOW + 2 * MIN).outcome, "ok");
    assert_eq!(sent_ids(&model.last_prompt()), [a]);
    assert!(
        w.live()
            .contains(&(a, "src/store.rs sets the busy timeout to 7000 ms.".into()))
    );
    assert_eq!(w.mutations().last().unwrap(), &("update".to_string(), a));
}

// ---------------------------------------------------------------------------
// the pass sees a dreamer's edit only at the next natural bust

#[test]
fn a_dreamer_merge_waits_for_a_busting_pass_and_folds_into_m0_at_the_next_hard() {
    use mc_base::config::TransformConfig;
    use mc_base::domain::envelope::Envelope;
    use mc_transform_core::testkit::{SESSION, bytes, session, warm_now};
    use mc_transform_core::{Decision, run_pass};

    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open_in_memory().unwrap();
    let messages = session(3);
    let transform = TransformConfig {
        relief_drop: false,
        ..TransformConfig::default()
    };
    let pass = |store: &mut Store, percent: u64, now: i64| {
        let env = Envelope::from_value(json!({
            "harness": "opencode", "session_id": SESSION, "project_dir": dir.path(),
            "model": {"provider": "anthropic", "id": "m", "context_limit": 100_000, "output_limit": 0},
            "usage": {"input": percent * 1000}, "now_ms": now, "messages": messages,
        }))
        .unwrap();
        run_pass(store, env, &transform, now).unwrap()
    };
    let warm = warm_now(&messages);
    let project = mc_base::identity::project_identity(dir.path());
    let a = memory::write(
        &mut store,
        &project,
        "CONSTRAINTS",
        "Never log API keys.",
        "agent",
        warm,
    )
    .unwrap()
    .id;
    let b = memory::write(
        &mut store,
        &project,
        "CONSTRAINTS",
        "API keys must never be logged.",
        "agent",
        warm,
    )
    .unwrap()
    .id;
    let first = pass(&mut store, 30, warm);
    let text = |out: &mc_transform_core::PassOutput, i: usize| {
        out.messages[i]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(text(&first, 0).contains("Never log API keys."));

    // The dreamer merges the two.
    let model = Scripted::new().text(&format!(
        "<consolidate><merge ids=\"{a},{b}\">Never log API keys anywhere.</merge></consolidate>"
    ));
    let dream = config();
    let clock = move || warm;
    let s = settings(&dream, Some(&model), &clock);
    let report = run_now(&mut store, &s, dir.path(), Task::Consolidate).unwrap();
    assert_eq!(report.tasks[0].outcome, "ok", "{report:?}");

    // A defer pass is byte-identical; a busting pass shows the delta in m[1]
    // without rebuilding m[0]; the next natural HARD (idle) folds it in.
    let replay = pass(&mut store, 30, warm);
    assert_eq!(replay.pass.decision, Decision::Defer);
    assert_eq!(bytes(&replay.messages), bytes(&first.messages));
    let soft = pass(&mut store, 70, warm);
    assert_eq!(soft.pass.decision, Decision::Execute);
    assert_ne!(soft.pass.materialize_reason, Some("memory_epoch"));
    assert_eq!(text(&soft, 0), text(&first, 0), "m[0] untouched");
    assert!(
        text(&soft, 1).contains(&format!("<superseded id=\"{a}\"")),
        "{}",
        text(&soft, 1)
    );
    let hard = pass(&mut store, 30, warm + 10 * MIN);
    assert_eq!(hard.pass.materialize_reason, Some("ttl_idle"));
    assert!(text(&hard, 0).contains("Never log API keys anywhere."));
    assert!(!text(&hard, 0).contains("must never be logged"));
}

// ---------------------------------------------------------------------------
// team memory

fn read(root: &Path, category: &str) -> String {
    std::fs::read_to_string(team::folder(root).join(format!("{category}.md"))).unwrap()
}

#[test]
fn export_edit_import_export_is_stable_and_nothing_duplicates() {
    let mut w = World::new();
    let root = w.dir.path().to_path_buf();
    let a = w.write("CONSTRAINTS", "Never log API keys.");
    let b = w.write("CONSTRAINTS", "Tests never touch the real home directory.");
    let c = w.write("NAMING", "Money is integer cents.");
    let secret = w.write("CONFIG_VALUES", "The staging password = hunter2hunter2");
    let private = w.write("CONFIG_VALUES", "My local checkout lives in ~/src/mc.");
    dream_private(&mut w, private);
    let project = w.project.clone();
    let exported = team::export(&mut w.store, &project, &root, false).unwrap();
    assert_eq!(exported.exported, 3);
    assert_eq!(exported.private, 1);
    assert_eq!(exported.refused.len(), 1, "{exported:?}");
    assert!(!team::folder(&root).join("CONFIG_VALUES.md").exists());
    let constraints = read(&root, "CONSTRAINTS");
    let entries = team::parse_file(&constraints).unwrap();
    assert_eq!(
        entries
            .iter()
            .map(|e| e.content.as_str())
            .collect::<Vec<_>>(),
        [
            "Never log API keys.",
            "Tests never touch the real home directory."
        ]
    );
    // Exporting again changes nothing.
    let again = team::export(&mut w.store, &project, &root, false).unwrap();
    assert!(again.files.iter().all(|f| !f.changed), "{again:?}");
    assert_eq!(read(&root, "CONSTRAINTS"), constraints);

    // A teammate edits in git: rewords one, deletes one, adds one, moves one.
    let (id_a, id_b) = (entries[0].id.clone(), entries[1].id.clone());
    let naming = team::parse_file(&read(&root, "NAMING")).unwrap();
    let edited_constraints = team::render_file(
        "CONSTRAINTS",
        &[
            (&id_a, "Never log API keys or tokens."),
            ("no-force-push", "Never force-push to main."),
            (&naming[0].id, "Money is integer cents."),
        ],
    );
    std::fs::write(
        team::folder(&root).join("CONSTRAINTS.md"),
        &edited_constraints,
    )
    .unwrap();
    std::fs::write(
        team::folder(&root).join("NAMING.md"),
        team::render_file("NAMING", &[]),
    )
    .unwrap();
    // A plain export now would lose that: it refuses.
    let err = team::export(&mut w.store, &project, &root, false).unwrap_err();
    assert!(
        err.to_string()
            .contains("has changes that were not imported"),
        "{err}"
    );
    let imported = team::import(&mut w.store, &project, &root, NOW).unwrap();
    assert_eq!(
        (
            imported.created,
            imported.updated,
            imported.moved,
            imported.archived
        ),
        (1, 1, 1, 1),
        "{imported:?}"
    );
    let live: Vec<String> = w.live().into_iter().map(|(_, c)| c).collect();
    assert_eq!(
        live,
        [
            "Never log API keys or tokens.",
            "The staging password = hunter2hunter2",
            "My local checkout lives in ~/src/mc.",
            "Never force-push to main.",
            "Money is integer cents.",
        ]
    );
    let _ = (a, b, c, secret, id_b);
    // Export reproduces the edited files exactly, and importing again is a no-op.
    team::export(&mut w.store, &project, &root, false).unwrap();
    assert_eq!(read(&root, "CONSTRAINTS"), edited_constraints);
    assert_eq!(read(&root, "NAMING"), team::render_file("NAMING", &[]));
    let twice = team::import(&mut w.store, &project, &root, NOW).unwrap();
    assert_eq!(
        (twice.created, twice.updated, twice.archived, twice.moved),
        (0, 0, 0, 0)
    );
    assert_eq!(w.live().len(), 5);
}

fn dream_private(w: &mut World, id: i64) {
    let project = w.project.clone();
    set_private(&mut w.store, &project, id, true).unwrap();
}

#[test]
fn import_refuses_secrets_keeps_local_archives_and_lets_the_file_win_a_conflict() {
    let mut w = World::new();
    let root = w.dir.path().to_path_buf();
    let a = w.write("CONSTRAINTS", "Never log API keys.");
    let b = w.write("CONSTRAINTS", "Tests never touch the real home directory.");
    let project = w.project.clone();
    team::export(&mut w.store, &project, &root, false).unwrap();
    let entries = team::parse_file(&read(&root, "CONSTRAINTS")).unwrap();
    // Archived here after the export: the unchanged entry does not bring it back.
    memory::archive(&mut w.store, &project, b, Some("obsolete"), NOW).unwrap();
    // Edited on both sides: the file wins, and says so.
    memory::update(
        &mut w.store,
        &project,
        a,
        "Never log API keys (local).",
        NOW,
    )
    .unwrap();
    let file = team::render_file(
        "CONSTRAINTS",
        &[
            (&entries[0].id, "Never log API keys (team)."),
            (&entries[1].id, &entries[1].content),
            ("leak", "token: ghp_0123456789abcdefghijABCDEFGHIJ012345"),
        ],
    );
    std::fs::write(team::folder(&root).join("CONSTRAINTS.md"), file).unwrap();
    let report = team::import(&mut w.store, &project, &root, NOW).unwrap();
    assert_eq!(report.conflicts, [entries[0].id.clone()]);
    assert_eq!(report.refused.len(), 1);
    assert!(
        report.refused[0].reason.contains("credential"),
        "{report:?}"
    );
    assert_eq!(w.live(), [(a, "Never log API keys (team).".to_string())]);
    // A missing file is not a deletion.
    std::fs::remove_file(team::folder(&root).join("CONSTRAINTS.md")).unwrap();
    let report = team::import(&mut w.store, &project, &root, NOW).unwrap();
    assert_eq!(report.archived, 0);
    assert_eq!(w.live().len(), 1);
    // And the secret never reaches the files on export.
    team::export(&mut w.store, &project, &root, true).unwrap();
    assert!(!read(&root, "CONSTRAINTS").contains("ghp_"));
}

// ---------------------------------------------------------------------------
// the git commit index

fn git(dir: &Path, args: &[&str], when: i64) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=Ada", "-c", "user.email=ada@example.com"])
        .args(["-c", "commit.gpgsign=false"])
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_DATE", format!("@{} +0000", when / 1000))
        .env("GIT_COMMITTER_DATE", format!("@{} +0000", when / 1000))
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn commit(dir: &Path, file: &str, message: &str, when: i64) {
    std::fs::write(dir.join(file), message).unwrap();
    git(dir, &["add", file], when);
    git(dir, &["commit", "-q", "-m", message], when);
}

#[test]
fn the_commit_index_is_incremental_and_a_plain_folder_is_parked() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    git(root, &["init", "-q", "-b", "main"], NOW);
    commit(root, "old.txt", "Too old to index", NOW - 400 * DAY);
    commit(root, "a.txt", "Add a\n\nWith a body.", NOW - 2 * DAY);
    git(root, &["checkout", "-q", "-b", "side"], NOW);
    commit(root, "b.txt", "Add b on a side branch", NOW - DAY);
    git(root, &["checkout", "-q", "main"], NOW);
    commit(root, "c.txt", "Add c", NOW - DAY);
    git(root, &["merge", "-q", "--no-edit", "side"], NOW - HOUR);
    let mut store = Store::open_in_memory().unwrap();
    let dream = config();
    let model = Scripted::new();
    let run = |store: &mut Store, now: i64| {
        let clock = move || now;
        let s = settings(&dream, Some(&model), &clock);
        run_now(store, &s, root, Task::GitIndex)
            .unwrap()
            .tasks
            .remove(0)
    };
    let first = run(&mut store, NOW);
    assert_eq!(first.outcome, "ok", "{first:?}");
    assert_eq!(first.detail["indexed"]["added"], 3, "{first:?}");
    let rows: Vec<(String, String, String, String)> = store
        .conn()
        .prepare("SELECT subject, body, paths, author FROM git_commits ORDER BY committed_ms DESC, subject")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(
        rows,
        [
            (
                "Add b on a side branch".into(),
                "".into(),
                "b.txt".into(),
                "Ada <ada@example.com>".into()
            ),
            (
                "Add c".into(),
                "".into(),
                "c.txt".into(),
                "Ada <ada@example.com>".into()
            ),
            (
                "Add a".into(),
                "With a body.".into(),
                "a.txt".into(),
                "Ada <ada@example.com>".into()
            ),
        ],
        "no merge commit, nothing older than a year"
    );
    // HEAD did not move: no git log at all.
    let same = run(&mut store, NOW + MIN);
    assert_eq!(same.outcome, "nothing");
    assert_eq!(same.detail["note"], "HEAD has not moved");
    // One more commit: one more row.
    commit(root, "d.txt", "Add d", NOW + 2 * MIN);
    let next = run(&mut store, NOW + 3 * MIN);
    assert_eq!(next.detail["indexed"]["added"], 1, "{next:?}");

    // A plain folder is parked, and a tick leaves it alone for a day.
    let plain = tempfile::tempdir().unwrap();
    let clock = move || NOW;
    let s = settings(&dream, Some(&model), &clock);
    let report = run_now(&mut store, &s, plain.path(), Task::GitIndex).unwrap();
    assert_eq!(report.tasks[0].detail["git"], "none");
    let mut dream_only_git = config();
    dream_only_git.schedule.consolidate = None;
    dream_only_git.schedule.verify = None;
    dream_only_git.schedule.classify = None;
    dream_only_git.schedule.archive_stale = None;
    dream_only_git.schedule.sync = None;
    let clock = move || NOW + 20 * MIN;
    let s = settings(&dream_only_git, Some(&model), &clock);
    let tick_report = tick(&mut store, &s).unwrap();
    let plain_id = mc_base::identity::project_identity(plain.path());
    let parked = tick_report
        .projects
        .iter()
        .find(|p| p.project == plain_id)
        .unwrap();
    assert!(
        parked.tasks[0]
            .reason
            .as_deref()
            .unwrap()
            .starts_with("not a git repository (parked")
    );
}

// ---------------------------------------------------------------------------
// embed

#[test]
fn embed_fills_vectors_once_skips_without_a_provider_and_keeps_what_it_stored_on_a_fault() {
    use mc_search_core::testkit::{Fake, Mode};
    let mut w = World::new();
    w.write("CONSTRAINTS", "Never log API keys.");
    w.write("ARCHITECTURE", "Retries double up to a minute.");
    let dream = config();
    let model = Scripted::new();
    // No provider: skipped with the reason, nothing asked.
    let report = w.run(&model, Task::Embed, NOW);
    assert_eq!(report.outcome, "skipped");
    assert_eq!(
        report.reason.as_deref(),
        Some("no embeddings.model configured")
    );

    let fake = Fake::start(Mode::Fine);
    let provider = fake.provider();
    let sleep = |_: std::time::Duration| {};
    let run = |w: &mut World, now: i64| {
        let clock = move || now;
        let mut s = settings(&dream, Some(&model), &clock);
        s.embeddings = Ok(Embedder {
            provider: &provider,
            sleep: &sleep,
        });
        let dir = w.dir.path().to_path_buf();
        run_now(&mut w.store, &s, &dir, Task::Embed)
            .unwrap()
            .tasks
            .remove(0)
    };
    let report = run(&mut w, NOW);
    assert_eq!(report.outcome, "ok", "{report:?}");
    let stored: i64 = w
        .store
        .conn()
        .query_row("SELECT count(*) FROM embeddings", [], |r| r.get(0))
        .unwrap();
    assert!(stored >= 2, "{stored}");
    let asked = fake.requests().len();
    // A second run embeds nothing twice.
    let report = run(&mut w, NOW + MIN);
    assert_eq!(report.outcome, "nothing", "{report:?}");
    assert_eq!(fake.requests().len(), asked);

    // A new memory while the provider answers garbage: the run fails with the
    // embeddings class, and the vectors already there stay.
    w.write("PROJECT_RULES", "Tests use a fixed clock.");
    fake.set(Mode::Garbage);
    let report = run(&mut w, NOW + 2 * MIN);
    assert_eq!(report.outcome, "failed", "{report:?}");
    assert_eq!(report.failure.as_ref().unwrap().class, "embeddings");
    let kept: i64 = w
        .store
        .conn()
        .query_row("SELECT count(*) FROM embeddings", [], |r| r.get(0))
        .unwrap();
    assert_eq!(kept, stored);
}

#[test]
fn tasks_serialize_to_their_names() {
    for task in Task::ALL {
        assert_eq!(json!(task), json!(task.name()));
        assert_eq!(Task::parse(task.name()), Some(task));
    }
}

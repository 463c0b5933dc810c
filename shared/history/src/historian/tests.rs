//! The historian end to end in one process: a scripted model, a temp store.

use std::cell::RefCell;

use super::*;
use mc_base::testkit::{NOW, WORDS, envelope, messages};
use mc_llm::{CallFailure, LlmError, ModelRef};

fn input(session: &str, turns: usize, usage: u64) -> Input {
    Input::from_envelope(envelope(session, messages(session, turns, WORDS), usage)).unwrap()
}

/// The `first`/`last` of the prompt's `<messages>` element.
fn chunk_range(prompt: &Prompt) -> (i64, i64) {
    let at = prompt.user.find("<messages first=\"").unwrap();
    let rest = &prompt.user[at + 17..];
    let first: i64 = rest[..rest.find('"').unwrap()].parse().unwrap();
    let rest = &rest[rest.find("last=\"").unwrap() + 6..];
    let last: i64 = rest[..rest.find('"').unwrap()].parse().unwrap();
    (first, last)
}

fn compartment(start: i64, end: i64, title: &str) -> String {
    format!(
        "<compartment start=\"{start}\" end=\"{end}\" importance=\"60\" episode=\"feature\">\
         <title>{title}</title><p1>Long account of {title}.</p1><p2>Shorter {title}.</p2>\
         <p3>{title}, briefly.</p3><p4>{title}</p4></compartment>\n"
    )
}

/// An answer folding the whole chunk in two compartments, plus facts.
fn good_answer(prompt: &Prompt, facts: &str) -> String {
    let (first, last) = chunk_range(prompt);
    let mid = (first + last) / 2;
    format!(
        "<history>\n{}{}<facts>{facts}</facts>\n<unprocessed_from>{}</unprocessed_from>\n</history>",
        compartment(first, mid, &format!("Work {first}-{mid}")),
        compartment(mid + 1, last, &format!("Work {}-{last}", mid + 1)),
        last + 1
    )
}

/// A model that answers from a script and records what it was asked.
struct Scripted<F: Fn(usize, &Prompt) -> std::result::Result<String, LlmError>> {
    answer: F,
    prompts: RefCell<Vec<Prompt>>,
}

impl<F: Fn(usize, &Prompt) -> std::result::Result<String, LlmError>> Scripted<F> {
    fn new(answer: F) -> Self {
        Scripted {
            answer,
            prompts: RefCell::new(Vec::new()),
        }
    }
}

impl<F: Fn(usize, &Prompt) -> std::result::Result<String, LlmError>> Model for Scripted<F> {
    fn complete(
        &self,
        prompt: &Prompt,
        _events: &mut dyn FnMut(llm::Event),
    ) -> std::result::Result<Completion, LlmError> {
        let n = self.prompts.borrow().len();
        self.prompts.borrow_mut().push(prompt.clone());
        let text = (self.answer)(n, prompt)?;
        Ok(Completion {
            tokens_in: 1_000,
            tokens_out: 100,
            text,
            model: ModelRef::parse("fake/model").unwrap(),
            truncated: false,
        })
    }
}

fn settings() -> (HistorianConfig, TransformConfig) {
    (HistorianConfig::default(), TransformConfig::default())
}

fn run_with(
    store: &mut Store,
    input: &Input,
    model: &dyn Model,
    historian: &HistorianConfig,
) -> RunReport {
    run_job(store, input, model, historian, Job::Fold)
}

fn run_job(
    store: &mut Store,
    input: &Input,
    model: &dyn Model,
    historian: &HistorianConfig,
    job: Job,
) -> RunReport {
    let transform = TransformConfig::default();
    let now = || NOW;
    let params = RunParams {
        settings: Settings {
            historian,
            transform: &transform,
        },
        job,
        lease_ms: 60_000,
        holder: "test".into(),
        now: &now,
    };
    run(store, input, model, &params, &mut |_| {}).unwrap()
}

fn compartments(store: &Store, input: &Input) -> Vec<(i64, i64, String)> {
    let session = sessions::find_session(store.conn(), &input.harness, &input.session_id)
        .unwrap()
        .unwrap();
    store::load_compartments(store.conn(), session.id)
        .unwrap()
        .into_iter()
        .map(|c| {
            (
                c.compartment.start_ordinal,
                c.compartment.end_ordinal,
                c.compartment.title,
            )
        })
        .collect()
}

#[test]
fn a_clean_run_publishes_compartments_and_facts() {
    let mut store = Store::open_in_memory().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut input = input("ses_clean", 30, 5_000);
    input.project_dir = Some(dir.path().to_path_buf());
    let model = Scripted::new(|_, p| {
        Ok(good_answer(
            p,
            "<fact category=\"CONSTRAINTS\">Tests never touch the real home directory.</fact>",
        ))
    });
    let (mut historian, _) = settings();
    historian.chunk_tokens = 100_000;
    let report = run_with(&mut store, &input, &model, &historian);
    assert_eq!(report.status, RunStatus::Published, "{report:#?}");
    // One chunk ending the eligible range: no lookahead, so the second
    // compartment (at the edge) is held back for the next run.
    assert_eq!(report.chunks.len(), 1);
    assert!(!report.chunks[0].lookahead);
    assert_eq!(report.compartments.len(), 1);
    assert_eq!(report.held_back.len(), 1);
    let (first, last) = chunk_range(&model.prompts.borrow()[0]);
    assert_eq!(first, 1);
    assert_eq!(report.compartments[0].start, 1);
    assert_eq!(report.held_back[0].end, last);
    assert_eq!(report.compartments[0].end + 1, report.held_back[0].start);
    assert_eq!(report.facts_promoted, 1);
    assert_eq!((report.tokens.input, report.tokens.output), (1_000, 100));
    assert_eq!(report.model.as_deref(), Some("fake/model"));
    // The live tail is protected: the newest real user message is not folded.
    assert!(last < 2 * 30 - 1);
    let stored = compartments(&store, &input);
    assert_eq!(
        stored,
        [(
            1,
            report.compartments[0].end,
            report.compartments[0].title.clone()
        )]
    );
    // The fact landed in the project's memory.
    let project = project_identity(dir.path());
    let memories = store::live_memories(store.conn(), &project, NOW).unwrap();
    assert_eq!(memories.len(), 1);
    assert_eq!(
        memories[0].content,
        "Tests never touch the real home directory."
    );
    // The run is recorded and the lease released.
    let session = sessions::find_session(store.conn(), "opencode", "ses_clean")
        .unwrap()
        .unwrap();
    let status = super::status(store.conn(), session.id).unwrap().unwrap();
    let last_run = status.last_run.unwrap();
    assert_eq!(last_run.status.as_deref(), Some("published"));
    assert_eq!(last_run.compartments, 1);
    assert_eq!(status.lease, None);

    // The next run starts at the held-back compartment, and the same fact is
    // not stored twice.
    let report = run_with(&mut store, &input, &model, &historian);
    assert_eq!(report.status, RunStatus::Published, "{report:#?}");
    let (again_first, _) = chunk_range(&model.prompts.borrow()[1]);
    assert_eq!(again_first, stored[0].1 + 1);
    assert_eq!(report.facts_promoted, 0);
    assert!(!report.facts[0].created);
    assert_eq!(
        store::live_memories(store.conn(), &project, NOW)
            .unwrap()
            .len(),
        1
    );
    // The earlier compartment is context in the second prompt.
    assert!(
        model.prompts.borrow()[1]
            .user
            .contains("<earlier_history>\n<compartment start=\"1\"")
    );
}

#[test]
fn the_prompt_carries_the_contract_and_ordinals() {
    let mut store = Store::open_in_memory().unwrap();
    let input = input("ses_prompt", 30, 5_000);
    let model = Scripted::new(|_, p| Ok(good_answer(p, "")));
    let (historian, _) = settings();
    run_with(&mut store, &input, &model, &historian);
    let prompt = &model.prompts.borrow()[0];
    for needle in [
        "<history>",
        "<unprocessed_from>",
        "importance=",
        "episode=",
        "PROJECT_RULES (",
        "NAMING (",
        "square brackets",
    ] {
        assert!(prompt.system.contains(needle), "{needle}");
    }
    assert!(
        prompt.user.contains("\n[1] U: Task 0:"),
        "{}",
        &prompt.user[..400]
    );
    assert!(prompt.user.contains("\n[2] A: Did task 0."));
    assert!(prompt.user.contains("TC: read(src/f0.rs)"));
    assert!(
        !prompt.user.contains("fn x() {}"),
        "tool outputs never show"
    );
    assert_eq!(prompt.max_tokens, historian.max_output_tokens);
}

#[test]
fn a_rejected_answer_is_repaired_once() {
    let mut store = Store::open_in_memory().unwrap();
    let input = input("ses_repair", 30, 5_000);
    let model = Scripted::new(|n, p| {
        let (first, last) = chunk_range(p);
        if n == 0 {
            // Overlapping compartments.
            Ok(format!(
                "<history>{}{}<unprocessed_from>{}</unprocessed_from></history>",
                compartment(first, first + 4, "A"),
                compartment(first + 3, last, "B"),
                last + 1
            ))
        } else {
            Ok(good_answer(p, ""))
        }
    });
    let (historian, _) = settings();
    let report = run_with(&mut store, &input, &model, &historian);
    assert_eq!(report.status, RunStatus::Published, "{report:#?}");
    let prompts = model.prompts.borrow();
    assert_eq!(prompts.len(), 2);
    assert!(prompts[1].user.contains("<rejected_answer>"));
    assert!(
        prompts[1].user.contains("overlaps compartment"),
        "{}",
        prompts[1].user
    );
    assert_eq!(report.tokens.input, 2_000, "both calls count");
}

#[test]
fn rejected_twice_publishes_nothing_and_records_the_cause() {
    for (name, bad) in [
        ("malformed", "<history><compartment start=\"x\"></history>".to_string()),
        ("truncated", "<history>\n<compartment start=\"1\" end=\"4\" importance=\"5\" episode=\"feature\"><title>cut".to_string()),
        ("empty", String::new()),
        ("no compartments", "<history><unprocessed_from>1</unprocessed_from></history>".to_string()),
    ] {
        let mut store = Store::open_in_memory().unwrap();
        let input = input("ses_bad", 30, 5_000);
        let model = Scripted::new(|_, _| Ok(bad.clone()));
        let (historian, _) = settings();
        let report = run_with(&mut store, &input, &model, &historian);
        assert_eq!(report.status, RunStatus::Failed, "{name}");
        let failure = report.failure.clone().unwrap();
        assert_eq!(failure.class(), "answer_rejected", "{name}");
        let error = failure.to_string();
        assert!(error.contains("repaired answer was rejected too"), "{name}: {error}");
        assert!(compartments(&store, &input).is_empty(), "{name}: nothing published");
        let session = sessions::find_session(store.conn(), "opencode", "ses_bad").unwrap().unwrap();
        let status = super::status(store.conn(), session.id).unwrap().unwrap();
        let failure = status.last_failure.unwrap();
        assert_eq!(failure.status.as_deref(), Some("failed"));
        assert_eq!(failure.error.as_deref(), Some(error.as_str()));
        assert_eq!(failure.error_class.as_deref(), Some("answer_rejected"));
        assert_eq!(status.failures_since_success, 1);
        assert_eq!(status.lease, None, "the lease is released after a failure");
    }
}

#[test]
fn model_failures_are_recorded() {
    let mut store = Store::open_in_memory().unwrap();
    let input = input("ses_down", 30, 5_000);
    let model = Scripted::new(|_, _| {
        Err(LlmError::new(
            ModelRef::parse("fake/model").as_ref(),
            CallFailure::Status(503),
            "HTTP 503 Service Unavailable: {\"error\":\"down\"}",
        ))
    });
    let (historian, _) = settings();
    let report = run_with(&mut store, &input, &model, &historian);
    assert_eq!(report.status, RunStatus::Failed);
    assert!(
        report
            .failure
            .as_ref()
            .unwrap()
            .to_string()
            .contains("HTTP 503"),
        "{report:?}"
    );
    assert_eq!(
        report.failure.as_ref().map(RunFailure::class),
        Some("provider_status")
    );
    assert_eq!(
        model.prompts.borrow().len(),
        1,
        "a failed call is not 'repaired'"
    );
}

#[test]
fn nothing_to_do_when_everything_is_protected_or_folded() {
    let mut store = Store::open_in_memory().unwrap();
    let model = Scripted::new(|_, p| Ok(good_answer(p, "")));
    let (historian, _) = settings();
    // Three turns fit in the protected tail.
    let small = input("ses_small", 3, 5_000);
    let report = run_with(&mut store, &small, &model, &historian);
    assert_eq!(
        (report.status, report.reason),
        (RunStatus::NothingToDo, Some(Idle::Protected))
    );
    assert!(model.prompts.borrow().is_empty());
    let session = sessions::find_session(store.conn(), "opencode", "ses_small")
        .unwrap()
        .unwrap();
    assert_eq!(
        super::status(store.conn(), session.id).unwrap(),
        None,
        "no run recorded"
    );
    // Subagents have no historian.
    let mut sub = input("ses_sub", 30, 5_000);
    sub.subagent = true;
    let report = run_with(&mut store, &sub, &model, &historian);
    assert_eq!(report.reason, Some(Idle::Subagent));
}

#[test]
fn a_held_lease_stops_a_second_historian() {
    let mut store = Store::open_in_memory().unwrap();
    let input = input("ses_lease", 30, 5_000);
    // Register the session, then let someone else hold its lease.
    let model = Scripted::new(|_, p| Ok(good_answer(p, "")));
    let (historian, _) = settings();
    let session = store
        .write(|tx| {
            let s = sessions::create_session(tx, "opencode", "ses_lease", false, None, NOW)?;
            publish::acquire_lease(tx, s.id, "other", NOW, 60_000)?.unwrap();
            Ok(s)
        })
        .unwrap();
    let report = run_with(&mut store, &input, &model, &historian);
    assert_eq!(
        (report.status, report.reason),
        (RunStatus::NothingToDo, Some(Idle::LeaseHeld))
    );
    assert_eq!(
        report.lease.as_ref().map(|l| l.holder.as_str()),
        Some("other")
    );
    assert!(model.prompts.borrow().is_empty());
    // An expired lease (its holder died) is taken over.
    store
        .write(|tx| {
            tx.execute(
                "UPDATE historian_leases SET expires_ms = ?2 WHERE session = ?1",
                params![session.id, NOW - 1],
            )?;
            Ok(())
        })
        .unwrap();
    let report = run_with(&mut store, &input, &model, &historian);
    assert_eq!(report.status, RunStatus::Published);
}

#[test]
fn long_ranges_go_in_chunks_with_lookahead() {
    let mut store = Store::open_in_memory().unwrap();
    let input = input("ses_chunks", 60, 5_000);
    let model = Scripted::new(|_, p| Ok(good_answer(p, "")));
    let (mut historian, _) = settings();
    historian.chunk_tokens = 2_000;
    historian.max_chunks = 3;
    let report = run_with(&mut store, &input, &model, &historian);
    assert_eq!(report.status, RunStatus::Published, "{report:#?}");
    assert_eq!(report.chunks.len(), 3);
    assert!(report.chunks.iter().all(|c| c.lookahead));
    assert!(report.held_back.is_empty(), "lookahead: nothing held back");
    let prompts = model.prompts.borrow();
    assert!(prompts[0].user.contains("<lookahead>"));
    // Each chunk starts right after the previous one.
    let ranges: Vec<(i64, i64)> = prompts.iter().map(chunk_range).collect();
    assert_eq!(ranges[1].0, ranges[0].1 + 1);
    assert_eq!(ranges[2].0, ranges[1].1 + 1);
    let stored = compartments(&store, &input);
    assert_eq!(stored.len(), 6);
    for pair in stored.windows(2) {
        assert_eq!(pair[1].0, pair[0].1 + 1, "contiguous: {stored:?}");
    }
}

#[test]
fn an_emergency_never_holds_back() {
    let mut store = Store::open_in_memory().unwrap();
    let input = input("ses_emergency", 30, 19_500);
    let model = Scripted::new(|_, p| Ok(good_answer(p, "")));
    let (historian, _) = settings();
    let report = run_with(&mut store, &input, &model, &historian);
    assert_eq!(report.status, RunStatus::Published);
    assert_eq!(report.compartments.len(), 2);
    assert!(report.held_back.is_empty());
}

#[test]
fn check_reports_a_due_run_and_why() {
    let store = Store::open_in_memory().unwrap();
    let config = TransformConfig::default();
    let input = input("ses_due", 60, 18_000);
    let report = check(store.conn(), &input, &config).unwrap();
    assert!(report.due.due, "{report:?}");
    assert_eq!(report.due.reason, Some(trigger::DueReason::ForceBand));
    assert_eq!(
        report.protected_tail,
        trigger::protected_tail(report.window)
    );
    assert_eq!(
        report.due.eligible_tokens,
        report.tail_tokens - report.protected_tail
    );
    // check writes nothing.
    let sessions: i64 = store
        .conn()
        .query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))
        .unwrap();
    assert_eq!(sessions, 0);
}

#[test]
fn prompt_matches_what_run_sends() {
    let mut store = Store::open_in_memory().unwrap();
    let input = input("ses_same", 30, 5_000);
    let (historian, transform) = settings();
    let settings = Settings {
        historian: &historian,
        transform: &transform,
    };
    let preview = prompt(store.conn(), &input, &settings, None, NOW).unwrap();
    assert_eq!(preview.status, PromptStatus::Ready);
    let model = Scripted::new(|_, p| Ok(good_answer(p, "")));
    run_with(&mut store, &input, &model, &historian);
    let sent = &model.prompts.borrow()[0];
    assert_eq!(preview.system.as_deref(), Some(sent.system.as_str()));
    assert_eq!(preview.user.as_deref(), Some(sent.user.as_str()));
}

// ---------------------------------------------------------------------------
// wrapup and recomp

const A_FACT: &str =
    "<fact category=\"CONSTRAINTS\">Tests never touch the real home directory.</fact>";

/// Whole-chunk answers, each compartment titled `tag` and the range.
fn titled(tag: &'static str) -> impl Fn(usize, &Prompt) -> std::result::Result<String, LlmError> {
    move |_, p| {
        let (first, last) = chunk_range(p);
        let mid = (first + last) / 2;
        Ok(format!(
            "<history>\n{}{}<facts>{A_FACT}</facts>\n<unprocessed_from>{}</unprocessed_from>\n</history>",
            compartment(first, mid, &format!("{tag} {first}-{mid}")),
            compartment(mid + 1, last, &format!("{tag} {}-{last}", mid + 1)),
            last + 1
        ))
    }
}

fn session_id(store: &Store, input: &Input) -> i64 {
    sessions::find_session(store.conn(), &input.harness, &input.session_id)
        .unwrap()
        .unwrap()
        .id
}

#[test]
fn wrapup_folds_all_but_the_newest_n_messages_in_chunks_whatever_the_pressure() {
    let mut store = Store::open_in_memory().unwrap();
    let input = input("ses_wrap", 30, 1_000);
    let model = Scripted::new(titled("Wrap"));
    let (mut historian, _) = settings();
    historian.chunk_tokens = 3_000;
    // A routine run keeps the protected live tail (8k tokens, some 26
    // messages here) and stops at historian.max_chunks.
    let mut routine_store = Store::open_in_memory().unwrap();
    let routine = run_with(&mut routine_store, &input, &model, &historian);
    let routine_end = routine.compartments.last().map_or(0, |c| c.end);
    assert!(routine_end < 60 - 20, "{routine:#?}");
    model.prompts.borrow_mut().clear();

    let report = run_job(
        &mut store,
        &input,
        &model,
        &historian,
        Job::Wrapup { keep: 6 },
    );
    assert_eq!(report.status, RunStatus::Published, "{report:#?}");
    assert_eq!(report.job, Job::Wrapup { keep: 6 });
    // Token-capped chunks, more than historian.max_chunks of them, one after
    // the other, each starting where the last ended.
    assert!(
        report.chunks.len() > historian.max_chunks as usize,
        "{:?}",
        report.chunks
    );
    assert!(
        report.chunks.iter().all(|c| c.tokens <= 3_000),
        "{:?}",
        report.chunks
    );
    let stored = compartments(&store, &input);
    for pair in stored.windows(2) {
        assert_eq!(pair[0].1 + 1, pair[1].0, "{stored:?}");
    }
    // Everything but the newest six messages (three turns), nothing held back.
    assert_eq!(stored.first().unwrap().0, 1);
    assert_eq!(stored.last().unwrap().1, 60 - 6, "{stored:?}");
    assert!(report.held_back.is_empty());
    // Under the lease, released after.
    let status = super::status(store.conn(), session_id(&store, &input))
        .unwrap()
        .unwrap();
    assert_eq!(status.lease, None);
    // Again: nothing left outside the kept tail.
    let again = run_job(
        &mut store,
        &input,
        &model,
        &historian,
        Job::Wrapup { keep: 6 },
    );
    assert_eq!(again.status, RunStatus::NothingToDo, "{again:#?}");
}

#[test]
fn recomp_rebuilds_the_folded_range_keeps_memory_and_adds_no_fact() {
    let mut store = Store::open_in_memory().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut input = input("ses_recomp", 30, 1_000);
    input.project_dir = Some(dir.path().to_path_buf());
    let (mut historian, _) = settings();
    historian.chunk_tokens = 4_000;
    let first = Scripted::new(titled("Old"));
    let report = run_job(
        &mut store,
        &input,
        &first,
        &historian,
        Job::Wrapup { keep: 10 },
    );
    assert_eq!(report.status, RunStatus::Published, "{report:#?}");
    let old = compartments(&store, &input);
    let through = old.last().unwrap().1;
    let project = project_identity(dir.path());
    let memories = store::live_memories(store.conn(), &project, NOW).unwrap();
    assert_eq!(memories.len(), 1);
    // The user curates that memory; a recompute must leave it as it is.
    store
        .write(|tx| store::update_memory(tx, &project, memories[0].id, "Curated by hand.", NOW))
        .unwrap();
    let session = session_id(&store, &input);
    let edits_before: i64 = store
        .conn()
        .query_row("SELECT count(*) FROM compartment_edits", [], |r| r.get(0))
        .unwrap();

    // Larger chunks this time: other boundaries, the same range.
    historian.chunk_tokens = 9_000;
    let model = Scripted::new(|_, p: &Prompt| {
        let (first, last) = chunk_range(p);
        Ok(format!(
            "<history>\n{}<facts><fact category=\"NAMING\">A new fact.</fact></facts>\n\
             <unprocessed_from>{}</unprocessed_from>\n</history>",
            compartment(first, last, &format!("New {first}-{last}")),
            last + 1
        ))
    });
    let report = run_job(&mut store, &input, &model, &historian, Job::Recomp);
    assert_eq!(report.status, RunStatus::Published, "{report:#?}");
    assert_eq!(report.job, Job::Recomp);
    assert_eq!(report.replaced, Some(old.len()));
    assert_eq!((report.facts_promoted, report.facts.len()), (0, 0));
    let new = compartments(&store, &input);
    assert!(new.iter().all(|c| c.2.starts_with("New ")), "{new:?}");
    assert_eq!(new.first().unwrap().0, 1);
    assert_eq!(new.last().unwrap().1, through, "the same range, no further");
    for pair in new.windows(2) {
        assert_eq!(pair[0].1 + 1, pair[1].0, "{new:?}");
    }
    // The first prompt started at message 1 with no earlier history; later
    // prompts show the new compartments as earlier history, never the old.
    let prompts = model.prompts.borrow();
    assert_eq!(chunk_range(&prompts[0]).0, 1);
    assert!(!prompts[0].user.contains("<earlier_history>\n<compartment"));
    assert!(prompts.iter().all(|p| !p.user.contains("Old ")));
    if prompts.len() > 1 {
        assert!(prompts[1].user.contains("New 1-"));
    }
    // Sequences go on from the old ones; memory is as curated; the edit is
    // recorded for the head.
    assert!(report.compartments[0].sequence > old.len() as i64);
    let memories = store::live_memories(store.conn(), &project, NOW).unwrap();
    assert_eq!(memories.len(), 1);
    assert_eq!(memories[0].content, "Curated by hand.");
    let edits: Vec<String> = store
        .conn()
        .prepare("SELECT kind FROM compartment_edits WHERE session = ?1 ORDER BY id")
        .unwrap()
        .query_map([session], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(edits.len() as i64, edits_before + 1);
    assert_eq!(edits.last().map(String::as_str), Some("recompute"));
}

#[test]
fn a_recomp_that_falls_short_or_fails_changes_nothing() {
    let mut store = Store::open_in_memory().unwrap();
    let input = input("ses_short", 30, 1_000);
    let (mut historian, _) = settings();
    historian.chunk_tokens = 4_000;
    let nothing = run_job(
        &mut store,
        &input,
        &Scripted::new(titled("Old")),
        &historian,
        Job::Recomp,
    );
    assert_eq!(nothing.reason, Some(Idle::NothingFolded), "{nothing:#?}");
    let first = Scripted::new(titled("Old"));
    run_job(
        &mut store,
        &input,
        &first,
        &historian,
        Job::Wrapup { keep: 10 },
    );
    let old = compartments(&store, &input);

    // The answers fold only half of each chunk: the last chunk leaves the
    // end of the range unfolded.
    let half = Scripted::new(|_, p: &Prompt| {
        let (first, last) = chunk_range(p);
        let mid = (first + last) / 2;
        Ok(format!(
            "<history>\n{}<facts></facts>\n<unprocessed_from>{}</unprocessed_from>\n</history>",
            compartment(first, mid, "Half"),
            mid + 1
        ))
    });
    let report = run_job(&mut store, &input, &half, &historian, Job::Recomp);
    assert_eq!(report.status, RunStatus::Failed, "{report:#?}");
    let failure = report.failure.as_ref().unwrap();
    assert_eq!(failure.class(), "recomp_incomplete", "{failure}");
    assert_eq!(
        compartments(&store, &input),
        old,
        "the old compartments stay"
    );

    // A model that fails mid-way: nothing changes either.
    let failing = Scripted::new(|n, p: &Prompt| {
        if n == 0 {
            titled("New")(n, p)
        } else {
            Err(LlmError::new(
                ModelRef::parse("fake/model").as_ref(),
                CallFailure::Transport,
                "connection refused",
            ))
        }
    });
    let report = run_job(&mut store, &input, &failing, &historian, Job::Recomp);
    assert_eq!(report.status, RunStatus::Failed, "{report:#?}");
    assert_eq!(compartments(&store, &input), old);
}

#[test]
fn idle_reasons_and_statuses_keep_their_wire_strings() {
    let idle = [
        (Idle::NothingNew, "nothing_new"),
        (Idle::Protected, "protected"),
        (Idle::NothingToShow, "nothing_to_show"),
        (Idle::Subagent, "subagent"),
        (Idle::LeaseHeld, "lease_held"),
        (Idle::NothingFolded, "nothing_folded"),
    ];
    for (reason, text) in idle {
        assert_eq!(serde_json::json!(reason), serde_json::json!(text));
    }
    for (status, text) in [
        (PromptStatus::Ready, "ready"),
        (PromptStatus::NothingToDo, "nothing_to_do"),
    ] {
        assert_eq!(serde_json::json!(status), serde_json::json!(text));
    }
}

//! Pass-level tests of recall hints: a new prompt gets its hint once, at
//! the tail; every later pass (defer or busting, one-shot or resident)
//! renders the same bytes; a weak, slow or failing search gives none.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rusqlite::Connection;
use serde_json::Value;

use mc_base::config::TransformConfig;
use mc_base::domain::envelope::Envelope;
use mc_base::error::{Error, Result};
use mc_base::store::Store;

use super::pass::{Resident, run_pass_on};
use super::recall::{Ask, BUDGET, Found, Kind, Recall};
use super::report::{Bust, Decision, PassOutput};
use super::tests::config;
use crate::testkit::*;

/// A search that answers what it was given, and counts how often it was asked.
#[derive(Debug, Default)]
struct Fake {
    found: Vec<Found>,
    asked: AtomicUsize,
    queries: std::sync::Mutex<Vec<String>>,
    delay: Option<Duration>,
    fail: bool,
}

impl Recall for Fake {
    fn find(&self, _conn: &Connection, ask: &Ask<'_>) -> Result<Vec<Found>> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.queries.lock().unwrap().push(ask.query.to_string());
        if let Some(delay) = self.delay {
            std::thread::sleep(delay);
        }
        if self.fail {
            return Err(Error::input("the index is gone"));
        }
        Ok(self.found.clone())
    }
}

fn staging() -> Found {
    Found {
        kind: Kind::Memory,
        name: "memory #7".into(),
        expand: None,
        text: "The staging database listens on port 5433, not 5432.".into(),
    }
}

const PROMPT: &str = "which port does the staging database listen on?";

struct Run {
    store: Store,
    project: tempfile::TempDir,
    fake: Arc<Fake>,
    config: TransformConfig,
}

impl Run {
    fn new(fake: Fake) -> Run {
        Run {
            store: Store::open_in_memory().unwrap(),
            project: tempfile::tempdir().unwrap(),
            fake: Arc::new(fake),
            config: TransformConfig {
                recall_hints: true,
                ..config()
            },
        }
    }

    fn envelope(&self, messages: &[Value], percent: u64) -> Envelope {
        let now = warm_now(messages);
        let mut envelope = envelope(messages, percent, now);
        envelope.project_dir = Some(self.project.path().to_path_buf());
        envelope
    }

    fn pass(&mut self, messages: &[Value], percent: u64) -> PassOutput {
        let envelope = self.envelope(messages, percent);
        let now = envelope.now_ms.unwrap();
        let resident = Resident {
            recall: Some(self.fake.clone()),
            ..Resident::default()
        };
        run_pass_on(&mut self.store, envelope, resident, &self.config, now).unwrap()
    }

    fn asked(&self) -> usize {
        self.fake.asked.load(Ordering::SeqCst)
    }
}

/// The text the model sees of user message `id`.
fn prompt_of(out: &PassOutput, id: &str) -> String {
    out.messages
        .iter()
        .find(|m| m["info"]["id"] == id)
        .map(|m| m["parts"][0]["text"].as_str().unwrap().to_string())
        .unwrap_or_else(|| panic!("{id} is in the output"))
}

fn with_prompt(mut messages: Vec<Value>, id: &str, text: &str) -> Vec<Value> {
    let at = warm_now(&messages) + 5_000;
    messages.push(user(id, text, at));
    messages
}

#[test]
fn a_new_prompt_gets_its_hint_once_and_every_later_pass_replays_it() {
    let mut run = Run::new(Fake {
        found: vec![staging()],
        ..Fake::default()
    });
    let history = session(2);
    run.pass(&history, 20);
    let before = run.pass(&history, 20);
    let messages = with_prompt(history.clone(), "msg_100_u", PROMPT);
    let out = run.pass(&messages, 20);
    assert_eq!(out.pass.recall, Some("hint"));
    assert_eq!(out.pass.bust, Bust::None, "new bytes at the tail only");
    let shown = prompt_of(&out, "msg_100_u");
    assert!(
        shown.contains(&format!("{PROMPT}\n\n<ctx-search-hint>")),
        "{shown}"
    );
    assert!(
        shown.ends_with(
            "\n\n<ctx-search-hint>\nmc keeps more on this, out of your view (ctx_search \
             \"port staging database listen\" finds it):\n- memory #7: The staging database \
             listens on port 5433, not 5432.\n</ctx-search-hint>"
        ),
        "{shown}"
    );
    assert_eq!(
        run.fake.queries.lock().unwrap().as_slice(),
        ["port staging database listen"]
    );
    // Every earlier byte is the previous pass's.
    let earlier = bytes(&body(&before));
    assert_eq!(bytes(&body(&out))[..earlier.len()], earlier[..]);

    // The turn goes on (defer passes): the prompt is not decided again and
    // its bytes come back the same.
    let mut turn = messages.clone();
    turn.push(tool_step(
        "msg_100_s0",
        "call_100",
        "read",
        "fn main() {}",
        warm_now(&messages) + 1000,
    ));
    let again = run.pass(&turn, 20);
    assert_eq!(again.pass.recall, None);
    assert_eq!(again.pass.bust, Bust::None);
    assert_eq!(prompt_of(&again, "msg_100_u"), shown);
    assert_eq!(run.asked(), 1);
    // An execute pass (the turn answered) keeps it too.
    turn.push(answer("msg_100_z", "5433", warm_now(&turn) + 1000));
    let busting = run.pass(&turn, 70);
    assert_eq!(
        busting.pass.decision,
        Decision::Execute,
        "{:?}",
        busting.pass
    );
    assert_eq!(prompt_of(&busting, "msg_100_u"), shown);

    // The next prompt matching the same memory: it is in view already (the
    // earlier hint named it), so no hint.
    let next = with_prompt(
        turn,
        "msg_101_u",
        "and the staging database port for tests?",
    );
    let out = run.pass(&next, 20);
    assert_eq!(
        (out.pass.recall, run.asked()),
        (None, 2),
        "asked, nothing new to name"
    );
    let plain = prompt_of(&out, "msg_101_u");
    assert!(
        plain.ends_with("and the staging database port for tests?"),
        "{plain}"
    );
    assert_eq!(prompt_of(&out, "msg_100_u"), shown);
}

#[test]
fn weak_short_slow_or_failing_searches_give_no_hint_and_are_not_asked_again() {
    // One term of four in common: not strong.
    let weak = Found {
        text: "The database is SQLite.".into(),
        ..staging()
    };
    let mut run = Run::new(Fake {
        found: vec![weak],
        ..Fake::default()
    });
    let messages = with_prompt(session(1), "msg_100_u", PROMPT);
    let out = run.pass(&messages, 20);
    assert_eq!((out.pass.recall, run.asked()), (None, 1));
    assert!(!prompt_of(&out, "msg_100_u").contains("ctx-search-hint"));
    run.pass(&messages, 20);
    assert_eq!(run.asked(), 1, "decided once");

    // Too short to search.
    let mut run = Run::new(Fake {
        found: vec![staging()],
        ..Fake::default()
    });
    let out = run.pass(&with_prompt(session(1), "msg_100_u", "staging port?"), 20);
    assert_eq!((out.pass.recall, run.asked()), (None, 0));

    // Slower than the budget, or failing: no hint, and the pass goes on.
    for (fake, outcome) in [
        (
            Fake {
                found: vec![staging()],
                delay: Some(BUDGET + Duration::from_millis(50)),
                ..Fake::default()
            },
            "slow",
        ),
        (
            Fake {
                fail: true,
                ..Fake::default()
            },
            "failed",
        ),
    ] {
        let mut run = Run::new(fake);
        let out = run.pass(&messages, 20);
        assert_eq!(out.pass.recall, Some(outcome));
        assert!(!prompt_of(&out, "msg_100_u").contains("ctx-search-hint"));
        let again = run.pass(&messages, 20);
        assert_eq!((again.pass.recall, run.asked()), (None, 1));
    }
}

#[test]
fn with_recall_hints_off_no_prompt_is_decided_but_stored_hints_still_render() {
    let mut run = Run::new(Fake {
        found: vec![staging()],
        ..Fake::default()
    });
    let messages = with_prompt(session(1), "msg_100_u", PROMPT);
    let shown = prompt_of(&run.pass(&messages, 20), "msg_100_u");
    assert!(shown.contains("ctx-search-hint"));
    run.config.recall_hints = false;
    let later = with_prompt(
        messages,
        "msg_101_u",
        "which port does the staging database use now?",
    );
    let out = run.pass(&later, 20);
    assert_eq!(out.pass.recall, None);
    assert_eq!(
        prompt_of(&out, "msg_100_u"),
        shown,
        "no earlier byte changes"
    );
    assert!(!prompt_of(&out, "msg_101_u").contains("ctx-search-hint"));
    assert_eq!(run.asked(), 1);
}

#[test]
fn a_prompt_not_at_the_tail_is_never_decided() {
    let mut run = Run::new(Fake {
        found: vec![staging()],
        ..Fake::default()
    });
    // The session's first pass sees a prompt already answered: no hint on it.
    let mut messages = with_prompt(session(1), "msg_100_u", PROMPT);
    messages.push(answer("msg_100_z", "5433", warm_now(&messages) + 1000));
    let out = run.pass(&messages, 20);
    assert_eq!((out.pass.recall, run.asked()), (None, 0));
    assert!(!prompt_of(&out, "msg_100_u").contains("ctx-search-hint"));
}

/// The third pass's rules as bytes — the re-injected todo list, a recall
/// hint, reasoning kept by its token budget — pinned like
/// `render_fingerprint_is_pinned_to_the_version`: a change to any of them
/// fails here until `RENDER_VERSION` is bumped (one declared bust).
#[test]
fn third_pass_render_is_pinned_to_the_version() {
    use sha2::{Digest, Sha256};
    let mut digest = Sha256::new();
    let mut rendered = String::new();
    let mut add = |out: &PassOutput| {
        let text = serde_json::to_string(&out.messages).unwrap();
        digest.update(&text);
        rendered.push_str(&text);
    };
    // The agent drops its newest todo call: a busting pass re-injects the
    // list; then a new prompt gets its hint.
    let mut run = Run::new(Fake {
        found: vec![staging()],
        ..Fake::default()
    });
    run.config.smart_drops = true;
    let history = super::tests_drops::editing_then_quiet(8, 7);
    run.pass(&history, 30);
    super::tests::queue(&mut run.store, &[7 * 5 + 3]);
    add(&run.pass(&history, 70));
    add(&run.pass(&with_prompt(history, "msg_300_u", PROMPT), 30));
    // Reasoning beyond a 1,600-token budget is cleared.
    let mut run = Run::new(Fake::default());
    run.config.smart_drops = true;
    run.config.clear_reasoning_age = 100_000;
    run.config.keep_reasoning_tokens = 1_600;
    let mut messages = session(6);
    for m in &mut messages {
        if m["parts"][1]["type"] == "reasoning" {
            m["parts"][1]["text"] = serde_json::json!("t".repeat(2_000));
        }
    }
    add(&run.pass(&messages, 70));
    for needle in [
        "mc_synthetic_todo_",
        "<ctx-search-hint>",
        "\"type\":\"reasoning\"",
    ] {
        assert!(rendered.contains(needle), "the scenario lost {needle}");
    }
    let fingerprint: String = digest
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        (super::render::RENDER_VERSION, fingerprint.as_str()),
        (
            3,
            "37eb69d95b48cdd755bee02e4130fffb51f1c4d2b257d14a45d13e8d46692087"
        ),
        "the rendered bytes changed: bump RENDER_VERSION and pin the new fingerprint"
    );
}

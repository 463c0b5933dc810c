//! The head of the prompt (m[0]/m[1]) in the pass: a test per HARD trigger
//! and per non-trigger, splicing, pins, the system prompt, markers, nudges.

use serde_json::{Value, json};

use mc_base::config::TransformConfig;
use mc_base::store::Store;
use mc_history::store::{self as history, NewCompartment};
use mc_history::trigger::DueReason;

use super::reduce::{ReduceRequest, reduce};
use super::report::{Bust, Decision, PassOutput};
use super::tests::*;
use super::{run_pass, status};
use mc_base::domain::envelope::Envelope;
use mc_base::domain::sessions;

fn session_row(store: &Store) -> i64 {
    sessions::find_session(store.conn(), "opencode", SESSION)
        .unwrap()
        .unwrap()
        .id
}

fn project(store: &Store) -> String {
    sessions::find_session(store.conn(), "opencode", SESSION)
        .unwrap()
        .unwrap()
        .project_identity
        .expect("sessions in these tests have a project")
}

/// An envelope like `envelope()` with a project folder and optional system prompt.
fn envelope_in(
    dir: &std::path::Path,
    messages: &[Value],
    percent: u64,
    now_ms: i64,
    system: Option<Value>,
) -> Envelope {
    let mut value = json!({
        "harness": "opencode",
        "session_id": SESSION,
        "project_dir": dir,
        "model": {"provider": "anthropic", "id": "m", "context_limit": 100_000, "output_limit": 0},
        "usage": {"input": percent * 1000},
        "now_ms": now_ms,
        "messages": messages,
    });
    if let Some(system) = system {
        value["system"] = system;
    }
    Envelope::from_value(value).unwrap()
}

pub(crate) struct Fixture {
    pub(crate) store: Store,
    dir: tempfile::TempDir,
    pub(crate) messages: Vec<Value>,
    pub(crate) config: TransformConfig,
    system: Option<Value>,
}

impl Fixture {
    pub(crate) fn new(turns: usize) -> Fixture {
        Fixture {
            store: Store::open_in_memory().unwrap(),
            dir: tempfile::tempdir().unwrap(),
            messages: session(turns),
            config: TransformConfig::default(),
            system: None,
        }
    }

    pub(crate) fn run(&mut self, percent: u64, now_ms: i64) -> PassOutput {
        let env = envelope_in(
            self.dir.path(),
            &self.messages,
            percent,
            now_ms,
            self.system.clone(),
        );
        run_pass(&mut self.store, env, &self.config, now_ms).unwrap()
    }

    pub(crate) fn warm(&mut self) -> PassOutput {
        let now = warm_now(&self.messages);
        self.run(30, now)
    }

    pub(crate) fn hot(&mut self) -> PassOutput {
        let now = warm_now(&self.messages);
        self.run(70, now)
    }

    /// Publish one compartment over the ordinals `start..=end` of the session.
    pub(crate) fn publish(&mut self, start: i64, end: i64, title: &str) {
        let session = session_row(&self.store);
        let ids: Vec<(i64, String)> = self
            .store
            .conn()
            .prepare("SELECT ordinal, message_id FROM messages WHERE session = ?1 ORDER BY ordinal")
            .unwrap()
            .query_map([session], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let id_of = |o: i64| ids.iter().find(|(x, _)| *x == o).unwrap().1.clone();
        let c = NewCompartment {
            start_ordinal: start,
            end_ordinal: end,
            start_message_id: id_of(start),
            end_message_id: id_of(end),
            start_ms: None,
            end_ms: None,
            title: title.into(),
            tiers: [
                format!("{title}: full story"),
                format!("{title}: shorter"),
                format!("{title}: short"),
                title.to_string(),
            ],
            importance: 50,
            episode: Some("debugging".into()),
        };
        self.store
            .write(|tx| history::publish_compartments(tx, session, &[c], T0))
            .unwrap();
    }
}

/// `insta::assert_snapshot!` into `shared/snapshots/NAME.snap`: a fixed
/// place, so a snapshot keeps its file when its test moves.
macro_rules! snapshot {
    ($name:expr, $description:expr, $text:expr) => {
        insta::with_settings!({
            snapshot_path => concat!(env!("CARGO_MANIFEST_DIR"), "/snapshots"),
            prepend_module_to_snapshot => false,
            omit_expression => true,
            description => $description,
        }, {
            insta::assert_snapshot!($name, $text);
        })
    };
}
pub(crate) use snapshot;

fn head(out: &PassOutput) -> (String, String) {
    let text = |i: usize| {
        out.messages[i]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(out.messages[0]["info"]["syntheticHead"], true);
    assert_eq!(out.messages[1]["info"]["syntheticHead"], true);
    (text(0), text(1))
}

fn ids(out: &PassOutput) -> Vec<String> {
    body(out)
        .iter()
        .map(|m| m["info"]["id"].as_str().unwrap_or("-").to_string())
        .collect()
}

#[test]
fn first_pass_renders_an_empty_baseline_and_a_placeholder_delta() {
    let mut f = Fixture::new(2);
    let out = f.warm();
    let (m0, m1) = head(&out);
    assert_eq!(m0, "<session-history></session-history>");
    assert_eq!(
        m1,
        "<session-history-since>(nothing new)</session-history-since>"
    );
    assert_eq!(out.messages[0]["parts"][0]["synthetic"], true);
    assert_eq!(out.messages[0]["info"]["role"], "user");
    assert_eq!(out.pass.materialize_reason, Some("first_render"));
    // A defer pass replays both byte-identically.
    let again = f.warm();
    assert_eq!(again.pass.decision, Decision::Defer);
    assert_eq!(bytes(&again.messages), bytes(&out.messages));
}

/// m[0] was rebuilt for `reason` (whether its bytes changed is the `bust`).
fn assert_hard(out: &PassOutput, reason: &str) {
    assert_eq!(out.pass.materialize_reason, Some(reason), "{:?}", out.pass);
    assert!(out.pass.materialized);
    assert_eq!(out.pass.decision, Decision::Execute);
}

fn assert_replayed(out: &PassOutput, before: &PassOutput) {
    assert_eq!(out.pass.decision, Decision::Defer, "{:?}", out.pass);
    assert!(!out.pass.materialized);
    assert_eq!(bytes(&out.messages), bytes(&before.messages));
}

#[test]
fn hard_trigger_model_change() {
    let mut f = Fixture::new(2);
    f.warm();
    let now = warm_now(&f.messages);
    let mut env = envelope_in(f.dir.path(), &f.messages, 30, now, None);
    env.model.id = Some("other-model".into());
    let out = run_pass(&mut f.store, env, &f.config, now).unwrap();
    assert_eq!(out.pass.materialize_reason, Some("model_change"));
}

#[test]
fn hard_trigger_system_prompt_change() {
    let mut f = Fixture::new(2);
    f.system = Some(json!(["You are helpful."]));
    f.warm();
    f.system = Some(json!(["You are helpful and terse."]));
    assert_hard(&f.warm(), "system_change");
}

#[test]
fn hard_trigger_idle_past_the_cache_ttl_fires_once() {
    let mut f = Fixture::new(2);
    f.warm();
    let idle = warm_now(&f.messages) + 10 * 60_000;
    assert_hard(&f.run(30, idle), "ttl_idle");
    let next = f.run(30, idle + 1000);
    assert_eq!(
        next.pass.decision,
        Decision::Defer,
        "the fold consumed the idle window"
    );
}

#[test]
fn hard_trigger_memory_epoch() {
    let mut f = Fixture::new(2);
    let before = f.warm();
    let p = project(&f.store);
    f.store
        .write(|tx| history::bump_memory_epoch(tx, &p))
        .unwrap();
    let out = f.warm();
    assert_hard(&out, "memory_epoch");
    // Nothing else changed, so the rebuilt head has the same bytes: no bust.
    assert_eq!(bytes(&out.messages), bytes(&before.messages));
    assert_eq!(out.pass.bust, Bust::None);
}

#[test]
fn hard_trigger_structural_compartment_edit() {
    let mut f = Fixture::new(4);
    f.warm();
    f.publish(1, 4, "First turn");
    f.hot(); // SOFT: lands in m[1]
    let session = session_row(&f.store);
    f.store
        .write(|tx| history::delete_compartment(tx, session, 1, T0))
        .unwrap();
    let out = f.warm();
    assert_hard(&out, "compartment_edit");
    // The compartment was only in m[1]; m[0] rebuilt to the same bytes.
    assert_eq!(out.pass.bust, Bust::Soft);
    assert!(!head(&out).0.contains("First turn"));
    assert_eq!(ids(&out)[0], "msg_000_u", "nothing is covered any more");
}

#[test]
fn hard_trigger_render_config() {
    let mut f = Fixture::new(2);
    f.warm();
    f.config.history_budget_percentage = 0.004;
    assert_hard(&f.warm(), "render_config");
}

#[test]
fn hard_trigger_force_band_folds_what_arrived() {
    let mut f = Fixture::new(4);
    f.warm();
    let now = warm_now(&f.messages);
    // Nothing new since m[0]: the force band leaves it alone.
    let out = f.run(86, now);
    assert_eq!(out.pass.materialize_reason, None, "{:?}", out.pass);
    f.publish(1, 4, "Turn zero");
    let out = f.run(87, now + 10);
    assert_hard(&out, "force_band");
    assert_eq!(out.pass.bust, Bust::Hard);
    assert!(head(&out).0.contains("## 1-4 · Turn zero"));
}

#[test]
fn non_triggers_never_rebuild_m0() {
    let mut f = Fixture::new(4);
    f.system = Some(json!(["Agent.\nToday's date: Mon Nov 30 2026"]));
    let before = f.warm();
    let p = project(&f.store);
    // A new compartment, a new memory, a profile entry, edited project docs and a new date.
    f.publish(1, 4, "Turn zero");
    f.store
        .write(|tx| {
            history::write_memory(tx, &p, "NAMING", "Tags are written §N§.", None, "test", T0)
                .map(|_| ())
        })
        .unwrap();
    f.store
        .write(|tx| history::add_profile_item(tx, "Prefers short answers.", T0).map(|_| ()))
        .unwrap();
    std::fs::write(f.dir.path().join("ARCHITECTURE.md"), "# Arch\nnew text\n").unwrap();
    f.system = Some(json!(["Agent.\nToday's date: Tue Dec 01 2026"]));
    let out = f.warm();
    assert_replayed(&out, &before);
    assert_eq!(
        out.system,
        Some(json!([format!(
            "Agent.\nToday's date: Mon Nov 30 2026\n\n{}",
            super::system::guidance(true)
        )]))
    );
    // The next busting pass surfaces them in m[1] (SOFT), m[0] untouched.
    let soft = f.hot();
    assert_eq!(soft.pass.bust, Bust::Soft, "{:?}", soft.pass);
    assert!(!soft.pass.materialized);
    let (m0, m1) = head(&soft);
    assert_eq!(m0, head(&before).0);
    assert!(
        m1.contains("<new-compartments>\n## 1-4 · Turn zero\nTurn zero: full story"),
        "{m1}"
    );
    assert!(
        m1.contains("<new-memories>\n<NAMING>\n#1: Tags are written §N§.\n</NAMING>"),
        "{m1}"
    );
    assert!(
        m1.contains("<new-user-profile>\n- Prefers short answers."),
        "{m1}"
    );
    assert!(!m1.contains("new text"), "docs edits wait for a HARD fold");
    // The date moved on with the bust.
    assert!(
        soft.system.unwrap()[0]
            .as_str()
            .unwrap()
            .contains("Tue Dec 01 2026")
    );
}

/// OpenCode's system prompt reaches mc through a hook after the pass
/// (`system_hook`): the same guidance, the date frozen until a busting pass.
#[test]
fn system_hook_freezes_the_date_until_a_busting_pass() {
    use super::system::{SystemRequest, guidance, system_hook};
    let mut f = Fixture::new(4);
    let request = |date: &str| SystemRequest {
        harness: "opencode".into(),
        session_id: SESSION.into(),
        system: json!([format!("Agent.\nToday's date: {date}"), "Skills."]),
        render_unknown: false,
    };
    let expect = |date: &str| {
        json!([
            format!("Agent.\nToday's date: {date}\n\n{}", guidance(true)),
            "Skills."
        ])
    };
    // Before any pass the session is unknown: nothing is changed.
    let unknown = system_hook(&mut f.store, &request("Mon Nov 30 2026"), &f.config).unwrap();
    assert!(!unknown.known_session);
    assert_eq!(unknown.system, request("Mon Nov 30 2026").system);
    // Pi asks before its first pass: it gets what the known session will get.
    let early = SystemRequest {
        render_unknown: true,
        ..request("Mon Nov 30 2026")
    };
    let early = system_hook(&mut f.store, &early, &f.config).unwrap();
    assert!(!early.known_session && early.guidance);
    assert_eq!(early.system, expect("Mon Nov 30 2026"));

    let first = f.warm();
    assert_eq!(first.system, None, "no system in the envelope, none out");
    let out = system_hook(&mut f.store, &request("Mon Nov 30 2026"), &f.config).unwrap();
    assert!(out.known_session && out.guidance);
    assert_eq!(out.system, expect("Mon Nov 30 2026"));
    // Midnight passes; defer passes keep the frozen date, byte for byte.
    let deferred = f.warm();
    assert_eq!(deferred.pass.decision, Decision::Defer);
    let out = system_hook(&mut f.store, &request("Tue Dec 01 2026"), &f.config).unwrap();
    assert_eq!(out.system, expect("Mon Nov 30 2026"));
    let again = f.warm();
    assert_eq!(again.pass.decision, Decision::Defer);
    assert_eq!(
        system_hook(&mut f.store, &request("Tue Dec 01 2026"), &f.config)
            .unwrap()
            .system,
        expect("Mon Nov 30 2026")
    );
    // A busting pass moves it on to the date the hook saw last.
    let busting = f.hot();
    assert_eq!(busting.pass.decision, Decision::Execute);
    let out = system_hook(&mut f.store, &request("Tue Dec 01 2026"), &f.config).unwrap();
    assert_eq!(out.system, expect("Tue Dec 01 2026"));
    assert_eq!(out.today.as_deref(), Some("Today's date: Tue Dec 01 2026"));
    // A side call without a date (a title request) changes nothing stored.
    let title = SystemRequest {
        system: json!(["Generate a title."]),
        ..request("")
    };
    let out = system_hook(&mut f.store, &title, &f.config).unwrap();
    assert_eq!(
        out.system,
        json!([format!("Generate a title.\n\n{}", guidance(true))])
    );
    assert_eq!(
        system_hook(&mut f.store, &request("Tue Dec 01 2026"), &f.config)
            .unwrap()
            .system,
        expect("Tue Dec 01 2026")
    );
}

#[test]
fn system_hook_without_guidance_leaves_the_prompt_alone() {
    use super::system::{SystemRequest, system_hook};
    let mut f = Fixture::new(2);
    f.config.system_prompt_guidance = false;
    f.warm();
    let request = SystemRequest {
        harness: "opencode".into(),
        session_id: SESSION.into(),
        system: json!(["Agent.\nToday's date: Mon Nov 30 2026"]),
        render_unknown: false,
    };
    let out = system_hook(&mut f.store, &request, &f.config).unwrap();
    assert!(out.known_session && !out.guidance);
    assert_eq!(out.system, request.system);
}

#[test]
fn a_historian_publish_between_defer_passes_waits_for_the_next_bust() {
    let mut f = Fixture::new(6);
    let first = f.warm();
    f.publish(1, 8, "Turns zero and one");
    let deferred = f.warm();
    assert_replayed(&deferred, &first);
    assert_eq!(
        ids(&deferred)[0],
        "msg_000_u",
        "raw history still on the wire"
    );
    let soft = f.hot();
    let (_, m1) = head(&soft);
    assert!(m1.contains("## 1-8 · Turns zero and one"), "{m1}");
    assert_eq!(ids(&soft)[0], "msg_002_u", "covered messages left the wire");
    // And it replays from then on.
    let replay = f.warm();
    assert_replayed(&replay, &soft);
}

#[test]
fn a_fold_renders_compartments_by_decay_and_memories_by_category() {
    let mut f = Fixture::new(6);
    f.warm();
    let p = project(&f.store);
    f.publish(1, 4, "Zero");
    f.publish(5, 8, "One");
    f.store
        .write(|tx| {
            history::write_memory(
                tx,
                &p,
                "PROJECT_RULES",
                "Run cargo fmt & clippy.",
                Some(90),
                "test",
                T0,
            )?;
            history::write_memory(
                tx,
                &p,
                "ARCHITECTURE",
                "Core never prints.",
                None,
                "test",
                T0,
            )?;
            history::bump_memory_epoch(tx, &p)
        })
        .unwrap();
    let out = f.warm();
    assert_hard(&out, "memory_epoch");
    let (m0, m1) = head(&out);
    assert_eq!(
        m0,
        "<session-history>\n## 1-4 · Zero\nZero: full story\n\n## 5-8 · One\nOne: full story\n</session-history>\n\n\
         <project-memory>\n<PROJECT_RULES>\n#1: Run cargo fmt &amp; clippy.\n</PROJECT_RULES>\n\
         <ARCHITECTURE>\n#2: Core never prints.\n</ARCHITECTURE>\n</project-memory>"
    );
    assert!(m1.contains("(nothing new)"));
    assert_eq!(ids(&out)[0], "msg_002_u");
    // An update of a rendered memory is a delta in m[1] on the next bust.
    f.store
        .write(|tx| history::update_memory(tx, &p, 2, "Core never prints or reads env.", T0))
        .unwrap();
    let soft = f.hot();
    assert!(
        head(&soft)
            .1
            .contains("<updated id=\"2\">Core never prints or reads env.</updated>")
    );
    let report = status(&f.store, "opencode", SESSION).unwrap().unwrap();
    let h = report.head.unwrap();
    assert_eq!(
        (h.compartments, h.memories_in_m0, h.covered_through),
        (2, 2, 8)
    );
    assert_eq!(h.tiers, json!({"1": 2}));
    assert_eq!(h.materialized_reason, "memory_epoch");
}

/// A 12-turn session, its first 24 messages folded into three dated
/// compartments of falling age and mixed importance, three memories, a
/// profile item and two pins, with `budget` as the history budget share;
/// then the pass that renders them.
fn rendered_head(budget: f64) -> (Fixture, PassOutput) {
    let mut f = Fixture::new(12);
    f.config.history_budget_percentage = budget;
    f.warm();
    let session = session_row(&f.store);
    let p = project(&f.store);
    let day = 86_400_000;
    let compartment = |start: i64, end: i64, title: &str, importance: i64, at: i64| {
        let ids: Vec<String> = [start, end]
            .iter()
            .map(|o| {
                f.store
                    .conn()
                    .query_row(
                        "SELECT message_id FROM messages WHERE session = ?1 AND ordinal = ?2",
                        [session, *o],
                        |r| r.get(0),
                    )
                    .unwrap()
            })
            .collect();
        NewCompartment {
            start_ordinal: start,
            end_ordinal: end,
            start_message_id: ids[0].clone(),
            end_message_id: ids[1].clone(),
            start_ms: Some(at),
            end_ms: Some(at + 3_600_000),
            title: title.into(),
            tiers: [
                format!("{title}: every step, path and command & its <output>."),
                format!("{title}: the steps in short."),
                format!("{title}: one sentence."),
                title.to_string(),
            ],
            importance,
            episode: Some("feature".into()),
        }
    };
    let folded = [
        compartment(1, 8, "Set up the cart module", 90, T0 - 3 * day),
        compartment(9, 16, "Debug the rounding of totals", 20, T0 - day),
        compartment(17, 24, "Add a discount rule", 60, T0),
    ];
    f.store
        .write(|tx| {
            history::publish_compartments(tx, session, &folded, T0)?;
            history::write_memory(
                tx,
                &p,
                "PROJECT_RULES",
                "Run cargo fmt & clippy before a commit.",
                Some(90),
                "test",
                T0,
            )?;
            history::write_memory(
                tx,
                &p,
                "ARCHITECTURE",
                "The core never prints.",
                None,
                "test",
                T0,
            )?;
            history::write_memory(
                tx,
                &p,
                "NAMING",
                "Money is `Cents`, never f64.",
                None,
                "test",
                T0,
            )?;
            history::add_profile_item(tx, "Prefers short answers.", T0)?;
            history::pin(tx, session, "msg_000_u", "user", T0)?;
            history::pin(tx, session, "msg_001_z", "assistant", T0 + 65_000)?;
            history::bump_memory_epoch(tx, &p)
        })
        .unwrap();
    let out = f.warm();
    assert_hard(&out, "memory_epoch");
    (f, out)
}

#[test]
fn the_rendered_head_fades_old_history_within_its_budget() {
    // A history budget of ~200 tokens: the unimportant compartment fades first.
    let (_, out) = rendered_head(0.003);
    let (m0, m1) = head(&out);
    snapshot!(
        "head_m0_m1_after_a_fold",
        "m[0] and m[1] after three compartments (budget ~200 tokens), three memories, a profile item and two pins",
        format!("--- m[0] ---\n{m0}\n--- m[1] ---\n{m1}\n")
    );
}

#[test]
fn the_rendered_head_carries_memory_changes_in_m1() {
    let (mut f, out) = rendered_head(TransformConfig::default().history_budget_percentage);
    let (m0, _) = head(&out);
    let p = project(&f.store);
    // A memory changed and one added: a delta in m[1] on the next bust, m[0] as it was.
    f.store
        .write(|tx| {
            history::update_memory(tx, &p, 2, "The core never prints or reads env.", T0)?;
            history::write_memory(
                tx,
                &p,
                "CONSTRAINTS",
                "Totals round half-even.",
                None,
                "test",
                T0,
            )
            .map(|_| ())
        })
        .unwrap();
    let soft = f.hot();
    let (m0_after, m1) = head(&soft);
    assert_eq!(m0_after, m0);
    snapshot!(
        "head_m1_delta_after_memory_changes",
        "m[1] on the next bust after a memory was updated and another written",
        m1
    );
}

#[test]
fn project_docs_render_in_m0() {
    let mut f = Fixture::new(1);
    std::fs::write(
        f.dir.path().join("ARCHITECTURE.md"),
        "\u{feff}# Map\r\ncore <-> cli  \n\n\n",
    )
    .unwrap();
    let (m0, _) = head(&f.warm());
    assert_eq!(
        m0,
        "<project-docs>\n<file name=\"ARCHITECTURE.md\">\n# Map\ncore &lt;-&gt; cli\n</file>\n</project-docs>\n\n<session-history></session-history>"
    );
}

#[test]
fn pressure_backstop_folds_a_large_m1() {
    let mut f = Fixture::new(12);
    f.config.history_budget_percentage = 0.004; // budget = 100k × 65 % × 5 % = 3250 tokens
    f.warm();
    for t in 0..6 {
        let start = t * 4 + 1;
        let long = "detail ".repeat(150);
        let session = session_row(&f.store);
        let ids: Vec<String> = [start, start + 3]
            .iter()
            .map(|o| {
                f.store
                    .conn()
                    .query_row(
                        "SELECT message_id FROM messages WHERE session=?1 AND ordinal=?2",
                        [session, *o],
                        |r| r.get(0),
                    )
                    .unwrap()
            })
            .collect();
        let c = NewCompartment {
            start_ordinal: start,
            end_ordinal: start + 3,
            start_message_id: ids[0].clone(),
            end_message_id: ids[1].clone(),
            start_ms: None,
            end_ms: None,
            title: format!("Part {t}"),
            tiers: [long.clone(), "medium".into(), "short".into(), "line".into()],
            importance: 50,
            episode: None,
        };
        f.store
            .write(|tx| history::publish_compartments(tx, session, &[c], T0))
            .unwrap();
    }
    let out = f.hot();
    assert_eq!(
        out.pass.materialize_reason,
        Some("pressure_backstop"),
        "{:?}",
        out.pass
    );
    assert!(
        head(&out).1.contains("(nothing new)"),
        "m[1] folded into m[0]"
    );
}

#[test]
fn pinned_messages_survive_an_emergency_drop_and_a_fold() {
    let mut f = Fixture::new(10);
    f.warm();
    let session = session_row(&f.store);
    // Pin the first tool step (tag 2) and the first user message.
    f.store
        .write(|tx| {
            history::pin(tx, session, "msg_000_s0", "assistant", T0 + 1000)?;
            history::pin(tx, session, "msg_000_u", "user", T0)
        })
        .unwrap();
    queue(&mut f.store, &[1, 2]);
    let now = warm_now(&f.messages);
    let out = f.run(96, now);
    assert!(
        !out.pass.dropped.contains(&1) && !out.pass.dropped.contains(&2),
        "{:?}",
        out.pass.dropped
    );
    assert!(
        out.pass.dropped.contains(&3),
        "the unpinned neighbour went: {:?}",
        out.pass.dropped
    );
    assert!(
        tool_parts(&out, "call_0_0")[0]["state"]["output"]
            .as_str()
            .unwrap()
            .starts_with("§2§ line 0.0")
    );
    // The historian folds turn zero; the pinned messages come back verbatim in m[0].
    f.publish(1, 4, "Turn zero");
    let p = project(&f.store);
    f.store
        .write(|tx| history::bump_memory_epoch(tx, &p))
        .unwrap();
    let folded = f.warm();
    assert_hard(&folded, "memory_epoch");
    let (m0, _) = head(&folded);
    assert!(
        m0.contains("<pinned-messages>\n<pinned id=\"msg_000_u\" role=\"user\">\nplease do step 0\n</pinned>\n</pinned-messages>"),
        "{m0}"
    );
    assert!(!ids(&folded).contains(&"msg_000_u".to_string()));

    // The pass busted: it names the newest message of the covered run for
    // the adapter's compaction boundary.
    let through = folded.pass.fold_boundary.clone().expect("a boundary");
    let at = f
        .messages
        .iter()
        .position(|m| m["info"]["id"] == through.as_str())
        .unwrap();
    assert_eq!(
        ids(&folded).first().map(String::as_str),
        f.messages[at + 1]["info"]["id"].as_str(),
        "the boundary follows the last message the head took off the wire"
    );
    // OpenCode now sends mc's boundary and what follows it; the pinned messages
    // are gone from the input, yet the next rebuild of m[0] still carries them
    // (from mc's own copy), and the boundary never reaches the wire.
    let marker = |suffix: &str, role: &str, part: Value| {
        json!({"info": {"id": format!("{through}{suffix}"), "sessionID": SESSION, "role": role,
                        "summary": role == "assistant", "finish": "stop", "time": {"created": T0}},
               "parts": [part]})
    };
    let mut behind = vec![
        marker("mcb0", "user", json!({"type": "compaction", "auto": true})),
        marker(
            "mcb1",
            "assistant",
            json!({"type": "text", "text": "[mc: folded]", "synthetic": true}),
        ),
    ];
    behind.extend(f.messages[at + 1..].iter().cloned());
    let full = std::mem::replace(&mut f.messages, behind);
    let replayed = f.warm();
    assert_eq!(
        replayed.pass.bust,
        Bust::None,
        "a defer pass after the move"
    );
    assert_eq!(
        body(&replayed),
        body(&folded),
        "byte-identical across the boundary"
    );
    assert!(replayed.pass.fold_boundary.is_none());
    f.store
        .write(|tx| history::bump_memory_epoch(tx, &p))
        .unwrap();
    let rebuilt = f.warm();
    assert_hard(&rebuilt, "memory_epoch");
    let (m0_again, _) = head(&rebuilt);
    assert_eq!(m0_again, m0, "the pins render the same from mc's copy");
    assert!(
        ids(&rebuilt)
            .iter()
            .all(|id| !id.ends_with("mcb0") && !id.ends_with("mcb1"))
    );
    // Without mc's boundary (a message merely missing), no copy stands in.
    f.messages = full[at + 1..].to_vec();
    f.store
        .write(|tx| history::bump_memory_epoch(tx, &p))
        .unwrap();
    let (m0_missing, _) = head(&f.warm());
    assert!(
        !m0_missing.contains("<pinned id=\"msg_000_u\""),
        "{m0_missing}"
    );
}

#[test]
fn temporal_markers_follow_gaps_and_can_be_switched_off() {
    let mut f = Fixture::new(3); // turns start 60 s apart: no markers
    let late = warm_now(&f.messages) + 3 * 3_600_000;
    f.messages.push(user("msg_late", "back again", late));
    let out = f.run(30, late + 10);
    let last = texts(&out).last().unwrap().clone();
    assert!(last.starts_with("§13§ <!-- +3h -->\nback again"), "{last}");
    assert_eq!(texts(&out).iter().filter(|t| t.contains("<!--")).count(), 1);
    let mut g = Fixture::new(3);
    g.config.temporal_awareness = false;
    g.messages = f.messages.clone();
    let out = g.run(30, late + 10);
    assert_eq!(texts(&out).last().unwrap(), "§13§ back again");
}

#[test]
fn channel_nudges_land_on_new_content_and_replay() {
    let mut f = Fixture::new(1);
    f.config.protected_tags = 1;
    // Big old tool outputs: ~120k tokens of reducible output.
    let big = "fn filler() { let x = 1 + 2; }\n".repeat(2000);
    let mut messages = vec![user("msg_u0", "start", T0)];
    for i in 0..6 {
        messages.push(tool_step(
            &format!("msg_t{i}"),
            &format!("c{i}"),
            "bash",
            &big,
            T0 + 1000 * (i + 1),
        ));
    }
    f.messages = messages;
    let out = f.run(30, T0 + 10_000);
    let last_output = tool_parts(&out, "c5")[0]["state"]["output"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        last_output.contains("<system-reminder>"),
        "channel 1 on the newest new output"
    );
    assert!(last_output.contains("ctx_reduce"));
    // Channel 2: a synthetic reminder after the finished step.
    let reminder = out.messages.last().unwrap();
    assert_eq!(reminder["info"]["role"], "user");
    assert_eq!(reminder["parts"][0]["synthetic"], true);
    assert!(
        reminder["parts"][0]["text"]
            .as_str()
            .unwrap()
            .contains("ctx_reduce")
    );
    // Next pass: both replay in place, byte for byte.
    let again = f.run(30, T0 + 11_000);
    assert_eq!(again.pass.decision, Decision::Defer);
    assert_eq!(bytes(&again.messages), bytes(&out.messages));
}

/// A second Channel 2 reminder (after the reducible mass fell away and grew
/// back) joins the first one; it never moves it, which would change bytes the
/// provider has cached on a pass that reclaims nothing.
#[test]
fn a_second_channel2_reminder_leaves_the_first_in_place() {
    let mut f = Fixture::new(1);
    f.config.protected_tags = 1;
    f.config.relief_drop = false;
    let big = "fn filler() { let x = 1 + 2; }\n".repeat(2000);
    let step = |i: i64| {
        tool_step(
            &format!("msg_t{i:02}"),
            &format!("c{i}"),
            "bash",
            &big,
            T0 + 1000 * (i + 1),
        )
    };
    f.messages = vec![user("msg_u0", "start", T0)];
    f.messages.extend((0..6).map(step));
    let first = f.run(30, T0 + 10_000);
    let reminders = |out: &PassOutput| -> Vec<String> {
        out.messages
            .iter()
            .filter_map(|m| m["parts"][0]["text"].as_str())
            .filter(|t| t.starts_with("<system-reminder>") && t.contains("not yet reduced"))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(reminders(&first).len(), 1);
    // The agent drops the spent outputs; a busting pass applies the drops and
    // the reducible mass falls below the re-arm line.
    let tags: Vec<i64> = (0..6)
        .map(|i| {
            let text = tool_parts(&first, &format!("c{i}"))[0]["state"]["output"]
                .as_str()
                .unwrap()
                .to_string();
            text[2..text[2..].find('§').unwrap() + 2].parse().unwrap()
        })
        .collect();
    let request = ReduceRequest {
        harness: "opencode".into(),
        session_id: SESSION.into(),
        drop: tags,
    };
    f.messages.push(answer("msg_t06_z", "done", T0 + 7_500));
    f.run(30, T0 + 10_500);
    reduce(&mut f.store, &request, &f.config, T0 + 11_000).unwrap();
    let dropped = f.run(70, T0 + 12_000);
    assert_eq!(dropped.pass.decision, Decision::Execute);
    assert_eq!(dropped.pass.dropped.len(), 6, "{:?}", dropped.pass);
    assert_eq!(reminders(&dropped).len(), 1);
    // New big outputs arrive; the next reminder is due on a defer pass.
    f.messages.push(user("msg_u1", "go on", T0 + 8_000));
    f.messages.extend((7..12).map(step));
    let second = f.run(30, T0 + 13_000);
    assert_eq!(second.pass.decision, Decision::Defer);
    assert_eq!(reminders(&second).len(), 2, "{:?}", reminders(&second));
    let before = bytes(&dropped.messages);
    let after = bytes(&second.messages);
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "a defer pass keeps every message sent before, byte for byte"
    );
}

#[test]
fn caveman_compresses_old_long_prose_and_replays() {
    let mut f = Fixture::new(1);
    f.config.caveman = true;
    f.config.protected_tags = 2;
    let prose = "I think we should basically just run the tests in order to see what is really happening with the build. ".repeat(8);
    let mut messages = Vec::new();
    for i in 0..10 {
        messages.push(user(&format!("msg_{i:02}"), &prose, T0 + i * 1000));
    }
    f.messages = messages;
    let out = f.run(70, T0 + 20_000);
    let t = texts(&out);
    assert!(
        !t[0].contains("basically") && t[0].len() < prose.len(),
        "oldest compressed: {}",
        t[0]
    );
    assert!(t[9].contains("basically"), "newest untouched");
    let again = f.run(30, T0 + 21_000);
    assert_eq!(again.pass.decision, Decision::Defer);
    assert_eq!(bytes(&again.messages), bytes(&out.messages));
}

#[test]
fn subagents_get_no_head() {
    let mut store = Store::open_in_memory().unwrap();
    let messages = session(2);
    let mut env = envelope(&messages, 30, warm_now(&messages));
    env.subagent = true;
    let out = run_pass(&mut store, env, &config(), warm_now(&messages)).unwrap();
    assert_eq!(out.messages[0]["info"]["id"], "msg_000_u");
    assert!(!out.pass.materialized);
}

#[test]
fn the_emergency_drop_acts_once_per_usage_sample() {
    let mut f = Fixture::new(12);
    f.warm();
    let now = warm_now(&f.messages);
    let first = f.run(96, now);
    assert!(!first.pass.dropped.is_empty());
    // The same provider sample again (no new response yet): nothing more goes.
    let same = f.run(96, now + 10);
    assert!(same.pass.dropped.is_empty(), "{:?}", same.pass.dropped);
    assert_eq!(same.pass.bust, Bust::None);
    assert_eq!(bytes(&same.messages), bytes(&first.messages));
}

#[test]
fn historian_due_follows_the_shared_trigger_and_blocks_at_95() {
    let mut f = Fixture::new(1);
    // ~100k tokens of unfolded tail in a 100k window: well past 3 × the trigger budget.
    let big = "let value = compute(input, 42);\n".repeat(1500);
    f.messages = (0..12)
        .map(|i| {
            tool_step(
                &format!("msg_t{i:02}"),
                &format!("c{i}"),
                "read",
                &big,
                T0 + i * 1000,
            )
        })
        .collect();
    f.messages.insert(0, user("msg_u", "go", T0 - 1000));
    let out = f.run(30, T0 + 20_000);
    assert!(out.pass.historian_due, "{:?}", out.pass);
    assert_eq!(out.pass.historian_reason, Some(DueReason::TailSize));
    assert!(!out.pass.blocking);
    let urgent = f.run(96, T0 + 21_000);
    assert_eq!(urgent.pass.historian_reason, Some(DueReason::ForceBand));
    assert!(urgent.pass.blocking);
    // A short session is not due.
    let mut g = Fixture::new(2);
    let out = g.warm();
    assert!(!out.pass.historian_due && out.pass.historian_reason.is_none());
}

/// A session of `turns` turns, each a user message and a `bash` step whose
/// output is about `tokens` tokens.
fn bash_session(turns: i64, tokens: usize) -> Vec<Value> {
    let output = "let value = compute(input, 42);\n".repeat(tokens / 8);
    (0..turns)
        .flat_map(|t| {
            let at = T0 + t * 10_000;
            [
                user(&format!("msg_u{t:03}"), &format!("step {t}"), at),
                tool_step(
                    &format!("msg_t{t:03}"),
                    &format!("c{t}"),
                    "bash",
                    &output,
                    at + 1000,
                ),
            ]
        })
        .collect()
}

#[test]
fn an_adapter_that_can_wait_hears_of_a_blocking_fold_before_anything_is_kept() {
    let waiting = |f: &mut Fixture, percent: u64, now: i64| {
        let mut env = envelope_in(f.dir.path(), &f.messages, percent, now, None);
        env.wait_for_fold = true;
        run_pass(&mut f.store, env, &f.config, now).unwrap()
    };
    let counts = |f: &Fixture| -> (i64, i64, i64) {
        f.store
            .conn()
            .query_row(
                "SELECT passes_execute + passes_defer, tag_counter,
                        (SELECT count(*) FROM tags WHERE status = 'dropped')
                 FROM sessions",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap()
    };
    // ~140k tokens of tool output, all of it in the newest 20 tags: the
    // emergency drop can take nothing, so at 96 % the fold is blocking.
    let mut f = Fixture::new(1);
    let big = "let value = compute(input, 42);\n".repeat(1500);
    f.messages = (0..12)
        .map(|i| {
            tool_step(
                &format!("msg_t{i:02}"),
                &format!("c{i}"),
                "read",
                &big,
                T0 + i * 1000,
            )
        })
        .collect();
    f.messages.insert(0, user("msg_u", "go", T0 - 1000));
    f.run(30, T0 + 20_000);
    let before = counts(&f);
    f.messages
        .push(tool_step("msg_t12", "c12", "read", &big, T0 + 30_000));
    let wait = waiting(&mut f, 96, T0 + 31_000);
    assert_eq!(
        (wait.pass.decision, wait.pass.reason, wait.pass.blocking),
        (Decision::Wait, "blocking_fold", true)
    );
    assert_eq!(wait.pass.historian_reason, Some(DueReason::ForceBand));
    assert_eq!(wait.messages, f.messages, "the input, untouched");
    assert_eq!(counts(&f), before, "nothing kept: no tag, no drop, no pass");
    // Without the flag (after the fold) the same input is the one full pass,
    // and its own report agrees that the fold was blocking.
    let full = f.run(96, T0 + 32_000);
    assert_eq!(full.pass.decision, Decision::Execute);
    assert!(full.pass.blocking, "{:?}", full.pass);
    // Below the blocking band a waiting adapter gets the ordinary pass.
    let calm = waiting(&mut f, 40, T0 + 33_000);
    assert_ne!(calm.pass.decision, Decision::Wait);

    // ~100k tokens of old bash output: before this pass's drops the fold
    // would be blocking, after them the live tail is all that is left. The
    // answer is the one the pass reports, so the adapter does not wait.
    let mut g = Fixture::new(1);
    g.messages = bash_session(60, 1700);
    g.run(30, T0 + 700_000);
    let envelope = envelope_in(g.dir.path(), &g.messages, 96, T0 + 701_000, None);
    let before_drops = mc_history::historian::check(
        g.store.conn(),
        &mc_history::historian::Input::from_envelope(envelope).unwrap(),
        &g.config,
    )
    .unwrap();
    assert!(before_drops.due.blocking, "{before_drops:?}");
    let pass = waiting(&mut g, 96, T0 + 701_000);
    assert_eq!(pass.pass.decision, Decision::Execute, "{:?}", pass.pass);
    assert!(!pass.pass.dropped.is_empty());
    assert!(!pass.pass.blocking, "{:?}", pass.pass);
}

#[test]
fn guidance_has_a_variant_without_ctx_reduce() {
    let mut f = Fixture::new(1);
    f.system = Some(json!(["Base prompt."]));
    f.messages[0]["info"]["tools"] = json!({"ctx_reduce": false});
    let out = f.warm();
    let system = out.system.unwrap()[0].as_str().unwrap().to_string();
    assert!(system.starts_with("Base prompt.\n\n## Context management (mc)"));
    assert!(!system.contains("ctx_reduce"), "{system}");
    f.config.system_prompt_guidance = false;
    let mut g = Fixture::new(1);
    g.config.system_prompt_guidance = false;
    g.system = Some(json!(["Base prompt."]));
    assert_eq!(g.warm().system, Some(json!(["Base prompt."])));
}

//! Property: over random sessions and random sequences of passes, tail growth
//! and reduce calls, every defer pass re-emits the previous output's bytes for
//! all older messages (ARCHITECTURE.md, invariant 1), and mutations first appear
//! only on passes that are not defer (invariant 2). A second strategy piles up
//! large outputs, drops them all and piles them up again: the sequences that
//! re-arm reduce reminders and make relief drops act (it found reminders that
//! moved on a defer pass).
//!
//! Every pass also goes through a resident `mc-transform serve` on a second
//! database that sees the same steps, as deltas of the incremental envelope:
//! the answer, rebuilt, is the in-process pass's document byte for byte
//! (what the serve process replays of its previous render is never stale).

use mc_base::config::TransformConfig;
use mc_base::domain::sessions;
use mc_base::store::{Store, StoreOptions};
use mc_history::store::{self as history, NewCompartment};
use mc_tests::TestEnv;
use mc_tests::serve::{Incremental, Served};
use mc_transform_core::incremental::{fingerprint, same};
use mc_transform_core::{Decision, Envelope, ReduceRequest, reduce, run_pass};
use proptest::prelude::*;
use serde_json::{Value, json};

const SESSION: &str = "ses_prop";

#[derive(Debug, Clone)]
enum Step {
    /// A user turn: the user message, `tools` tool steps (output sizes in
    /// lines), and a final answer unless the turn is left mid-tool-use.
    Turn {
        tools: Vec<usize>,
        finished: bool,
        with_file: bool,
    },
    /// The agent queues drops of these tags (taken modulo the tags so far).
    Reduce(Vec<u16>),
    /// The agent queues drops of every tag so far (protected ones wait).
    ReduceAll,
    /// A pass at this usage (% of the window), `idle_min` minutes after the last message.
    Pass { percent: u64, idle_min: i64 },
    /// The historian publishes a compartment over the next `share` of the unfolded messages.
    Publish { share: u8 },
    /// `mc-historian recomp`: the compartments are replaced by one over the
    /// same range (a recompute edit, shown at the next busting pass).
    Recomp,
    /// A memory is written (or, with `update`, the oldest one is rewritten).
    Memory { update: bool },
    /// The user pins a message (index taken modulo the messages so far).
    Pin(u16),
    /// The newest message grows (a streamed answer, a tool step that goes on).
    Grow,
    /// The newest message's last part changes in place (a text streamed on,
    /// a tool's output rewritten).
    Edit,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (prop::collection::vec(prop_oneof![3 => 0usize..60, 1 => 1500usize..3000], 0..4), any::<bool>(), prop::bool::weighted(0.15))
            .prop_map(|(tools, finished, with_file)| Step::Turn { tools, finished, with_file }),
        2 => prop::collection::vec(any::<u16>(), 1..6).prop_map(Step::Reduce),
        5 => (prop_oneof![Just(20u64), Just(40), Just(66), Just(88), Just(96)], prop_oneof![3 => Just(0i64), 1 => Just(7)])
            .prop_map(|(percent, idle_min)| Step::Pass { percent, idle_min }),
        1 => (1u8..=100).prop_map(|share| Step::Publish { share }),
        1 => Just(Step::Recomp),
        1 => any::<bool>().prop_map(|update| Step::Memory { update }),
        1 => any::<u16>().prop_map(Step::Pin),
        1 => Just(Step::Grow),
        1 => Just(Step::Edit),
    ]
}

impl Builder {
    /// The newest message's last text or tool output gets more text; its id.
    fn edit(&mut self) -> Option<String> {
        let at = self.tick();
        let last = self.messages.last_mut()?;
        let id = last["info"]["id"].as_str()?.to_string();
        let part = last["parts"]
            .as_array_mut()?
            .iter_mut()
            .rev()
            .find(|p| p["text"].is_string() || p["state"]["output"].is_string())?;
        let text = if part["text"].is_string() {
            &mut part["text"]
        } else {
            &mut part["state"]["output"]
        };
        *text = json!(format!("{} (edited at {at})", text.as_str()?));
        Some(id)
    }

    /// The newest message gets a text part more (its id stays); its id.
    fn grow(&mut self) -> Option<String> {
        let at = self.tick();
        let last = self.messages.last_mut()?;
        let id = last["info"]["id"].as_str()?.to_string();
        let parts = last["parts"].as_array_mut()?;
        parts.push(json!({"id": format!("{id}_g{at}"), "type": "text", "text": format!("and more at {at}")}));
        Some(id)
    }
}

struct Builder {
    messages: Vec<Value>,
    clock: i64,
    n: usize,
}

impl Builder {
    fn id(&mut self, kind: &str) -> String {
        self.n += 1;
        format!("msg_{:05}_{kind}", self.n)
    }

    fn tick(&mut self) -> i64 {
        self.clock += 1500;
        self.clock
    }

    fn turn(&mut self, tools: &[usize], finished: bool, with_file: bool) {
        let id = self.id("u");
        let at = self.tick();
        let mut parts = vec![
            json!({"id": format!("{id}_p0"), "type": "text", "text": format!("request {}", self.n)}),
        ];
        if with_file {
            parts.push(
                json!({"id": format!("{id}_p1"), "type": "file", "mime": "text/plain",
                              "filename": "notes.txt", "url": "file:///repo/notes.txt"}),
            );
        }
        self.messages.push(json!({"info": {"id": id, "sessionID": SESSION, "role": "user", "time": {"created": at}}, "parts": parts}));
        for (i, &lines) in tools.iter().enumerate() {
            let id = self.id("t");
            let at = self.tick();
            let output = format!("{i}: some tool output line for {id}\n").repeat(lines);
            let tool = ["read", "bash", "grep", "edit", "todowrite"][lines % 5];
            // Edits of three files (smart drops mark the superseded ones), todo
            // lists (the older ones are spent), and arguments up to ~60 KB
            // (a dropped call's are cut at the cap).
            let input = match tool {
                "edit" => json!({"filePath": format!("src/f{}.rs", lines % 3),
                                 "oldString": "z".repeat(lines * 20), "newString": "y"}),
                "todowrite" => {
                    json!({"todos": [{"content": format!("task {lines}"), "status": "pending"}]})
                }
                _ => json!({"path": format!("src/{id}.rs"), "body": "z".repeat(lines * 20)}),
            };
            let status = if lines == 0 {
                json!({"status": "error", "input": {"x": 1}, "error": "boom"})
            } else {
                json!({"status": "completed", "input": input,
                                        "output": output, "title": "t", "metadata": {}})
            };
            self.messages.push(json!({
                "info": {"id": id, "sessionID": SESSION, "role": "assistant", "finish": "tool-calls",
                         "time": {"created": at, "completed": at + 200}},
                "parts": [{"type": "step-start"},
                          {"type": "reasoning", "text": format!("why {id}")},
                          {"type": "tool", "callID": format!("call_{}", i % 2), "tool": tool, "state": status},
                          {"type": "step-finish"}]
            }));
        }
        if finished {
            let id = self.id("a");
            let at = self.tick();
            self.messages.push(json!({
                "info": {"id": id, "sessionID": SESSION, "role": "assistant", "finish": "stop",
                         "time": {"created": at, "completed": at + 200}},
                "parts": [{"type": "reasoning", "text": "done thinking"}, {"type": "text", "text": format!("answer {id}")}]
            }));
        }
    }
}

/// Publish a compartment over the next `share` % of the session's messages
/// that no compartment covers yet (the historian's job, done by hand).
fn publish(store: &mut Store, share: u8, now: i64) {
    let Some(session) = sessions::find_session(store.conn(), "opencode", SESSION).unwrap() else {
        return;
    };
    store
        .write(|tx| {
            let covered: i64 = tx.query_row(
                "SELECT coalesce(max(end_ordinal), 0) FROM compartments WHERE session = ?1",
                [session.id],
                |r| r.get(0),
            )?;
            let open: Vec<(i64, String)> = tx
                .prepare("SELECT ordinal, message_id FROM messages WHERE session = ?1 AND ordinal > ?2 ORDER BY ordinal")?
                .query_map([session.id, covered], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()?;
            let take = open.len() * usize::from(share) / 100;
            if take == 0 {
                return Ok(());
            }
            let (first, last) = (&open[0], &open[take - 1]);
            let c = NewCompartment {
                start_ordinal: first.0,
                end_ordinal: last.0,
                start_message_id: first.1.clone(),
                end_message_id: last.1.clone(),
                start_ms: None,
                end_ms: None,
                title: format!("Messages {}-{}", first.0, last.0),
                tiers: ["p1 text".into(), "p2".into(), "p3".into(), "p4".into()],
                importance: i64::from(share),
                episode: None,
            };
            history::publish_compartments(tx, session.id, &[c], now).map(|_| ())
        })
        .unwrap();
}

/// Replace the session's compartments with one over the range they cover.
fn recomp(store: &mut Store, now: i64) {
    let Some(session) = sessions::find_session(store.conn(), "opencode", SESSION).unwrap() else {
        return;
    };
    store
        .write(|tx| {
            let old = history::load_compartments(tx, session.id)?;
            let (Some(first), Some(last)) = (old.first(), old.last()) else {
                return Ok(());
            };
            let (start, end) = (
                first.compartment.start_ordinal,
                last.compartment.end_ordinal,
            );
            let c = NewCompartment {
                start_ordinal: start,
                end_ordinal: end,
                start_message_id: String::new(),
                end_message_id: last.end_message_id.clone(),
                start_ms: None,
                end_ms: None,
                title: format!("Recomputed {start}-{end}"),
                tiers: ["p1 again".into(), "p2".into(), "p3".into(), "p4".into()],
                importance: 50,
                episode: None,
            };
            history::replace_compartments(tx, session.id, &[c], now).map(|_| ())
        })
        .unwrap();
}

fn remember(store: &mut Store, update: bool, n: usize, now: i64) {
    let Some(session) = sessions::find_session(store.conn(), "opencode", SESSION).unwrap() else {
        return;
    };
    let project = session
        .project_identity
        .expect("the envelope names a project");
    store
        .write(|tx| {
            let oldest: Option<i64> = tx.query_row(
                "SELECT min(id) FROM memories WHERE project = ?1",
                [&project],
                |r| r.get(0),
            )?;
            match (update, oldest) {
                (true, Some(id)) => {
                    history::update_memory(tx, &project, id, &format!("rewritten fact {n}"), now)
                }
                _ => history::write_memory(
                    tx,
                    &project,
                    "CONSTRAINTS",
                    &format!("fact {n}"),
                    None,
                    "test",
                    now,
                )
                .map(|_| ()),
            }
        })
        .unwrap();
}

fn pin(store: &mut Store, messages: &[Value], pick: u16, now: i64) {
    let Some(session) = sessions::find_session(store.conn(), "opencode", SESSION).unwrap() else {
        return;
    };
    let m = &messages[usize::from(pick) % messages.len()];
    let id = m["info"]["id"].as_str().unwrap();
    let role = m["info"]["role"].as_str().unwrap();
    store
        .write(|tx| history::pin(tx, session.id, id, role, now).map(|_| ()))
        .unwrap();
}

/// The serve side of [`replay_holds`]: a resident process on its own
/// database, which the test also opens to apply the same steps.
struct Resident {
    /// Its folders live as long as the process.
    _env: TestEnv,
    store: Store,
    served: Served,
    client: Incremental,
}

impl Resident {
    fn start() -> Resident {
        let env = TestEnv::new();
        env.user_config(
            r#"{"transform": {"protected_tags": 4, "clear_reasoning_age": 10,
                "keep_reasoning_tokens": 20, "smart_drops": true}}"#,
        );
        let store = Store::open(&env.db(), &StoreOptions::default()).unwrap();
        let served = Served::start(&mut env.db_command("mc-transform", &["serve"]));
        Resident {
            _env: env,
            store,
            served,
            client: Incremental::default(),
        }
    }
}

/// Run `steps` and check every defer pass against the pass before it, and
/// every pass against the resident process's answer.
fn replay_holds(steps: Vec<Step>) -> Result<(), TestCaseError> {
    let config = TransformConfig {
        protected_tags: 4,
        clear_reasoning_age: 10,
        keep_reasoning_tokens: 20,
        smart_drops: true,
        ..TransformConfig::default()
    };
    let mut store = Store::open_in_memory().unwrap();
    let mut resident = Resident::start();
    let project = tempfile::tempdir().unwrap();
    let mut b = Builder {
        messages: Vec::new(),
        clock: 1_800_000_000_000,
        n: 0,
    };
    b.turn(&[3], true, false);
    let mut previous: Option<Vec<(Option<String>, u128)>> = None;
    // The messages that changed since the last pass.
    let mut grown: Vec<String> = Vec::new();
    let mut max_tag = 0i64;
    for step in steps {
        // Each step that writes the store writes both.
        let mut both = |f: &mut dyn FnMut(&mut Store)| {
            f(&mut store);
            f(&mut resident.store);
        };
        match step {
            Step::Turn {
                tools,
                finished,
                with_file,
            } => b.turn(&tools, finished, with_file),
            Step::Grow => grown.extend(b.grow()),
            Step::Edit => grown.extend(b.edit()),
            Step::Reduce(picks) => {
                if max_tag > 0 {
                    let drop: Vec<i64> =
                        picks.iter().map(|p| i64::from(*p) % max_tag + 1).collect();
                    let request = ReduceRequest {
                        harness: "opencode".into(),
                        session_id: SESSION.into(),
                        drop,
                    };
                    both(&mut |s| {
                        reduce(s, &request, &config, b.clock).unwrap();
                    });
                }
            }
            Step::ReduceAll => {
                let drop = (1..=max_tag).collect();
                let request = ReduceRequest {
                    harness: "opencode".into(),
                    session_id: SESSION.into(),
                    drop,
                };
                both(&mut |s| {
                    reduce(s, &request, &config, b.clock).unwrap();
                });
            }
            Step::Publish { share } => both(&mut |s| publish(s, share, b.clock)),
            Step::Recomp => both(&mut |s| recomp(s, b.clock)),
            Step::Memory { update } => both(&mut |s| remember(s, update, b.n, b.clock)),
            Step::Pin(pick) => both(&mut |s| pin(s, &b.messages, pick, b.clock)),
            Step::Pass { percent, idle_min } => {
                let now = b.clock + 1000 + idle_min * 60_000;
                let value = json!({
                    "session_id": SESSION,
                    "project_dir": project.path(),
                    "system": [format!("You are an agent.\nToday's date: day {}", b.n)],
                    "model": {"provider": "p", "id": "m", "context_limit": 100_000},
                    "usage": {"input": percent * 1000},
                    "now_ms": now,
                    "messages": b.messages,
                });
                let served = resident.client.pass_value(&mut resident.served, &value);
                let out = run_pass(
                    &mut store,
                    Envelope::from_value(value).unwrap(),
                    &config,
                    now,
                )
                .unwrap();
                // Each message's bytes, by their fingerprint (equal exactly
                // when they serialise alike), with its id.
                let mut bytes: Vec<(Option<String>, u128)> = out
                    .messages
                    .iter()
                    .map(|m| (m["info"]["id"].as_str().map(str::to_string), fingerprint(m)))
                    .collect();
                // The system prompt is the first thing a prompt cache keys on.
                bytes.insert(0, (None, fingerprint(&json!(out.system))));
                max_tag = max_tag.max(out.pass.tags as i64);
                if out.pass.decision == Decision::Defer {
                    prop_assert!(
                        out.pass.dropped.is_empty(),
                        "a defer pass dropped {:?}",
                        out.pass.dropped
                    );
                    if let Some(prev) = &previous {
                        prop_assert!(bytes.len() >= prev.len(), "a defer pass lost messages");
                        for (i, (new, old)) in bytes.iter().zip(prev).enumerate() {
                            // A message that grew since is new content.
                            if old.0.as_ref().is_some_and(|id| grown.contains(id)) {
                                break;
                            }
                            prop_assert_eq!(new, old, "message {} changed on a defer pass", i);
                        }
                    }
                }
                let decision = out.pass.decision;
                let document = out.into_value();
                let served = served.map_err(|e| TestCaseError::fail(format!("serve: {e}")))?;
                prop_assert!(
                    same(&served, &document),
                    "the resident answer, rebuilt, is the pass ({:?}):\n{}\n{}",
                    decision,
                    served,
                    document
                );
                // Time moves on past this pass.
                b.clock = now;
                previous = Some(bytes);
                grown.clear();
            }
        }
    }
    Ok(())
}

/// Steps that pile up large outputs, drop them all and pile them up again:
/// what re-arms the Channel 2 reminder and makes relief drops act.
fn heavy_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        5 => prop::collection::vec(1500usize..3000, 1..3)
            .prop_map(|tools| Step::Turn { tools, finished: true, with_file: false }),
        1 => Just(Step::ReduceAll),
        4 => Just(Step::Pass { percent: 30, idle_min: 0 }),
        1 => Just(Step::Pass { percent: 70, idle_min: 0 }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn defer_passes_replay_every_earlier_byte(steps in prop::collection::vec(step(), 1..24)) {
        replay_holds(steps)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn defer_passes_replay_through_reminders_and_mass_drops(steps in prop::collection::vec(heavy_step(), 8..40)) {
        replay_holds(steps)?;
    }
}

//! mc-search against the pass: memory edits never bust the cache by
//! themselves (a defer pass after any of them is byte-identical; the next
//! busting pass shows them in m[1]; the next natural HARD fold moves them into
//! m[0] and empties the delta), expand gives back what a drop took, and
//! nothing of another project is visible.

use serde_json::{Value, json};

use mc_base::config::TransformConfig;
use mc_base::domain::envelope::Envelope;
use mc_base::store::Store;
use mc_transform_core::testkit::{SESSION, T0, body, bytes, session, warm_now};
use mc_transform_core::{Decision, PassOutput, ReduceRequest, reduce, run_pass};

use super::expand::{self, Target};
use super::memory::Written;
use super::{Scope, memory, notes, query, tools};

struct Fixture {
    store: Store,
    dir: tempfile::TempDir,
    messages: Vec<Value>,
    config: TransformConfig,
}

impl Fixture {
    fn new(turns: usize) -> Fixture {
        Fixture {
            store: Store::open_in_memory().unwrap(),
            dir: tempfile::tempdir().unwrap(),
            messages: session(turns),
            config: TransformConfig {
                relief_drop: false,
                ..TransformConfig::default()
            },
        }
    }

    fn run(&mut self, percent: u64, now_ms: i64) -> PassOutput {
        let env = Envelope::from_value(json!({
            "harness": "opencode",
            "session_id": SESSION,
            "project_dir": self.dir.path(),
            "model": {"provider": "anthropic", "id": "m", "context_limit": 100_000, "output_limit": 0},
            "usage": {"input": percent * 1000},
            "now_ms": now_ms,
            "messages": self.messages,
        }))
        .unwrap();
        run_pass(&mut self.store, env, &self.config, now_ms).unwrap()
    }

    /// Below the execute threshold, cache warm: a defer pass.
    fn warm(&mut self) -> PassOutput {
        let now = warm_now(&self.messages);
        let out = self.run(30, now);
        assert_eq!(out.pass.decision, Decision::Defer, "{:?}", out.pass);
        out
    }

    /// Over the execute threshold: a pass that busts anyway (m[1] refreshed).
    fn hot(&mut self) -> PassOutput {
        let now = warm_now(&self.messages);
        let out = self.run(70, now);
        assert_eq!(out.pass.decision, Decision::Execute, "{:?}", out.pass);
        out
    }

    /// The provider's cache has expired: the natural HARD fold.
    fn idle(&mut self, minutes: i64) -> PassOutput {
        let now = warm_now(&self.messages) + minutes * 60_000;
        let out = self.run(30, now);
        assert_eq!(
            out.pass.materialize_reason,
            Some("ttl_idle"),
            "{:?}",
            out.pass
        );
        out
    }

    fn project(&self) -> String {
        mc_base::domain::sessions::find_session(self.store.conn(), "opencode", SESSION)
            .unwrap()
            .unwrap()
            .project_identity
            .unwrap()
    }

    fn scope(&self) -> Scope {
        Scope {
            project: self.project(),
            harness: "opencode".into(),
            session_id: Some(SESSION.into()),
        }
    }
}

fn head(out: &PassOutput) -> (String, String) {
    let text = |i: usize| {
        out.messages[i]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .to_string()
    };
    (text(0), text(1))
}

#[test]
fn memory_edits_wait_for_a_busting_pass_and_fold_into_m0_at_the_next_hard() {
    let mut f = Fixture::new(3);
    let first = f.warm_or_first();
    let p = f.project();

    // A write: nothing moves on a defer pass.
    let a = memory::write(
        &mut f.store,
        &p,
        "NAMING",
        "Money is integer Cents.",
        "agent",
        T0,
    )
    .unwrap();
    let b = memory::write(
        &mut f.store,
        &p,
        "CONSTRAINTS",
        "Never log API keys.",
        "agent",
        T0,
    )
    .unwrap();
    let replay = f.warm();
    assert_eq!(bytes(&replay.messages), bytes(&first.messages));

    // The next busting pass shows them in m[1]; m[0] is untouched.
    let soft = f.hot();
    let (m0, m1) = head(&soft);
    assert_eq!(m0, head(&first).0);
    assert!(m1.contains("<new-memories>"), "{m1}");
    assert!(
        m1.contains(&format!("#{}: Money is integer Cents.", a.id)),
        "{m1}"
    );

    // The natural HARD fold moves them into m[0] and empties the delta.
    let hard = f.idle(10);
    let (m0, m1) = head(&hard);
    assert!(
        m0.contains(&format!("#{}: Money is integer Cents.", a.id)),
        "{m0}"
    );
    assert!(
        m0.contains(&format!("#{}: Never log API keys.", b.id)),
        "{m0}"
    );
    assert!(m1.contains("(nothing new)"), "{m1}");
    let settled = f.warm_at_idle(10);

    // Update, archive, merge and a profile line: still byte-identical on defer.
    memory::update(&mut f.store, &p, a.id, "Money is integer Cents (i64).", T0).unwrap();
    memory::archive(&mut f.store, &p, b.id, Some("superseded by a lint"), T0).unwrap();
    let c = memory::write(
        &mut f.store,
        &p,
        "NAMING",
        "Cents are never f64.",
        "agent",
        T0,
    )
    .unwrap();
    let merged = memory::merge(
        &mut f.store,
        &p,
        &[a.id, c.id],
        "Money is integer Cents (i64), never f64.",
        None,
        T0,
    )
    .unwrap();
    memory::profile_add(&mut f.store, "Prefers short answers.", T0).unwrap();
    let replay = f.warm_at_idle(10);
    assert_eq!(bytes(&replay.messages), bytes(&settled.messages));

    // The next bust carries them as a delta: the merge source superseded, the
    // archived one removed, the merged memory new; the just-written source of
    // the merge (never rendered) does not appear at all.
    let now = warm_now(&f.messages) + 10 * 60_000;
    let soft = f.run(70, now);
    let (m0_soft, m1) = head(&soft);
    assert_eq!(
        m0_soft,
        head(&hard).0,
        "m[0] is untouched by a soft refresh"
    );
    assert!(
        m1.contains(&format!(
            "<superseded id=\"{}\" by=\"{}\"/>",
            a.id, merged.id
        )),
        "{m1}"
    );
    assert!(m1.contains(&format!("<removed id=\"{}\"/>", b.id)), "{m1}");
    assert!(
        m1.contains(&format!(
            "#{}: Money is integer Cents (i64), never f64.",
            merged.id
        )),
        "{m1}"
    );
    assert!(!m1.contains("Cents are never f64."), "{m1}");
    assert!(
        m1.contains("<new-user-profile>\n- Prefers short answers."),
        "{m1}"
    );

    // The next natural HARD folds all of it into m[0] and empties the delta.
    let hard = f.idle(30);
    let (m0, m1) = head(&hard);
    assert!(
        m0.contains(&format!(
            "#{}: Money is integer Cents (i64), never f64.",
            merged.id
        )),
        "{m0}"
    );
    assert!(!m0.contains("Never log API keys."), "{m0}");
    assert!(!m0.contains(&format!("#{}:", a.id)), "{m0}");
    assert!(m0.contains("Prefers short answers."), "{m0}");
    assert!(m1.contains("(nothing new)"), "{m1}");
}

impl Fixture {
    /// The first pass (it renders the head once), at the warm clock.
    fn warm_or_first(&mut self) -> PassOutput {
        let now = warm_now(&self.messages);
        let out = self.run(30, now);
        assert_eq!(out.pass.materialize_reason, Some("first_render"));
        out
    }

    /// A defer pass `minutes` after the last message (after an idle fold).
    fn warm_at_idle(&mut self, minutes: i64) -> PassOutput {
        let now = warm_now(&self.messages) + minutes * 60_000 + 1000;
        let out = self.run(30, now);
        assert_eq!(out.pass.decision, Decision::Defer, "{:?}", out.pass);
        out
    }
}

#[test]
fn expand_gives_back_a_dropped_output_byte_for_byte() {
    // Eight turns: tag 2 is outside the newest 20 (protected) tags.
    let mut f = Fixture::new(8);
    f.warm_or_first();
    let original = f.messages[1]["parts"][2]["state"]["output"]
        .as_str()
        .unwrap()
        .to_string();
    // The first tool output is tag 2 (tag 1 is the first user text).
    let request = ReduceRequest {
        harness: "opencode".into(),
        session_id: SESSION.into(),
        drop: vec![2],
    };
    reduce(&mut f.store, &request, &f.config, T0).unwrap();
    let dropped = f.hot();
    let all: String = bytes(&body(&dropped)).concat();
    assert!(all.contains("[dropped §2§]"), "the drop applied");
    assert!(!all.contains(&original), "the output left the wire");

    let scope = f.scope();
    let e = expand::expand(f.store.conn(), &scope, Target::Tag(2), 15_000).unwrap();
    assert!(!e.truncated);
    assert!(
        e.text
            .starts_with("Original of §2§ (tool read, message 2, dropped from the prompt):"),
        "{}",
        e.text
    );
    assert!(
        e.text.contains("input: {\"filePath\":\"src/call_0_0.rs\"}"),
        "{}",
        e.text
    );
    assert!(
        e.text.ends_with(&original),
        "the original output comes back whole"
    );

    // A budget smaller than the output cuts it and says so.
    let cut = expand::expand(f.store.conn(), &scope, Target::Tag(2), 100).unwrap();
    assert!(cut.truncated);
    assert!(
        cut.text
            .contains("[cut here: the budget of 100 tokens was reached"),
        "{}",
        cut.text
    );

    // A range: every message in order, with roles, cut at a message boundary
    // with the continuation named.
    let range = expand::expand(
        f.store.conn(),
        &scope,
        Target::Range { from: 1, to: 8 },
        15_000,
    )
    .unwrap();
    assert_eq!(range.messages, 8);
    assert!(
        range.text.contains("[1] user:\nplease do step 0"),
        "{}",
        range.text
    );
    assert!(
        range.text.contains("[4] assistant:\ndone with 0"),
        "{}",
        range.text
    );
    let small = expand::expand(
        f.store.conn(),
        &scope,
        Target::Range { from: 1, to: 8 },
        700,
    )
    .unwrap();
    assert!(small.truncated);
    let next = small.continue_with.clone().unwrap();
    assert!(next.ends_with("-8"), "{next}");
    assert!(
        small.text.contains(&format!("continue with {next}")),
        "{}",
        small.text
    );
}

#[test]
fn expand_of_a_compartment_opens_its_range_and_unknown_targets_are_refused() {
    let mut f = Fixture::new(3);
    f.warm_or_first();
    let session = mc_base::domain::sessions::find_session(f.store.conn(), "opencode", SESSION)
        .unwrap()
        .unwrap()
        .id;
    let c = mc_history::store::NewCompartment {
        start_ordinal: 5,
        end_ordinal: 8,
        start_message_id: "msg_001_u".into(),
        end_message_id: "msg_001_z".into(),
        start_ms: None,
        end_ms: None,
        title: "Step one".into(),
        tiers: ["a".into(), "b".into(), "c".into(), "d".into()],
        importance: 50,
        episode: None,
    };
    f.store
        .write(|tx| mc_history::store::publish_compartments(tx, session, &[c], T0))
        .unwrap();
    let scope = f.scope();
    let e = expand::expand(f.store.conn(), &scope, Target::Compartment(1), 15_000).unwrap();
    assert_eq!((e.from, e.to, e.messages), (5, 8, 4));
    assert!(e.text.contains("[5] user:\nplease do step 1"), "{}", e.text);
    for target in [Target::Compartment(9), Target::Tag(999)] {
        let err = expand::expand(f.store.conn(), &scope, target, 15_000).unwrap_err();
        assert_eq!(err.kind(), mc_base::error::ErrorKind::Input, "{err}");
    }
    // Another project's view of the same session id sees nothing.
    let other = Scope {
        project: "git:someone-else".into(),
        ..scope
    };
    assert!(expand::expand(f.store.conn(), &other, Target::Tag(2), 15_000).is_err());
}

#[test]
fn another_projects_memory_is_invisible_by_id_list_query_and_tool() {
    let mut f = Fixture::new(1);
    f.warm_or_first();
    let p = f.project();
    let theirs = memory::write(
        &mut f.store,
        "git:other",
        "NAMING",
        "Their secret naming rule.",
        "user",
        T0,
    )
    .unwrap();
    let ours = memory::write(&mut f.store, &p, "NAMING", "Our naming rule.", "user", T0).unwrap();
    assert!(memory::show(f.store.conn(), &p, theirs.id).is_err());
    assert!(memory::update(&mut f.store, &p, theirs.id, "hijacked", T0).is_err());
    assert!(memory::archive(&mut f.store, &p, theirs.id, None, T0).is_err());
    assert!(memory::merge(&mut f.store, &p, &[theirs.id, ours.id], "x", None, T0).is_err());
    let listed = memory::list(
        f.store.conn(),
        &p,
        &memory::Filter {
            status: Some("all".into()),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        listed.iter().map(|m| m.id).collect::<Vec<_>>(),
        vec![ours.id]
    );
    let hits = query::query(f.store.conn(), &p, "naming rule", &[], 10).unwrap();
    assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), vec![ours.id]);
    // Their memory is unchanged by every refused attempt.
    let still = memory::show(f.store.conn(), "git:other", theirs.id).unwrap();
    assert_eq!(
        (still.content.as_str(), still.status.as_str()),
        ("Their secret naming rule.", "active")
    );
    // Through the tool, the answer is the same "no such memory" as for a missing id.
    let scope = f.scope();
    let ctx = tools::Context {
        scope: &scope,
        source: "agent",
        transform: &f.config,
        now_ms: T0,
        embeddings: None,
    };
    let a = tools::call(
        &mut f.store,
        &ctx,
        "ctx_memory",
        &json!({"action": "show", "id": theirs.id}),
    )
    .unwrap();
    let b = tools::call(
        &mut f.store,
        &ctx,
        "ctx_memory",
        &json!({"action": "show", "id": 9999}),
    )
    .unwrap();
    assert!(a.is_error && b.is_error);
    assert_eq!(
        a.text.replace(&theirs.id.to_string(), "N"),
        b.text.replace("9999", "N")
    );
    // And the head of this project's session never renders it.
    let out = f.idle(10);
    assert!(!head(&out).0.contains("Their secret"));
}

#[test]
fn dedup_normalizes_case_and_whitespace_and_update_refuses_a_duplicate() {
    let mut store = Store::open_in_memory().unwrap();
    let a = memory::write(
        &mut store,
        "git:p",
        "naming",
        "  Use SQLite   for Memory ",
        "user",
        T0,
    )
    .unwrap();
    assert_eq!(a.result, Written::Created);
    assert_eq!(json!(a.result), json!("created"));
    let again = memory::write(
        &mut store,
        "git:p",
        "NAMING",
        "use sqlite for memory",
        "agent",
        T0,
    )
    .unwrap();
    assert_eq!((again.result, again.id), (Written::Existing, a.id));
    assert_eq!(json!(again.result), json!("existing"));
    // Another category, or another project, is another memory.
    assert_eq!(
        memory::write(
            &mut store,
            "git:p",
            "CONSTRAINTS",
            "use sqlite for memory",
            "user",
            T0
        )
        .unwrap()
        .result,
        Written::Created
    );
    assert_eq!(
        memory::write(
            &mut store,
            "git:q",
            "NAMING",
            "use sqlite for memory",
            "user",
            T0
        )
        .unwrap()
        .result,
        Written::Created
    );
    let b = memory::write(&mut store, "git:p", "NAMING", "Tags are §N§.", "user", T0).unwrap();
    let err = memory::update(&mut store, "git:p", b.id, "USE SQLITE FOR MEMORY", T0).unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("memory #{} already says this", a.id)),
        "{err}"
    );
    // Refusals: empty, too long, bad category; nothing written by any.
    for (category, content) in [
        ("NAMING", "  "),
        ("NAMING", &"x".repeat(5000)[..]),
        ("NOPE", "fine"),
    ] {
        assert!(memory::write(&mut store, "git:p", category, content, "user", T0).is_err());
    }
    let count: i64 = store
        .conn()
        .query_row("SELECT count(*) FROM memories", [], |r| r.get(0))
        .unwrap();
    assert_eq!(count, 4);
    // The mutation log has the update of nothing (refused) and nothing else.
    let log: i64 = store
        .conn()
        .query_row("SELECT count(*) FROM memory_mutations", [], |r| r.get(0))
        .unwrap();
    assert_eq!(log, 0);
}

#[test]
fn notes_belong_to_their_session() {
    let mut f = Fixture::new(1);
    f.warm_or_first();
    let scope = f.scope();
    let n = notes::write(
        &mut f.store,
        &scope,
        "check the migration before finishing",
        T0,
    )
    .unwrap();
    assert_eq!(notes::list(f.store.conn(), &scope, false).unwrap().len(), 1);
    let hits = query::query(
        f.store.conn(),
        &scope.project,
        "migration",
        &["note".into()],
        10,
    )
    .unwrap();
    assert_eq!(hits.len(), 1);
    // Another session (unknown to mc) can neither list nor dismiss it.
    let other = Scope {
        session_id: Some("ses_other".into()),
        ..scope.clone()
    };
    assert!(notes::list(f.store.conn(), &other, false).is_err());
    assert!(notes::dismiss(&mut f.store, &other, n.id, T0).is_err());
    notes::dismiss(&mut f.store, &scope, n.id, T0).unwrap();
    assert!(
        notes::list(f.store.conn(), &scope, false)
            .unwrap()
            .is_empty()
    );
    assert_eq!(notes::list(f.store.conn(), &scope, true).unwrap().len(), 1);
    assert!(
        notes::dismiss(&mut f.store, &scope, n.id, T0).is_err(),
        "twice is an error"
    );
}

fn indexed(f: &mut Fixture) -> super::index::IndexReport {
    super::index::catch_up(&mut f.store, None, &mut |_, _| {}).unwrap()
}

#[test]
fn raw_messages_are_indexed_off_the_pass_once_and_found_by_words_and_identifiers() {
    let mut f = Fixture::new(3);
    f.messages.push(mc_transform_core::testkit::answer(
        "msg_100_z",
        "The RetryPolicy lives in src/lease_manager.rs; error E0308 came from parse_json.",
        T0 + 900_000,
    ));
    f.warm_or_first();
    let p = f.project();
    // The pass only queued the parts; nothing is searchable until a catch-up.
    let waiting = super::index::pending(f.store.conn()).unwrap();
    assert!(waiting > 0);
    let none = query::query(f.store.conn(), &p, "RetryPolicy", &["message".into()], 10).unwrap();
    assert!(none.is_empty());
    let first = indexed(&mut f);
    assert_eq!((first.indexed as i64, first.pending), (waiting, 0));
    assert_eq!(indexed(&mut f).indexed, 0, "running it again does no work");
    let find = |f: &Fixture, text: &str| {
        query::query(f.store.conn(), &p, text, &["message".into()], 10)
            .unwrap()
            .into_iter()
            .map(|h| (h.ordinal.unwrap(), h.snippet))
            .collect::<Vec<_>>()
    };
    // Whole identifiers, their camel-case pieces, snake_case pieces, paths, error codes.
    for text in [
        "RetryPolicy",
        "retry policy",
        "lease manager",
        "lease_manager.rs",
        "E0308",
        "parse_json",
    ] {
        let hits = find(&f, text);
        assert_eq!(hits.first().map(|h| h.0), Some(13), "{text:?}: {hits:?}");
        assert!(hits[0].1.contains("RetryPolicy"), "{text:?}: {hits:?}");
    }
    // A tool output and its input are found too; a phrase must match whole.
    assert!(!find(&f, "\"fn example\"").is_empty());
    assert!(find(&f, "\"example fn\"").is_empty());
    // `-word` leaves out.
    assert!(find(&f, "RetryPolicy -lease").is_empty());
}

#[test]
fn search_leaves_out_what_the_asking_session_sees_and_finds_what_left_the_wire() {
    let mut f = Fixture::new(8);
    f.warm_or_first();
    let p = f.project();
    // Drop the first tool output, fold the first turn into a compartment.
    let request = ReduceRequest {
        harness: "opencode".into(),
        session_id: SESSION.into(),
        drop: vec![2],
    };
    reduce(&mut f.store, &request, &f.config, T0).unwrap();
    f.hot();
    let session = mc_base::domain::sessions::find_session(f.store.conn(), "opencode", SESSION)
        .unwrap()
        .unwrap()
        .id;
    let c = mc_history::store::NewCompartment {
        start_ordinal: 1,
        end_ordinal: 4,
        start_message_id: "msg_000_u".into(),
        end_message_id: "msg_000_z".into(),
        start_ms: None,
        end_ms: None,
        title: "Step zero".into(),
        tiers: ["a".into(), "b".into(), "c".into(), "d".into()],
        importance: 50,
        episode: None,
    };
    f.store
        .write(|tx| mc_history::store::publish_compartments(tx, session, &[c], T0))
        .unwrap();
    indexed(&mut f);
    let asking = query::Request {
        project: &p,
        text: "example",
        sources: &["message".to_string()],
        limit: 100,
        asking: Some(("opencode", SESSION)),
        ..query::Request::default()
    };
    let ordinals: Vec<i64> = query::search(f.store.conn(), &asking)
        .unwrap()
        .iter()
        .map(|h| h.ordinal.unwrap())
        .collect();
    // Folded (ordinals 1-4) and dropped outputs are found; raw messages still
    // on the wire (after the compartment, not dropped) are not.
    assert!(
        ordinals.contains(&2) && ordinals.contains(&3),
        "{ordinals:?}"
    );
    assert!(ordinals.iter().all(|o| *o <= 4), "{ordinals:?}");
    // Anyone else (the user on the command line) sees every hit.
    let everyone = query::Request {
        asking: None,
        ..asking.clone()
    };
    assert!(query::search(f.store.conn(), &everyone).unwrap().len() > ordinals.len());
    // A session filter and a harness filter.
    let other = query::Request {
        session: Some(("opencode", "ses_other")),
        ..everyone.clone()
    };
    assert!(query::search(f.store.conn(), &other).unwrap().is_empty());
    let pi = query::Request {
        harness: Some("pi"),
        ..everyone.clone()
    };
    assert!(query::search(f.store.conn(), &pi).unwrap().is_empty());
}

#[test]
fn deleting_a_session_removes_its_index_rows() {
    let mut f = Fixture::new(2);
    f.warm_or_first();
    indexed(&mut f);
    let p = f.project();
    assert!(
        !query::query(f.store.conn(), &p, "example", &[], 10)
            .unwrap()
            .is_empty()
    );
    f.store
        .write(|tx| {
            tx.execute("DELETE FROM sessions WHERE session_id = ?1", [SESSION])?;
            Ok(())
        })
        .unwrap();
    let rows: i64 = f
        .store
        .conn()
        .query_row(
            "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'example'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(rows, 0);
    let check = super::index::check(f.store.conn()).unwrap();
    assert_eq!((check.parts, check.pending, check.healthy), (0, 0, true));
}

fn commit(
    hash_byte: char,
    subject: &str,
    body: &str,
    paths: &[&str],
    day: i64,
) -> crate::gitlog::Commit {
    let hash: String = std::iter::repeat_n(hash_byte, 40).collect();
    crate::gitlog::Commit {
        short_hash: hash[..7].to_string(),
        hash,
        subject: subject.into(),
        body: body.into(),
        paths: paths.iter().map(|p| p.to_string()).collect(),
        author: "Ada <ada@example.com>".into(),
        committed_ms: T0 + day * 86_400_000,
    }
}

fn commit_subjects(store: &Store, words: &str) -> Vec<String> {
    let only = ["commit".to_string()];
    query::query(store.conn(), "git:p", words, &only, 10)
        .unwrap()
        .into_iter()
        .map(|h| h.snippet)
        .collect()
}

#[test]
fn the_commit_index_follows_git_commits_through_rewrites_and_pruning() {
    use crate::gitlog::{WINDOW_MS, store_commits};
    let mut store = Store::open_in_memory().unwrap();
    let first = vec![
        commit(
            'a',
            "Lease: back off on busy",
            "RetryPolicy doubles the wait.",
            &["src/lease.rs"],
            0,
        ),
        commit('b', "Docs: the lease", "", &["README.md"], 1),
        commit(
            'c',
            "Store: open the database",
            "Mentions the lease once, in the body.",
            &["src/store.rs"],
            2,
        ),
    ];
    store
        .write(|tx| store_commits(tx, "git:p", &first, T0))
        .unwrap();
    assert_eq!(commit_subjects(&store, "RetryPolicy").len(), 1);
    // Another project's commits are not this project's hits.
    assert!(
        query::query(store.conn(), "git:other", "lease", &[], 10)
            .unwrap()
            .is_empty()
    );
    // The subject weighs more than the body: the newer commit that names
    // the lease only in its body ranks last.
    let ranked = commit_subjects(&store, "lease");
    assert_eq!(ranked.len(), 3, "{ranked:?}");
    assert!(ranked[2].starts_with("Store: open"), "{ranked:?}");
    // A rewritten commit (same hash, new text): the old words are gone.
    let rewritten = vec![commit(
        'a',
        "Lease: give up after 8 s",
        "No RetryPolicy any more, a deadline.",
        &["src/lease.rs"],
        0,
    )];
    store
        .write(|tx| store_commits(tx, "git:p", &rewritten, T0))
        .unwrap();
    assert!(commit_subjects(&store, "busy").is_empty());
    assert_eq!(commit_subjects(&store, "deadline").len(), 1);
    // Pruned out of the window: out of the index too.
    store
        .write(|tx| store_commits(tx, "git:p", &[], T0 + WINDOW_MS + 3 * 86_400_000))
        .unwrap();
    assert!(commit_subjects(&store, "lease").is_empty());
    let rows: i64 = store
        .conn()
        .query_row(
            "SELECT count(*) FROM commits_fts WHERE commits_fts MATCH 'lease'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(rows, 0);
}

#[test]
fn the_recall_search_names_only_what_the_asking_session_does_not_see() {
    use mc_transform_core::recall::{Ask, Kind, Recall};
    // Eight turns: the first read is outside the protected tags.
    let mut f = Fixture::new(8);
    f.warm_or_first();
    let p = f.project();
    let shown = memory::write(
        &mut f.store,
        &p,
        "CONFIG_VALUES",
        "The staging database listens on port 5433.",
        "agent",
        T0,
    )
    .unwrap();
    // The first read's output dropped: off the wire, still kept. The
    // busting pass that drops it shows the memory in the head from now on.
    let request = ReduceRequest {
        harness: "opencode".into(),
        session_id: SESSION.into(),
        drop: vec![2],
    };
    reduce(&mut f.store, &request, &f.config, T0).unwrap();
    f.hot();
    let unseen = memory::write(
        &mut f.store,
        &p,
        "CONFIG_VALUES",
        "Staging database backups listen on port 6000.",
        "agent",
        T0,
    )
    .unwrap();
    indexed(&mut f);
    let find = |query: &str| {
        let ask = Ask {
            project: &p,
            harness: "opencode",
            session_id: SESSION,
            query,
            limit: 6,
        };
        super::recall::Search.find(f.store.conn(), &ask).unwrap()
    };
    let names: Vec<String> = find("staging database port")
        .into_iter()
        .map(|found| found.name)
        .collect();
    assert!(
        names.contains(&format!("memory #{}", unseen.id)),
        "{names:?}"
    );
    assert!(
        !names.contains(&format!("memory #{}", shown.id)),
        "in the head: {names:?}"
    );
    // Of its own messages only what left the wire, with what opens it.
    let messages: Vec<_> = find("line example return")
        .into_iter()
        .filter(|found| found.kind == Kind::Message)
        .collect();
    assert!(
        messages.iter().any(|m| m.expand.as_deref() == Some("§2§")),
        "{messages:?}"
    );
    // Every one of them is a dropped tag of this session (none still on the wire).
    let session = mc_base::domain::sessions::find_session(f.store.conn(), "opencode", SESSION)
        .unwrap()
        .unwrap()
        .id;
    for m in &messages {
        let tag: i64 = m
            .expand
            .as_deref()
            .unwrap()
            .trim_matches('§')
            .parse()
            .unwrap();
        let status: String = f
            .store
            .conn()
            .query_row(
                "SELECT status FROM tags WHERE session = ?1 AND number = ?2",
                rusqlite::params![session, tag],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(status, "dropped", "{m:?}");
    }
}

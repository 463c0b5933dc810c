//! A damaged search index, through the real binaries: each way an FTS5
//! index can break (its segments gone, its structure record gone, its table
//! dropped, a row's index entry gone), for the messages, memories and
//! commits indexes. Before the repair a search or a memory write fails with
//! an error naming `mc-search index --rebuild` and `--check` exits 1 naming
//! the index; after `mc-search index --rebuild` `--check` is healthy, every
//! search finds what it found before, and memory writes work. `mc-doctor`
//! FAILs on the same damage and `mc-doctor --fix` repairs it.

use std::path::PathBuf;
use std::process::Output;

use serde_json::Value;

use mc_tests::TestEnv;
use mc_tests::generate::{self, SessionSpec};

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn ok(out: Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    json(&out)
}

/// A failure that names the repair (and not a backup).
fn names_the_rebuild(out: &Output, what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{what}: {stderr}");
    assert!(
        stderr.contains("hint: ") && stderr.contains("`mc-search index --rebuild`"),
        "{what}: {stderr}"
    );
    assert!(!stderr.contains("backup"), "{what}: {stderr}");
}

fn git(env: &TestEnv, dir: &std::path::Path, args: &[&str]) {
    let out = env
        .program("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=Ada", "-c", "user.email=ada@example.com"])
        .args([
            "-c",
            "commit.gpgsign=false",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .env("GIT_AUTHOR_DATE", "2026-11-29T10:00:00Z")
        .env("GIT_COMMITTER_DATE", "2026-11-29T10:00:00Z")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}");
}

/// A database with kept messages (indexed), two memories and two commits,
/// all of one project.
struct Fixture {
    env: TestEnv,
    repo: PathBuf,
    /// A word of a kept message.
    message_word: String,
}

impl Fixture {
    fn new() -> Fixture {
        let env = TestEnv::new();
        let repo = env.path("repo");
        std::fs::create_dir_all(repo.join("src")).unwrap();
        std::fs::write(repo.join("src/lease.rs"), "pub struct RetryPolicy;\n").unwrap();
        git(&env, &repo, &["init", "-q"]);
        git(&env, &repo, &["add", "."]);
        git(
            &env,
            &repo,
            &["commit", "-q", "-m", "Lease: back off on busy"],
        );
        std::fs::write(repo.join("src/wal.rs"), "pub fn checkpoint() {}\n").unwrap();
        git(&env, &repo, &["add", "."]);
        git(
            &env,
            &repo,
            &["commit", "-q", "-m", "Checkpoint the journal nightly"],
        );

        let messages = generate::session(&SessionSpec::new(7, 12, 20_000));
        let mut envelope = generate::envelope(
            &messages,
            "ses_index",
            generate::usage_at_percent(20.0),
            generate::last_time_ms(&messages) + 1_000,
        );
        envelope["project_dir"] = Value::from(repo.to_str().unwrap());
        let out = env.run_db("mc-transform", &[], &envelope.to_string());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let f = Fixture {
            env,
            repo,
            message_word: String::new(),
        };
        ok(f.search(&["index"]));
        ok(f.search(&["index", "--commits"]));
        for content in ["Retry the lease on busy", "Checkpoint the journal at night"] {
            ok(f.write_memory(content));
        }
        // A word of one kept text part, to search messages by.
        let text: String = f
            .db()
            .query_row(
                "SELECT content FROM raw_parts WHERE kind = 'message' ORDER BY id LIMIT 1",
                [],
                |r| r.get(0),
            )
            .unwrap();
        let word = text
            .split(|c: char| !c.is_alphabetic())
            .filter(|w| w.len() >= 6)
            .max_by_key(|w| w.len())
            .unwrap()
            .to_lowercase();
        Fixture {
            message_word: word,
            ..f
        }
    }

    fn search(&self, args: &[&str]) -> Output {
        let mut all = vec!["--project-dir", self.repo.to_str().unwrap()];
        all.extend_from_slice(args);
        self.env.run_db("mc-search", &all, "")
    }

    fn write_memory(&self, content: &str) -> Output {
        self.search(&[
            "memory",
            "write",
            "--category",
            "CONSTRAINTS",
            "--content",
            content,
        ])
    }

    fn db(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(self.env.db()).unwrap()
    }

    /// What each index's search finds: (source, query) → hits.
    fn findings(&self) -> Vec<Value> {
        [
            ("message", self.message_word.as_str()),
            ("memory", "lease"),
            ("memory", "journal"),
            ("commit", "checkpoint"),
            ("commit", "lease"),
        ]
        .iter()
        .map(|(source, words)| {
            let found = ok(self.search(&["query", words, "--source", source]));
            let hits = found["hits"].clone();
            assert!(
                !hits.as_array().unwrap().is_empty(),
                "{source} {words}: {found:#}"
            );
            hits
        })
        .collect()
    }
}

/// The ways an index breaks, as SQL on its file.
fn damages(table: &str, key: &str) -> Vec<(String, String)> {
    vec![
        (
            format!("{table}: segments gone"),
            format!("DELETE FROM {table}_data WHERE id > 10"),
        ),
        (
            format!("{table}: structure record gone"),
            format!("DELETE FROM {table}_data WHERE id = 10"),
        ),
        (
            format!("{table}: table dropped"),
            format!("DROP TABLE {table}"),
        ),
        (
            format!("{table}: one row's entry gone"),
            format!("DELETE FROM {table} WHERE rowid = ({key})"),
        ),
    ]
}

#[test]
fn every_damaged_index_is_named_then_rebuilt_from_its_rows() {
    let f = Fixture::new();
    let before = f.findings();
    let healthy = ok(f.search(&["index", "--check"]));
    assert_eq!(healthy["healthy"], true, "{healthy:#}");
    let names: Vec<&str> = healthy["indexes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "messages_fts",
            "memories_fts",
            "notes_fts",
            "compartments_fts",
            "commits_fts"
        ]
    );
    let cases = [
        ("messages_fts", "SELECT min(id) FROM raw_parts", "message"),
        ("memories_fts", "SELECT min(id) FROM memories", "memory"),
        ("commits_fts", "SELECT min(id) FROM git_commits", "commit"),
    ];
    for (table, key, source) in cases {
        for (what, sql) in damages(table, key) {
            // A contentless index (messages, commits) deletes by rowid only
            // with its own delete command.
            f.db().execute_batch(&sql).unwrap();
            let row_gone = what.ends_with("entry gone");

            let check = f.search(&["index", "--check"]);
            assert_eq!(check.status.code(), Some(1), "{what}: --check exits 1");
            let state = json(&check);
            assert_eq!(state["healthy"], false, "{what}: {state:#}");
            let entry = state["indexes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|i| i["name"] == table)
                .unwrap()
                .clone();
            assert_eq!(entry["healthy"], false, "{what}: {state:#}");
            if row_gone {
                assert_eq!(entry["missing"], 1, "{what}: {state:#}");
            }
            names_the_rebuild(&check, &what);

            if !row_gone {
                // A search of the damaged index fails, naming the repair.
                let words = if source == "message" {
                    f.message_word.clone()
                } else {
                    "lease".to_string()
                };
                names_the_rebuild(
                    &f.search(&["query", &words, "--source", source]),
                    &format!("{what}: search"),
                );
                if table == "memories_fts" {
                    // A write that reaches the damaged part fails naming the
                    // repair (lost segments alone do not stop an insert).
                    let out = f.write_memory(&format!("Vacuum the cache weekly ({what})"));
                    if !out.status.success() {
                        names_the_rebuild(&out, &format!("{what}: memory write"));
                    }
                    if what.ends_with("dropped") || what.ends_with("record gone") {
                        names_the_rebuild(&out, &format!("{what}: memory write"));
                    }
                }
            }

            let rebuilt = ok(f.search(&["index", "--rebuild"]));
            assert_eq!(rebuilt["pending"], 0, "{what}: {rebuilt:#}");
            let check = ok(f.search(&["index", "--check"]));
            assert_eq!(check["healthy"], true, "{what}: {check:#}");
            assert_eq!(
                f.findings(),
                before,
                "{what}: the same hits after the rebuild"
            );
            // Idempotent: again changes nothing.
            ok(f.search(&["index", "--rebuild"]));
            assert_eq!(f.findings(), before, "{what}: a second rebuild");
        }
    }
    // Memory writes work on the rebuilt index, and are found.
    let written = ok(f.write_memory("Keep the WAL small"));
    assert_eq!(written["result"], "created", "{written:#}");
    let found = ok(f.search(&["query", "small", "--source", "memory"]));
    assert_eq!(
        found["hits"][0]["snippet"], "Keep the WAL small",
        "{found:#}"
    );
}

/// The doctor's check of the indexes, in `mc-doctor --json`.
fn doctor_index_check(f: &Fixture, args: &[&str]) -> (Value, Value) {
    let mut all = vec!["--json", "--no-probe"];
    all.extend_from_slice(args);
    let out = f.env.run_db("mc-doctor", &all, "");
    let doc = json(&out);
    let check = doc["checks"]
        .as_array()
        .unwrap_or_else(|| panic!("{doc:#}"))
        .iter()
        .find(|c| c["id"] == "db.indexes")
        .unwrap_or_else(|| panic!("no db.indexes check: {doc:#}"))
        .clone();
    (check, doc)
}

#[test]
fn the_doctor_fails_a_damaged_index_and_fix_rebuilds_it() {
    let f = Fixture::new();
    let before = f.findings();
    let (check, doc) = doctor_index_check(&f, &[]);
    assert_eq!(check["status"], "pass", "{doc:#}");

    f.db().execute_batch("DROP TABLE memories_fts").unwrap();
    let (check, doc) = doctor_index_check(&f, &[]);
    assert_eq!(check["status"], "fail", "{doc:#}");
    assert_eq!(check["fix"], "mc-search index --rebuild", "{doc:#}");
    assert!(
        check["what"]
            .as_str()
            .unwrap()
            .contains("memories_fts: the table is missing"),
        "{check:#}"
    );

    let (check, doc) = doctor_index_check(&f, &["--fix"]);
    assert_eq!(check["status"], "pass", "after --fix: {doc:#}");
    let state = ok(f.search(&["index", "--check"]));
    assert_eq!(state["healthy"], true, "{state:#}");
    assert_eq!(f.findings(), before);
    let written = ok(f.write_memory("Keep the WAL small"));
    assert_eq!(written["result"], "created", "{written:#}");
}

//! mc-search on the command line: the subcommands, JSON on stdin as the same
//! fields as the flags, and every bad input a clear error with exit 2 and
//! nothing written.

use serde_json::Value;

use mc_tests::TestEnv;

fn json(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn fails(out: &std::process::Output, code: i32, message: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing on stdout after a failure");
    let first = stderr.lines().next().unwrap_or_default();
    assert!(first.starts_with("mc-search: error: "), "{stderr}");
    assert!(first.contains(message), "{message:?} not in {stderr}");
}

#[test]
fn memories_round_trip_through_flags_and_stdin() {
    let env = TestEnv::new();
    let dir = env.path("project");
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.to_str().unwrap();
    let search = |args: &[&str], stdin: &str| {
        let mut all = vec!["--project-dir", dir];
        all.extend_from_slice(args);
        env.run_db("mc-search", &all, stdin)
    };
    let a = json(&search(
        &[
            "memory",
            "write",
            "--category",
            "naming",
            "--content",
            "Use SQLite  for memory",
        ],
        "",
    ));
    assert_eq!(
        (a["result"].as_str(), a["id"].as_i64()),
        (Some("created"), Some(1))
    );
    // The same fields as JSON on stdin; case and spacing do not make a new memory.
    let again = env.run_db(
        "mc-search",
        &["memory", "write"],
        &format!(r#"{{"project_dir": "{dir}", "category": "NAMING", "content": "use sqlite for MEMORY"}}"#),
    );
    assert_eq!(json(&again)["result"], "existing");
    let shown = json(&search(&["memory", "show", "--id", "1"], ""));
    assert_eq!(shown["content"], "Use SQLite  for memory");
    assert_eq!(shown["source"], "user");
    let archived = json(&search(
        &[
            "memory",
            "archive",
            "--id",
            "1",
            "--reason",
            "moved to Postgres",
        ],
        "",
    ));
    assert_eq!(
        (
            archived["status"].as_str(),
            archived["archive_reason"].as_str()
        ),
        (Some("archived"), Some("moved to Postgres"))
    );
    assert_eq!(
        json(&search(&["memory", "list"], ""))["memories"],
        serde_json::json!([])
    );
    assert_eq!(
        json(&search(&["memory", "list", "--status", "archived"], ""))["memories"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let profile = json(&env.run_db(
        "mc-search",
        &["profile", "add", "--content", "Prefers terse answers."],
        "",
    ));
    assert_eq!(profile["result"], "created");
}

#[test]
fn bad_input_is_a_clear_error_and_writes_nothing() {
    let env = TestEnv::new();
    let dir = env.path("project");
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.to_str().unwrap();
    let search = |args: &[&str], stdin: &str| {
        let mut all = vec!["--project-dir", dir];
        all.extend_from_slice(args);
        env.run_db("mc-search", &all, stdin)
    };
    fails(
        &search(
            &["memory", "write", "--category", "COLOURS", "--content", "x"],
            "",
        ),
        2,
        "ctx_memory \"category\" must be one of PROJECT_RULES, ARCHITECTURE, CONSTRAINTS, CONFIG_VALUES, NAMING, not \"COLOURS\"",
    );
    fails(
        &search(
            &["memory", "write", "--category", "NAMING", "--content", "  "],
            "",
        ),
        2,
        "needs \"content\"",
    );
    let long = "x".repeat(5000);
    fails(
        &search(
            &[
                "memory",
                "write",
                "--category",
                "NAMING",
                "--content",
                &long,
            ],
            "",
        ),
        2,
        "the limit is 4096",
    );
    fails(
        &search(&["memory", "show", "--id", "42"], ""),
        2,
        "no memory #42 in this project",
    );
    fails(
        &search(&["memory", "merge", "--ids", "1", "--content", "x"], ""),
        2,
        "at least two different memory ids",
    );
    fails(
        &search(
            &["note", "write", "--session", "ses_x", "--content", "hi"],
            "",
        ),
        2,
        "has not seen opencode session",
    );
    fails(
        &search(&["expand", "20-10", "--session", "ses_x"], ""),
        2,
        "ends before it starts",
    );
    fails(
        &search(&["query", "   "], ""),
        2,
        "ctx_search needs \"query\"",
    );
    fails(
        &env.run_db("mc-search", &["memory", "write"], "{not json"),
        2,
        "not JSON",
    );
    fails(
        &env.run_db("mc-search", &["memory", "write"], "[1]"),
        2,
        "must be a JSON object",
    );
    let bad_utf8 = run_bytes(&env, &["memory", "write"], b"{\"content\": \"\xff\"}");
    assert_eq!(
        bad_utf8.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&bad_utf8.stderr)
    );
    fails(
        &env.run_db("mc-search", &["call"], r#"{"tool": "ctx_nothing"}"#),
        2,
        "unknown tool",
    );
    // The hint says what to do, on its own line.
    let out = search(&["memory", "show", "--id", "42"], "");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("mc-search: hint: list the project's memories")
    );
    // Nothing was written by any of it.
    let list = json(&search(&["memory", "list", "--status", "all"], ""));
    assert_eq!(list["memories"], serde_json::json!([]));
}

fn run_bytes(env: &TestEnv, args: &[&str], stdin: &[u8]) -> std::process::Output {
    mc_tests::pipe(&mut env.db_command("mc-search", args), stdin).unwrap()
}

#[test]
fn a_tool_call_answers_the_models_text_and_a_mistake_as_an_error_text() {
    let env = TestEnv::new();
    let dir = env.path("project");
    std::fs::create_dir_all(&dir).unwrap();
    let call = |arguments: &str| {
        json(&env.run_db(
            "mc-search",
            &["call"],
            &format!(
                r#"{{"tool": "ctx_memory", "arguments": {arguments}, "project_dir": {:?}}}"#,
                dir.to_str().unwrap()
            ),
        ))
    };
    let saved =
        call(r#"{"action": "write", "category": "CONSTRAINTS", "content": "Never log keys."}"#);
    assert_eq!(saved["is_error"], false);
    assert!(
        saved["text"]
            .as_str()
            .unwrap()
            .starts_with("Saved memory #1 in CONSTRAINTS."),
        "{saved}"
    );
    let wrong = call(r#"{"action": "update", "id": "1"}"#);
    assert_eq!(wrong["is_error"], true);
    assert_eq!(
        wrong["text"],
        "Error: ctx_memory update needs \"content\" (a string; update needs \"id\", \"content\")"
    );
}

/// `git -C dir …` with a fixed author and date.
fn git(env: &TestEnv, dir: &std::path::Path, date: &str, args: &[&str]) -> String {
    env.git_at(dir, date, args).trim().to_string()
}

#[test]
fn commits_are_indexed_once_and_found_by_subject_body_path_and_hash() {
    let env = TestEnv::new();
    let repo = env.path("repo");
    std::fs::create_dir_all(repo.join("src")).unwrap();
    std::fs::write(repo.join("src/lib.rs"), "pub fn open() {}\n").unwrap();
    git(&env, &repo, "2026-11-20T10:00:00Z", &["init", "-q"]);
    git(&env, &repo, "2026-11-20T10:00:00Z", &["add", "."]);
    git(
        &env,
        &repo,
        "2026-11-20T10:00:00Z",
        &["commit", "-q", "-m", "First commit"],
    );
    std::fs::write(repo.join("src/lease.rs"), "pub struct RetryPolicy;\n").unwrap();
    git(&env, &repo, "2026-11-29T10:00:00Z", &["add", "."]);
    git(
        &env,
        &repo,
        "2026-11-29T10:00:00Z",
        &[
            "commit",
            "-q",
            "-m",
            "Lease: back off on busy",
            "-m",
            "The retry policy doubles the wait up to 8 s.",
        ],
    );
    let hash = git(&env, &repo, "2026-11-29T10:00:00Z", &["rev-parse", "HEAD"]);
    let dir = repo.to_str().unwrap();
    let search = |args: &[&str]| {
        let mut all = vec!["--project-dir", dir];
        all.extend_from_slice(args);
        env.run_db("mc-search", &all, "")
    };

    // Nothing indexed yet: no commit hit.
    let before = json(&search(&["query", "lease", "--source", "commit"]));
    assert_eq!(before["hits"], serde_json::json!([]), "{before:#}");

    let first = json(&search(&["index", "--commits"]));
    assert_eq!(first["commits"]["added"], 2, "{first:#}");
    let again = json(&search(&["index", "--commits"]));
    assert_eq!(again["commits"]["added"], 0, "nothing twice: {again:#}");
    assert_eq!(again["commits"]["updated"], 0, "{again:#}");

    // By words of the body, by a path, and by the short hash.
    for words in ["retry policy", "lease.rs", &hash[..7]] {
        let found = json(&search(&["query", words]));
        let hit = &found["hits"][0];
        assert_eq!(hit["source"], "commit", "{words}: {found:#}");
        assert_eq!(hit["commit"], hash.as_str(), "{words}: {found:#}");
        assert_eq!(
            hit["reference"],
            format!("commit {} (2026-11-29)", &hash[..7]),
            "{found:#}"
        );
        assert!(
            hit["snippet"].as_str().unwrap().contains("src/lease.rs"),
            "{found:#}"
        );
    }
    // Dates filter commits by when they were committed.
    let old = json(&search(&["query", "commit lease", "--until", "2026-11-25"]));
    let subjects: Vec<&str> = old["hits"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h["snippet"].as_str())
        .collect();
    assert_eq!(subjects, ["First commit [src/lib.rs]"], "{old:#}");

    // Outside a repository: a clear input error.
    let plain = env.path("plain");
    std::fs::create_dir_all(&plain).unwrap();
    fails(
        &env.run_db(
            "mc-search",
            &[
                "--project-dir",
                plain.to_str().unwrap(),
                "index",
                "--commits",
            ],
            "",
        ),
        2,
        "is not in a git repository",
    );
}

#[test]
fn embeddings_come_from_the_config_and_a_dead_endpoint_leaves_full_text_with_a_warning() {
    let env = TestEnv::new();
    let dir = env.path("project");
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.to_str().unwrap();
    // None configured (the local default turned off): the backfill says what to set.
    env.user_config(r#"{"embeddings": {"model": null}}"#);
    fails(
        &env.run_db("mc-search", &["index", "--embeddings"], ""),
        2,
        "no embeddings model configured",
    );
    let out = env.run_db(
        "mc-search",
        &[
            "--project-dir",
            dir,
            "memory",
            "write",
            "--category",
            "naming",
            "--content",
            "Retry the lease on busy",
        ],
        "",
    );
    assert!(out.status.success());
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    env.user_config(
        &serde_json::json!({
            "providers": {"local": {"kind": "openai", "base_url": format!("http://127.0.0.1:{port}/v1")}},
            "embeddings": {"model": "local/tiny", "dimensions": 4, "query_timeout_ms": 500, "retries": 0},
        })
        .to_string(),
    );
    // The configured length: the search asks the endpoint for the query's vector.
    let found = json(&env.run_db("mc-search", &["--project-dir", dir, "query", "lease"], ""));
    assert_eq!(
        found["hits"][0]["snippet"], "Retry the lease on busy",
        "{found:#}"
    );
    let warning = found["warnings"][0].as_str().unwrap();
    assert!(warning.contains("cannot be reached"), "{warning}");
    assert!(warning.ends_with("ranked by full text only"), "{warning}");
    // The backfill fails with what it managed and how to go on.
    let out = env.run_db("mc-search", &["index", "--embeddings"], "");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot be reached") && stderr.contains("run it again"),
        "{stderr}"
    );
}

/// The local model's files served from 127.0.0.1, as its real address would
/// (the test model is the shipped spec, checksums and all); each request's
/// path is recorded.
fn serve_model() -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/test-model/wordllama-l2-supercat-256");
    assert!(dir.is_dir(), "no test model: run scripts/test-model");
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let port = server.server_addr().to_ip().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for request in server.incoming_requests().take(20) {
            let path = request.url().to_string();
            log.lock().unwrap().push(path.clone());
            let spec = &mc_search_core::embed::local::WORDLLAMA_L2_256;
            let file = spec
                .files
                .iter()
                .find(|f| path == format!("/m/{}", f.remote));
            let _ = match file {
                Some(f) => request.respond(tiny_http::Response::from_file(
                    std::fs::File::open(dir.join(f.name)).unwrap(),
                )),
                None => request.respond(tiny_http::Response::empty(404)),
            };
        }
    });
    (format!("http://127.0.0.1:{port}/m"), seen)
}

#[test]
fn the_local_model_is_fetched_once_then_search_ranks_with_it_and_a_damaged_one_warns() {
    let (url, seen) = serve_model();
    let env = TestEnv::new().with_var("MC_MODELS_URL", &url);
    let dir = env.path("project");
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.to_str().unwrap();
    let write = |content: &str| {
        let out = env.run_db(
            "mc-search",
            &[
                "--project-dir",
                dir,
                "memory",
                "write",
                "--category",
                "naming",
                "--content",
                content,
            ],
            "",
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    write("MSRV is pinned at 1.85 in the release workflow");
    write("The release script uploads the binaries");
    // Not fetched yet: full text, and not a word about it.
    let found = json(&env.run_db("mc-search", &["--project-dir", dir, "query", "release"], ""));
    assert_eq!(found["hits"].as_array().unwrap().len(), 2, "{found:#}");
    assert!(
        found
            .get("warnings")
            .is_none_or(|w| w.as_array().unwrap().is_empty()),
        "{found:#}"
    );
    let doctor = env.run_db("mc-doctor", &["--no-probe", "--json"], "");
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        text.contains("the local model is not fetched yet"),
        "{text}"
    );

    // The first backfill fetches the model (checked), then embeds.
    let out = env.run_db("mc-search", &["index", "--embeddings"], "");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json(&out);
    assert_eq!(
        report["model"], "local:wordllama-l2-supercat-256",
        "{report:#}"
    );
    assert_eq!(report["embedded"], 2, "{report:#}");
    assert_eq!(
        report["fetched"]["downloaded"].as_array().unwrap().len(),
        2,
        "{report:#}"
    );
    let model_dir = env.cache_home().join("mc/models/wordllama-l2-supercat-256");
    assert!(model_dir.join("model.safetensors").is_file());
    // Again: nothing fetched, nothing embedded.
    let again = json(&env.run_db("mc-search", &["index", "--embeddings"], ""));
    assert_eq!(
        (again["embedded"].as_i64(), again.get("fetched")),
        (Some(0), None),
        "{again:#}"
    );
    assert_eq!(seen.lock().unwrap().len(), 2, "each file fetched once");

    let found = json(&env.run_db("mc-search", &["--project-dir", dir, "query", "release"], ""));
    assert!(
        found
            .get("warnings")
            .is_none_or(|w| w.as_array().unwrap().is_empty()),
        "{found:#}"
    );
    assert_eq!(found["hits"].as_array().unwrap().len(), 2, "{found:#}");
    let doctor = env.run_db("mc-doctor", &["--no-probe", "--json"], "");
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert!(text.contains("checksums match"), "{text}");

    // Cut short on disk: search still answers, by full text, and says why.
    let weights = model_dir.join("model.safetensors");
    let bytes = std::fs::read(&weights).unwrap();
    std::fs::write(&weights, &bytes[..1000]).unwrap();
    let out = env.run_db("mc-search", &["--project-dir", dir, "query", "release"], "");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let found = json(&out);
    assert_eq!(found["hits"].as_array().unwrap().len(), 2, "{found:#}");
    let warning = found["warnings"][0].as_str().unwrap();
    assert!(
        warning.contains("damaged") && warning.contains("cut short"),
        "{warning}"
    );
    let doctor = env.run_db("mc-doctor", &["--no-probe", "--json"], "");
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert!(text.contains("cut short"), "{text}");
    // Setup fetches it again (asked for with --embeddings).
    let out = env.run_db("mc-doctor", &["setup", "--embeddings", "--yes"], "");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(&weights).unwrap(), bytes);
}

/// Two `mc-search index` processes at once on one database: both succeed,
/// every kept part is indexed exactly once, and `--check` finds the index whole.
#[test]
fn two_indexers_at_once_index_each_part_once() {
    use mc_tests::generate::{self, SessionSpec};
    let env = TestEnv::new();
    let messages = generate::session(&SessionSpec::new(7, 40, 60_000));
    let envelope = generate::envelope(
        &messages,
        "ses_race",
        generate::usage_at_percent(20.0),
        generate::last_time_ms(&messages) + 1_000,
    );
    let out = env.run_db("mc-transform", &[], &envelope.to_string());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let before = json(&env.run_db("mc-search", &["index", "--check"], ""));
    let parts = before["parts"].as_i64().unwrap();
    assert!(parts > 40, "{before}");
    assert_eq!(before["pending"].as_i64(), Some(parts), "{before}");

    let mut indexers = [
        env.db_command("mc-search", &["index"]),
        env.db_command("mc-search", &["index"]),
    ];
    for out in mc_tests::pipe_all(&mut indexers, b"").unwrap() {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let after = json(&env.run_db("mc-search", &["index", "--check"], ""));
    assert_eq!(after["pending"], 0, "{after}");
    assert_eq!(after["indexed"].as_i64(), Some(parts), "{after}");
    assert_eq!(after["healthy"], true, "{after}");
    let store = mc_base::store::Store::open(&env.db(), &Default::default()).unwrap();
    let rows: i64 = store
        .conn()
        .query_row("SELECT count(*) FROM messages_fts", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, parts, "a part indexed twice, or lost");
}

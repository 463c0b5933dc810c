//! The real Codex (npm `@openai/codex` 0.169.0, pinned in `tests/e2e`)
//! through `mc-transform gateway`: its provider's base URL is the gateway's
//! `/openai`, `gateway.openai_upstream` a strict fake Responses API of ours
//! on 127.0.0.1 (refuses unpaired calls and changed reasoning, reports
//! cached tokens by common prefix). A test is skipped (with a note) only
//! where the binary is not installed, never under CI.

use mc_base::codec::responses::Request;
use mc_tests::codex::{Codex, Options};
use mc_tests::fake_responses::{Recorded, Reply, Usage};
use serde_json::json;

fn start(test: &str, gateway_db: Option<std::path::PathBuf>) -> Option<Codex> {
    start_with(test, gateway_db, None)
}

fn start_with(
    test: &str,
    gateway_db: Option<std::path::PathBuf>,
    transform: Option<serde_json::Value>,
) -> Option<Codex> {
    let cx = Codex::start(
        test,
        Options {
            gateway: true,
            gateway_db,
            transform,
            // Codex's own compaction only where a test asks for it.
            auto_compact_limit: Some(10_000_000),
            ..Options::default()
        },
    )?;
    cx.provider.strict();
    Some(cx)
}

fn shell(cmd: &str) -> Reply {
    Reply::Call {
        namespace: None,
        name: "exec_command".into(),
        arguments: json!({ "cmd": cmd }),
    }
}

fn outputs(request: &Recorded) -> Vec<String> {
    request.call_outputs().into_iter().map(|(_, o)| o).collect()
}

fn item_bytes(raw: &[u8]) -> Vec<Vec<u8>> {
    let req = Request::parse(raw).unwrap();
    req.items
        .iter()
        .map(|i| req.bytes(i.span).to_vec())
        .collect()
}

fn assert_no_secret(cx: &Codex) {
    let stderr = cx.gateway.as_ref().unwrap().stderr();
    assert!(
        !stderr.contains("test-key"),
        "the key was printed: {stderr}"
    );
}

#[test]
fn codex_through_the_gateway_gets_tags_its_reasoning_back_and_its_key_upstream() {
    let Some(cx) = start(
        "codex_through_the_gateway_gets_tags_its_reasoning_back_and_its_key_upstream",
        None,
    ) else {
        return;
    };
    let p = &cx.provider;
    p.push(shell("echo first-output"), None);
    p.push(Reply::Text("It printed first-output.".into()), None);
    let thread = cx.exec(None, "Run echo.").thread_id;
    p.push(shell("echo second-output"), None);
    p.push(Reply::Text("Done again.".into()), None);
    cx.exec(Some(&thread), "Once more.");
    assert!(p.refusals().is_empty(), "{:?}", p.refusals());
    let turns = p.turns();
    assert_eq!(turns.len(), 4, "{turns:?}");
    // Tags on the wire: the tool output the model sees is tagged.
    let out = outputs(&turns[1]);
    assert!(
        out.iter()
            .any(|o| o.starts_with('§') && o.contains("first-output")),
        "{out:?}"
    );
    // The reasoning item Codex sent back reached the fake byte for byte
    // (the strict fake refuses anything else), and it is there.
    assert_eq!(turns[1].count("sealed/reasoning"), 1, "{}", turns[1].body);
    // Each request repeats the previous one's items byte for byte, then grows.
    for pair in turns.windows(2) {
        let (a, b) = (item_bytes(&pair[0].raw), item_bytes(&pair[1].raw));
        assert!(b.len() > a.len());
        assert_eq!(b[..a.len()], a[..], "an earlier item changed");
    }
    // Codex's key reached the provider as it sent it, and nowhere else.
    for turn in &turns {
        assert_eq!(turn.header("authorization"), Some("Bearer test-key"));
        assert_eq!(turn.path, "/v1/responses");
        assert_eq!(turn.header("session-id"), Some(thread.as_str()));
    }
    assert_no_secret(&cx);
    // The pass ran in Codex's own session, the one its hooks and MCP name.
    let db = rusqlite::Connection::open(&cx.db).unwrap();
    let sessions: Vec<(String, String)> = db
        .prepare("SELECT harness, session_id FROM sessions")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(sessions, [("codex".to_string(), thread.clone())]);
}

#[test]
fn a_queued_drop_waits_for_a_busting_request_then_replays() {
    // Only the newest tag is protected, so a short session can drop one.
    let Some(cx) = start_with(
        "a_queued_drop_waits_for_a_busting_request_then_replays",
        None,
        Some(json!({"protected_tags": 1})),
    ) else {
        return;
    };
    let p = &cx.provider;
    let big = "x".repeat(3000);
    p.push(shell(&format!("echo {big}")), None);
    p.push(Reply::Text("Long output seen.".into()), None);
    let thread = cx.exec(None, "Print something long.").thread_id;
    let tagged = outputs(&p.turns()[1]);
    let tag: i64 = tagged
        .iter()
        .find(|o| o.contains(&big))
        .and_then(|o| o.strip_prefix('§'))
        .and_then(|o| o.split('§').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no tagged output: {tagged:?}"));
    let reduce = cx.mc(
        "mc-transform",
        &["reduce"],
        &json!({"harness": "codex", "session_id": thread, "drop": [tag]}).to_string(),
    );
    assert!(
        reduce.status.success(),
        "{}",
        String::from_utf8_lossy(&reduce.stderr)
    );
    // A deferring request keeps the output; its answer puts the window over
    // mc's threshold (65 % of Codex's own compaction limit, 90 % of its
    // 200k window: the gateway's window for Codex) and under that limit.
    let full = Usage {
        input: 130_000,
        cached: 0,
        output: 10,
    };
    p.push(Reply::Text("Noted.".into()), Some(full));
    cx.exec(Some(&thread), "Go on.");
    let deferred = p.turns().last().unwrap().clone();
    let holding = |r: &Recorded| outputs(r).iter().filter(|o| o.contains(&big)).count();
    assert_eq!(holding(&deferred), 1, "dropped on a deferring request");
    // The next request busts: the drop applies, the call keeps its output item.
    p.push(Reply::Text("Next.".into()), None);
    cx.exec(Some(&thread), "And now?");
    let busted = p.turns().last().unwrap().clone();
    // mc's head comes after Codex's developer message, never before.
    assert_eq!(
        busted.body["input"][0]["role"], "developer",
        "{}",
        busted.body
    );
    assert_eq!(holding(&busted), 0, "{}", busted.body);
    let kinds: Vec<String> = busted.body["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            format!(
                "{} {} {}",
                i["type"],
                i["role"],
                i.to_string().chars().take(150).collect::<String>()
            )
        })
        .collect();
    assert!(
        outputs(&busted).iter().any(|o| o.starts_with("[dropped")),
        "{:#?}",
        kinds
    );
    // And replayed on the one after, byte for byte up to its new tail.
    p.push(Reply::Text("Again.".into()), None);
    cx.exec(Some(&thread), "Again?");
    let replayed = p.turns().last().unwrap().clone();
    let (a, b) = (item_bytes(&busted.raw), item_bytes(&replayed.raw));
    assert_eq!(b[..a.len()], a[..]);
    assert!(p.refusals().is_empty(), "{:?}", p.refusals());
}

#[test]
fn an_upstream_error_reaches_codex_unchanged() {
    let Some(cx) = start("an_upstream_error_reaches_codex_unchanged", None) else {
        return;
    };
    let body = json!({"error": {"message": "Your input exceeds the context window of this model. Please adjust your input and try again.",
        "type": "invalid_request_error", "param": "input", "code": "context_length_exceeded"}});
    cx.provider.push(
        Reply::Error {
            status: 400,
            body: body.to_string(),
        },
        None,
    );
    let out = cx.exec_output(None, "Hello.");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("exceeds the context window") || stdout.contains("context window"),
        "Codex did not show the provider's error: {stdout}"
    );
    assert_no_secret(&cx);
}

#[test]
fn a_broken_mc_database_leaves_codex_working_untouched() {
    let dir = tempfile::tempdir().unwrap();
    // A folder where the database should be: the store cannot open.
    let Some(cx) = start(
        "a_broken_mc_database_leaves_codex_working_untouched",
        Some(dir.path().to_path_buf()),
    ) else {
        return;
    };
    cx.provider.push(shell("echo untouched"), None);
    cx.provider.push(Reply::Text("Fine.".into()), None);
    let exec = cx.exec(None, "Run it.");
    assert_eq!(exec.message, "Fine.");
    let turns = cx.provider.turns();
    assert_eq!(turns.len(), 2);
    let out = outputs(&turns[1]);
    assert!(out.iter().all(|o| !o.starts_with('§')), "{out:?}");
    let stderr = cx.gateway.as_ref().unwrap().stderr();
    assert!(
        stderr.contains("forwards every request untouched"),
        "{stderr}"
    );
}

/// `mc-transform codex exec …` with mc's config at `config` (the gateway on
/// `port`, forwarding to the fake), Codex's own provider the fake directly.
fn launch(cx: &Codex, port: u16, prompt: &str) -> std::process::Output {
    let config = cx.file("launch.jsonc");
    std::fs::write(
        &config,
        format!(
            r#"{{"gateway": {{"openai_upstream": "{}", "listen": "127.0.0.1:{port}"}}}}"#,
            cx.provider.base_url()
        ),
    )
    .unwrap();
    let mut command = cx.command(mc_tests::bin_path("mc-transform"));
    command
        .env("MC_CONFIG", &config)
        .env("MC_CODEX_BIN", mc_tests::codex::codex_bin().unwrap())
        .env("OPENAI_API_KEY", "test-key")
        .args(["codex", "exec", "--json", "--skip-git-repo-check"])
        .args(["-s", "danger-full-access", prompt]);
    mc_tests::pipe_within(&mut command, b"", std::time::Duration::from_secs(120))
        .unwrap()
        .expect("mc-transform codex finishes")
}

fn launcher_codex(test: &str) -> Option<Codex> {
    let cx = Codex::start(
        test,
        Options {
            auto_compact_limit: Some(10_000_000),
            ..Options::default()
        },
    )?;
    cx.provider.strict();
    Some(cx)
}

fn end(pid: Option<u32>) {
    if let Some(pid) = pid {
        let _ = std::process::Command::new("kill")
            .arg(pid.to_string())
            .status();
    }
}

fn started_pid(stderr: &str) -> Option<u32> {
    stderr
        .split("(pid ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|pid| pid.parse().ok())
}

#[test]
fn the_launcher_starts_a_gateway_and_codex_goes_through_it() {
    let Some(cx) = launcher_codex("the_launcher_starts_a_gateway_and_codex_goes_through_it") else {
        return;
    };
    cx.provider.push(shell("echo via-launcher"), None);
    cx.provider.push(Reply::Text("Launched.".into()), None);
    let port = mc_tests::gateway::free_port();
    let out = launch(&cx, port, "Run it.");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let pid = started_pid(&stderr);
    end(pid);
    assert!(out.status.success(), "{stderr}");
    assert!(pid.is_some(), "no gateway was started: {stderr}");
    let turns = cx.provider.turns();
    assert_eq!(turns.len(), 2);
    assert!(
        outputs(&turns[1]).iter().any(|o| o.starts_with('§')),
        "not through mc: {:?}",
        outputs(&turns[1])
    );
    assert_eq!(turns[1].header("authorization"), Some("Bearer test-key"));
    assert!(!stderr.contains("test-key"));
    // Codex's own config was not touched.
    let config = std::fs::read_to_string(cx.codex_home().join("config.toml")).unwrap();
    assert!(!config.contains("mc-gateway"), "{config}");
}

#[test]
fn a_killed_gateway_is_started_again_and_codex_carries_on() {
    let Some(cx) = launcher_codex("a_killed_gateway_is_started_again_and_codex_carries_on") else {
        return;
    };
    let port = mc_tests::gateway::free_port();
    // A gateway of ours the launcher finds; the agent's command kills it.
    let config = cx.file("own-gateway.jsonc");
    std::fs::write(
        &config,
        format!(
            r#"{{"gateway": {{"openai_upstream": "{}"}}}}"#,
            cx.provider.base_url()
        ),
    )
    .unwrap();
    let mut first = mc_tests::gateway::GatewayProcess::start_with(
        &config,
        &cx.home(),
        port,
        &[("MC_DB", &cx.db)],
    );
    cx.provider
        .push(shell(&format!("kill -9 {}; sleep 1", first.pid())), None);
    cx.provider.push(Reply::Text("Still here.".into()), None);
    let out = launch(&cx, port, "Kill it.");
    first.kill();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let pid = started_pid(&stderr);
    end(pid);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("had stopped; started it again"), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Still here."), "{stdout}");
    assert!(
        cx.provider.refusals().is_empty(),
        "{:?}",
        cx.provider.refusals()
    );
}

#[test]
fn without_a_gateway_the_launcher_lets_codex_use_its_own_provider() {
    let Some(cx) = launcher_codex("without_a_gateway_the_launcher_lets_codex_use_its_own_provider")
    else {
        return;
    };
    // Something that is not mc's gateway holds the port.
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = squatter.local_addr().unwrap().port();
    cx.provider.push(Reply::Text("Direct.".into()), None);
    let out = launch(&cx, port, "Hello.");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("Codex runs on its own provider"),
        "{stderr}"
    );
    let turns = cx.provider.turns();
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0].count("§"), 0, "went through mc");
    drop(squatter);
}

#[test]
fn the_doctor_says_where_the_gateway_sends_codex_and_when_the_config_moved() {
    let dir = tempfile::tempdir().unwrap();
    let port = mc_tests::gateway::free_port();
    let config = dir.path().join("config.jsonc");
    let write = |openai: &str| {
        std::fs::write(
            &config,
            format!(
                r#"{{"gateway": {{"openai_upstream": "{openai}", "listen": "127.0.0.1:{port}"}}}}"#
            ),
        )
        .unwrap();
    };
    let doctor = || {
        let mut command = std::process::Command::new(mc_tests::bin_path("mc-doctor"));
        mc_tests::env::seal_at_home(&mut command, dir.path())
            .env("MC_CONFIG", &config)
            .env("MC_DB", dir.path().join("ctx.db"))
            .arg("--json");
        let out = mc_tests::pipe_within(&mut command, b"", std::time::Duration::from_secs(60))
            .unwrap()
            .expect("mc-doctor finishes");
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        doc["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == "gateway")
            .cloned()
            .unwrap_or_else(|| panic!("no gateway check: {doc:#}"))
    };
    write("http://127.0.0.1:9/v1");
    let mut gateway = mc_tests::gateway::GatewayProcess::start(&config, dir.path(), port);
    let up = doctor();
    assert_eq!(up["status"], "pass", "{up}");
    assert!(
        up["what"]
            .as_str()
            .unwrap()
            .contains("Codex's /openai to http://127.0.0.1:9/v1"),
        "{up}"
    );
    // The config now names another upstream than the running gateway's.
    write("https://chatgpt.com/backend-api/codex");
    let moved = doctor();
    gateway.kill();
    assert_eq!(moved["status"], "warn", "{moved}");
    assert!(
        moved["what"]
            .as_str()
            .unwrap()
            .contains("gateway.openai_upstream is https://chatgpt.com/backend-api/codex"),
        "{moved}"
    );
}

#[test]
fn codex_s_own_compaction_passes_untouched_and_pins_stay_exactly_once() {
    const ALPHA: &str = "PIN-ALPHA: always run the lock test before committing.";
    const BRAVO: &str = "PIN-BRAVO: the parser lives in src/parse.rs.";
    let restore = format!(
        "'{}' restore --harness codex",
        mc_tests::bin_path("mc-pin").display()
    );
    let Some(cx) = Codex::start(
        "codex_s_own_compaction_passes_untouched_and_pins_stay_exactly_once",
        Options {
            hooks: vec![("SessionStart".into(), None, restore)],
            auto_compact_limit: Some(50_000),
            gateway: true,
            ..Options::default()
        },
    ) else {
        return;
    };
    cx.provider.strict();
    let p = &cx.provider;
    let over = Some(Usage {
        input: 60_000,
        cached: 0,
        output: 10,
    });
    let pin = |thread: &str, last: &str| {
        cx.mc_json(
            "mc-pin",
            &[
                "pin",
                "--harness",
                "codex",
                "--session",
                thread,
                "--last",
                last,
            ],
        )
    };
    p.push(Reply::Text("Understood.".into()), None);
    let t = cx.exec(None, ALPHA).thread_id;
    pin(&t, "user");
    p.push(Reply::Text(BRAVO.into()), over);
    cx.exec(Some(&t), "Write the parser.");
    pin(&t, "assistant");
    for round in 1..=2 {
        let n = p.turns().len();
        p.push(Reply::Text(format!("Round {round} done.")), over);
        cx.exec(Some(&t), &format!("Round {round}."));
        assert_eq!(p.compactions(), round, "Codex compacted");
        for text in [ALPHA, BRAVO] {
            assert_eq!(
                p.turns()[n].count(text),
                1,
                "after compaction {round}: {text:?} not exactly once:\n{}",
                p.turns()[n].body
            );
        }
    }
    // Codex's compaction requests went as Codex wrote them: no tag of mc's.
    let compactions: Vec<Recorded> = p
        .requests()
        .into_iter()
        .filter(Recorded::is_compaction)
        .collect();
    assert_eq!(compactions.len(), 2);
    for c in &compactions {
        assert_eq!(c.count("§"), 0, "a compaction request was changed");
    }
    // The turns did go through mc.
    assert!(p.turns().iter().any(|r| r.count("§") > 0));
    assert!(p.refusals().is_empty(), "{:?}", p.refusals());
}

/// `mc-doctor ARGS` in Codex's sealed environment.
fn doctor(cx: &Codex, args: &[&str]) -> std::process::Output {
    let mut command = cx.command(mc_tests::bin_path("mc-doctor"));
    command.args(args);
    mc_tests::pipe_within(&mut command, b"", std::time::Duration::from_secs(60))
        .unwrap()
        .expect("mc-doctor finishes")
}

fn gateway_check(cx: &Codex) -> serde_json::Value {
    let out = doctor(cx, &["--json", "--no-probe"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "gateway")
        .cloned()
        .unwrap_or_else(|| panic!("no gateway check: {doc:#}"))
}

#[test]
fn setup_sends_a_plain_codex_through_a_gateway_its_hooks_start_and_uninstall_gives_it_back() {
    use mc_tests::gateway::{EndOnDrop, end_gateway_on, free_port, status_on};
    let Some(cx) = launcher_codex(
        "setup_sends_a_plain_codex_through_a_gateway_its_hooks_start_and_uninstall_gives_it_back",
    ) else {
        return;
    };
    let port = free_port();
    let _end = EndOnDrop(port);
    // The user's own setup: Codex's config selects their provider (the
    // fake); mc's user config names the gateway's port, and nothing says
    // where Codex's calls go but Codex's config.
    let mut extra: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(cx.mc_config()).unwrap()).unwrap();
    extra.as_object_mut().unwrap().remove("gateway");
    std::fs::write(cx.mc_config(), extra.to_string()).unwrap();
    let user_config = cx.home().join(".config/mc/config.jsonc");
    std::fs::create_dir_all(user_config.parent().unwrap()).unwrap();
    let config_before = format!("// mine\n{{\"gateway\": {{\"listen\": \"127.0.0.1:{port}\"}}}}\n");
    std::fs::write(&user_config, &config_before).unwrap();
    let toml = cx.codex_home().join("config.toml");
    let toml_before = std::fs::read_to_string(&toml).unwrap();
    let hooks = cx.codex_home().join("hooks.json");
    let hooks_before = std::fs::read_to_string(&hooks).unwrap();

    let out = doctor(&cx, &["setup", "--harness", "codex", "--yes"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let toml_after = std::fs::read_to_string(&toml).unwrap();
    assert!(
        toml_after.contains("model_provider = \"mc-gateway\"")
            && toml_after.contains(&format!("base_url = \"http://127.0.0.1:{port}/openai\"")),
        "{toml_after}"
    );
    assert!(status_on(port).is_none(), "setup itself starts no gateway");

    // A plain `codex`: its SessionStart hook starts the gateway before the
    // first call, and every call goes through it to the user's provider.
    cx.provider.push(shell("echo through-mc"), None);
    cx.provider.push(Reply::Text("Done.".into()), None);
    let run = cx.exec(None, "Run it.");
    assert_eq!(run.message, "Done.");
    let status = status_on(port).expect("the hook left a gateway running");
    assert_eq!(status["openai_upstream"], cx.provider.base_url().as_str());
    // mc-pin's hook read what setup wrote in config.toml as "through the
    // gateway": it gave the session its folder (the head's memory needs it).
    assert_eq!(
        session_dir(&cx, &run.thread_id).as_deref(),
        Some(canonical(&cx.project).as_str()),
        "the hook did not see Codex's config select the gateway"
    );
    let turns = cx.provider.turns();
    assert_eq!(turns.len(), 2);
    assert!(
        outputs(&turns[1]).iter().any(|o| o.starts_with('§')),
        "not through mc: {:?}",
        outputs(&turns[1])
    );
    assert!(
        cx.provider.refusals().is_empty(),
        "{:?}",
        cx.provider.refusals()
    );
    let check = gateway_check(&cx);
    assert_eq!(check["status"], "pass", "{check}");
    assert!(
        check["what"]
            .as_str()
            .unwrap()
            .contains("Codex's config selects it"),
        "{check}"
    );

    // The gateway killed between sessions: the doctor warns, and the next
    // `codex`'s hook starts it again (no "Reconnecting..." forever).
    end_gateway_on(port);
    let check = gateway_check(&cx);
    assert_eq!(check["status"], "warn", "{check}");
    assert!(
        check["what"]
            .as_str()
            .unwrap()
            .contains("Codex is wired through the gateway"),
        "{check}"
    );
    cx.provider.push(Reply::Text("Again.".into()), None);
    let again = cx.exec(Some(&run.thread_id), "Once more.");
    assert_eq!(again.message, "Again.");
    assert!(status_on(port).is_some(), "the hook did not start it again");
    assert_eq!(cx.provider.turns().len(), 3);

    // The port held by another program: no gateway can be had, and the
    // prompt's hook blocks the prompt with the reason, where Codex would
    // otherwise wait "Reconnecting..." for good.
    end_gateway_on(port);
    let squatter = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let mut command = cx.command(mc_tests::codex::codex_bin().unwrap());
    command
        .env("OPENAI_API_KEY", "test-key")
        .args([
            "exec",
            "--dangerously-bypass-hook-trust",
            "--skip-git-repo-check",
        ])
        .arg("Blocked?");
    let out = mc_tests::pipe_within(&mut command, b"", std::time::Duration::from_secs(60))
        .unwrap()
        .expect("Codex ends the blocked turn instead of reconnecting");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("UserPromptSubmit Blocked"), "{text}");
    assert_eq!(cx.provider.turns().len(), 3, "a call left for a dead port");
    drop(squatter);

    // Uninstall gives the user's files back byte for byte, and Codex goes
    // to its provider directly again.
    let out = doctor(&cx, &["setup", "--uninstall", "--harness", "codex"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&toml).unwrap(), toml_before);
    assert_eq!(std::fs::read_to_string(&hooks).unwrap(), hooks_before);
    assert_eq!(
        std::fs::read_to_string(&user_config).unwrap(),
        config_before
    );
    cx.provider.push(Reply::Text("Direct.".into()), None);
    let direct = cx.exec(None, "Hello.");
    assert_eq!(direct.message, "Direct.");
    assert!(
        status_on(port).is_none(),
        "no hook of mc's is left to start one"
    );
    let last = cx.provider.turns().pop().unwrap();
    assert_eq!(last.count("§"), 0, "went through mc");
}

/// The folder mc-pin's SessionStart hook gave `thread` (only a hook that
/// knows Codex goes through the gateway does: a request names no folder).
fn session_dir(cx: &Codex, thread: &str) -> Option<String> {
    let db = rusqlite::Connection::open(&cx.db).unwrap();
    db.query_row(
        "SELECT project_dir FROM sessions WHERE harness = 'codex' AND session_id = ?1",
        [thread],
        |r| r.get(0),
    )
    .ok()
    .flatten()
}

fn canonical(path: &std::path::Path) -> String {
    std::fs::canonicalize(path).unwrap().display().to_string()
}

/// `mc-transform codex exec …` (or `exec resume THREAD …`) with hooks
/// trusted, mc's config at `config`.
fn launch_with_hooks(
    cx: &Codex,
    config: &std::path::Path,
    resume: Option<&str>,
    prompt: &str,
) -> std::process::Output {
    let mut command = cx.command(mc_tests::bin_path("mc-transform"));
    command
        .env("MC_CONFIG", config)
        .env("MC_CODEX_BIN", mc_tests::codex::codex_bin().unwrap())
        .env("OPENAI_API_KEY", "test-key")
        .args(["codex", "exec", "--json", "--dangerously-bypass-hook-trust"])
        .args(["--skip-git-repo-check", "-s", "danger-full-access"]);
    if let Some(thread) = resume {
        command.args(["resume", thread]);
    }
    command.arg(prompt);
    mc_tests::pipe_within(&mut command, b"", std::time::Duration::from_secs(120))
        .unwrap()
        .expect("mc-transform codex finishes")
}

#[test]
fn under_the_launcher_codex_s_hooks_know_the_gateway_and_pins_are_in_every_request_once() {
    const ALPHA: &str = "PIN-ALPHA: always run the lock test before committing.";
    const BRAVO: &str = "PIN-BRAVO: the parser lives in src/parse.rs.";
    let restore = format!(
        "'{}' restore --harness codex",
        mc_tests::bin_path("mc-pin").display()
    );
    // What Codex gives its hooks' environment, as they see it.
    let probe = "env > \"$HOME/../hook-env\"".to_string();
    let Some(cx) = Codex::start(
        "under_the_launcher_codex_s_hooks_know_the_gateway_and_pins_are_in_every_request_once",
        Options {
            hooks: vec![
                ("SessionStart".into(), None, restore),
                ("SessionStart".into(), None, probe),
            ],
            auto_compact_limit: Some(50_000),
            ..Options::default()
        },
    ) else {
        return;
    };
    cx.provider.strict();
    let p = &cx.provider;
    let port = mc_tests::gateway::free_port();
    let config = cx.file("launch.jsonc");
    std::fs::write(
        &config,
        format!(
            r#"{{"gateway": {{"openai_upstream": "{}", "listen": "127.0.0.1:{port}"}}}}"#,
            p.base_url()
        ),
    )
    .unwrap();
    // The gateway the launcher starts, ended with the test.
    let _end = mc_tests::gateway::EndOnDrop(port);
    let run = |resume: Option<&str>, prompt: &str| -> String {
        let out = launch_with_hooks(&cx, &config, resume, prompt);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find_map(|e| e["thread_id"].as_str().map(str::to_string))
            .or_else(|| resume.map(str::to_string))
            .expect("a thread")
    };
    let over = Some(Usage {
        input: 60_000,
        cached: 0,
        output: 10,
    });
    let pin = |thread: &str, last: &str| {
        cx.mc_json(
            "mc-pin",
            &[
                "pin",
                "--harness",
                "codex",
                "--session",
                thread,
                "--last",
                last,
            ],
        )
    };
    p.push(Reply::Text("Understood.".into()), None);
    let t = run(None, ALPHA);
    // Codex hands its hooks its own environment: the launcher's variable
    // reaches mc-pin, which takes the session as through the gateway.
    let env = std::fs::read_to_string(cx.file("hook-env")).expect("the probe hook ran");
    let want = format!("MC_CODEX_GATEWAY=http://127.0.0.1:{port}/openai");
    assert!(env.lines().any(|l| l == want), "{env}");
    assert_eq!(
        session_dir(&cx, &t).as_deref(),
        Some(canonical(&cx.project).as_str())
    );
    pin(&t, "user");
    p.push(Reply::Text(BRAVO.into()), over);
    run(Some(&t), "Write the parser.");
    pin(&t, "assistant");
    for round in 1..=2 {
        let n = p.turns().len();
        p.push(shell(&format!("echo round-{round}")), None);
        p.push(Reply::Text(format!("Round {round} read.")), None);
        run(Some(&t), &format!("Round {round}."));
        assert_eq!(p.compactions(), round, "Codex compacted");
        p.push(Reply::Text(format!("Round {round} done.")), over);
        run(Some(&t), &format!("Round {round}, go on."));
        let after = &p.turns()[n..];
        assert_eq!(after.len(), 3, "{after:?}");
        for (k, request) in after.iter().enumerate() {
            for text in [ALPHA, BRAVO] {
                assert_eq!(
                    request.count(text),
                    1,
                    "compaction {round}, request {k} after it: {text:?} not exactly once:\n{}",
                    request.body
                );
            }
            assert!(request.count("§") > 0, "not through mc: {}", request.body);
        }
    }
    assert!(p.refusals().is_empty(), "{:?}", p.refusals());
}

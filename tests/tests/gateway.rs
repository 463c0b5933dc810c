//! The real Claude Code (pinned in `tests/e2e`) through `mc-transform
//! gateway` (the pass that changes nothing, for now) in front of the fake
//! Anthropic provider: what the provider receives is what Claude Code sent,
//! headers and credentials included; what the provider answers is what
//! Claude Code gets; a killed gateway that comes back is picked up by Claude
//! Code's own retries; the gateway prints no credential. The provider is
//! strict: it refuses, with the real API's 400, what the real API refuses.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mc_tests::claude::{ClaudeCode, Options};
use mc_tests::fake_provider::Reply;
use mc_tests::gateway::{
    EndOnDrop, GatewayProcess, end_gateway_on, free_port, status_on, write_config,
};
use serde_json::{Value, json};

const API_KEY: &str = "sk-ant-api03-e2e-gateway-key";
const LOGIN: &str = "sk-ant-oat01-e2e-gateway-login";

/// A TCP tap on 127.0.0.1 in front of `target`: copies both ways and keeps
/// every byte the client sent, to compare with what arrived upstream.
struct Tap {
    url: String,
    sent: Arc<Mutex<Vec<u8>>>,
}

impl Tap {
    fn start(target: String) -> Tap {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let sent = Arc::new(Mutex::new(Vec::new()));
        let keep = sent.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                let keep = keep.clone();
                std::thread::spawn(move || {
                    let mut piece = [0u8; 16 * 1024];
                    while let Ok(n) = c_in.read(&mut piece) {
                        if n == 0 {
                            break;
                        }
                        keep.lock().unwrap().extend_from_slice(&piece[..n]);
                        if s_out.write_all(&piece[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = s_out.shutdown(Shutdown::Write);
                });
                let (mut s_in, mut c_out) = (server, client);
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut s_in, &mut c_out);
                    let _ = c_out.shutdown(Shutdown::Write);
                });
            }
        });
        Tap { url, sent }
    }

    /// The bodies of the POSTs the client sent, in order.
    fn bodies(&self) -> Vec<Vec<u8>> {
        let bytes = self.sent.lock().unwrap().clone();
        let mut bodies = Vec::new();
        let mut rest = &bytes[..];
        while let Some(end) = find(rest, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&rest[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            let body = &rest[end + 4..(end + 4 + length).min(rest.len())];
            if head.starts_with("post ") {
                bodies.push(body.to_vec());
            }
            rest = &rest[(end + 4 + length).min(rest.len())..];
        }
        bodies
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn start(test: &str) -> Option<(ClaudeCode, GatewayProcess)> {
    let cc = ClaudeCode::start(test, Options::default())?;
    cc.provider.strict();
    let root = cc.provider.base_url().trim_end_matches("/v1").to_string();
    let config = write_config(&cc.file(""), &root);
    let gateway = GatewayProcess::start(&config, &cc.home(), free_port());
    cc.use_base_url(gateway.url());
    Some((cc, gateway))
}

fn json_of(out: &std::process::Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "no JSON result ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// No credential in anything the gateway printed.
fn assert_no_secret(gateway: &GatewayProcess) {
    let stderr = gateway.stderr();
    for secret in [API_KEY, LOGIN] {
        assert!(
            !stderr.contains(secret),
            "the gateway printed a credential: {stderr}"
        );
    }
}

#[test]
fn the_provider_gets_claude_code_s_headers_its_side_calls_unchanged_and_tags() {
    let Some((cc, gateway)) =
        start("the_provider_gets_claude_code_s_headers_its_side_calls_unchanged_and_tags")
    else {
        return;
    };
    let tap = Tap::start(gateway.url().trim_start_matches("http://").to_string());
    cc.use_base_url(&tap.url);
    let out = cc.run("Say hello.", &[("ANTHROPIC_API_KEY", API_KEY)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result = json_of(&out);
    assert_eq!(result["result"], "ok", "{result}");
    let session = result["session_id"].as_str().unwrap();
    let sent = tap.bodies();
    let received: Vec<_> = cc
        .provider
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .collect();
    assert!(!received.is_empty());
    assert_eq!(
        sent.len(),
        received.len(),
        "one upstream request per request"
    );
    let mut agent_calls = 0;
    for (sent, got) in sent.iter().zip(&received) {
        let before: Value = serde_json::from_slice(sent).expect("Claude Code sends JSON");
        let after: Value = serde_json::from_slice(&got.raw).expect("the gateway sends JSON");
        let agent_call = before["tools"].as_array().is_some_and(|t| !t.is_empty());
        if agent_call {
            // mc's pass ran: the messages carry its tags; what it does not
            // own (the tools, the system prompt, the model, the other
            // fields) is as Claude Code sent it.
            agent_calls += 1;
            assert!(
                after["messages"].to_string().contains('§'),
                "no tag on the agent's call: {after}"
            );
            for (key, value) in before.as_object().unwrap() {
                if key != "messages" {
                    assert_eq!(&after[key], value, "{key} changed on its way");
                }
            }
        } else {
            assert!(
                sent == &got.raw,
                "a side request changed on its way through the gateway"
            );
        }
        assert_eq!(got.header("x-api-key"), Some(API_KEY));
        assert_eq!(got.header("anthropic-version"), Some("2023-06-01"));
        let betas = got.header("anthropic-beta").unwrap_or_default();
        assert!(betas.contains("claude-code-20250219"), "{betas}");
        assert_eq!(got.header("x-claude-code-session-id"), Some(session));
        assert_eq!(got.header("accept-encoding"), Some("identity"));
    }
    assert!(agent_calls > 0, "no main-conversation call went through");
    assert_no_secret(&gateway);
}

#[test]
fn a_broken_mc_database_leaves_claude_code_working_untouched() {
    let Some(cc) = ClaudeCode::start(
        "a_broken_mc_database_leaves_claude_code_working_untouched",
        Options::default(),
    ) else {
        return;
    };
    cc.provider.strict();
    let root = cc.provider.base_url().trim_end_matches("/v1").to_string();
    let config = write_config(&cc.file(""), &root);
    let db = cc.file("broken.db");
    std::fs::write(&db, b"this is not a SQLite database, whatever it once was").unwrap();
    let gateway = GatewayProcess::start_with(&config, &cc.home(), free_port(), &[("MC_DB", &db)]);
    cc.use_base_url(gateway.url());
    let out = cc.run("Say hello.", &[("ANTHROPIC_API_KEY", API_KEY)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json_of(&out)["result"], "ok");
    let agent = cc.provider.agent_requests();
    let request = agent.last().expect("a main-conversation request");
    let body: Value = serde_json::from_slice(&request.raw).unwrap();
    assert!(
        !body["messages"].to_string().contains('§'),
        "a pass ran on a store that cannot open"
    );
    assert!(
        gateway.stderr().contains("store cannot be opened"),
        "{}",
        gateway.stderr()
    );
    assert_no_secret(&gateway);
}

#[test]
fn a_subscription_login_is_forwarded_as_received() {
    let Some((cc, gateway)) = start("a_subscription_login_is_forwarded_as_received") else {
        return;
    };
    let out = cc.run(
        "Say hello.",
        &[
            ("ANTHROPIC_API_KEY", ""),
            ("CLAUDE_CODE_OAUTH_TOKEN", LOGIN),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let agent = cc.provider.agent_requests();
    let request = agent.last().expect("a main-conversation request");
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {LOGIN}").as_str())
    );
    assert_eq!(request.header("x-api-key"), None);
    let betas = request.header("anthropic-beta").unwrap_or_default();
    assert!(betas.contains("oauth-2025-04-20"), "{betas}");
    assert_no_secret(&gateway);
}

#[test]
fn an_upstream_error_reaches_claude_code_unchanged() {
    let Some((cc, gateway)) = start("an_upstream_error_reaches_claude_code_unchanged") else {
        return;
    };
    let wording = "mc-e2e: this exact wording came from the provider";
    cc.provider.push(
        Reply::Error {
            status: 400,
            body: json!({"type": "error", "error": {"type": "invalid_request_error", "message": wording}}),
        },
        None,
    );
    let out = cc.run("Say hello.", &[("ANTHROPIC_API_KEY", API_KEY)]);
    let result = json_of(&out);
    assert_eq!(result["is_error"], true, "{result}");
    assert!(
        result["result"]
            .as_str()
            .unwrap_or_default()
            .contains(wording),
        "{result}"
    );
    assert_no_secret(&gateway);
}

#[test]
fn a_killed_gateway_that_comes_back_is_picked_up_by_claude_code_s_retries() {
    let Some((cc, mut gateway)) =
        start("a_killed_gateway_that_comes_back_is_picked_up_by_claude_code_s_retries")
    else {
        return;
    };
    let port = gateway.port();
    gateway.kill();
    let config = cc.file("gateway-config.jsonc");
    let home = cc.home();
    let cc = Arc::new(cc);
    let run = {
        let cc = cc.clone();
        std::thread::spawn(move || cc.run("Say hello.", &[("ANTHROPIC_API_KEY", API_KEY)]))
    };
    // Claude Code meets a closed port and retries; the gateway comes back.
    std::thread::sleep(Duration::from_secs(3));
    let back = GatewayProcess::start(&config, &home, port);
    let out = run.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(json_of(&out)["result"], "ok");
    assert!(!cc.provider.agent_requests().is_empty());
    assert_no_secret(&back);
}

#[test]
fn two_sessions_at_once_stay_apart() {
    let Some((cc, gateway)) = start("two_sessions_at_once_stay_apart") else {
        return;
    };
    let cc = Arc::new(cc);
    let runs: Vec<_> = ["First session.", "Second session."]
        .into_iter()
        .map(|text| {
            let cc = cc.clone();
            std::thread::spawn(move || cc.run(text, &[("ANTHROPIC_API_KEY", API_KEY)]))
        })
        .collect();
    let sessions: Vec<String> = runs
        .into_iter()
        .map(|run| {
            let out = run.join().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            json_of(&out)["session_id"].as_str().unwrap().to_string()
        })
        .collect();
    assert_ne!(sessions[0], sessions[1]);
    for (session, prompt) in sessions.iter().zip(["First session.", "Second session."]) {
        let theirs: Vec<_> = cc
            .provider
            .agent_requests()
            .into_iter()
            .filter(|r| r.header("x-claude-code-session-id") == Some(session.as_str()))
            .collect();
        assert!(!theirs.is_empty(), "no request of {session}");
        for request in theirs {
            let text = String::from_utf8_lossy(&request.raw);
            assert!(
                text.contains(prompt),
                "{session} carries another session's prompt"
            );
        }
    }
    assert_no_secret(&gateway);
}

#[test]
fn the_gateway_refuses_a_taken_port_and_a_non_loopback_address() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "http://127.0.0.1:9");
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let gateway = |listen: &str| {
        let mut command = Command::new(mc_tests::bin_path("mc-transform"));
        mc_tests::env::seal_at_home(&mut command, dir.path())
            .env("MC_CONFIG", &config)
            .args(["gateway", "--listen", listen]);
        mc_tests::pipe_within(&mut command, b"", Duration::from_secs(20))
            .unwrap()
            .expect("the gateway exits at once")
    };
    let out = gateway(&format!("127.0.0.1:{port}"));
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("listening on 127.0.0.1:{port}")),
        "{stderr}"
    );
    assert!(
        stderr.contains("hint:") && stderr.contains("--listen"),
        "{stderr}"
    );
    let out = gateway("0.0.0.0:0");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("loopback only"));
    // A project config cannot move the gateway: refused with a warning.
    let project = dir.path().join("project");
    std::fs::create_dir_all(project.join(".mc")).unwrap();
    std::fs::write(
        project.join(".mc/config.jsonc"),
        r#"{"gateway": {"anthropic_upstream": "https://evil.example"}}"#,
    )
    .unwrap();
    let mut command = Command::new(mc_tests::bin_path("mc-transform"));
    mc_tests::env::seal_at_home(&mut command, dir.path())
        .current_dir(&project)
        .args(["gateway", "--listen", "0.0.0.0:1"]);
    let out = mc_tests::pipe_within(&mut command, b"", Duration::from_secs(20))
        .unwrap()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning") && stderr.contains("gateway.anthropic_upstream"),
        "{stderr}"
    );
}

/// `mc-transform claude -p TEXT` in Claude Code's sealed environment, with
/// the gateway's config at `config`; its output, and the pid of a gateway it
/// started (which the caller ends).
fn launch(
    cc: &ClaudeCode,
    config: &std::path::Path,
    text: &str,
) -> (std::process::Output, Option<u32>) {
    let root = cc.provider.base_url().trim_end_matches("/v1").to_string();
    let mut command = cc.command(mc_tests::bin_path("mc-transform"));
    command
        .env("MC_CONFIG", config)
        .env("MC_CLAUDE_BIN", mc_tests::claude::claude_bin().unwrap())
        .env("ANTHROPIC_BASE_URL", &root)
        .env("ANTHROPIC_API_KEY", API_KEY)
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .args(["claude", "-p", text, "--output-format", "json"]);
    let out = mc_tests::pipe_within(&mut command, b"", Duration::from_secs(120))
        .unwrap()
        .expect("mc-transform claude finishes");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let pid = stderr
        .split("(pid ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|pid| pid.parse().ok());
    (out, pid)
}

/// mc's config for the launcher: the gateway on `port`, forwarding to the
/// fake provider.
fn launch_config(cc: &ClaudeCode, port: u16) -> std::path::PathBuf {
    let root = cc.provider.base_url().trim_end_matches("/v1").to_string();
    let config = cc.file("launch.jsonc");
    std::fs::write(
        &config,
        format!(
            r#"{{"gateway": {{"anthropic_upstream": "{root}", "listen": "127.0.0.1:{port}"}}}}"#
        ),
    )
    .unwrap();
    config
}

fn end(pid: Option<u32>) {
    if let Some(pid) = pid {
        let _ = Command::new("kill").arg(pid.to_string()).status();
    }
}

#[test]
fn the_launcher_starts_a_gateway_and_claude_code_goes_through_it() {
    let Some(cc) = ClaudeCode::start(
        "the_launcher_starts_a_gateway_and_claude_code_goes_through_it",
        Options::default(),
    ) else {
        return;
    };
    let root = cc.provider.base_url().trim_end_matches("/v1").to_string();
    let port = free_port();
    let config = launch_config(&cc, port);
    let (out, pid) = launch(&cc, &config, "Say hello.");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    assert!(pid.is_some(), "no gateway was started: {stderr}");
    assert_eq!(json_of(&out)["result"], "ok");
    // It went through the gateway: the gateway counts it.
    let mut status = TcpStream::connect(("127.0.0.1", port)).unwrap();
    status
        .write_all(b"GET /_mc/gateway HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = status.read_to_string(&mut answer);
    end(pid);
    let body: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["upstream"], root.as_str());
    assert!(body["served"].as_u64().unwrap() >= 2, "{body}");
    assert!(!stderr.contains(API_KEY));
}

#[test]
fn without_a_gateway_the_launcher_lets_claude_code_talk_to_the_provider() {
    let Some(cc) = ClaudeCode::start(
        "without_a_gateway_the_launcher_lets_claude_code_talk_to_the_provider",
        Options::default(),
    ) else {
        return;
    };
    // Something that is not mc's gateway holds the port.
    let squatter = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = squatter.local_addr().unwrap().port();
    let config = launch_config(&cc, port);
    let (out, pid) = launch(&cc, &config, "Say hello.");
    end(pid);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(json_of(&out)["result"], "ok");
    assert!(
        stderr.contains("talks to the provider directly"),
        "{stderr}"
    );
    assert!(!cc.provider.agent_requests().is_empty());
    drop(squatter);
}

#[test]
fn the_doctor_says_whether_the_gateway_is_up_and_where_it_forwards() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = dir.path().join("config.jsonc");
    std::fs::write(
        &config,
        format!(r#"{{"gateway": {{"anthropic_upstream": "http://127.0.0.1:9", "listen": "127.0.0.1:{port}"}}}}"#),
    )
    .unwrap();
    let doctor = || {
        let mut command = Command::new(mc_tests::bin_path("mc-doctor"));
        mc_tests::env::seal_at_home(&mut command, dir.path())
            .env("MC_CONFIG", &config)
            .env("MC_DB", dir.path().join("ctx.db"))
            .arg("--json");
        let out = mc_tests::pipe_within(&mut command, b"", Duration::from_secs(60))
            .unwrap()
            .expect("mc-doctor finishes");
        gateway_check_of(&out)
    };
    let mut gateway = GatewayProcess::start(&config, dir.path(), port);
    let up = doctor();
    assert_eq!(up["status"], "pass", "{up}");
    let what = up["what"].as_str().unwrap();
    assert!(
        what.contains(&format!(
            "gateway up on 127.0.0.1:{port}, forwarding to http://127.0.0.1:9"
        )),
        "{what}"
    );
    gateway.kill();
    let down = doctor();
    assert_eq!(down["status"], "pass", "{down}");
    assert!(
        down["what"].as_str().unwrap().starts_with("no gateway on"),
        "{down}"
    );
}

/// `mc-doctor ARGS` in Claude Code's sealed environment (its home and
/// `CLAUDE_CONFIG_DIR`, mc's database and config).
fn doctor(cc: &ClaudeCode, args: &[&str]) -> std::process::Output {
    let mut command = cc.command(mc_tests::bin_path("mc-doctor"));
    command.args(args);
    mc_tests::pipe_within(&mut command, b"", Duration::from_secs(60))
        .unwrap()
        .expect("mc-doctor finishes")
}

fn gateway_check(cc: &ClaudeCode) -> Value {
    gateway_check_of(&doctor(cc, &["--json", "--no-probe"]))
}

/// The `gateway` check of `mc-doctor --json`'s output.
fn gateway_check_of(out: &std::process::Output) -> Value {
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "gateway")
        .cloned()
        .unwrap_or_else(|| panic!("no gateway check: {doc:#}"))
}

#[test]
fn setup_sends_a_plain_claude_through_a_gateway_its_hooks_start_and_uninstall_gives_it_back() {
    let Some(cc) = ClaudeCode::start(
        "setup_sends_a_plain_claude_through_a_gateway_its_hooks_start_and_uninstall_gives_it_back",
        Options::default(),
    ) else {
        return;
    };
    cc.provider.strict();
    let root = cc.provider.base_url().trim_end_matches("/v1").to_string();
    let port = free_port();
    let _end = EndOnDrop(port);
    // The user's own setup: Claude Code's settings send it to their
    // provider (the fake one); mc's user config names the gateway's port.
    let settings = cc.config_dir().join("settings.json");
    let before = format!(
        "{{\n  \"env\": {{\n    \"ANTHROPIC_BASE_URL\": \"{root}\"\n  }},\n  \"model\": \"sonnet\"\n}}\n"
    );
    std::fs::write(&settings, &before).unwrap();
    let user_config = cc.home().join(".config/mc/config.jsonc");
    std::fs::create_dir_all(user_config.parent().unwrap()).unwrap();
    let config_before = format!("// mine\n{{\"gateway\": {{\"listen\": \"127.0.0.1:{port}\"}}}}\n");
    std::fs::write(&user_config, &config_before).unwrap();

    let dry = doctor(&cc, &["setup", "--harness", "claude-code", "--dry-run"]);
    let plan = String::from_utf8_lossy(&dry.stdout);
    assert!(dry.status.success(), "{plan}");
    assert!(
        plan.contains(&format!(
            "\"ANTHROPIC_BASE_URL\": \"http://127.0.0.1:{port}\""
        )) && plan.contains(&format!("\"anthropic_upstream\": \"{root}\""))
            && plan.contains("mc-transform gateway --ensure"),
        "{plan}"
    );
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), before);

    let out = doctor(&cc, &["setup", "--harness", "claude-code", "--yes"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(status_on(port).is_none(), "setup itself starts no gateway");

    // A plain `claude` (its environment names the provider directly, the
    // settings win): its SessionStart hook starts the gateway before the
    // first call, and every call goes through it.
    let result = cc.prompt_as_configured("Say hello.");
    assert_eq!(result["result"], "ok", "{result}");
    let status = status_on(port).expect("the hook left a gateway running");
    assert_eq!(status["upstream"], root.as_str());
    let agent = cc.provider.agent_requests();
    assert!(!agent.is_empty());
    assert!(
        agent
            .iter()
            .all(|r| r.body["messages"].to_string().contains('§')),
        "a call missed the gateway"
    );
    let check = gateway_check(&cc);
    assert_eq!(check["status"], "pass", "{check}");
    assert!(
        check["what"].as_str().unwrap().contains("last turn")
            && check["what"].as_str().unwrap().contains("went through it"),
        "{check}"
    );

    // The gateway killed between sessions: the doctor warns, and the next
    // `claude`'s hook starts it again.
    end_gateway_on(port);
    let check = gateway_check(&cc);
    assert_eq!(check["status"], "warn", "{check}");
    assert!(
        check["what"].as_str().unwrap().contains("none answers"),
        "{check}"
    );
    let calls = cc.provider.agent_requests().len();
    let result = cc.prompt_as_configured("Say hello again.");
    assert_eq!(result["result"], "ok", "{result}");
    assert!(status_on(port).is_some(), "the hook did not start it again");
    assert!(cc.provider.agent_requests().len() > calls);

    // Uninstall gives the user's files back byte for byte, and Claude Code
    // goes to the provider directly again.
    end_gateway_on(port);
    let out = doctor(&cc, &["setup", "--uninstall", "--harness", "claude-code"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), before);
    assert_eq!(
        std::fs::read_to_string(&user_config).unwrap(),
        config_before
    );
    // A gateway still up (started by hand) while Claude Code, no longer
    // wired, talks to the provider: the doctor says the last turn missed it.
    let gateway = GatewayProcess::start(&cc.mc_config(), &cc.home(), port);
    let calls = cc.provider.agent_requests().len();
    let result = cc.prompt_as_configured("Say hello directly.");
    assert_eq!(result["result"], "ok", "{result}");
    let direct = cc.provider.agent_requests();
    assert!(direct.len() > calls);
    assert!(
        !direct.last().unwrap().body["messages"]
            .to_string()
            .contains('§')
    );
    let check = gateway_check(&cc);
    assert_eq!(check["status"], "warn", "{check}");
    assert!(
        check["what"]
            .as_str()
            .unwrap()
            .contains("did not go through it (Claude Code is not wired to it)"),
        "{check}"
    );
    drop(gateway);
}

/// Each thinking block in `raw` (a request body), as its bytes: from the
/// `{"type":"thinking"` that opens it to the `}` after its signature.
fn thinking_blocks(raw: &[u8]) -> Vec<Vec<u8>> {
    let mut blocks = Vec::new();
    let mut from = 0;
    while let Some(at) = find(&raw[from..], br#"{"type":"thinking""#) {
        let start = from + at;
        let Some(len) = find(&raw[start..], b"\"}") else {
            break;
        };
        blocks.push(raw[start..start + len + 2].to_vec());
        from = start + len + 2;
    }
    blocks
}

#[test]
fn thinking_blocks_cross_the_gateway_byte_for_byte() {
    let Some((cc, gateway)) = start("thinking_blocks_cross_the_gateway_byte_for_byte") else {
        return;
    };
    cc.provider.think();
    let tap = Tap::start(gateway.url().trim_start_matches("http://").to_string());
    cc.use_base_url(&tap.url);
    cc.provider.push(
        Reply::Tool {
            name: "mcp__mc__ctx_memory".into(),
            input: json!({"action": "write", "category": "CONSTRAINTS",
                          "content": "Thinking survives the gateway."}),
        },
        None,
    );
    cc.provider.push(
        Reply::Tool {
            name: "mcp__mc__ctx_memory".into(),
            input: json!({"action": "list"}),
        },
        None,
    );
    cc.provider.push(Reply::Text("Done.".into()), None);
    let out = cc.run("Remember it, then list.", &[("ANTHROPIC_API_KEY", API_KEY)]);
    let result = json_of(&out);
    // The strict provider took every request: no thinking block came back
    // changed (it answers a changed one with the real API's 400).
    assert_eq!(result["result"], "Done.", "{result}");
    let agent = cc.provider.agent_requests();
    assert_eq!(agent.len(), 3, "a call per reply");
    assert!(
        agent[2].body["messages"].to_string().contains('§'),
        "the pass ran"
    );
    // Claude Code sent its thinking back, and the provider got exactly
    // those bytes.
    let issued = cc.provider.issued_thinking();
    let last_sent = tap
        .bodies()
        .into_iter()
        .rfind(|b| find(b, b"\"tools\"").is_some())
        .unwrap();
    let sent = thinking_blocks(&last_sent);
    let received = thinking_blocks(&agent[2].raw);
    assert!(
        sent.len() >= 2,
        "Claude Code kept its thinking: {}",
        String::from_utf8_lossy(&last_sent)
    );
    assert_eq!(sent, received, "a thinking block changed on its way");
    for (signature, _) in issued.iter().take(2) {
        assert!(
            received
                .iter()
                .any(|b| find(b, signature.as_bytes()).is_some())
        );
    }
    assert_no_secret(&gateway);
}

/// The real API's answer when it is overloaded, with a wording of ours.
fn overloaded() -> Reply {
    Reply::Error {
        status: 529,
        body: json!({"type": "error", "error": {"type": "overloaded_error",
                     "message": "Overloaded (mc-e2e wording)"}}),
    }
}

#[test]
fn an_overloaded_upstream_reaches_claude_code_which_retries_then_reports_it() {
    let Some((cc, gateway)) =
        start("an_overloaded_upstream_reaches_claude_code_which_retries_then_reports_it")
    else {
        return;
    };
    let env = [
        ("ANTHROPIC_API_KEY", API_KEY),
        ("CLAUDE_CODE_MAX_RETRIES", "2"),
    ];
    // One 529: Claude Code retries through the gateway, and the retry works.
    cc.provider.push(overloaded(), None);
    let out = cc.run("Say hello.", &env);
    let result = json_of(&out);
    assert_eq!(result["result"], "ok", "{result}");
    assert_eq!(cc.provider.agent_requests().len(), 2, "one retry");
    // 529s past its retries: it gives up and says so.
    for _ in 0..3 {
        cc.provider.push(overloaded(), None);
    }
    let out = cc.run("Say hello again.", &env);
    let result = json_of(&out);
    assert_eq!(result["is_error"], true, "{result}");
    assert_eq!(
        cc.provider.agent_requests().len(),
        5,
        "two retries, then no more"
    );
    // Claude Code 2.1.197 tells a 529 by its status: it says so, and names
    // the gateway it went through.
    let said = result["result"].as_str().unwrap_or_default();
    assert!(
        said.starts_with("API Error: Repeated 529 Overloaded errors.")
            && said.contains(gateway.url().trim_start_matches("http://")),
        "{result}"
    );
    assert_no_secret(&gateway);
}

/// A message with its breakpoints taken off (Claude Code moves its own to
/// the newest message on every call).
fn without_breakpoints(message: &Value) -> Value {
    let mut message = message.clone();
    for block in message["content"].as_array_mut().into_iter().flatten() {
        if let Some(block) = block.as_object_mut() {
            block.remove("cache_control");
        }
    }
    message
}

#[test]
fn a_fault_mid_session_keeps_mcs_shape_and_sends_the_new_tail() {
    let Some(cc) = ClaudeCode::start(
        "a_fault_mid_session_keeps_mcs_shape_and_sends_the_new_tail",
        Options::default(),
    ) else {
        return;
    };
    cc.provider.strict();
    let _gateway = cc.through_gateway();
    let p = &cc.provider;
    p.push(Reply::Text("First done.".into()), None);
    let s = cc.prompt("Start.")["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    p.push(Reply::Text("Second done.".into()), None);
    cc.prompt_in(Some(&s), "Go on.", &[]);
    let before = p.agent_requests().last().unwrap().body["messages"]
        .as_array()
        .unwrap()
        .clone();
    assert!(
        Value::Array(before.clone()).to_string().contains('§'),
        "mc's shape: tags on the wire"
    );

    // The fault: another process holds mc's database past the hook's wait.
    let holder = mc_tests::env::lock_database_with(Command::new("python3"), &cc.db);
    p.push(Reply::Text("Third done.".into()), None);
    let out = cc.prompt_in(Some(&s), "One step while mc is stuck.", &[]);
    assert_eq!(out["result"], "Third done.", "{out}");
    let after = p.agent_requests().last().unwrap().body["messages"]
        .as_array()
        .unwrap()
        .clone();
    drop(holder);
    // The request after the fault is the one before it (mc's shape, not
    // Claude Code's raw history) plus the new tail, which came as it was sent.
    assert!(after.len() > before.len(), "the new tail arrived");
    for (i, (a, b)) in before.iter().zip(&after).enumerate() {
        assert_eq!(
            without_breakpoints(a),
            without_breakpoints(b),
            "message {i} of mc's shape changed at the fault"
        );
    }
    let tail = Value::Array(after[before.len()..].to_vec()).to_string();
    assert!(tail.contains("One step while mc is stuck.") && !tail.contains('§'));

    // The database free again, mc's pass runs: the new prompt is tagged.
    p.push(Reply::Text("Fourth done.".into()), None);
    cc.prompt_in(Some(&s), "And now mc is back.", &[]);
    let back = p.agent_requests().last().unwrap().body["messages"].to_string();
    assert!(back.contains("§ And now mc is back."), "{back}");
}

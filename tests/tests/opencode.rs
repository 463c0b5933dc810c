//! End to end against the real `opencode` binary (npm `opencode-ai`, pinned in
//! `tests/e2e/package.json`; `scripts/test` installs it): OpenCode runs with
//! mc's plugin and talks to a fake Anthropic provider of ours on 127.0.0.1;
//! the tests assert on the request bytes the provider receives.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use mc_tests::bin_path;
use mc_tests::fake_provider::{FakeProvider, Recorded, Reply, Usage};
use serde_json::{Value, json};

/// The model's window as configured: usable = 100 000 − 10 000 output reserve.
const CONTEXT: u64 = 100_000;
const OUTPUT: u64 = 10_000;
const USABLE: u64 = CONTEXT - OUTPUT;

fn opencode_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("MC_OPENCODE_BIN") {
        return PathBuf::from(path);
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/node_modules/.bin/opencode");
    assert!(
        path.exists(),
        "the real OpenCode is not installed at {}: run scripts/test, or `npm install --prefix tests/e2e`",
        path.display()
    );
    path
}

fn plugin_source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../mc-transform/adapters/opencode/mc.js")
}

/// A running `opencode serve` with mc's plugin, an isolated home, and a fake provider.
struct OpenCode {
    child: Child,
    url: String,
    provider: FakeProvider,
    dir: tempfile::TempDir,
    agent: ureq::Agent,
}

struct Options {
    /// Where mc keeps its database; `None` for a path that cannot be created.
    db: Option<PathBuf>,
    with_plugin: bool,
    /// mc config (JSONC text) handed to every mc process through MC_CONFIG.
    mc_config: Option<String>,
}

impl OpenCode {
    fn start(options: Options) -> OpenCode {
        let provider = FakeProvider::start();
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let config = home.join(".config/opencode");
        std::fs::create_dir_all(config.join("plugin")).unwrap();
        let project = dir.path().join("project");
        std::fs::create_dir_all(project.join("src")).unwrap();
        std::fs::write(project.join("src/lib.rs"), "pub fn answer() -> u32 {\n    42\n}\n".repeat(40)).unwrap();
        let settings = json!({
            "autoupdate": false,
            "share": "disabled",
            "compaction": {"auto": false},
            "model": "mock/mock-sonnet",
            "provider": {"mock": {
                "npm": "@ai-sdk/anthropic",
                "name": "Mock",
                "options": {"baseURL": provider.base_url(), "apiKey": "test-key"},
                "models": {"mock-sonnet": {"name": "Mock Sonnet", "limit": {"context": CONTEXT, "output": OUTPUT}}}
            }}
        });
        std::fs::write(config.join("opencode.json"), serde_json::to_string_pretty(&settings).unwrap()).unwrap();
        if options.with_plugin {
            std::fs::copy(plugin_source(), config.join("plugin/mc.js")).unwrap();
        }
        let db = options.db.unwrap_or_else(|| {
            // A database under a regular file cannot be created: mc must fail open.
            let blocker = dir.path().join("not-a-folder");
            std::fs::write(&blocker, "x").unwrap();
            blocker.join("ctx.db")
        });
        let mc_config = dir.path().join("mc-config.jsonc");
        std::fs::write(&mc_config, options.mc_config.as_deref().unwrap_or("{}")).unwrap();
        let mut child = Command::new(opencode_bin())
            .args(["serve", "--hostname", "127.0.0.1", "--port", "0"])
            .current_dir(&project)
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .env("XDG_STATE_HOME", home.join(".local/state"))
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("MC_DB", &db)
            .env("MC_CONFIG", &mc_config)
            .env("MC_TRANSFORM_BIN", bin_path("mc-transform"))
            .env("MC_PIN_BIN", bin_path("mc-pin"))
            .env("MC_HISTORIAN_BIN", bin_path("mc-historian"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start opencode serve");
        let url = listening_url(&mut child);
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .proxy(None)
            .timeout_global(Some(Duration::from_secs(120)))
            .http_status_as_error(false)
            .build()
            .into();
        OpenCode {
            child,
            url,
            provider,
            dir,
            agent,
        }
    }

    fn post(&self, path: &str, body: Value) -> Value {
        let mut response = self
            .agent
            .post(&format!("{}{path}", self.url))
            .send_json(&body)
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        let status = response.status();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        assert!(status.is_success(), "POST {path}: {status}: {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    fn new_session(&self) -> String {
        self.post("/session", json!({}))["id"].as_str().unwrap().to_string()
    }

    /// Send a user message and wait for the assistant's answer.
    fn prompt(&self, session: &str, text: &str) -> Value {
        self.post(&format!("/session/{session}/message"), json!({"parts": [{"type": "text", "text": text}]}))
    }
}

impl Drop for OpenCode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Read the server's stdout until it says where it listens.
fn listening_url(child: &mut Child) -> String {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(at) = line.find("http://") {
                let _ = tx.send(line[at..].trim().to_string());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(90))
        .expect("opencode serve did not say where it listens within 90 s")
}

/// A request as a prompt cache keys it: tools, system, messages — with the
/// cache_control markers (which OpenCode moves every turn) removed.
fn cache_key(request: &Recorded) -> Vec<String> {
    let mut body = request.body.clone();
    strip_cache_control(&mut body);
    let mut key = vec![body["tools"].to_string(), body["system"].to_string()];
    key.extend(body["messages"].as_array().unwrap().iter().map(Value::to_string));
    key
}

fn strip_cache_control(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("cache_control");
            map.values_mut().for_each(strip_cache_control);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_cache_control),
        _ => {}
    }
}

fn all_text(request: &Recorded) -> String {
    request.body["messages"].to_string()
}

/// Tool results the provider saw, as (tool_use_id, text).
fn tool_results(request: &Recorded) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for message in request.body["messages"].as_array().unwrap() {
        for block in message["content"].as_array().into_iter().flatten() {
            if block["type"] == "tool_result" {
                let text = match &block["content"] {
                    Value::String(s) => s.clone(),
                    Value::Array(items) => items.iter().filter_map(|i| i["text"].as_str()).collect::<Vec<_>>().join(""),
                    other => other.to_string(),
                };
                out.push((block["tool_use_id"].as_str().unwrap_or_default().to_string(), text));
            }
        }
    }
    out
}

fn usage_at(percent: u64) -> Usage {
    Usage {
        input: 500,
        cache_read: USABLE * percent / 100 - 500,
        cache_write: 0,
        output: 20,
    }
}

fn with_mc(mc_config: Option<&str>) -> OpenCode {
    let db = tempfile::tempdir().unwrap().keep().join("ctx.db");
    OpenCode::start(Options { db: Some(db), with_plugin: true, mc_config: mc_config.map(str::to_string) })
}

/// The tag number a tool result starts with (`§N§ …`).
fn leading_tag(text: &str) -> Option<u64> {
    let rest = text.strip_prefix('§')?;
    rest[..rest.find('§')?].parse().ok()
}

#[test]
fn tags_reach_the_provider_and_turns_below_the_threshold_keep_the_prefix() {
    let oc = with_mc(None);
    oc.provider.set_usage(usage_at(20));
    let session = oc.new_session();
    oc.provider.push(Reply::Tool { name: "read".into(), input: json!({"filePath": "src/lib.rs"}) }, None);
    for turn in 0..4 {
        oc.prompt(&session, &format!("turn {turn}: look at the code"));
    }
    let requests = oc.provider.agent_requests();
    assert!(requests.len() >= 5, "{} agent requests", requests.len());
    let text = all_text(requests.last().unwrap());
    assert!(text.contains("§1§ turn 0: look at the code"), "{}", &text[..text.len().min(600)]);
    assert!(text.contains("<session-history></session-history>"), "the head is in the request");
    let results = tool_results(requests.last().unwrap());
    assert!(results.iter().any(|(_, t)| t.starts_with('§') && t.contains("pub fn answer")), "{results:?}");
    // Cache stability on the wire: every request repeats the previous one's bytes.
    for pair in requests.windows(2) {
        let (before, after) = (cache_key(&pair[0]), cache_key(&pair[1]));
        assert!(after.len() >= before.len());
        for (i, (a, b)) in before.iter().zip(&after).enumerate() {
            assert_eq!(a, b, "cache key element {i} changed between consecutive requests");
        }
    }
}

#[test]
fn without_a_usable_database_the_session_keeps_working_untouched() {
    let oc = OpenCode::start(Options { db: None, with_plugin: true, mc_config: None });
    let session = oc.new_session();
    oc.provider.push(Reply::Text("still here".into()), None);
    let reply = oc.prompt(&session, "hello");
    assert_eq!(reply["parts"].as_array().unwrap().iter().find(|p| p["type"] == "text").unwrap()["text"], "still here");
    let requests = oc.provider.agent_requests();
    let text = all_text(requests.last().unwrap());
    assert!(text.contains("hello") && !text.contains('§'), "passthrough: no tags, no head: {text}");
    drop(oc.dir.path());
}

#[test]
fn ctx_reduce_then_a_busting_turn_drops_the_output_and_later_requests_keep_it() {
    let oc = with_mc(Some(r#"{"transform": {"protected_tags": 2}}"#));
    oc.provider.set_usage(usage_at(20));
    let session = oc.new_session();
    // Turn 1: the agent reads a file.
    oc.provider.push(Reply::Tool { name: "read".into(), input: json!({"filePath": "src/lib.rs"}) }, None);
    oc.prompt(&session, "read the library");
    let seen = oc.provider.agent_requests();
    let (_, output) = tool_results(seen.last().unwrap()).pop().expect("the read result reached the provider");
    let tag = leading_tag(&output).expect("the read output is tagged");
    // Turn 2: the agent drops it with ctx_reduce; the answer reports usage over the threshold.
    oc.provider.push(Reply::Tool { name: "ctx_reduce".into(), input: json!({"drop": tag.to_string()}) }, None);
    oc.provider.push(Reply::Text("dropped it".into()), Some(usage_at(70)));
    oc.prompt(&session, "you can drop that output now");
    let reduce_result = tool_results(oc.provider.agent_requests().last().unwrap())
        .into_iter()
        .find(|(_, t)| t.contains("queued"))
        .expect("ctx_reduce answered");
    assert!(reduce_result.1.contains(&format!("§{tag}§")), "{reduce_result:?}");
    // Turn 3: the first request after crossing the threshold applies the drop.
    oc.provider.set_usage(usage_at(30));
    oc.prompt(&session, "continue");
    oc.prompt(&session, "and once more");
    let requests = oc.provider.agent_requests();
    let placeholder = format!("[dropped §{tag}§]");
    let n = requests.len();
    let applied = requests.iter().position(|r| tool_results(r).iter().any(|(_, t)| t == &placeholder));
    let applied = applied.unwrap_or_else(|| panic!("no request carries {placeholder}"));
    assert!(!tool_results(&requests[applied]).iter().any(|(_, t)| t.contains("pub fn answer")));
    // Every later request keeps the dropped form, and the prefix, byte for byte.
    for pair in requests[applied..n].windows(2) {
        let (before, after) = (cache_key(&pair[0]), cache_key(&pair[1]));
        for (i, (a, b)) in before.iter().zip(&after).enumerate() {
            assert_eq!(a, b, "element {i} changed after the drop was applied");
        }
    }
}

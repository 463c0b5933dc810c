//! A real OpenCode (`opencode serve`) for end-to-end tests and benchmarks:
//! an isolated home, optionally mc's plugin, and a fake Anthropic provider of
//! ours on 127.0.0.1 that records every request.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::bin_path;
use crate::fake_provider::{FakeProvider, Recorded, Usage};

/// The model's window as configured: usable = 100 000 − 10 000 output reserve.
pub const CONTEXT: u64 = 100_000;
pub const OUTPUT: u64 = 10_000;
pub const USABLE: u64 = CONTEXT - OUTPUT;

/// The pinned `opencode`, as [`crate::harness::Pinned::path`] finds it.
pub fn opencode_bin() -> Option<PathBuf> {
    crate::harness::OPENCODE.path()
}

pub fn plugin_source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../adapters/opencode/mc.js")
}

/// A running `opencode serve` with mc's plugin, an isolated home, and a fake provider.
pub struct OpenCode {
    child: Child,
    pub url: String,
    pub provider: FakeProvider,
    pub dir: PathBuf,
    /// The folder OpenCode runs in (the project its sessions belong to).
    pub project: PathBuf,
    /// The database mc uses.
    pub db: PathBuf,
    agent: ureq::Agent,
}

/// What [`Prepare::before_start`] runs, with the home folder.
pub type BeforeStart = Box<dyn Fn(&Path)>;

#[derive(Default)]
pub struct Options {
    /// Where mc keeps its database; `None` for a path that cannot be created.
    pub db: Option<PathBuf>,
    pub with_plugin: bool,
    /// mc config (JSONC text) handed to every mc process through MC_CONFIG.
    pub mc_config: Option<String>,
    /// Point the plugin at this mc-transform instead of the built one.
    pub transform_bin: Option<PathBuf>,
    /// Install the plugin behind a timing wrapper that logs each hook call to
    /// this file, a line each: `messages <ms>` or `system <ms>`, and before
    /// each messages call `input <count> <first message id>`.
    pub timing_log: Option<PathBuf>,
    /// The model's context window in tokens; `None` for [`CONTEXT`].
    pub context: Option<u64>,
    /// Point the plugin at this mc-historian instead of the built one.
    pub historian_bin: Option<PathBuf>,
    /// More environment for the server (and so the plugin), e.g. `MC_OPENCODE_SESSIONS`.
    pub env: Vec<(String, String)>,
    /// Run in this project folder instead of a new one under the instance's
    /// folder (a second OpenCode process on another's project).
    pub project: Option<PathBuf>,
}

/// More of the setup around OpenCode, for [`OpenCode::start_prepared`].
#[derive(Default)]
pub struct Prepare {
    /// Leave `compaction` out of `opencode.json` (OpenCode's default: on).
    pub leave_compaction_unset: bool,
    /// Run this with the home folder after the config is written and before
    /// the server starts (`mc-doctor setup` wires mc there).
    pub before_start: Option<BeforeStart>,
}

impl OpenCode {
    /// Start in `dir` (a fresh folder the caller owns), or `None` (with a
    /// note on stderr) when the pinned binary is not installed; under CI
    /// (`CI` set) a missing binary fails.
    pub fn start(dir: &Path, options: Options) -> Option<OpenCode> {
        OpenCode::start_prepared(dir, options, Prepare::default())
    }

    /// [`OpenCode::start`], with `prepare` applied before the server starts.
    pub fn start_prepared(dir: &Path, options: Options, prepare: Prepare) -> Option<OpenCode> {
        let bin = crate::harness::OPENCODE.for_test(&crate::harness::current_test())?;
        let provider = FakeProvider::start();
        let home = dir.join("home");
        let config = home.join(".config/opencode");
        std::fs::create_dir_all(config.join("plugin")).unwrap();
        let project = options
            .project
            .clone()
            .unwrap_or_else(|| dir.join("project"));
        std::fs::create_dir_all(project.join("src")).unwrap();
        std::fs::write(
            project.join("src/lib.rs"),
            "pub fn answer() -> u32 {\n    42\n}\n".repeat(40),
        )
        .unwrap();
        let mut settings = json!({
            "autoupdate": false,
            "share": "disabled",
            "compaction": {"auto": false},
            "model": "mock/mock-sonnet",
            "provider": {"mock": {
                "npm": "@ai-sdk/anthropic",
                "name": "Mock",
                "options": {"baseURL": provider.base_url(), "apiKey": "test-key"},
                "models": {"mock-sonnet": {"name": "Mock Sonnet", "limit": {"context": options.context.unwrap_or(CONTEXT), "output": OUTPUT}}}
            }}
        });
        if prepare.leave_compaction_unset {
            settings.as_object_mut().unwrap().remove("compaction");
        }
        std::fs::write(
            config.join("opencode.json"),
            serde_json::to_string_pretty(&settings).unwrap(),
        )
        .unwrap();
        if let Some(log) = &options.timing_log {
            // mc's plugin lives beside the config (so it resolves the plugin
            // package) and a wrapper in the plugin folder times its hook.
            std::fs::create_dir_all(config.join("mc")).unwrap();
            std::fs::copy(plugin_source(), config.join("mc/mc.js")).unwrap();
            std::fs::write(config.join("plugin/timing.js"), timing_wrapper(log)).unwrap();
        } else if options.with_plugin {
            std::fs::copy(plugin_source(), config.join("plugin/mc.js")).unwrap();
        }
        let db = options.db.unwrap_or_else(|| {
            // A database under a regular file cannot be created: mc must fail open.
            let blocker = dir.join("not-a-folder");
            std::fs::write(&blocker, "x").unwrap();
            blocker.join("ctx.db")
        });
        // `{provider}` in the mc config stands for the fake provider's root URL.
        let mc_config = dir.join("mc-config.jsonc");
        let root = provider.base_url().trim_end_matches("/v1").to_string();
        let text = options
            .mc_config
            .as_deref()
            .unwrap_or("{}")
            .replace("{provider}", &root);
        std::fs::write(&mc_config, text).unwrap();
        if let Some(before_start) = &prepare.before_start {
            before_start(&home);
        }
        let mut server = Command::new(bin);
        sealed(&mut server, &home, &db, &mc_config);
        let mut child = server
            .args(["serve", "--hostname", "127.0.0.1", "--port", "0"])
            .current_dir(&project)
            .env(
                "MC_TRANSFORM_BIN",
                options
                    .transform_bin
                    .clone()
                    .unwrap_or_else(|| bin_path("mc-transform")),
            )
            .env("MC_PIN_BIN", bin_path("mc-pin"))
            .env("MC_SEARCH_BIN", bin_path("mc-search"))
            .env(
                "MC_HISTORIAN_BIN",
                options
                    .historian_bin
                    .clone()
                    .unwrap_or_else(|| bin_path("mc-historian")),
            )
            .envs(options.env.iter().map(|(k, v)| (k, v)))
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
        Some(OpenCode {
            child,
            url,
            provider,
            dir: dir.to_path_buf(),
            project,
            db,
            agent,
        })
    }

    /// The process id of `opencode serve`.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn post(&self, path: &str, body: Value) -> Value {
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

    /// Run an mc binary the way the plugin does: the server's environment,
    /// so the same home, database and config.
    pub fn mc(&self, bin: &str, args: &[&str], stdin: &[u8]) -> std::process::Output {
        let mut command = Command::new(bin_path(bin));
        sealed(
            &mut command,
            &self.dir.join("home"),
            &self.db,
            &self.dir.join("mc-config.jsonc"),
        );
        crate::pipe(command.args(args).current_dir(&self.dir), stdin)
            .unwrap_or_else(|e| panic!("running {bin}: {e}"))
    }

    pub fn get(&self, path: &str) -> Value {
        let mut response = self
            .agent
            .get(&format!("{}{path}", self.url))
            .call()
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let text = response.body_mut().read_to_string().unwrap_or_default();
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    pub fn new_session(&self) -> String {
        self.post("/session", json!({}))["id"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Send a user message and wait for the assistant's answer.
    pub fn prompt(&self, session: &str, text: &str) -> Value {
        self.post(
            &format!("/session/{session}/message"),
            json!({"parts": [{"type": "text", "text": text}]}),
        )
    }
}

impl Drop for OpenCode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The sealed environment ([`crate::env::seal`]: nothing of the developer's
/// but `PATH` and the like) of the server and of every mc process it starts:
/// `home` as `HOME` with the XDG folders under it, mc's database and config,
/// and no proxy for loopback. The clock is the real one: OpenCode stamps its
/// messages with it, and the plugin's back-off runs on it.
fn sealed(command: &mut Command, home: &Path, db: &Path, mc_config: &Path) {
    crate::env::seal(command)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("MC_DB", db)
        .env("MC_CONFIG", mc_config);
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
pub fn cache_key(request: &Recorded) -> Vec<String> {
    let mut body = request.body.clone();
    strip_cache_control(&mut body);
    let mut key = vec![body["tools"].to_string(), body["system"].to_string()];
    key.extend(
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(Value::to_string),
    );
    key
}

pub fn strip_cache_control(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("cache_control");
            map.values_mut().for_each(strip_cache_control);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_cache_control),
        _ => {}
    }
}

pub fn all_text(request: &Recorded) -> String {
    request.body["messages"].to_string()
}

/// Tool results the provider saw, as (tool_use_id, text).
pub fn tool_results(request: &Recorded) -> Vec<(String, String)> {
    request
        .tool_results()
        .into_iter()
        .map(|r| (r.tool_use_id, r.text))
        .collect()
}

pub fn usage_at(percent: u64) -> Usage {
    Usage {
        input: 500,
        cache_read: USABLE * percent / 100 - 500,
        cache_write: 0,
        output: 20,
    }
}

/// The tag number a tool result starts with (`§N§ …`).
pub fn leading_tag(text: &str) -> Option<u64> {
    let rest = text.strip_prefix('§')?;
    rest[..rest.find('§')?].parse().ok()
}

/// A plugin that loads mc's plugin and logs how long each messages-hook call
/// takes, timed from outside the hook (`messages MS`, `system MS`), and what
/// OpenCode handed the messages hook (`input COUNT FIRST-ID`).
fn timing_wrapper(log: &Path) -> String {
    format!(
        r#"import {{ appendFileSync }} from "node:fs"
import {{ McContext }} from "../mc/mc.js"
export const McTiming = async (input) => {{
  const hooks = await McContext(input)
  for (const [name, label] of [["experimental.chat.messages.transform", "messages"], ["experimental.chat.system.transform", "system"]]) {{
    const inner = hooks[name]
    hooks[name] = async (i, o) => {{
      if (label === "messages") {{
        const first = o.messages[0]?.info?.id ?? "-"
        appendFileSync({log}, `input ${{o.messages.length}} ${{first}}\n`)
      }}
      const start = performance.now()
      await inner(i, o)
      appendFileSync({log}, `${{label}} ${{(performance.now() - start).toFixed(3)}}\n`)
    }}
  }}
  return hooks
}}
"#,
        log = serde_json::to_string(&log.display().to_string()).unwrap()
    )
}

//! The real Pi (`pi`, npm `@mariozechner/pi-coding-agent`, pinned in
//! `tests/e2e/package.json`) for end-to-end tests: print mode (`pi -p`) and
//! RPC mode (`pi --mode rpc`, JSON Lines on stdin and stdout), an isolated
//! agent folder (`PI_CODING_AGENT_DIR`) whose `models.json` names one custom
//! provider, the fake Anthropic provider of ours on 127.0.0.1 that records
//! every request, and mc's extension loaded with `-e`.
//!
//! What the pinned version does, as observed: one `POST /v1/messages` per
//! model call, streamed, with the system prompt and the last user message
//! marked `cache_control`; no other request with `PI_OFFLINE=1`.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fake_provider::FakeProvider;

/// The pinned `pi`, as [`crate::harness::Pinned::path`] finds it.
pub fn pi_bin() -> Option<PathBuf> {
    crate::harness::PI.path()
}

/// mc's Pi extension in this repository.
pub fn extension() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../adapters/pi/mc.ts")
}

/// The model the fake provider plays for Pi.
pub const MODEL: &str = "mock-model";

/// What to set up around Pi.
pub struct Options {
    /// The model's window, as `models.json` states it.
    pub context_window: u64,
    /// Pi's `compaction.reserveTokens`: it compacts on its own when a reply's
    /// usage passes `context_window - reserve`.
    pub reserve_tokens: u64,
    /// Pi's `compaction.keepRecentTokens`: what a compaction keeps word for word.
    pub keep_recent_tokens: u64,
    /// Load mc's extension.
    pub with_mc: bool,
    /// mc's config (JSONC text), if any; `{PROVIDER}` in it becomes the fake
    /// provider's root URL (for a historian model it plays).
    pub mc_config: Option<String>,
    /// More extensions loaded before and after mc's (a timing pair, say):
    /// Pi runs an event's handlers in load order.
    pub extensions_around: (Vec<PathBuf>, Vec<PathBuf>),
    /// More environment for Pi and what it starts.
    pub env: Vec<(String, String)>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            context_window: 200_000,
            reserve_tokens: 16_384,
            keep_recent_tokens: 20_000,
            with_mc: true,
            mc_config: None,
            extensions_around: (Vec::new(), Vec::new()),
            env: Vec::new(),
        }
    }
}

/// Pi set up in a temp folder: a home, the agent folder, a git project,
/// mc's database, and the fake provider.
pub struct Pi {
    bin: PathBuf,
    dir: tempfile::TempDir,
    pub provider: FakeProvider,
    pub project: PathBuf,
    pub db: PathBuf,
    with_mc: bool,
    extensions_around: (Vec<PathBuf>, Vec<PathBuf>),
    env: Vec<(String, String)>,
}

impl Pi {
    /// Set up Pi, or `None` (with a note on stderr) when the pinned binary
    /// is not installed. Under CI (`CI` set) a missing binary fails.
    pub fn start(test: &str, options: Options) -> Option<Pi> {
        let bin = crate::harness::PI.for_test(test)?;
        let dir = tempfile::tempdir().expect("a temp folder");
        let provider = FakeProvider::start();
        let project = dir.path().join("project");
        std::fs::create_dir_all(&project).unwrap();
        let db = dir.path().join("ctx.db");
        let pi = Pi {
            bin,
            dir,
            provider,
            project,
            db,
            with_mc: options.with_mc,
            extensions_around: options.extensions_around,
            env: options.env,
        };
        std::fs::create_dir_all(pi.agent_dir()).unwrap();
        std::fs::create_dir_all(pi.home()).unwrap();
        // The SDK appends /v1/messages to the base URL.
        let root = pi.provider.base_url().trim_end_matches("/v1").to_string();
        write_json(
            &pi.agent_dir().join("models.json"),
            &json!({"providers": {"fake": {
                "baseUrl": root, "api": "anthropic-messages", "apiKey": "test-key",
                "models": [{"id": MODEL, "name": "Mock", "reasoning": false, "input": ["text"],
                            "contextWindow": options.context_window, "maxTokens": 4096,
                            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}}]}}}),
        );
        write_json(
            &pi.agent_dir().join("settings.json"),
            &json!({"compaction": {"enabled": true, "reserveTokens": options.reserve_tokens,
                                   "keepRecentTokens": options.keep_recent_tokens},
                    "quietStartup": true}),
        );
        let config = options.mc_config.unwrap_or("{}".into());
        std::fs::write(pi.mc_config(), config.replace("{PROVIDER}", &root)).unwrap();
        let git = |args: &[&str]| {
            let out = crate::pipe(pi.sealed("git").args(args), b"").unwrap();
            assert!(out.status.success(), "git {args:?}");
        };
        git(&["init", "-q"]);
        git(&[
            "-c",
            "user.name=mc tests",
            "-c",
            "user.email=tests@mc.invalid",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "root",
        ]);
        Some(pi)
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// `PI_CODING_AGENT_DIR`: models, settings, sessions.
    pub fn agent_dir(&self) -> PathBuf {
        self.dir.path().join("agent")
    }

    pub fn mc_config(&self) -> PathBuf {
        self.dir.path().join("mc-config.jsonc")
    }

    /// A file in the test's temp folder.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A command in the sealed environment Pi and everything it starts
    /// share: the temp home, mc's database and config, mc's binaries first
    /// on PATH, Pi offline. The clock is the real one.
    pub fn sealed(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let home = self.home();
        let mut command = Command::new(program);
        crate::env::seal_at_home(&mut command, &home)
            .env("PI_CODING_AGENT_DIR", self.agent_dir())
            .env("PI_OFFLINE", "1")
            .env("PI_SKIP_VERSION_CHECK", "1")
            .env("PI_TELEMETRY", "0")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("MC_DB", &self.db)
            .env("MC_CONFIG", self.mc_config())
            .env("PATH", self.path())
            .current_dir(&self.project);
        for (name, value) in &self.env {
            command.env(name, value);
        }
        command
    }

    /// mc's binaries, then `pi`'s folder (the historian's harness default
    /// runs `pi -p`), then the rest.
    fn path(&self) -> std::ffi::OsString {
        let with_bins = crate::path_with_bins();
        let pi_dir = self.bin.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut dirs: Vec<PathBuf> = std::env::split_paths(&with_bins).collect();
        dirs.insert(1.min(dirs.len()), pi_dir);
        std::env::join_paths(dirs).unwrap_or(with_bins)
    }

    fn pi(&self, session: &Path) -> Command {
        let mut command = self.sealed(&self.bin);
        command
            .args(["--provider", "fake", "--model", MODEL, "--session"])
            .arg(session)
            .args(["--no-skills", "--no-prompt-templates", "--no-context-files"]);
        for path in &self.extensions_around.0 {
            command.arg("-e").arg(path);
        }
        if self.with_mc {
            command.arg("-e").arg(extension());
        }
        for path in &self.extensions_around.1 {
            command.arg("-e").arg(path);
        }
        command
    }

    /// The session file of a session named `name` (created by its first prompt).
    pub fn session(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.jsonl"))
    }

    /// One prompt in print mode in `session` (created or continued). Fails
    /// the test when Pi fails or is still running after two minutes.
    pub fn prompt(&self, session: &Path, text: &str) -> String {
        self.prompt_env(session, text, &[])
    }

    pub fn prompt_env(&self, session: &Path, text: &str, env: &[(&str, &str)]) -> String {
        let mut command = self.pi(session);
        command.args(["-p", text]);
        for (name, value) in env {
            command.env(name, value);
        }
        let out = crate::pipe_within(&mut command, b"", Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("running pi: {e}"))
            .expect("pi -p was still running after 120 s");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "pi -p failed ({}): {stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// Start Pi in RPC mode on `session`.
    pub fn rpc(&self, session: &Path) -> Rpc {
        let mut command = self.pi(session);
        command
            .args(["--mode", "rpc"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("starting pi --mode rpc");
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { break };
                if let Ok(value) = serde_json::from_str::<Value>(&line)
                    && tx.send(value).is_err()
                {
                    break;
                }
            }
        });
        Rpc {
            child,
            events: rx,
            seen: Vec::new(),
        }
    }

    /// Run `program` (one of mc's binaries) in the same environment.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        self.sealed(program)
    }
}

/// A running `pi --mode rpc`.
pub struct Rpc {
    child: std::process::Child,
    events: std::sync::mpsc::Receiver<Value>,
    /// Every event read so far.
    pub seen: Vec<Value>,
}

impl Rpc {
    /// Send one command line.
    pub fn send(&mut self, command: Value) {
        let stdin = self.child.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{command}").expect("writing to pi");
        stdin.flush().unwrap();
    }

    /// Read events until `done` holds for one (returned); fails after `secs`.
    pub fn until(&mut self, secs: u64, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let event = self.events.recv_timeout(left).unwrap_or_else(|_| {
                let kinds: Vec<_> = self.seen.iter().map(|e| e["type"].clone()).collect();
                panic!("pi --mode rpc: no such event within {secs} s; saw {kinds:?}")
            });
            self.seen.push(event.clone());
            if done(&event) {
                return event;
            }
        }
    }

    /// `prompt`, then wait for the agent to finish.
    pub fn prompt(&mut self, text: &str) {
        self.send(json!({"type": "prompt", "message": text}));
        self.until(120, |e| e["type"] == "agent_end");
    }

    /// Wait until Pi is not compacting (an automatic compaction starts right
    /// after `agent_end`); returns whether it was.
    pub fn settle(&mut self) -> bool {
        self.send(json!({"type": "get_state"}));
        let state = self.until(60, |e| {
            e["type"] == "response" && e["command"] == "get_state"
        });
        let compacting = state["data"]["isCompacting"] == true
            || self
                .seen
                .iter()
                .rev()
                .take_while(|e| e["type"] != "agent_end")
                .any(|e| e["type"] == "compaction_start");
        if compacting
            && !self
                .seen
                .iter()
                .rev()
                .take_while(|e| e["type"] != "compaction_start")
                .any(|e| e["type"] == "compaction_end")
        {
            self.until(300, |e| e["type"] == "compaction_end");
        }
        compacting
    }

    /// The process id of `pi` (the parent of the resident mc-transform).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `compact`, and wait for its answer.
    pub fn compact(&mut self) -> Value {
        self.send(json!({"type": "compact"}));
        self.until(120, |e| {
            e["type"] == "response" && e["command"] == "compact"
        })
    }

    /// Close stdin and wait for Pi to exit.
    pub fn finish(mut self) {
        drop(self.child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Rpc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn write_json(path: &Path, value: &Value) {
    std::fs::write(path, serde_json::to_string_pretty(value).unwrap())
        .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

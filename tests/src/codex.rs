//! The real Codex (`codex`, npm `@openai/codex` with its native binary in
//! `@openai/codex-linux-x64`, pinned in `tests/e2e/package.json`) for
//! end-to-end tests: `codex exec --json` (and `exec resume`), an isolated
//! `CODEX_HOME` with a custom `[model_providers.mock]` speaking the Responses
//! API to our fake on 127.0.0.1, hooks in `hooks.json` (with `[features]
//! hooks = true` and `--dangerously-bypass-hook-trust`), optionally
//! `mc-search mcp` as an MCP server, and a fake Anthropic provider that plays
//! the historian.
//!
//! What the pinned version does, as observed: one streamed `POST
//! {base_url}/responses` per model turn, uncompressed; when the last turn's
//! usage passed `model_auto_compact_token_limit`, a compaction request before
//! the next turn (`x-codex-turn-metadata` `request_kind: compaction`), then
//! `SessionStart` with `source: "resume"` and `"compact"` (in that order)
//! before the turn's request. Hook output reaches the model as a developer
//! message. MCP tools are offered in a namespace `mcp__<server>`, and every
//! `tools/call` carries the session in `_meta["x-codex-turn-metadata"]`.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};

use crate::bin_path;
use crate::fake_provider::FakeProvider;
use crate::fake_responses::FakeResponses;

/// The pinned `codex`, as [`crate::harness::Pinned::path`] finds it.
pub fn codex_bin() -> Option<PathBuf> {
    crate::harness::CODEX.path()
}

/// What to set up around Codex.
#[derive(Default)]
pub struct Options {
    /// Hooks in `$CODEX_HOME/hooks.json`: (event, matcher, command).
    pub hooks: Vec<(String, Option<String>, String)>,
    /// `mc-search mcp --harness codex` as the MCP server `mc`.
    pub mcp: bool,
    /// `model_auto_compact_token_limit`.
    pub auto_compact_limit: Option<u64>,
    /// Codex's provider is mc's gateway (`mc-transform gateway`, base URL
    /// `…/openai`, `gateway.openai_upstream` the fake), with the API key as
    /// `env_key`; the gateway's database is this one when given, else mc's.
    pub gateway: bool,
    pub gateway_db: Option<PathBuf>,
    /// mc's `transform` section (a JSON object), if not the defaults.
    pub transform: Option<Value>,
}

/// The result of one `codex exec`.
#[derive(Debug, Clone)]
pub struct Exec {
    pub thread_id: String,
    /// The agent's last message.
    pub message: String,
    pub events: Vec<Value>,
}

/// Codex set up in a temp folder: a home, a git project, mc's database, the
/// fake Responses provider, and a fake Anthropic provider for the historian.
pub struct Codex {
    bin: PathBuf,
    dir: tempfile::TempDir,
    pub provider: FakeResponses,
    /// Plays the historian (`fake/mock-historian` in mc's config).
    pub historian: FakeProvider,
    pub project: PathBuf,
    pub db: PathBuf,
    /// mc's gateway in front of the fake, with [`Options::gateway`].
    pub gateway: Option<crate::gateway::GatewayProcess>,
}

impl Codex {
    /// Set up Codex, or `None` (with a note on stderr) when the pinned
    /// binary is not installed. Under CI (`CI` set) a missing binary fails.
    pub fn start(test: &str, options: Options) -> Option<Codex> {
        let bin = crate::harness::CODEX.for_test(test)?;
        let dir = tempfile::tempdir().expect("a temp folder");
        let provider = FakeResponses::start();
        let historian = FakeProvider::start();
        historian.play_historian("mock-historian");
        let project = dir.path().join("project");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::create_dir_all(dir.path().join("home/.codex")).unwrap();
        let db = dir.path().join("ctx.db");
        let mut codex = Codex {
            bin,
            dir,
            provider,
            historian,
            project,
            db,
            gateway: None,
        };
        codex.git(&["init", "-q"]);
        codex.git(&[
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
        let mut config = String::from(
            "model = \"mock-model\"\nmodel_provider = \"mock\"\nmodel_context_window = 200000\n\
             check_for_update_on_startup = false\n",
        );
        if let Some(limit) = options.auto_compact_limit {
            config.push_str(&format!("model_auto_compact_token_limit = {limit}\n"));
        }
        let port = crate::gateway::free_port();
        let (base_url, env_key) = if options.gateway {
            (
                format!("http://127.0.0.1:{port}/openai"),
                "env_key = \"OPENAI_API_KEY\"\n",
            )
        } else {
            (codex.provider.base_url(), "")
        };
        config.push_str(&format!(
            "\n[model_providers.mock]\nname = \"mock\"\nbase_url = \"{base_url}\"\nwire_api = \"responses\"\n\
             {env_key}request_max_retries = 0\nstream_max_retries = 0\n\n[features]\nhooks = true\n"
        ));
        if options.mcp {
            config.push_str(&format!(
                "\n[mcp_servers.mc]\ncommand = {}\nargs = [\"mcp\", \"--harness\", \"codex\"]\n\
                 default_tools_approval_mode = \"approve\"\n\n[mcp_servers.mc.env]\nMC_DB = {}\n",
                toml_string(&bin_path("mc-search").display().to_string()),
                toml_string(&codex.db.display().to_string()),
            ));
        }
        std::fs::write(codex.codex_home().join("config.toml"), config).unwrap();
        let mut hooks = json!({"hooks": {}});
        for (event, matcher, command) in &options.hooks {
            let mut group =
                json!({"hooks": [{"type": "command", "command": command, "timeout": 30}]});
            if let Some(matcher) = matcher {
                group["matcher"] = json!(matcher);
            }
            let mut list = hooks["hooks"][event.as_str()]
                .as_array()
                .cloned()
                .unwrap_or_default();
            list.push(group);
            hooks["hooks"][event.as_str()] = json!(list);
        }
        std::fs::write(
            codex.codex_home().join("hooks.json"),
            serde_json::to_string_pretty(&hooks).unwrap(),
        )
        .unwrap();
        let root = codex
            .historian
            .base_url()
            .trim_end_matches("/v1")
            .to_string();
        std::fs::write(
            codex.mc_config(),
            format!(
                r#"{{"providers": {{"fake": {{"kind": "anthropic", "base_url": "{root}"}}}},
                    "historian": {{"model": "fake/mock-historian", "retries": 0, "timeout_ms": 30000}},
                    "gateway": {{"openai_upstream": "{}"}}, "transform": {}}}"#,
                codex.provider.base_url(),
                options.transform.clone().unwrap_or_else(|| json!({}))
            ),
        )
        .unwrap();
        if options.gateway {
            let db = options
                .gateway_db
                .clone()
                .unwrap_or_else(|| codex.db.clone());
            codex.gateway = Some(crate::gateway::GatewayProcess::start_with(
                &codex.mc_config(),
                &codex.home(),
                port,
                &[("MC_DB", &db)],
            ));
        }
        Some(codex)
    }

    /// Send Codex's model calls to `base_url` (a relay's or a gateway's
    /// `…/v1` or `…/openai`) instead of straight to the fake, with the API
    /// key as the provider's `env_key`.
    pub fn use_base_url(&self, base_url: &str) {
        let path = self.codex_home().join("config.toml");
        let config = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<String> = config
            .lines()
            .filter(|l| !l.starts_with("env_key = "))
            .map(|l| {
                if l.starts_with("base_url = ") {
                    format!(
                        "base_url = {}\nenv_key = \"OPENAI_API_KEY\"",
                        toml_string(base_url)
                    )
                } else {
                    l.to_string()
                }
            })
            .collect();
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    }

    /// `HOME` of Codex and every process it starts.
    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// `CODEX_HOME`: config, hooks, sessions' rollouts.
    pub fn codex_home(&self) -> PathBuf {
        self.home().join(".codex")
    }

    /// mc's config (`MC_CONFIG`): the historian's model on the fake provider.
    pub fn mc_config(&self) -> PathBuf {
        self.dir.path().join("mc-config.jsonc")
    }

    /// A file in the test's temp folder (hooks can log there as `$HOME/../NAME`).
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A command in the sealed environment Codex and everything it starts
    /// share: the temp home, `CODEX_HOME`, mc's database and config, no
    /// proxy for loopback. The clock is the real one.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let home = self.home();
        let mut command = Command::new(program);
        crate::env::seal_at_home(&mut command, &home)
            .env("CODEX_HOME", self.codex_home())
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("MC_DB", &self.db)
            .env("MC_CONFIG", self.mc_config())
            .env("PATH", crate::path_with_bins())
            .current_dir(&self.project);
        command
    }

    fn git(&self, args: &[&str]) {
        let out = crate::pipe(self.command("git").args(args), b"")
            .unwrap_or_else(|e| panic!("running git {args:?}: {e}"));
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `codex exec --json` with `prompt`, in a new thread or `resume`d,
    /// whatever its outcome. Fails the test when it runs over two minutes.
    pub fn exec_output(&self, resume: Option<&str>, prompt: &str) -> Output {
        let mut command = self.command(&self.bin);
        command
            .env("OPENAI_API_KEY", "test-key")
            .args(["exec", "--json", "--dangerously-bypass-hook-trust"])
            // The agent's shell commands (scripted by the fake provider) may
            // write mc's database, outside the project.
            .args(["--skip-git-repo-check", "-s", "danger-full-access"]);
        if let Some(thread) = resume {
            command.args(["resume", thread]);
        }
        command.arg(prompt);
        crate::pipe_within(&mut command, b"", Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("running codex: {e}"))
            .expect("codex exec was still running after 120 s")
    }

    /// `codex exec --json` with `prompt`, in a new thread or `resume`d.
    /// Fails the test when Codex fails or runs over two minutes.
    pub fn exec(&self, resume: Option<&str>, prompt: &str) -> Exec {
        let out = self.exec_output(resume, prompt);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "codex exec failed ({}): {stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let events: Vec<Value> = stdout
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let thread_id = events
            .iter()
            .find_map(|e| e["thread_id"].as_str())
            .map(str::to_string)
            .or_else(|| resume.map(str::to_string))
            .unwrap_or_else(|| panic!("codex exec named no thread: {stdout}"));
        let message = events
            .iter()
            .rev()
            .find(|e| e["item"]["type"] == "agent_message")
            .and_then(|e| e["item"]["text"].as_str())
            .unwrap_or_default()
            .to_string();
        Exec {
            thread_id,
            message,
            events,
        }
    }

    /// The rollout of `thread`.
    pub fn rollout(&self, thread: &str) -> PathBuf {
        let suffix = format!("-{thread}.jsonl");
        let mut found = Vec::new();
        let mut dirs = vec![self.codex_home().join("sessions")];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.to_string_lossy().ends_with(&suffix) {
                    found.push(path);
                }
            }
        }
        found
            .pop()
            .unwrap_or_else(|| panic!("no rollout of thread {thread}"))
    }

    /// Run one of mc's binaries with `stdin` in the same environment.
    pub fn mc(&self, bin: &str, args: &[&str], stdin: &str) -> Output {
        crate::pipe(self.command(bin_path(bin)).args(args), stdin.as_bytes())
            .unwrap_or_else(|e| panic!("running {bin}: {e}"))
    }

    /// [`Codex::mc`], which must succeed, as JSON.
    pub fn mc_json(&self, bin: &str, args: &[&str]) -> Value {
        let out = self.mc(bin, args, "");
        assert!(
            out.status.success(),
            "{bin} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}

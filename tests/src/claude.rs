//! The real Claude Code (`claude`, npm `@anthropic-ai/claude-code`, pinned in
//! `tests/e2e/package.json`) for end-to-end tests: print mode (`claude -p …
//! --output-format json`), an isolated home and config folder, `mc-search mcp`
//! as its only MCP server, and a fake Anthropic provider of ours on
//! 127.0.0.1 that records every request.
//!
//! What the pinned version does, as observed: one `GET /` (a reachability
//! probe) and then one `POST /v1/messages?beta=true` per model turn, streamed,
//! with every MCP tool offered as `mcp__<server>__<tool>`; no token counts,
//! no title call and no telemetry with `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC`.
//! It starts each stdio MCP server with `CLAUDE_CODE_SESSION_ID` and
//! `CLAUDE_PROJECT_DIR` in its environment, in the session's folder.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};

use crate::bin_path;
use crate::fake_provider::FakeProvider;

/// The pinned `claude`, as [`crate::harness::Pinned::path`] finds it.
pub fn claude_bin() -> Option<PathBuf> {
    crate::harness::CLAUDE_CODE.path()
}

/// What to set up around Claude Code.
#[derive(Default)]
pub struct Options {
    /// Run `mc-search session-start --harness claude-code` as a `SessionStart`
    /// hook (in the isolated user settings).
    pub session_start_hook: bool,
    /// More environment for the MCP server (its `env` in the MCP config,
    /// which Claude Code applies after its own variables).
    pub server_env: Vec<(String, String)>,
    /// Hooks in the isolated user settings: (event, matcher, command).
    pub hooks: Vec<(String, Option<String>, String)>,
}

/// `text` quoted for `sh`.
pub fn sh(text: &str) -> String {
    shell_quote(text)
}

/// Claude Code set up in a temp folder: a home, a git project, mc's database,
/// the MCP config, and the fake provider.
pub struct ClaudeCode {
    bin: PathBuf,
    dir: tempfile::TempDir,
    pub provider: FakeProvider,
    /// The session's folder: a git repository with one commit.
    pub project: PathBuf,
    /// The database every mc process here uses.
    pub db: PathBuf,
    /// Where Claude Code sends its model calls instead of the fake provider
    /// (a gateway in front of it).
    base_url: std::sync::Mutex<Option<String>>,
}

impl ClaudeCode {
    /// Set up Claude Code, or `None` (with a note on stderr) when the pinned
    /// binary is not installed. Under CI (`CI` set) a missing binary fails:
    /// CI installs it, so there the tests must run.
    pub fn start(test: &str, options: Options) -> Option<ClaudeCode> {
        let bin = crate::harness::CLAUDE_CODE.for_test(test)?;
        let dir = tempfile::tempdir().expect("a temp folder");
        let provider = FakeProvider::start();
        let home = dir.path().join("home");
        std::fs::create_dir_all(home.join(".claude")).unwrap();
        let project = dir.path().join("project");
        std::fs::create_dir_all(&project).unwrap();
        let db = dir.path().join("ctx.db");
        let claude = ClaudeCode {
            bin,
            dir,
            provider,
            project,
            db,
            base_url: std::sync::Mutex::new(None),
        };
        claude.git(&["init", "-q"]);
        claude.git(&[
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
        let mc_search = bin_path("mc-search");
        let mut settings = json!({});
        if options.session_start_hook {
            let command = format!(
                "{} session-start --harness claude-code",
                shell_quote(&mc_search.display().to_string())
            );
            settings["hooks"] = json!({"SessionStart": [
                {"hooks": [{"type": "command", "command": command, "timeout": 10}]}
            ]});
        }
        for (event, matcher, command) in &options.hooks {
            let mut group =
                json!({"hooks": [{"type": "command", "command": command, "timeout": 30}]});
            if let Some(matcher) = matcher {
                group["matcher"] = json!(matcher);
            }
            let list = settings["hooks"][event.as_str()].as_array().cloned();
            let mut list = list.unwrap_or_default();
            list.push(group);
            settings["hooks"][event.as_str()] = json!(list);
        }
        write_json(&claude.config_dir().join("settings.json"), &settings);
        // mc's config: the historian's model is the fake provider too
        // (`FakeProvider::play_historian("mock-historian")` makes it answer).
        let root = claude
            .provider
            .base_url()
            .trim_end_matches("/v1")
            .to_string();
        std::fs::write(
            claude.mc_config(),
            format!(
                r#"{{"providers": {{"fake": {{"kind": "anthropic", "base_url": "{root}"}}}},
                    "historian": {{"model": "fake/mock-historian", "retries": 0, "timeout_ms": 30000}}}}"#
            ),
        )
        .unwrap();
        let mut env = serde_json::Map::new();
        env.insert("MC_DB".into(), json!(claude.db.display().to_string()));
        for (name, value) in &options.server_env {
            env.insert(name.clone(), json!(value));
        }
        write_json(
            &claude.mcp_config(),
            &json!({"mcpServers": {"mc": {
                "command": mc_search.display().to_string(),
                "args": ["mcp", "--harness", "claude-code"],
                "env": env,
            }}}),
        );
        Some(claude)
    }

    /// `HOME` of Claude Code and every process it starts.
    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// `CLAUDE_CONFIG_DIR`: settings, sessions' transcripts.
    pub fn config_dir(&self) -> PathBuf {
        self.home().join(".claude")
    }

    /// mc's config (`MC_CONFIG`): the historian's model on the fake provider.
    pub fn mc_config(&self) -> PathBuf {
        self.dir.path().join("mc-config.jsonc")
    }

    pub fn mcp_config(&self) -> PathBuf {
        self.dir.path().join("mcp.json")
    }

    /// A command in the sealed environment Claude Code and everything it
    /// starts share: the temp home, mc's database, the fake provider, no
    /// telemetry, no proxy for loopback. The clock is the real one.
    fn sealed(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let home = self.home();
        let mut command = Command::new(program);
        crate::env::seal_at_home(&mut command, &home)
            .env("CLAUDE_CONFIG_DIR", self.config_dir())
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("MC_DB", &self.db)
            .env("MC_CONFIG", self.mc_config())
            .env("PATH", crate::path_with_bins())
            .current_dir(&self.project);
        command
    }

    fn git(&self, args: &[&str]) {
        let out = crate::pipe(self.sealed("git").args(args), b"")
            .unwrap_or_else(|e| panic!("running git {args:?}: {e}"));
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A file in the test's temp folder (hooks can log there).
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The transcript of `session` (Claude Code names its folder after the project's path).
    pub fn transcript(&self, session: &str) -> PathBuf {
        let folder: String = self
            .project
            .display()
            .to_string()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        self.config_dir()
            .join("projects")
            .join(folder)
            .join(format!("{session}.jsonl"))
    }

    /// Run one prompt in print mode and return Claude Code's JSON result
    /// (`session_id`, `result`, `num_turns`, …). Fails the test when Claude
    /// Code fails, or is still running after two minutes.
    pub fn prompt(&self, text: &str) -> Value {
        self.prompt_in(None, text, &[])
    }

    /// [`ClaudeCode::prompt`] in an existing session (`--resume`), with more
    /// environment (`CLAUDE_CODE_AUTO_COMPACT_WINDOW`, say). `/compact` as the
    /// text compacts the session.
    pub fn prompt_in(&self, session: Option<&str>, text: &str, env: &[(&str, &str)]) -> Value {
        self.prompt_with(session, text, env, true)
    }

    /// [`ClaudeCode::prompt`] with only what the user's own settings say
    /// (`settings.json`, `.claude.json` in `CLAUDE_CONFIG_DIR`): no
    /// `--mcp-config`, no `--allowedTools`, as `mc-doctor setup` leaves it.
    pub fn prompt_as_configured(&self, text: &str) -> Value {
        self.prompt_with(None, text, &[], false)
    }

    /// mc's config gets a gateway on `port` forwarding to the fake provider
    /// (`gateway.listen`, `gateway.anthropic_upstream`).
    pub fn configure_gateway(&self, port: u16) {
        let root = self.provider.base_url().trim_end_matches("/v1").to_string();
        let config = std::fs::read_to_string(self.mc_config()).unwrap();
        let config = config.trim_end().strip_suffix('}').unwrap().to_string();
        std::fs::write(
            self.mc_config(),
            format!(
                r#"{config}, "gateway": {{"listen": "127.0.0.1:{port}", "anthropic_upstream": "{root}"}}}}"#
            ),
        )
        .unwrap();
    }

    /// Every model call through `mc-transform gateway` on a free port, on
    /// this database, as mc's config names it ([`ClaudeCode::configure_gateway`]).
    pub fn through_gateway(&self) -> crate::gateway::GatewayProcess {
        let port = crate::gateway::free_port();
        self.configure_gateway(port);
        let gateway = crate::gateway::GatewayProcess::start_with(
            &self.mc_config(),
            &self.home(),
            port,
            &[("MC_DB", &self.db)],
        );
        self.use_base_url(gateway.url());
        gateway
    }

    /// [`ClaudeCode::prompt_as_configured`] in an existing session when
    /// `session` is given: Claude Code with its own tools only (a benchmark's
    /// run without mc and its run through the gateway differ in nothing else).
    pub fn prompt_plain(&self, session: Option<&str>, text: &str) -> Value {
        self.prompt_with(session, text, &[], false)
    }

    /// Send Claude Code's model calls to `url` (`http://127.0.0.1:PORT`, a
    /// gateway) instead of straight to the fake provider.
    pub fn use_base_url(&self, url: &str) {
        *self.base_url.lock().unwrap() = Some(url.to_string());
    }

    /// Run one prompt in print mode and return whatever came of it, success
    /// or not (within two minutes). `env` entries with an empty value are
    /// removed from Claude Code's environment.
    pub fn run(&self, text: &str, env: &[(&str, &str)]) -> Output {
        let mut command = self.claude_command(None, text, env, true);
        crate::pipe_within(&mut command, b"", Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("running claude: {e}"))
            .expect("claude -p was still running after 120 s")
    }

    fn claude_command(
        &self,
        session: Option<&str>,
        text: &str,
        env: &[(&str, &str)],
        test_mcp: bool,
    ) -> Command {
        let root = self
            .base_url
            .lock()
            .unwrap()
            .clone()
            .unwrap_or_else(|| self.provider.base_url().trim_end_matches("/v1").to_string());
        let mut command = self.sealed(&self.bin);
        if let Some(session) = session {
            command.args(["--resume", session]);
        }
        command
            .env("ANTHROPIC_BASE_URL", root)
            .env("ANTHROPIC_API_KEY", "test-key");
        for (name, value) in env {
            if value.is_empty() {
                command.env_remove(name);
            } else {
                command.env(name, value);
            }
        }
        command
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("DISABLE_TELEMETRY", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .env("DISABLE_ERROR_REPORTING", "1")
            // Wait for the MCP servers before the first model call.
            .env("MCP_CONNECTION_NONBLOCKING", "false")
            .args(["-p", text, "--output-format", "json"]);
        if test_mcp {
            command.arg("--mcp-config").arg(self.mcp_config()).args([
                "--strict-mcp-config",
                "--allowedTools",
                "mcp__mc__*,Bash(mc-pin:*)",
            ]);
        }
        command
    }

    fn prompt_with(
        &self,
        session: Option<&str>,
        text: &str,
        env: &[(&str, &str)],
        test_mcp: bool,
    ) -> Value {
        let mut command = self.claude_command(session, text, env, test_mcp);
        let out = crate::pipe_within(&mut command, b"", Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("running claude: {e}"))
            .expect("claude -p was still running after 120 s");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "claude -p failed ({}): {stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("claude -p printed no JSON result ({e}): {stdout}"))
    }

    /// Run `mc-pin args` with `stdin` in the same environment (database,
    /// home, `CLAUDE_CONFIG_DIR`), in the project folder.
    pub fn mc_pin(&self, args: &[&str], stdin: &str) -> Output {
        crate::pipe(self.sealed(bin_path("mc-pin")).args(args), stdin.as_bytes())
            .unwrap_or_else(|e| panic!("running mc-pin: {e}"))
    }

    /// [`ClaudeCode::mc_pin`], which must succeed, as JSON.
    pub fn mc_pin_json(&self, args: &[&str]) -> Value {
        let out = self.mc_pin(args, "");
        assert!(
            out.status.success(),
            "mc-pin {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// A command in the same environment, for anything else the test runs.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        self.sealed(program)
    }

    /// Run `mc-search args` in the same environment (database, home), in the
    /// project folder.
    pub fn mc_search(&self, args: &[&str]) -> Output {
        crate::pipe(self.sealed(bin_path("mc-search")).args(args), b"")
            .unwrap_or_else(|e| panic!("running mc-search: {e}"))
    }

    /// [`ClaudeCode::mc_search`], which must succeed, as JSON.
    pub fn mc_search_json(&self, args: &[&str]) -> Value {
        let out = self.mc_search(args);
        assert!(
            out.status.success(),
            "mc-search {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

fn write_json(path: &Path, value: &Value) {
    std::fs::write(path, serde_json::to_string_pretty(value).unwrap())
        .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

/// `text` quoted for `sh`.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

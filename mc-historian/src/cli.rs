//! Argument parsing, input sources and the commands.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, anyhow};
use clap::{Args as ClapArgs, Parser, Subcommand};
use serde_json::Value;

use mc_base::codec::{claude, codex};
use mc_base::config::Config;
use mc_base::domain::envelope::Envelope;
use mc_base::store::Store;
use mc_cli::{Failure, GlobalArgs, Wait, write_json};
use mc_history::historian::choice::{self, ModelChoice, ModelSource};
use mc_history::historian::{self, Input, RunParams, RunStatus, Settings};
use mc_llm::{self as llm, Client};

use crate::progress::Progress;

const NAME: &str = "mc-historian";

const ABOUT: &str = "Folds old conversation of a coding session into compartments and facts.

A compartment summarises a finished piece of work at four levels of detail (p1 verbose
… p4 one line) with an importance and an episode type; mc-transform renders it by a decay
curve instead of the raw messages. Facts become project memory.

Input: the mc-transform envelope (JSON) on stdin, or --transcript FILE (a Claude Code
session JSONL, a Codex rollout or a Pi session file), or --opencode-url URL --session ID (a running OpenCode server).
Models and providers come from the user config (historian.model, providers). Without
one, the model the session's harness already uses: an OpenCode session's server
(--opencode-url, else OPENCODE_URL) folds in a hidden child session; a Claude Code,
Codex or Pi session runs claude -p, codex exec or pi -p when it is on PATH. `check`
says which model a run would use and why.";

#[derive(Parser, Debug)]
#[command(name = "mc-historian", version, about = ABOUT)]
struct Args {
    #[command(flatten)]
    global: GlobalArgs,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Fold the eligible history above the last compartment: call the model,
    /// validate, repair once, publish in one transaction.
    ///
    /// Answers {"status": published | nothing_to_do | failed, "compartments",
    /// "facts_promoted", "tokens", "model", …}. A failed run exits 1 and is
    /// recorded with its cause (mc-transform status shows it).
    Run(Source),
    /// Say whether a run is due and why (the transform's own rule); no model call.
    Check(Source),
    /// Print the exact request a run would send first; no call, nothing written.
    Prompt(Source),
    /// A harness hook (Claude Code or Codex `Stop`, `PostCompact`, …): read
    /// the hook input on stdin, and when `check` says a run is due for its
    /// transcript, start `mc-historian run` in the background and return at
    /// once. Prints nothing and always exits 0 (a `Stop` hook's exit 2 would
    /// keep the agent working): problems are warnings on stderr.
    Hook(HookArgs),
}

#[derive(ClapArgs, Debug)]
struct HookArgs {
    /// claude-code or codex [default: from the transcript]
    #[arg(long, value_name = "H")]
    harness: Option<String>,
    /// The model's context window in tokens [default: Codex's figure in its
    /// rollout; 200000 for Claude Code]
    #[arg(long, value_name = "TOKENS")]
    context_limit: Option<u64>,
    /// Wait for the run instead of starting it in the background (tests, scripts)
    #[arg(long)]
    wait: bool,
}

/// Where the session comes from. Without flags: the envelope on stdin.
#[derive(ClapArgs, Debug)]
struct Source {
    /// A session transcript: a Claude Code session JSONL, a Codex rollout or
    /// a Pi session file (told apart by its first line)
    #[arg(long, value_name = "FILE", conflicts_with = "opencode_url")]
    transcript: Option<PathBuf>,
    /// The harness the transcript comes from: claude-code, codex or pi
    /// [default: from the transcript]; a rollout is read as Codex's whatever
    /// this says
    #[arg(long, value_name = "H", requires = "transcript")]
    harness: Option<String>,
    /// A running OpenCode server to fetch the session's messages from
    #[arg(long, value_name = "URL", requires = "session")]
    opencode_url: Option<String>,
    /// Session id (with --opencode-url; overrides the transcript's own)
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// The project the session works in [default: the envelope's project_dir,
    /// the transcript's cwd, else the working directory]
    #[arg(long, value_name = "DIR")]
    project_dir: Option<PathBuf>,
    /// The model's context window in tokens, for pressure (the envelope's
    /// model.context_limit)
    #[arg(long, value_name = "TOKENS")]
    context_limit: Option<u64>,
    /// The clock, in milliseconds since the epoch (the envelope's now_ms)
    #[arg(long, value_name = "MS")]
    now_ms: Option<i64>,
}

/// A model-client failure: a misconfigured chain is the user's to fix (exit
/// 2), anything else exits 1; its hints follow the error line.
fn client_failure(error: llm::LlmError) -> Failure {
    let hints = error.hints.clone();
    Failure::of_kind(error.error_kind(), error.into()).with_hints(hints)
}

pub fn main() -> ExitCode {
    let args = Args::parse();
    let result = match &args.command {
        Command::Run(source) => run(&args, source),
        Command::Check(source) => check(&args, source),
        Command::Prompt(source) => prompt(&args, source),
        Command::Hook(hook) => Ok(run_hook(&args, hook)),
    };
    mc_cli::finish(NAME, result)
}

fn read_stdin() -> Result<String, Failure> {
    mc_cli::read_stdin(
        "expected the envelope (JSON) on stdin, or --transcript FILE, or --opencode-url URL \
         --session ID (see mc-historian --help)",
    )
}

/// The session to work on, and the clock its envelope fixed (if any).
struct Loaded {
    input: Input,
    now_ms: Option<i64>,
}

fn load_input(args: &Args, source: &Source) -> Result<Loaded, Failure> {
    let mut loaded = if let Some(path) = &source.transcript {
        from_transcript(
            path,
            source.session.as_deref(),
            source.harness.as_deref(),
            transcript_limit(args),
        )?
    } else if let Some(url) = &source.opencode_url {
        from_opencode(url, source)?
    } else {
        if source.session.is_some() {
            return Err(Failure::input(anyhow!(
                "--session goes with --opencode-url or --transcript; an envelope names its own session"
            )));
        }
        let text = read_stdin()?;
        let value = mc_cli::parse_json(&text, "input")?;
        let envelope = Envelope::from_value(value).map_err(|e| Failure::input(e.into()))?;
        let now_ms = envelope.now_ms;
        Loaded {
            input: Input::from_envelope(envelope).map_err(|e| Failure::input(e.into()))?,
            now_ms,
        }
    };
    if let Some(dir) = &source.project_dir {
        loaded.input.project_dir = Some(dir.clone());
    }
    if loaded.input.project_dir.is_none() {
        loaded.input.project_dir = mc_cli::working_dir();
    }
    if let Some(limit) = source.context_limit {
        loaded.input.model.context_limit = Some(limit);
    }
    if source.now_ms.is_some() {
        loaded.now_ms = source.now_ms;
    }
    Ok(loaded)
}

/// `transcript.max_bytes`. The config proper is loaded once the transcript
/// has named its project; this key is user-only, so the trusted layers alone
/// decide it (their warnings are printed by that later load).
fn transcript_limit(args: &Args) -> u64 {
    let layers: Vec<_> =
        mc_base::paths::config_layers(args.global.config.as_deref(), None, &mc_cli::env_paths())
            .into_iter()
            .filter(|layer| layer.tier.is_trusted())
            .collect();
    mc_base::config::load(&layers).config.transcript.max_bytes
}

/// Claude Code's context window when nothing says otherwise (its 1M-token
/// models say so only in the model name the transcript does not record).
const CLAUDE_CODE_WINDOW: u64 = 200_000;

fn from_transcript(
    path: &Path,
    session: Option<&str>,
    harness: Option<&str>,
    max_bytes: u64,
) -> Result<Loaded, Failure> {
    if let Some(h) = harness
        && !matches!(h, "claude-code" | "claude" | "codex" | "pi")
    {
        return Err(Failure::input(anyhow!(
            "unknown harness {h:?} for a transcript (claude-code, codex or pi)"
        )));
    }
    // A regular file within the cap, read line by line; a line that cannot be
    // read is skipped with a warning instead of failing the whole file.
    let objects = mc_base::codec::jsonl::read_objects(path, max_bytes, "transcript")?;
    mc_cli::warn(NAME, &objects.warnings);
    let rollout = objects
        .lines
        .first()
        .is_some_and(|(_, v)| v.get("type").and_then(Value::as_str) == Some("session_meta"));
    let no_session = || {
        Failure::input(anyhow!("transcript {} names no session", path.display()))
            .with_hints(["pass --session ID".to_string()])
    };
    let pi_file = objects
        .lines
        .first()
        .is_some_and(|(_, v)| mc_base::codec::pi::is_header(v));
    if pi_file || harness == Some("pi") {
        // A Pi session file: what the model sees on the current branch, with
        // the identities mc-transform gave those messages.
        let file = mc_base::codec::pi::SessionFile::from_lines(objects.lines);
        let session_id = session
            .map(str::to_string)
            .or_else(|| file.id.clone())
            .ok_or_else(no_session)?;
        let messages = mc_base::codec::pi::to_grouped_messages(&file, &session_id, false)
            .into_iter()
            .map(|m| m.message)
            .collect();
        let mut input = Input::from_messages(mc_base::codec::PI, &session_id, messages)
            .map_err(|e| Failure::input(e.into()))?;
        input.project_dir = file.cwd.clone().map(PathBuf::from);
        if let Some((provider, id)) = mc_base::codec::pi::last_model(&file) {
            input.model.provider = Some(provider);
            input.model.id = Some(id);
        }
        return Ok(Loaded {
            input,
            now_ms: None,
        });
    }
    let (harness, session_id, messages, project_dir, window) = if rollout {
        let lines = codex::lines_from(objects.lines);
        let session_id = session
            .map(str::to_string)
            .or_else(|| codex::session_id(&lines))
            .ok_or_else(no_session)?;
        let messages = codex::to_messages(&lines, &session_id);
        let window = codex::context_window(&lines);
        (
            historian::CODEX,
            session_id,
            messages,
            codex::cwd(&lines),
            window,
        )
    } else {
        let entries = claude::entries_from(objects.lines);
        let session_id = session
            .map(str::to_string)
            .or_else(|| entries.iter().find_map(|e| e.session_id.clone()))
            .ok_or_else(no_session)?;
        let messages = claude::to_messages(&entries, &session_id);
        // The session's working directory, as the transcript recorded it.
        let cwd = entries
            .iter()
            .rev()
            .find_map(|e| e.raw.get("cwd").and_then(Value::as_str))
            .filter(|cwd| !cwd.is_empty())
            .map(str::to_string);
        (
            historian::CLAUDE_CODE,
            session_id,
            messages,
            cwd,
            Some(CLAUDE_CODE_WINDOW),
        )
    };
    let mut input = Input::from_messages(harness, &session_id, messages)
        .map_err(|e| Failure::input(e.into()))?;
    input.project_dir = project_dir.map(PathBuf::from);
    input.model.context_limit = window;
    Ok(Loaded {
        input,
        now_ms: None,
    })
}

/// `mc-historian hook`: never fails the hook; what went wrong is a warning.
fn run_hook(args: &Args, hook: &HookArgs) -> ExitCode {
    if let Err(failure) = hook_inner(args, hook) {
        let text = failure
            .error
            .chain()
            .map(|c| c.to_string())
            .collect::<Vec<_>>();
        mc_cli::warn(NAME, &[format!("hook: {}", text.join(": "))]);
    }
    ExitCode::SUCCESS
}

fn hook_inner(args: &Args, hook: &HookArgs) -> Result<(), Failure> {
    let text = mc_cli::read_stdin("expected a hook input (JSON) on stdin")?;
    if mc_cli::inside_historian_child() {
        // The historian's own model call ending: nothing of the user's to fold.
        return Ok(());
    }
    let input = mc_cli::parse_json(&text, "the hook input")?;
    let field = |key: &str| {
        input
            .get(key)
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
    };
    let Some(transcript) = field("transcript_path") else {
        return Err(Failure::input(anyhow!(
            "the hook input names no transcript_path: nothing to fold"
        )));
    };
    let transcript = PathBuf::from(transcript);
    if !transcript.is_file() {
        // Claude Code writes the transcript after the first prompt.
        return Ok(());
    }
    let source = Source {
        transcript: Some(transcript.clone()),
        harness: hook.harness.clone(),
        opencode_url: None,
        session: field("session_id").map(str::to_string),
        project_dir: field("cwd").map(PathBuf::from),
        context_limit: hook.context_limit,
        now_ms: None,
    };
    let mut loaded = load_input(args, &source)?;
    let (config, store) = session_setup(args, &mut loaded)?;
    // A model must be configured, or the harness's own usable, or there is
    // nothing a run could do.
    let choice = choose(&config, &source, &loaded, &store);
    client(&config, &choice, &source, &loaded.input).map_err(client_failure)?;
    let report = historian::check(store.conn(), &loaded.input, &config.transform)?;
    if !report.due.due {
        return Ok(());
    }
    // After a failure, wait before the next try (5 minutes), as the OpenCode
    // plugin backs off.
    if let Some(session) = mc_base::domain::sessions::find_session(
        store.conn(),
        &loaded.input.harness,
        &loaded.input.session_id,
    )?
    .map(|s| s.id)
        && let Some(status) = historian::status(store.conn(), session)?
        && let Some(failed) = status.last_failure
        && status.failures_since_success > 0
        && mc_cli::now_ms().saturating_sub(failed.started_ms) < HOOK_BACKOFF_MS
    {
        return Ok(());
    }
    drop(store);
    let exe = std::env::current_exe().map_err(|e| Failure::runtime(e.into()))?;
    let mut run = std::process::Command::new(exe);
    if let Some(db) = &args.global.db {
        run.arg("--db").arg(db);
    }
    if let Some(config) = &args.global.config {
        run.arg("--config").arg(config);
    }
    run.args([
        "run",
        "--harness",
        loaded.input.harness.as_str(),
        "--transcript",
    ])
    .arg(&transcript)
    .args(["--session", loaded.input.session_id.as_str()]);
    if let Some(dir) = &loaded.input.project_dir {
        run.arg("--project-dir").arg(dir);
    }
    if let Some(limit) = loaded.input.model.context_limit {
        run.args(["--context-limit", &limit.to_string()]);
    }
    run.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    if hook.wait {
        run.status().map_err(|e| Failure::runtime(e.into()))?;
        return Ok(());
    }
    // Its own process group: the harness may end the hook's group when the
    // hook returns or times out; the run outlives it.
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut run, 0);
    run.spawn().map_err(|e| Failure::runtime(e.into()))?;
    Ok(())
}

/// How long `hook` waits after a failed run before starting another.
const HOOK_BACKOFF_MS: i64 = 5 * 60 * 1000;

fn from_opencode(url: &str, source: &Source) -> Result<Loaded, Failure> {
    let session = source.session.as_deref().expect("clap requires --session");
    let client =
        mc_cli::opencode(url).with_directory(source.project_dir.as_deref().and_then(Path::to_str));
    let messages = client
        .list_messages(session)
        .with_context(|| format!("fetching session {session} from {url}"))?;
    let mut input = Input::from_messages("opencode", session, messages)
        .map_err(|e| Failure::input(e.into()))?;
    // OpenCode records the working directory on assistant messages.
    input.project_dir = input.messages.iter().rev().find_map(|m| {
        m.info()
            .get("path")
            .and_then(|p| p.get("cwd"))
            .and_then(Value::as_str)
            .map(PathBuf::from)
    });
    Ok(Loaded {
        input,
        now_ms: None,
    })
}

/// The config and store for the loaded session: the config of the project
/// folder its first pass recorded (so `check` and the pass agree on the
/// threshold), else of the input's project folder.
fn session_setup(args: &Args, loaded: &mut Loaded) -> anyhow::Result<(Config, Store)> {
    let input = &mut loaded.input;
    let setup = mc_cli::session_setup(
        NAME,
        &args.global,
        Some((&input.harness, &input.session_id)),
        input.project_dir.as_deref(),
        Wait::Background,
    );
    input.project_dir = setup.project_dir;
    let path = mc_cli::db_path(args.global.db.as_deref())?;
    let store = setup
        .store
        .with_context(|| format!("opening {}", path.display()))?;
    Ok((setup.config, store))
}

/// Timeouts, retries and proxies for model calls, from the config.
fn llm_options(config: &Config) -> llm::Options {
    llm::Options::from_config(
        &config.historian,
        mc_cli::proxy_env(),
        llm::Sleeper::new(std::thread::sleep),
    )
}

/// The model a run of the loaded session uses, and why: the configured
/// chain, else the harness's own model (an OpenCode default first asks the
/// server whether its small_model costs no more than the session's).
fn choose(config: &Config, source: &Source, loaded: &Loaded, store: &Store) -> ModelChoice {
    let env = mc_cli::harness_env(source.opencode_url.as_deref(), false);
    let input = &loaded.input;
    // An unreadable session row only costs the recorded model.
    let model = choice::session_model(store.conn(), input).unwrap_or_default();
    let mut choice = choice::choose(
        &config.historian,
        &config.providers,
        &input.harness,
        &model,
        &env,
    );
    choice.ask_opencode(directory(input), &llm_options(config));
    choice
}

/// The session's folder, as the OpenCode server is asked about it.
fn directory(input: &Input) -> Option<&str> {
    input.project_dir.as_deref().and_then(Path::to_str)
}

/// The model chain, with each provider's key read from the variable the user
/// config names (an unset variable leaves that provider without a key), and
/// the session an `opencode` provider makes its child session under.
fn client(
    config: &Config,
    choice: &ModelChoice,
    source: &Source,
    input: &Input,
) -> Result<Client, llm::LlmError> {
    if choice.source == ModelSource::None {
        return Err(choice.missing());
    }
    let keys = mc_cli::keys::chain_keys(&choice.chain, &choice.providers);
    let harness = llm::HarnessSession {
        opencode_url: mc_cli::harness_env(source.opencode_url.as_deref(), false).opencode_url,
        directory: directory(input).map(str::to_string),
        session_id: Some(input.session_id.clone()),
    };
    Ok(
        Client::new(&choice.providers, &choice.chain, &keys, llm_options(config))?
            .with_harness(harness),
    )
}

fn check(args: &Args, source: &Source) -> Result<ExitCode, Failure> {
    let mut loaded = load_input(args, source)?;
    let (config, store) = session_setup(args, &mut loaded)?;
    let mut report = historian::check(store.conn(), &loaded.input, &config.transform)?;
    report.model = Some(choose(&config, source, &loaded, &store).report());
    write_json(
        &serde_json::to_value(report).map_err(anyhow::Error::from)?,
        args.global.pretty,
    )?;
    Ok(ExitCode::SUCCESS)
}

fn prompt(args: &Args, source: &Source) -> Result<ExitCode, Failure> {
    let mut loaded = load_input(args, source)?;
    let (config, store) = session_setup(args, &mut loaded)?;
    let choice = choose(&config, source, &loaded, &store);
    let client = match client(&config, &choice, source, &loaded.input) {
        Ok(client) => Some(client),
        Err(error) => {
            eprintln!("mc-historian: warning: {error}; showing the prompt without a request");
            mc_cli::hint(NAME, &error.hints);
            None
        }
    };
    let settings = Settings {
        historian: &config.historian,
        transform: &config.transform,
    };
    let now = loaded.now_ms.unwrap_or_else(mc_cli::now_ms);
    let mut report =
        historian::prompt(store.conn(), &loaded.input, &settings, client.as_ref(), now)?;
    report.model_source = Some(choice.source);
    report.model_reason = Some(choice.reason);
    write_json(
        &serde_json::to_value(report).map_err(anyhow::Error::from)?,
        args.global.pretty,
    )?;
    Ok(ExitCode::SUCCESS)
}

fn run(args: &Args, source: &Source) -> Result<ExitCode, Failure> {
    // Whether there is a model at all is known before a whole session is
    // fetched over HTTP (the OpenCode plugin may ask often).
    if source.opencode_url.is_some() {
        let config = args.global.load_config(NAME, source.project_dir.as_deref());
        let env = mc_cli::harness_env(source.opencode_url.as_deref(), false);
        let early = choice::choose(
            &config.historian,
            &config.providers,
            "opencode",
            &Default::default(),
            &env,
        );
        if early.source == ModelSource::None {
            return Err(client_failure(early.missing()));
        }
    }
    let mut loaded = load_input(args, source)?;
    let (config, mut store) = session_setup(args, &mut loaded)?;
    let choice = choose(&config, source, &loaded, &store);
    let client = client(&config, &choice, source, &loaded.input).map_err(client_failure)?;
    let fixed = loaded.now_ms;
    let now = move || fixed.unwrap_or_else(mc_cli::now_ms);
    // The lease outlives the longest model call (with its retries and
    // fallbacks) by a minute; it is renewed before every call.
    let lease = client.options().worst_case(client.chain().len()) + Duration::from_secs(60);
    let params = RunParams {
        settings: Settings {
            historian: &config.historian,
            transform: &config.transform,
        },
        lease_ms: i64::try_from(lease.as_millis()).unwrap_or(i64::MAX),
        holder: historian::publish::process_holder(
            std::process::id(),
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        ),
        now: &now,
    };
    let mut progress = Progress::new(std::io::stderr().is_terminal());
    let report = historian::run(&mut store, &loaded.input, &client, &params, &mut |event| {
        progress.show(&event)
    });
    progress.finish();
    let mut report = report?;
    report.model_source = Some(choice.source);
    mc_cli::warn(NAME, &report.warnings);
    write_json(
        &serde_json::to_value(&report).map_err(anyhow::Error::from)?,
        args.global.pretty,
    )?;
    match (report.status, &report.failure) {
        // A failed run exits 1 whatever the failure's kind: the run was made.
        (RunStatus::Failed, Some(failure)) => {
            eprintln!("mc-historian: error: {failure}");
            mc_cli::hint(NAME, &failure.hints());
            Ok(ExitCode::from(1))
        }
        (_, Some(failure)) => {
            eprintln!("mc-historian: warning: published part of the range: {failure}");
            mc_cli::hint(NAME, &failure.hints());
            Ok(ExitCode::SUCCESS)
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}

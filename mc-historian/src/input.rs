//! The session a command works on, from its source: the envelope on stdin,
//! a transcript (Claude Code, Codex, Pi) or a running OpenCode server; and
//! the config and store of its project.

use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use serde_json::Value;

use mc_base::codec::{claude, codex};
use mc_base::config::Config;
use mc_base::domain::envelope::Envelope;
use mc_base::store::Store;
use mc_cli::{Failure, Wait};
use mc_history::historian::{self, Input};

use crate::args::{Args, NAME, Source};

pub(crate) fn read_stdin() -> Result<String, Failure> {
    mc_cli::read_stdin(
        "expected the envelope (JSON) on stdin, or --transcript FILE, or --opencode-url URL \
         --session ID (see mc-historian --help)",
    )
}

/// The session to work on, and the clock its envelope fixed (if any).
pub(crate) struct Loaded {
    pub(crate) input: Input,
    pub(crate) now_ms: Option<i64>,
    /// Read from a transcript (which mc's own record may replace).
    pub(crate) transcript: bool,
}

pub(crate) fn load_input(args: &Args, source: &Source) -> Result<Loaded, Failure> {
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
            transcript: false,
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
pub(crate) fn transcript_limit(args: &Args) -> u64 {
    let layers: Vec<_> =
        mc_base::paths::config_layers(args.global.config.as_deref(), None, &mc_cli::env_paths())
            .into_iter()
            .filter(|layer| layer.tier.is_trusted())
            .collect();
    mc_base::config::load(&layers).config.transcript.max_bytes
}

/// Claude Code's context window when nothing says otherwise (its 1M-token
/// models say so only in the model name the transcript does not record).
pub(crate) const CLAUDE_CODE_WINDOW: u64 = 200_000;

pub(crate) fn from_transcript(
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
            transcript: true,
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
        transcript: true,
    })
}

pub(crate) fn from_opencode(url: &str, source: &Source) -> Result<Loaded, Failure> {
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
        transcript: false,
    })
}

/// The config and store for the loaded session: the config of the project
/// folder its first pass recorded (so `check` and the pass agree on the
/// threshold), else of the input's project folder.
pub(crate) fn session_setup(args: &Args, loaded: &mut Loaded) -> anyhow::Result<(Config, Store)> {
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
    // Claude Code through mc's gateway: mc's record of the session is the
    // one to fold, not a second copy from the transcript.
    if loaded.transcript {
        input
            .adopt_gateway_record(store.conn())
            .context("reading mc's record of the session")?;
    }
    Ok((setup.config, store))
}

/// The session's folder, as the OpenCode server is asked about it.
pub(crate) fn directory(input: &Input) -> Option<&str> {
    input.project_dir.as_deref().and_then(Path::to_str)
}

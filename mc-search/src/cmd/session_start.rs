//! `session-start`: a SessionStart hook: the session recorded, the head
//! for the agent printed.

use std::path::PathBuf;

use anyhow::anyhow;
use serde_json::{Value, json};

use mc_base::identity::project_identity;
use mc_cli::{Failure, now_ms, write_json};
use mc_search_core::{self as search, Scope};

use crate::args::{Args, NAME};
use crate::common::canonical;

pub(crate) fn session_start(args: &Args) -> Result<(), Failure> {
    let text = mc_cli::read_stdin("expected a SessionStart hook input as JSON on stdin")?;
    if mc_cli::inside_historian_child() {
        // The historian's own `claude -p` / `codex exec`: not the folder's session.
        return Ok(write_json(&json!({}), false)?);
    }
    let input = mc_cli::parse_json(&text, "the hook input")?;
    let session_id = args
        .at
        .session
        .clone()
        .or_else(|| {
            input
                .get("session_id")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .ok_or_else(|| Failure::input(anyhow!("the hook input has no \"session_id\"")))?;
    let dir = args
        .at
        .project_dir
        .clone()
        .or_else(|| input.get("cwd").and_then(Value::as_str).map(PathBuf::from))
        .or_else(mc_cli::working_dir)
        .ok_or_else(|| {
            Failure::input(anyhow!("no project folder: the hook input has no \"cwd\""))
        })?;
    let harness = args
        .at
        .harness
        .clone()
        .unwrap_or_else(|| "claude-code".into());
    let scope = Scope {
        project: project_identity(&dir),
        harness,
        session_id: Some(session_id),
    };
    let config = args.global.load_config(NAME, Some(&dir));
    let mut store = mc_cli::open_store(args.global.db.as_deref(), &config)?;
    let transcript = input.get("transcript_path").and_then(Value::as_str);
    search::record_session_start(&mut store, &scope, &canonical(&dir), transcript, now_ms())?;
    Ok(write_json(&json!({}), false)?)
}

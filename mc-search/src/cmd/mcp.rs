//! `mcp`: the agent tools as an MCP server over stdio, for the session the
//! harness names in the server's environment.

use anyhow::anyhow;

use mc_base::identity::project_identity;
use mc_cli::{Failure, now_ms};
use mc_search_core::mcp::{self, ServerInfo};
use mc_search_core::tools::{self, SessionSource, ToolServer};

use crate::args::{Args, NAME};
use crate::common::{canonical, embeddings_of};

pub(crate) fn serve_mcp(args: &Args) -> Result<(), Failure> {
    let dir = crate::common::project_dir_flag(args)?;
    let harness = args.at.harness.clone().unwrap_or_else(|| "opencode".into());
    // The harness's own word on the session, when it gives one.
    let named = tools::session_variable(&harness)
        .and_then(|name| std::env::var(name).ok())
        .filter(|id| !id.trim().is_empty());
    let session = match (&args.at.session, named) {
        (Some(id), _) => SessionSource::Fixed(Some(id.clone())),
        (None, Some(session_id)) => SessionSource::Harness { session_id },
        (None, None) => SessionSource::Current {
            project_dir: canonical(&dir),
        },
    };
    let config = args.global.load_config(NAME, Some(&dir));
    let store = mc_cli::open_store(args.global.db.as_deref(), &config)?;
    let clock = now_ms;
    let mut server = ToolServer {
        store,
        project: project_identity(&dir),
        harness,
        session,
        transform: config.transform.clone(),
        clock: &clock,
        embeddings: embeddings_of(&config),
    };
    let info = ServerInfo {
        name: "mc",
        version: env!("CARGO_PKG_VERSION"),
        instructions: Some(tools::MCP_INSTRUCTIONS.into()),
    };
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    mcp::serve(stdin.lock(), stdout.lock(), &mut server, &info)
        .map_err(|e| Failure::runtime(anyhow!(e).context("the MCP connection failed")))
}

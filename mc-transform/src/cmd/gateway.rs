//! `mc-transform gateway`: the resident server Claude Code uses as its
//! provider's base URL, and Codex as its provider's (under `/openai`)
//! (mc-gateway). Thin: the user config's `gateway.*`,
//! `--listen`, the clock, the pass the server runs, and where Codex's
//! `config.toml` says Codex compacts (the window of Codex's calls).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::anyhow;

use mc_base::config::Config;
use mc_base::domain::gateway::{ByApi, Identity, Pass};
use mc_base::store::StoreOptions;
use mc_cli::{Failure, GlobalArgs, Wait};
use mc_gateway::{Gateway, Limits, Upstream};
use mc_search_core::recall::Search;
use mc_transform_core::gateway::TransformPass;
use mc_transform_core::responses_pass::ResponsesPass;

use crate::common::NAME;

/// The pass the gateway runs on each Messages and Responses call: mc's
/// transform over the store `--db` (else `MC_DB`, else the default) names,
/// one pass per wire. A store that cannot be opened leaves the gateway
/// forwarding every request untouched, with a warning: Claude Code and
/// Codex keep working without mc rather than not at all.
fn pass_for(global: &GlobalArgs, config: &Config) -> (Arc<dyn Pass>, Option<String>) {
    let opened = mc_cli::db_path(global.db.as_deref()).and_then(|path| {
        let options = StoreOptions {
            busy_timeout: Wait::Hook.timeout(config),
        };
        // Recall hints search through mc-search (the core stays below it).
        let anthropic = TransformPass::open(&path, &options, config.transform.clone())?
            .with_recall(Arc::new(Search));
        let mut responses = ResponsesPass::open(&path, &options, config.transform.clone())?
            .with_recall(Arc::new(Search));
        if let Some(limit) = codex_compaction_limit() {
            responses = responses.with_window(limit);
        }
        Ok(ByApi {
            anthropic: Arc::new(anthropic),
            responses: Arc::new(responses),
        })
    });
    match opened {
        Ok(pass) => (Arc::new(pass), None),
        Err(e) => (
            Arc::new(Identity),
            Some(format!(
                "{NAME}: warning: mc's store cannot be opened ({e:#}); the gateway \
                 forwards every request untouched until it is restarted (mc-doctor checks \
                 the store)"
            )),
        ),
    }
}

/// Where Codex compacts its own history, as its `config.toml` says (read
/// once, when the gateway starts): mc's window for Codex's calls, so that
/// mc relieves the context first. `None` leaves the pass's default.
fn codex_compaction_limit() -> Option<u64> {
    mc_cli::codex_config().and_then(|text| mc_pin_core::codex_config::compaction_limit(&text))
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// No transparent huge pages for the gateway's memory. mimalloc asks for
/// them on its arenas (`MADV_HUGEPAGE`), so memory is faulted in 2 MiB at a
/// time across the gateway's worker threads: one session of 40 turns (the
/// largest request 878 KB) took 280 MiB of RSS, 170 MiB of it huge pages;
/// without them 77 MiB. Best effort: a kernel that refuses leaves the
/// gateway as it was.
fn no_huge_pages() {
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::disable_transparent_huge_pages(true);
}

/// Serve until killed.
pub fn run(global: &GlobalArgs, listen: Option<&str>) -> Result<(), Failure> {
    no_huge_pages();
    let (config, _warnings) = mc_cli::load_config(NAME, global.config.as_deref(), None);
    let text = listen.unwrap_or(&config.gateway.listen);
    let listen: SocketAddr = text.parse().map_err(|_| {
        Failure::input(anyhow!(
            "--listen {text:?} is not an address with a port, such as 127.0.0.1:4141"
        ))
    })?;
    let upstream = Upstream::parse(&config.gateway.anthropic_upstream)?;
    let openai_upstream = Upstream::parse_openai(&config.gateway.openai_upstream)?;
    let (pass, warning) = pass_for(global, &config);
    let gateway = Gateway::start(
        mc_gateway::Config {
            listen,
            upstream: upstream.clone(),
            openai_upstream: Some(openai_upstream.clone()),
            limits: Limits::default(),
            harness: "claude-code".into(),
            proxy: None,
            clock: Arc::new(now_ms),
        },
        pass,
    )?;
    let addr = gateway.addr();
    let prefix = mc_gateway::OPENAI_PREFIX;
    eprintln!(
        "{NAME}: gateway on http://{addr} forwarding to {} (set ANTHROPIC_BASE_URL=http://{addr}), \
         and http://{addr}{prefix} to {} (a Codex provider's base_url)",
        upstream.base(),
        openai_upstream.base(),
    );
    if let Some(warning) = warning {
        eprintln!("{warning}");
    }
    gateway.wait();
    Ok(())
}

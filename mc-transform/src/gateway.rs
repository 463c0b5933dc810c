//! `mc-transform gateway`: the resident server Claude Code uses as its
//! provider's base URL (mc-gateway). Thin: the user config's `gateway.*`,
//! `--listen`, the clock, and the pass the server runs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::anyhow;

use mc_base::config::Config;
use mc_base::domain::gateway::{Identity, Pass};
use mc_cli::{Failure, GlobalArgs};
use mc_gateway::{Gateway, Limits, Upstream};

use crate::commands::NAME;

/// The pass the gateway runs on each Messages call. For now the one that
/// changes nothing: the server is proved on its own first.
fn pass_for(_config: &Config) -> Arc<dyn Pass> {
    Arc::new(Identity)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Serve until killed.
pub fn run(global: &GlobalArgs, listen: Option<&str>) -> Result<(), Failure> {
    let (config, _warnings) = mc_cli::load_config(NAME, global.config.as_deref(), None);
    let text = listen.unwrap_or(&config.gateway.listen);
    let listen: SocketAddr = text.parse().map_err(|_| {
        Failure::input(anyhow!(
            "--listen {text:?} is not an address with a port, such as 127.0.0.1:4141"
        ))
    })?;
    let upstream = Upstream::parse(&config.gateway.anthropic_upstream)?;
    let gateway = Gateway::start(
        mc_gateway::Config {
            listen,
            upstream: upstream.clone(),
            limits: Limits::default(),
            harness: "claude-code".into(),
            proxy: None,
            clock: Arc::new(now_ms),
        },
        pass_for(&config),
    )?;
    eprintln!(
        "{NAME}: gateway on http://{} forwarding to {} (set ANTHROPIC_BASE_URL=http://{})",
        gateway.addr(),
        upstream.base(),
        gateway.addr()
    );
    gateway.wait();
    Ok(())
}

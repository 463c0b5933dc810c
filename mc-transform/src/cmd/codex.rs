//! `mc-transform codex [ARGS…]`: Codex through the gateway when it can be,
//! on its own provider when it cannot. Finds mc's gateway at
//! `gateway.listen` (or starts one), and runs `codex` with a provider of
//! mc's selected for this run only (`-c` overrides: `model_providers.mc-gateway`
//! with `wire_api = "responses"` and the gateway's `/openai` as its base URL,
//! the API key from `OPENAI_API_KEY` when set, else the ChatGPT login).
//! `MC_CODEX_GATEWAY` names the gateway's `/openai` in the run's environment,
//! for mc's hooks (`mc-pin restore`: the record rides in the head).
//! Nothing is written to Codex's config, so a gateway that cannot be had
//! means Codex runs exactly as configured, with a warning. Against a closed
//! port Codex keeps reconnecting ("waiting for network") rather than failing,
//! so while it runs a gateway that stopped is started again.

use std::net::SocketAddr;
use std::process::{Command, ExitCode};

use anyhow::anyhow;

use mc_cli::{Failure, GlobalArgs};

use super::claude::supervise;
use super::ensure::{is_up, start_gateway};
use crate::common::NAME;

/// The provider id the launcher gives Codex for its run.
pub const PROVIDER: &str = "mc-gateway";

/// The `-c` overrides that make Codex's run go through the gateway at `addr`.
pub fn overrides(addr: SocketAddr, api_key: bool) -> Vec<String> {
    let base = format!("http://{addr}{}", mc_gateway::OPENAI_PREFIX);
    let auth = if api_key {
        format!("model_providers.{PROVIDER}.env_key=\"OPENAI_API_KEY\"")
    } else {
        format!("model_providers.{PROVIDER}.requires_openai_auth=true")
    };
    [
        format!("model_providers.{PROVIDER}.name=\"mc gateway\""),
        format!("model_providers.{PROVIDER}.base_url=\"{base}\""),
        format!("model_providers.{PROVIDER}.wire_api=\"responses\""),
        auth,
        format!("model_provider=\"{PROVIDER}\""),
    ]
    .into_iter()
    .flat_map(|o| ["-c".to_string(), o])
    .collect()
}

pub fn run(global: &GlobalArgs, args: &[String]) -> Result<ExitCode, Failure> {
    let (config, _warnings) = mc_cli::load_config(NAME, global.config.as_deref(), None);
    let addr: SocketAddr = config
        .gateway
        .listen
        .parse()
        .map_err(|_| Failure::input(anyhow!("gateway.listen is not an address")))?;
    let codex = std::env::var_os("MC_CODEX_BIN").unwrap_or_else(|| "codex".into());
    let gateway_url = format!("http://{addr}");
    let mut route = true;
    if !is_up(addr) {
        match start_gateway(global, addr) {
            Some(pid) => eprintln!("{NAME}: started the gateway on {gateway_url} (pid {pid})"),
            None => {
                eprintln!(
                    "{NAME}: warning: no gateway answers on {gateway_url} and none could be \
                     started there (is the port taken? `mc-transform gateway` says why): \
                     Codex runs on its own provider"
                );
                route = false;
            }
        }
    }
    let mut command = Command::new(&codex);
    if route {
        let api_key = std::env::var_os("OPENAI_API_KEY").is_some_and(|k| !k.is_empty());
        command.args(overrides(addr, api_key));
        // What mc's hooks inside the run read to know the gateway carries it.
        command.env(
            "MC_CODEX_GATEWAY",
            format!("http://{addr}{}", mc_gateway::OPENAI_PREFIX),
        );
    }
    command.args(args);
    let hint = "set MC_CODEX_BIN to Codex's binary, or put codex on PATH";
    supervise(
        global,
        command,
        &codex,
        hint,
        route.then_some(addr),
        "Codex waits for it",
    )
}

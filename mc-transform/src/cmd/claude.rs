//! `mc-transform claude [ARGS…]`: Claude Code through the gateway when it
//! can be, straight to the provider when it cannot. Finds mc's gateway at
//! `gateway.listen` (its status path), starts one when none answers, runs
//! `claude` with `ANTHROPIC_BASE_URL` at it, and while Claude Code runs
//! starts the gateway again should it die: Claude Code retries a refused
//! connection for about three minutes, so a call in flight is only delayed.
//! A gateway that cannot be had at the start means a direct session, with a
//! warning — never a session that cannot reach its provider.

use std::net::SocketAddr;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};

use mc_cli::{Failure, GlobalArgs};

use super::ensure::{is_up, start_gateway};
use crate::common::NAME;

pub fn run(global: &GlobalArgs, args: &[String]) -> Result<ExitCode, Failure> {
    let (config, _warnings) = mc_cli::load_config(NAME, global.config.as_deref(), None);
    let addr: SocketAddr = config
        .gateway
        .listen
        .parse()
        .map_err(|_| Failure::input(anyhow!("gateway.listen is not an address")))?;
    let claude = std::env::var_os("MC_CLAUDE_BIN").unwrap_or_else(|| "claude".into());
    let gateway_url = format!("http://{addr}");
    let upstream = config.gateway.anthropic_upstream.trim_end_matches('/');
    let own = std::env::var("ANTHROPIC_BASE_URL").ok();
    let own = own.as_deref().map(|u| u.trim_end_matches('/'));
    let mut route = true;
    if let Some(own) = own
        && own != upstream
        && own != gateway_url
    {
        eprintln!(
            "{NAME}: warning: ANTHROPIC_BASE_URL is {own} but gateway.anthropic_upstream is \
             {upstream}: Claude Code talks to {own} directly; set gateway.anthropic_upstream \
             to it (mc-doctor setup does) to go through mc"
        );
        route = false;
    }
    if route && !is_up(addr) {
        match start_gateway(global, addr) {
            Some(pid) => eprintln!("{NAME}: started the gateway on {gateway_url} (pid {pid})"),
            None => {
                eprintln!(
                    "{NAME}: warning: no gateway answers on {gateway_url} and none could be \
                     started there (is the port taken? `mc-transform gateway` says why): \
                     Claude Code talks to the provider directly"
                );
                route = false;
            }
        }
    }
    let mut command = Command::new(&claude);
    command.args(args);
    if route {
        command.env("ANTHROPIC_BASE_URL", &gateway_url);
    }
    let hint = "set MC_CLAUDE_BIN to Claude Code's binary, or put claude on PATH";
    let stopped = "Claude Code's calls fail until it is back";
    supervise(
        global,
        command,
        &claude,
        hint,
        route.then_some(addr),
        stopped,
    )
}

/// Run the harness `command` (the program `program`, `hint` when it cannot
/// be run) to its end, its exit code ours; while it runs, a gateway at
/// `addr` that stopped is started again (`stopped`: what the harness does
/// meanwhile when it cannot be).
pub(crate) fn supervise(
    global: &GlobalArgs,
    mut command: Command,
    program: &std::ffi::OsStr,
    hint: &str,
    addr: Option<SocketAddr>,
    stopped: &str,
) -> Result<ExitCode, Failure> {
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot run {}", program.to_string_lossy()))
        .map_err(|e| Failure::runtime(e).with_hints([hint.to_string()]))?;
    let mut checked = Instant::now();
    loop {
        if let Some(status) = child.try_wait().map_err(|e| Failure::runtime(e.into()))? {
            let code = status.code().unwrap_or(1);
            return Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)));
        }
        if let Some(addr) = addr
            && checked.elapsed() >= Duration::from_secs(1)
        {
            checked = Instant::now();
            if !is_up(addr) {
                match start_gateway(global, addr) {
                    Some(pid) => eprintln!(
                        "{NAME}: the gateway on http://{addr} had stopped; started it again (pid {pid})"
                    ),
                    None => eprintln!(
                        "{NAME}: warning: the gateway on http://{addr} stopped and cannot be \
                         started again; {stopped}"
                    ),
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

//! Finding mc's gateway and starting one: what the launcher
//! (`mc-transform claude`) and Claude Code's hooks (`mc-transform gateway
//! --ensure`, wired by `mc-doctor setup`) share. A gateway is "up" when mc's
//! status path answers at the address, not merely when something listens
//! there. A gateway started here runs detached, in its own process group
//! with no terminal and no pipes of its starter, so a hook that started it
//! can return (and Claude Code kill its group) while it keeps serving.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::anyhow;

use mc_cli::{Failure, GlobalArgs};

use crate::common::NAME;

/// How long a started gateway may take to answer.
const START_WAIT: Duration = Duration::from_secs(3);

/// Whether mc's gateway answers at `addr` (not merely something listening).
pub fn is_up(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(300)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {addr}\r\n\r\n",
        mc_gateway::STATUS_PATH
    );
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = Vec::new();
    let _ = stream.take(64 * 1024).read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    text.starts_with("HTTP/1.1 200") && text.contains(r#""gateway":"mc""#)
}

/// Start a detached gateway on `addr` (with this process's `--db` and
/// `--config`); `Some(pid)` once it answers.
pub fn start_gateway(global: &GlobalArgs, addr: SocketAddr) -> Option<u32> {
    let exe = std::env::current_exe().ok()?;
    let mut command = Command::new(exe);
    if let Some(db) = &global.db {
        command.arg("--db").arg(db);
    }
    if let Some(config) = &global.config {
        command.arg("--config").arg(config);
    }
    command
        .args(["gateway", "--listen", &addr.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    let mut child = command.spawn().ok()?;
    let deadline = Instant::now() + START_WAIT;
    while Instant::now() < deadline {
        if is_up(addr) {
            return Some(child.id());
        }
        // It exited (the port is taken, the config is bad): no gateway.
        if let Ok(Some(_)) = child.try_wait() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    None
}

/// `gateway.listen` of the user config, as an address.
pub fn listen_addr(global: &GlobalArgs) -> Result<SocketAddr, Failure> {
    let (config, _warnings) = mc_cli::load_config(NAME, global.config.as_deref(), None);
    config.gateway.listen.parse().map_err(|_| {
        Failure::input(anyhow!(
            "gateway.listen {:?} is not an address with a port, such as 127.0.0.1:4141",
            config.gateway.listen
        ))
    })
}

/// `mc-transform gateway --ensure`: a gateway answers at `gateway.listen`
/// when this returns 0 — the one there, or one started now. Prints nothing
/// on stdout (a hook's stdout becomes the harness's context); when none can
/// be had, says why on stderr and exits 2: a hook's "block", so Claude Code
/// and Codex hold the prompt back and show the reason (Codex 0.169.0 would
/// otherwise wait "Reconnecting..." for a gateway that is not there; a
/// SessionStart hook's 2 is only shown). Bounded: about 3.5 s at most.
pub fn ensure(global: &GlobalArgs, listen: Option<&str>) -> Result<ExitCode, Failure> {
    let addr = match listen {
        Some(text) => text.parse().map_err(|_| {
            Failure::input(anyhow!(
                "--listen {text:?} is not an address with a port, such as 127.0.0.1:4141"
            ))
        })?,
        None => listen_addr(global)?,
    };
    if is_up(addr) {
        return Ok(ExitCode::SUCCESS);
    }
    if start_gateway(global, addr).is_some() {
        return Ok(ExitCode::SUCCESS);
    }
    let failure = Failure::runtime(anyhow!(
        "no mc gateway answers on {addr} and none could be started there, so calls to \
         http://{addr} would fail (a prompt is held back until one answers)"
    ))
    .with_hints([
        "run `mc-transform gateway` to see why (a port taken by another program?)".to_string(),
        "or go straight to the provider: mc-doctor setup --uninstall --harness claude-code \
         (or --harness codex)"
            .to_string(),
    ]);
    Err(Failure { code: 2, ..failure })
}

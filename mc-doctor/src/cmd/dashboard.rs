//! `dashboard`: the local web page (mc-dashboard), or its static export.
//! The edge: the config, the clock, the run's secrets from the system's
//! randomness, the first stdout line, the browser.

use std::io::{IsTerminal, Read, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;

use anyhow::anyhow;

use mc_base::store::{Store, StoreOptions};
use mc_cli::{Failure, Wait};
use mc_dashboard::{Dashboard, Server};
use mc_doctor_core::Env;

use crate::args::{Args, DashboardArgs};
use crate::cmd::check::check_options;

/// 16 bytes of the system's randomness, as hex.
fn secret() -> anyhow::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| anyhow!("cannot read /dev/urandom for the dashboard's token: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn state_logs(env: &Env) -> Vec<PathBuf> {
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| env.home.join(".local/state"));
    vec![state.join("mc").join("dream.log")]
}

/// Open `url` in the desktop's browser, best effort.
fn open_browser(url: &str) {
    let program = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let _ = Command::new(program)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}

pub(crate) fn run(args: &Args, d: &DashboardArgs, env: &Env) -> Result<ExitCode, Failure> {
    let loaded = mc_base::config::load(&env.layers);
    for warning in &loaded.warnings {
        eprintln!("mc-doctor: {warning}");
    }
    let config = loaded.config;
    let dash = Dashboard {
        db: env.db.clone(),
        store_options: StoreOptions {
            busy_timeout: Wait::Background.timeout(&config),
        },
        config,
        doctor: env.clone(),
        checks: check_options(args),
        logs: state_logs(env),
        token: secret()?,
        csrf: secret()?,
        clock: Arc::new(mc_cli::now_ms),
    };
    if let Some(file) = &d.export {
        let store = Store::open(&dash.db, &dash.store_options).map_err(anyhow::Error::from)?;
        let html = mc_dashboard::export(&dash, store.conn(), mc_dashboard::server::EXPORT_SESSIONS)
            .map_err(anyhow::Error::from)?;
        std::fs::write(file, html)
            .map_err(|e| Failure::runtime(anyhow!("cannot write {}: {e}", file.display())))?;
        println!(
            "Wrote {} (paths and secrets redacted; read it before you share it).",
            file.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let server = Server::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, d.port)), dash)
        .map_err(anyhow::Error::from)?;
    let url = server.url();
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {url}").map_err(anyhow::Error::from)?;
        out.flush().map_err(anyhow::Error::from)?;
    }
    if !d.no_open && std::io::stdout().is_terminal() {
        open_browser(&url);
    }
    server.run();
    Ok(ExitCode::SUCCESS)
}

//! `mc-transform gateway` as a process for end-to-end tests: started on a
//! free loopback port in front of an upstream, its stderr kept (to grep for
//! credentials), killed on drop.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::bin_path;

pub struct GatewayProcess {
    child: Child,
    /// `http://127.0.0.1:PORT`
    url: String,
    port: u16,
    stderr: Arc<Mutex<Vec<u8>>>,
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("an address").port()
}

/// A user config (`MC_CONFIG`) in `dir` whose gateway forwards to `upstream`.
pub fn write_config(dir: &Path, upstream: &str) -> std::path::PathBuf {
    let path = dir.join("gateway-config.jsonc");
    std::fs::write(
        &path,
        format!(r#"{{"gateway": {{"anthropic_upstream": "{upstream}"}}}}"#),
    )
    .expect("writing the gateway's config");
    path
}

impl GatewayProcess {
    /// Start the gateway on `port` with mc's config at `config`; returns
    /// once it listens. Panics with its stderr when it does not start.
    pub fn start(config: &Path, home: &Path, port: u16) -> GatewayProcess {
        GatewayProcess::start_with(config, home, port, &[])
    }

    /// As [`GatewayProcess::start`], with these variables set too.
    pub fn start_with(
        config: &Path,
        home: &Path,
        port: u16,
        vars: &[(&str, &Path)],
    ) -> GatewayProcess {
        let mut command = Command::new(bin_path("mc-transform"));
        crate::env::seal_at_home(&mut command, home).env("MC_CONFIG", config);
        for (name, value) in vars {
            command.env(name, value);
        }
        command
            .args(["gateway", "--listen", &format!("127.0.0.1:{port}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("starting mc-transform gateway");
        let mut reader = BufReader::new(child.stderr.take().expect("its stderr"));
        let mut first = String::new();
        let _ = reader.read_line(&mut first);
        assert!(
            first.contains("gateway on http://"),
            "the gateway did not start: {first}{}",
            {
                let _ = child.kill();
                let mut rest = String::new();
                let _ = reader.read_to_string(&mut rest);
                rest
            }
        );
        let stderr = Arc::new(Mutex::new(first.into_bytes()));
        {
            let stderr = stderr.clone();
            std::thread::spawn(move || {
                let mut piece = [0u8; 4096];
                while let Ok(n) = reader.read(&mut piece) {
                    if n == 0 {
                        break;
                    }
                    stderr.lock().unwrap().extend_from_slice(&piece[..n]);
                }
            });
        }
        GatewayProcess {
            child,
            url: format!("http://127.0.0.1:{port}"),
            port,
            stderr,
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// What it printed on stderr so far.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// Kill it (SIGKILL) and wait until it is gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// mc's gateway's status on `port`, when one answers there.
pub fn status_on(port: u16) -> Option<Value> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .write_all(b"GET /_mc/gateway HTTP/1.1\r\nHost: x\r\n\r\n")
        .ok()?;
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    serde_json::from_str(answer.split("\r\n\r\n").nth(1)?).ok()
}

/// End the gateway answering on `port` (one a hook of ours started) and wait
/// until it is gone.
pub fn end_gateway_on(port: u16) {
    let Some(pid) = status_on(port).and_then(|s| s["pid"].as_u64()) else {
        return;
    };
    let _ = Command::new("kill").arg(pid.to_string()).status();
    for _ in 0..100 {
        if status_on(port).is_none() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the gateway on {port} did not stop");
}

/// Ends the gateway on a port when the test ends, however it ends.
pub struct EndOnDrop(pub u16);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        end_gateway_on(self.0);
    }
}

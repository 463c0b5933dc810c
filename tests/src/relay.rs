//! A TCP relay on 127.0.0.1 in front of a local server, which goes away the
//! moment a chosen request passes through it: the server a client sees is
//! gone mid-run (every open connection shut down, nothing listening any more),
//! as when the harness quits while mc waits for it.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub struct Relay {
    url: String,
    gone: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// What the relay shares between its threads.
struct Shared {
    gone: Arc<AtomicBool>,
    /// Every socket it opened or accepted, to shut them all down at once.
    streams: Mutex<Vec<TcpStream>>,
    /// A request line with this method and a path containing this text ends it.
    cut_on: (String, String),
}

impl Shared {
    fn go_away(&self) {
        self.gone.store(true, Ordering::SeqCst);
        for stream in self
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Whether `bytes` hold a request line `METHOD …path… HTTP/`.
    fn is_cut(&self, bytes: &[u8]) -> bool {
        let text = String::from_utf8_lossy(bytes);
        let (method, path) = &self.cut_on;
        text.split("\r\n").any(|line| {
            line.strip_prefix(method.as_str())
                .and_then(|rest| rest.strip_prefix(' '))
                .and_then(|rest| rest.split(' ').next())
                .is_some_and(|target| target.contains(path.as_str()))
        })
    }
}

impl Relay {
    /// Relay to `target` (`http://127.0.0.1:PORT`) until a request
    /// `method` whose path contains `path` arrives: that request is never
    /// passed on, and the server is gone from then on.
    pub fn start(target: &str, method: &str, path: &str) -> Relay {
        let upstream = target
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let url = format!("http://{}", listener.local_addr().expect("an address"));
        listener
            .set_nonblocking(true)
            .expect("a nonblocking listener");
        let gone = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared {
            gone: gone.clone(),
            streams: Mutex::new(Vec::new()),
            cut_on: (method.to_string(), path.to_string()),
        });
        let thread = std::thread::spawn(move || {
            // Dropping the listener when gone closes the port.
            while !shared.gone.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let _ = client.set_nonblocking(false);
                        relay(client, &upstream, &shared);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Relay {
            url,
            gone,
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Whether the cut request has come.
    pub fn is_gone(&self) -> bool {
        self.gone.load(Ordering::SeqCst)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.gone.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Copy both ways between `client` and a new connection to `upstream`.
fn relay(client: TcpStream, upstream: &str, shared: &Arc<Shared>) {
    let Ok(server) = TcpStream::connect(upstream) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let (Ok(client_in), Ok(server_in)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    {
        let mut streams = shared.streams.lock().unwrap_or_else(|e| e.into_inner());
        for stream in [&client, &server] {
            if let Ok(clone) = stream.try_clone() {
                streams.push(clone);
            }
        }
    }
    let up = shared.clone();
    std::thread::spawn(move || copy(client_in, server, Some(&up)));
    std::thread::spawn(move || copy(server_in, client, None));
}

/// Copy `from` into `to` until either ends; with `watch`, a chunk holding
/// the cut request is dropped and the relay goes away.
fn copy(mut from: TcpStream, mut to: TcpStream, watch: Option<&Shared>) {
    let mut buffer = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buffer[..n];
        if let Some(shared) = watch
            && shared.is_cut(chunk)
        {
            shared.go_away();
            return;
        }
        if to.write_all(chunk).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

//! What the gateway benchmarks (bench-claude-code, bench-codex) time the
//! same way: a TCP relay on each side of the gateway (back to back in the
//! run without mc) that stamps every HTTP request as it passes, so the time
//! the gateway adds is from a request's last byte leaving the client-side
//! relay to its last byte reaching the provider-side one, on one clock; the
//! answer's first byte; a JSON parse and write of the same bodies to compare
//! with; a process's resident set.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::bench::percentiles;

/// One request as a relay saw it pass.
#[derive(Debug, Clone)]
pub struct Stamp {
    pub method: String,
    /// The request target (path and query).
    pub target: String,
    /// The request's body (content-length framing).
    pub body: Vec<u8>,
    /// Its last byte read from the client.
    pub read: Instant,
    /// Its last byte written on to the server.
    pub written: Instant,
    /// The answer's first byte from the server.
    pub first_byte: Option<Instant>,
}

impl Stamp {
    /// The target's path, without its query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }
}

/// A TCP relay on 127.0.0.1 that passes bytes on as they come and stamps
/// each HTTP request (content-length bodies) and its answer's first byte.
pub struct TimingRelay {
    url: String,
    stamps: Arc<Mutex<Vec<Stamp>>>,
}

impl TimingRelay {
    /// A relay to `target` (`http://127.0.0.1:PORT`, any path ignored).
    pub fn start(target: &str) -> TimingRelay {
        let upstream = target
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let url = format!("http://{}", listener.local_addr().expect("an address"));
        let stamps = Arc::new(Mutex::new(Vec::new()));
        let shared = stamps.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let (upstream, stamps) = (upstream.clone(), shared.clone());
                std::thread::spawn(move || relay(client, &upstream, &stamps));
            }
        });
        TimingRelay { url, stamps }
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The `POST` requests whose path `wanted` accepts, in the order they
    /// went on.
    pub fn posts(&self, wanted: impl Fn(&str) -> bool) -> Vec<Stamp> {
        let mut stamps = self.stamps.lock().unwrap().clone();
        stamps.retain(|s| s.method == "POST" && wanted(s.path()));
        stamps.sort_by_key(|s| s.written);
        stamps
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Copy the server's answers back to the client, stamping the first byte
/// after each request.
fn answers(
    mut server: TcpStream,
    mut client: TcpStream,
    waiting: Arc<Mutex<Option<usize>>>,
    stamps: Arc<Mutex<Vec<Stamp>>>,
) {
    let mut piece = vec![0u8; 64 * 1024];
    loop {
        let n = match server.read(&mut piece) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(i) = waiting.lock().unwrap().take() {
            stamps.lock().unwrap()[i].first_byte = Some(Instant::now());
        }
        if client.write_all(&piece[..n]).is_err() {
            break;
        }
    }
    let _ = client.shutdown(Shutdown::Write);
}

/// Relay one client connection: requests one after another (keep-alive),
/// answers copied back by a second thread.
fn relay(mut client: TcpStream, upstream: &str, stamps: &Arc<Mutex<Vec<Stamp>>>) {
    let Ok(mut server) = TcpStream::connect(upstream) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let waiting: Arc<Mutex<Option<usize>>> = Arc::new(Mutex::new(None));
    let (Ok(server_in), Ok(client_out)) = (server.try_clone(), client.try_clone()) else {
        return;
    };
    {
        let (waiting, stamps) = (waiting.clone(), stamps.clone());
        std::thread::spawn(move || answers(server_in, client_out, waiting, stamps));
    }
    let mut buffer: Vec<u8> = Vec::new();
    let mut piece = vec![0u8; 64 * 1024];
    loop {
        // One request head.
        let end = loop {
            if let Some(at) = find(&buffer, b"\r\n\r\n") {
                break at + 4;
            }
            match client.read(&mut piece) {
                Ok(0) | Err(_) => {
                    let _ = server.shutdown(Shutdown::Write);
                    return;
                }
                Ok(n) => buffer.extend_from_slice(&piece[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
        let mut words = head.split_whitespace();
        let method = words.next().unwrap_or_default().to_string();
        let target = words.next().unwrap_or_default().to_string();
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().ok())?
            })
            .unwrap_or(0);
        while buffer.len() < end + length {
            match client.read(&mut piece) {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&piece[..n]),
            }
        }
        let read = Instant::now();
        let request: Vec<u8> = buffer.drain(..end + length).collect();
        // Stamped before it goes on, so no answer byte can come first.
        let at = {
            let mut all = stamps.lock().unwrap();
            all.push(Stamp {
                method,
                target,
                body: request[end..].to_vec(),
                read,
                written: read,
                first_byte: None,
            });
            all.len() - 1
        };
        *waiting.lock().unwrap() = Some(at);
        if server.write_all(&request).is_err() {
            return;
        }
        stamps.lock().unwrap()[at].written = Instant::now();
    }
}

/// Milliseconds from `from` to `to` (0 when `to` came first).
pub fn ms(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64() * 1000.0
}

/// Per request: from its last byte leaving the client-side relay to its
/// last byte reaching the provider-side one (paired in order).
pub fn added(client: &[Stamp], server: &[Stamp]) -> Vec<f64> {
    client
        .iter()
        .zip(server)
        .map(|(c, s)| ms(c.written, s.read))
        .collect()
}

/// Per request: from its last byte leaving the client-side relay to the
/// answer's first byte reaching it.
pub fn first_byte(client: &[Stamp]) -> Vec<f64> {
    client
        .iter()
        .filter_map(|c| Some(ms(c.written, c.first_byte?)))
        .collect()
}

/// A serde_json parse and write of each body, ms.
pub fn parse_and_write(stamps: &[Stamp]) -> Vec<f64> {
    stamps
        .iter()
        .map(|c| {
            let started = Instant::now();
            let value: serde_json::Value =
                serde_json::from_slice(&c.body).unwrap_or(serde_json::Value::Null);
            let out = serde_json::to_vec(&value).unwrap_or_default();
            std::hint::black_box(out);
            started.elapsed().as_secs_f64() * 1000.0
        })
        .collect()
}

/// (first, median, p90) of `values`.
pub fn figures(values: &[f64]) -> (f64, f64, f64) {
    let first = values.first().copied().unwrap_or(f64::NAN);
    let (median, p90) = percentiles(&mut values.to_vec());
    (first, median, p90)
}

/// The resident set (now, peak) of process `pid` in KiB (Linux).
pub fn rss(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    };
    Some((kib("VmRSS:")?, kib("VmHWM:")?))
}

/// The timing lines both gateway benchmarks print: the time each hop takes
/// without mc and through it, a parse and write of the bodies, the first
/// answer byte both ways, and what the gateway adds against the targets.
pub fn timing_lines(without: (&[Stamp], &[Stamp]), with: (&[Stamp], &[Stamp])) -> Vec<String> {
    let (hop, via) = (added(without.0, without.1), added(with.0, with.1));
    let json = parse_and_write(with.0);
    let mut lines =
        vec!["  per request, ms                    first   median      p90   requests".to_string()];
    let mut line = |name: &str, values: &[f64]| {
        let (first, median, p90) = figures(values);
        lines.push(format!(
            "  {name:<32} {first:>7.2} {median:>8.2} {p90:>8.2} {:>10}",
            values.len()
        ));
        (first, median, p90)
    };
    let (_, hop_median, _) = line("relay to relay, without mc", &hop);
    let (via_first, via_median, via_p90) = line("relay to relay, through mc", &via);
    let (json_first, json_median, json_p90) = line("JSON parse+write of the body", &json);
    let (_, fb_without, _) = line("first answer byte, without mc", &first_byte(without.0));
    let (_, fb_with, _) = line("first answer byte, with mc", &first_byte(with.0));
    let added_median = via_median - hop_median;
    lines.push(format!(
        "  the gateway adds {added_median:.2} ms median ({:.2}× the parse+write median; first {:.2}×, p90 {:.2}×); first byte {:+.2} ms median (targets: ≤ 5 ms and ≤ 1.5×)",
        added_median / json_median,
        via_first / json_first,
        via_p90 / json_p90,
        fb_with - fb_without
    ));
    // The second half: the largest histories.
    let half = via.len() / 2;
    let (_, late, _) = figures(&via[half..]);
    let (_, late_json, _) = figures(&json[half..]);
    lines.push(format!(
        "  second half: through mc {late:.2} ms median against parse+write {late_json:.2} ms ({:.2}×)",
        (late - hop_median) / late_json
    ));
    lines
}

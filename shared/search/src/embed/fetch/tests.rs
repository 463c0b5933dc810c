//! The fetch against a file server of ours on 127.0.0.1 that honours
//! `Range`, and can cut a download short, ignore ranges or serve the wrong
//! bytes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::embed::local::{self, ModelFile, Spec};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Normal,
    /// The first `n` answers stop after this many bytes of the body.
    Cut {
        bytes: usize,
        times: usize,
    },
    /// Every answer is the whole file (200), whatever the range.
    IgnoreRange,
    /// The right length, one byte wrong.
    Corrupt,
}

struct Server {
    port: u16,
    /// The `range` header of each request ("" when none), in order.
    ranges: Arc<Mutex<Vec<String>>>,
}

fn serve(files: Vec<(&'static str, Vec<u8>)>, mode: Mode) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let ranges = Arc::new(Mutex::new(Vec::new()));
    let seen = ranges.clone();
    std::thread::spawn(move || {
        let mut cuts = 0;
        for stream in listener.incoming().take(50) {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut first = String::new();
            reader.read_line(&mut first).unwrap();
            let mut range = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("range:") {
                    range = v.trim().to_string();
                }
            }
            seen.lock().unwrap().push(range.clone());
            let path = first
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_string();
            let Some((_, body)) = files.iter().find(|(n, _)| path == format!("/m/{n}")) else {
                let _ = stream.write_all(
                    b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
                continue;
            };
            let mut body = body.clone();
            if mode == Mode::Corrupt {
                body[0] ^= 0xff;
            }
            let start: usize = range
                .strip_prefix("bytes=")
                .and_then(|r| r.strip_suffix('-'))
                .and_then(|n| n.parse().ok())
                .filter(|_| mode != Mode::IgnoreRange)
                .unwrap_or(0);
            let head = if start > 0 {
                format!(
                    "HTTP/1.1 206 Partial Content\r\ncontent-length: {}\r\ncontent-range: bytes {start}-{}/{}\r\nconnection: close\r\n\r\n",
                    body.len() - start,
                    body.len() - 1,
                    body.len()
                )
            } else {
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                )
            };
            let _ = stream.write_all(head.as_bytes());
            let rest = &body[start..];
            match mode {
                Mode::Cut { bytes, times } if cuts < times => {
                    cuts += 1;
                    let _ = stream.write_all(&rest[..bytes.min(rest.len())]);
                }
                _ => {
                    let _ = stream.write_all(rest);
                }
            }
            let _ = stream.flush();
            let _ = stream.shutdown(std::net::Shutdown::Both);
            // Drain what the client may still send.
            let _ = reader.read(&mut [0u8; 16]);
        }
    });
    Server { port, ranges }
}

fn content(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A spec of two made-up files (leaked: a spec's fields are 'static).
fn spec_of(files: &[(&'static str, Vec<u8>)]) -> &'static Spec {
    let file = |(name, body): &(&'static str, Vec<u8>), local: &'static str| ModelFile {
        name: local,
        remote: name,
        size: body.len() as u64,
        sha256: Box::leak(local::hex(&sha2::Sha256::digest(body)).into_boxed_str()),
    };
    Box::leak(Box::new(Spec {
        name: "test-model",
        base_url: "http://127.0.0.1:1/unused",
        files: [
            file(&files[0], local::TOKENIZER),
            file(&files[1], local::WEIGHTS),
        ],
        dimensions: 4,
        license: "test",
    }))
}

fn options(port: u16, retries: u32) -> FetchOptions {
    FetchOptions {
        base_url: format!("http://127.0.0.1:{port}/m"),
        connect_timeout: Duration::from_secs(2),
        read_timeout: Duration::from_secs(5),
        retries,
        first_backoff: Duration::from_millis(1),
    }
}

fn files() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("tok.json", content(1, 3_000)),
        ("w.bin", content(7, 200_000)),
    ]
}

use sha2::Digest;

#[test]
fn a_fetch_downloads_checks_and_moves_each_file_then_finds_them_present() {
    let files = files();
    let spec = spec_of(&files);
    let server = serve(files.clone(), Mode::Normal);
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("models").join("test-model");
    let mut seen = Vec::new();
    let done = fetch(
        &target,
        spec,
        &options(server.port, 0),
        &mut |f, d, t| seen.push((f.to_string(), d, t)),
        &|_| {},
    )
    .unwrap();
    assert_eq!(done.downloaded, vec![local::TOKENIZER, local::WEIGHTS]);
    assert_eq!(done.bytes, 203_000);
    assert_eq!(
        std::fs::read(target.join(local::WEIGHTS)).unwrap(),
        files[1].1
    );
    assert!(!target.join("model.safetensors.part").exists());
    assert_eq!(local::check(&target, spec), local::State::Ready);
    assert_eq!(
        seen.last().unwrap(),
        &(local::WEIGHTS.to_string(), 200_000, 200_000)
    );
    // Again: both checked, nothing asked of the server.
    let again = fetch(
        &target,
        spec,
        &options(server.port, 0),
        &mut |_, _, _| {},
        &|_| {},
    )
    .unwrap();
    assert_eq!(again.present.len(), 2);
    assert_eq!((again.requests, again.bytes), (0, 0));
    assert_eq!(server.ranges.lock().unwrap().len(), 2);
}

#[test]
fn a_cut_download_is_resumed_with_a_range_request() {
    let files = files();
    let spec = spec_of(&files);
    let server = serve(
        files.clone(),
        Mode::Cut {
            bytes: 70_000,
            times: 2,
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let waits = Mutex::new(Vec::new());
    let done = fetch(
        dir.path(),
        spec,
        &options(server.port, 3),
        &mut |_, _, _| {},
        &|d| waits.lock().unwrap().push(d),
    )
    .unwrap();
    assert_eq!(local::check(dir.path(), spec), local::State::Ready);
    // The tokenizer (3,000 bytes) came whole in the first cut answer; the
    // weights were cut once at 70,000 bytes and resumed from there.
    let ranges = server.ranges.lock().unwrap().clone();
    assert_eq!(ranges, vec!["", "", "bytes=70000-"]);
    assert_eq!(done.bytes, 203_000, "nothing received twice");
    assert_eq!(done.requests, 3);
    assert_eq!(*waits.lock().unwrap(), vec![Duration::from_millis(1)]);
}

#[test]
fn a_cut_that_outlasts_the_retries_keeps_the_part_for_the_next_fetch() {
    let files = files();
    let spec = spec_of(&files);
    let server = serve(
        files.clone(),
        Mode::Cut {
            bytes: 50_000,
            times: 3,
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let err = fetch(
        dir.path(),
        spec,
        &options(server.port, 1),
        &mut |_, _, _| {},
        &|_| {},
    )
    .unwrap_err();
    assert!(
        err.contains("cut after") && err.contains("run it again"),
        "{err}"
    );
    let part = dir.path().join("model.safetensors.part");
    assert_eq!(std::fs::metadata(&part).unwrap().len(), 100_000);
    assert!(!dir.path().join(local::WEIGHTS).exists());
    assert!(matches!(
        local::check(dir.path(), spec),
        local::State::Broken(_)
    ));
    // The next run goes on from 100,000 bytes.
    fetch(
        dir.path(),
        spec,
        &options(server.port, 1),
        &mut |_, _, _| {},
        &|_| {},
    )
    .unwrap();
    assert_eq!(local::check(dir.path(), spec), local::State::Ready);
    assert_eq!(
        server.ranges.lock().unwrap().last().unwrap(),
        "bytes=100000-"
    );
}

#[test]
fn a_server_that_ignores_the_range_gets_the_file_written_from_the_start() {
    let files = files();
    let spec = spec_of(&files);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("model.safetensors.part"),
        &files[1].1[..1234],
    )
    .unwrap();
    let server = serve(files.clone(), Mode::IgnoreRange);
    fetch(
        dir.path(),
        spec,
        &options(server.port, 0),
        &mut |_, _, _| {},
        &|_| {},
    )
    .unwrap();
    assert_eq!(
        std::fs::read(dir.path().join(local::WEIGHTS)).unwrap(),
        files[1].1
    );
}

#[test]
fn the_wrong_bytes_are_refused_and_nothing_is_kept() {
    let files = files();
    let spec = spec_of(&files);
    let server = serve(files.clone(), Mode::Corrupt);
    let dir = tempfile::tempdir().unwrap();
    let err = fetch(
        dir.path(),
        spec,
        &options(server.port, 1),
        &mut |_, _, _| {},
        &|_| {},
    )
    .unwrap_err();
    assert!(
        err.contains("SHA-256") && err.contains("nothing kept"),
        "{err}"
    );
    assert!(!dir.path().join(local::TOKENIZER).exists());
    assert!(!dir.path().join("tokenizer.json.part").exists());
    // Retried once from scratch, then given up.
    assert_eq!(server.ranges.lock().unwrap().len(), 2);
}

#[test]
fn a_missing_file_on_the_server_is_an_error_that_says_where() {
    let files = files();
    let spec = spec_of(&files);
    let server = serve(Vec::new(), Mode::Normal);
    let dir = tempfile::tempdir().unwrap();
    let err = fetch(
        dir.path(),
        spec,
        &options(server.port, 3),
        &mut |_, _, _| {},
        &|_| {},
    )
    .unwrap_err();
    assert!(
        err.contains("HTTP 404") && err.contains("/m/tok.json"),
        "{err}"
    );
    assert_eq!(
        server.ranges.lock().unwrap().len(),
        1,
        "a 404 is not retried"
    );
}

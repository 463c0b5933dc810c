//! Fetching a local model's files once, into its folder of mc's cache: each
//! file is downloaded to `<name>.part`, resumed with a `Range` request after
//! a cut, retried with a doubling wait, and moved into place only once its
//! size and SHA-256 are the expected ones. A file already there with the
//! right checksum is not downloaded again.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::local::{ModelFile, Spec, verify_file};

/// How a fetch talks to the server.
#[derive(Debug, Clone)]
pub struct FetchOptions {
    /// Where the files are (normally the spec's `base_url`).
    pub base_url: String,
    pub connect_timeout: Duration,
    /// The longest wait for any one read of the answer.
    pub read_timeout: Duration,
    /// Attempts after the first, per file.
    pub retries: u32,
    pub first_backoff: Duration,
}

impl FetchOptions {
    pub fn for_spec(spec: &Spec) -> FetchOptions {
        FetchOptions {
            base_url: spec.base_url.to_string(),
            connect_timeout: Duration::from_secs(15),
            read_timeout: Duration::from_secs(60),
            retries: 4,
            first_backoff: Duration::from_millis(500),
        }
    }
}

/// What a fetch did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Fetched {
    pub model: String,
    /// Files downloaded by this run.
    pub downloaded: Vec<String>,
    /// Files that were there already, checked.
    pub present: Vec<String>,
    /// Bytes received (resumed parts not counted twice).
    pub bytes: u64,
    /// Requests sent, retries included.
    pub requests: u64,
}

/// Fetch every file of `spec` missing from `dir` (made if need be).
/// `progress(file, done, total)` as bytes come; `sleep` waits between
/// attempts. On failure what was received is kept in `.part` files, and
/// the next fetch resumes it.
pub fn fetch(
    dir: &Path,
    spec: &Spec,
    options: &FetchOptions,
    progress: &mut dyn FnMut(&str, u64, u64),
    sleep: &dyn Fn(Duration),
) -> Result<Fetched, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("making {}: {e}", dir.display()))?;
    let mut report = Fetched {
        model: spec.name.to_string(),
        ..Fetched::default()
    };
    for file in &spec.files {
        let target = dir.join(file.name);
        if verify_file(&target, file).is_ok() {
            report.present.push(file.name.to_string());
            continue;
        }
        let url = format!("{}/{}", options.base_url.trim_end_matches('/'), file.remote);
        fetch_file(dir, file, &url, options, &mut report, progress, sleep)?;
        report.downloaded.push(file.name.to_string());
    }
    Ok(report)
}

fn fetch_file(
    dir: &Path,
    file: &ModelFile,
    url: &str,
    options: &FetchOptions,
    report: &mut Fetched,
    progress: &mut dyn FnMut(&str, u64, u64),
    sleep: &dyn Fn(Duration),
) -> Result<(), String> {
    let part = dir.join(format!("{}.part", file.name));
    let target = dir.join(file.name);
    // A link or folder in the way is not ours to write through.
    for path in [&part, &target] {
        if let Ok(meta) = std::fs::symlink_metadata(path)
            && !meta.is_file()
        {
            remove(path)?;
        }
    }
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(options.connect_timeout))
        .timeout_recv_response(Some(options.read_timeout))
        .timeout_recv_body(Some(options.read_timeout.max(Duration::from_secs(1)) * 10))
        .http_status_as_error(false)
        .max_redirects(5)
        .proxy(None)
        .user_agent(concat!("mc/", env!("CARGO_PKG_VERSION")))
        .build()
        .into();
    let mut wait = options.first_backoff;
    let mut attempt = 0;
    loop {
        report.requests += 1;
        match attempt_once(&agent, url, &part, file, report, progress) {
            Ok(()) => match verify_file(&part, file) {
                Ok(()) => {
                    std::fs::rename(&part, &target)
                        .map_err(|e| format!("moving {} into place: {e}", part.display()))?;
                    return Ok(());
                }
                Err(why) => {
                    // The whole file came and is not the one expected: start over.
                    remove(&part)?;
                    if attempt >= options.retries {
                        return Err(format!("{url}: {why}; nothing kept"));
                    }
                }
            },
            Err(Attempt::Fatal(why)) => return Err(format!("{url}: {why}")),
            Err(Attempt::Retry(why)) if attempt >= options.retries => {
                return Err(format!(
                    "{url}: {why} (after {} attempts; what came is kept in {}, run it again \
                     to resume)",
                    attempt + 1,
                    part.display()
                ));
            }
            Err(Attempt::Retry(_)) => {}
        }
        attempt += 1;
        sleep(wait);
        wait *= 2;
    }
}

enum Attempt {
    Retry(String),
    Fatal(String),
}

/// One request: resume `part` from its length, append what comes.
fn attempt_once(
    agent: &ureq::Agent,
    url: &str,
    part: &Path,
    file: &ModelFile,
    report: &mut Fetched,
    progress: &mut dyn FnMut(&str, u64, u64),
) -> Result<(), Attempt> {
    let have = std::fs::metadata(part).map_or(0, |m| m.len());
    if have > file.size {
        remove(part).map_err(Attempt::Fatal)?;
        return Err(Attempt::Retry("a partial file longer than the file".into()));
    }
    if have == file.size {
        return Ok(());
    }
    let mut request = agent.get(url);
    if have > 0 {
        request = request.header("range", format!("bytes={have}-"));
    }
    let mut response = request.call().map_err(|e| Attempt::Retry(e.to_string()))?;
    let status = response.status().as_u16();
    let append = match status {
        200 => false,
        206 => {
            let range = response
                .headers()
                .get("content-range")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            if !range.starts_with(&format!("bytes {have}-")) {
                remove(part).map_err(Attempt::Fatal)?;
                return Err(Attempt::Retry(format!(
                    "the server resumed at another place ({range:?})"
                )));
            }
            true
        }
        416 => {
            // What is kept cannot be resumed: start over.
            remove(part).map_err(Attempt::Fatal)?;
            return Err(Attempt::Retry(
                "the server refused to resume (HTTP 416)".into(),
            ));
        }
        429 | 500..=599 => return Err(Attempt::Retry(format!("HTTP {status}"))),
        _ => return Err(Attempt::Fatal(format!("HTTP {status}"))),
    };
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(part)
        .map_err(|e| Attempt::Fatal(format!("writing {}: {e}", part.display())))?;
    let mut done = if append { have } else { 0 };
    let limit = file.size.saturating_sub(done) + 1;
    let mut reader = response
        .body_mut()
        .with_config()
        .limit(limit)
        .reader()
        .take(limit);
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = match reader.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                let _ = out.flush();
                return Err(Attempt::Retry(format!(
                    "cut after {done} of {} bytes ({e})",
                    file.size
                )));
            }
        };
        let chunk = buffer.get(..n).unwrap_or_default();
        out.write_all(chunk)
            .map_err(|e| Attempt::Fatal(format!("writing {}: {e}", part.display())))?;
        done += n as u64;
        report.bytes += n as u64;
        progress(file.name, done, file.size);
        if done > file.size {
            break;
        }
    }
    out.flush()
        .map_err(|e| Attempt::Fatal(format!("writing {}: {e}", part.display())))?;
    if done < file.size {
        return Err(Attempt::Retry(format!(
            "cut after {done} of {} bytes",
            file.size
        )));
    }
    Ok(())
}

fn remove(path: &Path) -> Result<(), String> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(_) => return Ok(()),
    };
    let removed = if meta.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    removed.map_err(|e| format!("removing {}: {e}", path.display()))
}

#[cfg(test)]
mod tests;

//! Running a program for at most a deadline.
//!
//! The one way mc's core runs a program it waits for (a `command` model
//! provider, `crontab -l`, `--version` probes, `mc-dream cron`): stdin is
//! fed and both pipes are drained from threads while the child runs, so a
//! program that writes more than a pipe buffer (64 KiB on Linux) before it
//! exits never stalls against us until its deadline; past the deadline it is
//! killed.

use std::io::{Read, Write};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// At most this much of stderr is kept; the rest is discarded unread (the
/// pipe is closed, so the program is not held up by it either).
pub const STDERR_CAP: u64 = 64 * 1024;

/// Run `command` with `input` on its stdin (`None`: stdin is `/dev/null`)
/// for at most `limit`. `Ok(None)` when it ran out of time and was killed;
/// `Err` when it could not be started (its kind tells a missing program).
pub fn run_with_deadline(
    command: &mut Command,
    input: Option<Vec<u8>>,
    limit: Duration,
) -> std::io::Result<Option<Output>> {
    let mut child = command
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    // Threads feed and drain the pipes. They are detached when the program is
    // killed: its own children may hold the pipes open a while longer.
    if let (Some(mut stdin), Some(input)) = (child.stdin.take(), input) {
        std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
    }
    let stdout = drain(child.stdout.take(), u64::MAX);
    let stderr = drain(child.stderr.take(), STDERR_CAP);
    let Some(status) = wait_until(&mut child, Instant::now() + limit)? else {
        return Ok(None);
    };
    let collect = |reader: Option<JoinHandle<Vec<u8>>>| {
        reader.and_then(|r| r.join().ok()).unwrap_or_default()
    };
    Ok(Some(Output {
        status,
        stdout: collect(stdout),
        stderr: collect(stderr),
    }))
}

fn drain<R: Read + Send + 'static>(pipe: Option<R>, cap: u64) -> Option<JoinHandle<Vec<u8>>> {
    let pipe = pipe?;
    Some(std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.take(cap).read_to_end(&mut bytes);
        bytes
    }))
}

/// The exit status, or `None` (and the child killed and reaped) once
/// `deadline` passed. Polls with a pause growing from 2 to 50 ms.
fn wait_until(child: &mut Child, deadline: Instant) -> std::io::Result<Option<ExitStatus>> {
    let mut pause = Duration::from_millis(2);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        let now = Instant::now();
        if now >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut command = Command::new("sh");
        command.arg("-c").arg(script);
        command
    }

    /// A child that writes far more than a pipe buffer before exiting
    /// finishes with its output whole instead of stalling to its deadline.
    #[test]
    fn a_child_writing_more_than_a_pipe_buffer_finishes_whole() {
        let mebibyte = 1024 * 1024;
        // stderr past its cap is closed: `head` there dies of SIGPIPE, not stuck.
        let script =
            format!("head -c {mebibyte} /dev/zero; head -c {mebibyte} /dev/zero >&2 || true");
        let out = run_with_deadline(&mut sh(&script), None, Duration::from_secs(120))
            .unwrap()
            .expect("finished, not killed at the deadline");
        assert!(out.status.success(), "{:?}", out.status);
        assert_eq!(out.stdout.len(), mebibyte);
        assert!(out.stdout.iter().all(|&b| b == 0));
        assert_eq!(out.stderr.len() as u64, STDERR_CAP);
    }

    #[test]
    fn stdin_is_fed_and_the_status_kept() {
        let out = run_with_deadline(
            &mut sh("tr a-z A-Z; exit 3"),
            Some(b"hello".to_vec()),
            Duration::from_secs(60),
        )
        .unwrap()
        .unwrap();
        assert_eq!(out.stdout, b"HELLO");
        assert_eq!(out.status.code(), Some(3));
    }

    #[test]
    fn a_child_past_its_deadline_is_killed() {
        let out = run_with_deadline(&mut sh("exec sleep 30"), None, Duration::from_millis(50));
        assert!(matches!(out, Ok(None)), "{out:?}");
    }

    #[test]
    fn a_missing_program_is_an_error_of_its_kind() {
        let err = run_with_deadline(
            &mut Command::new("/nonexistent/mc-no-such-program"),
            None,
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    }
}

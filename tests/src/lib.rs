//! mc-tests: support for cross-binary pipelines, property tests and benchmarks.
//!
//! - [`generate`]: deterministic OpenCode sessions and pass envelopes.
//! - [`harness`]: the pinned real harnesses, and skipping when one is missing.
//! - [`bin_path`]: the workspace's binaries, found beside the running executable
//!   and refused when older than their sources ([`fresh`]).
//! - [`TestEnv`]: the sealed environment (cleared variables, temp home and
//!   XDG folders, fixed clock) every process test runs the binaries in.
//! - [`pipe`]: run a process with bytes on stdin and collect its output;
//!   [`pipe_within`] kills it when it runs too long; [`pipe_all`] runs
//!   several at once, all started before any input is written.

pub mod bench;
pub mod claude;
pub mod codex;
pub mod env;
pub mod fake_llm;
pub mod fake_opencode;
pub mod fake_provider;
pub mod fake_responses;
#[cfg(test)]
mod forgotten;
pub mod fresh;
pub mod gateway;
pub mod generate;
pub mod harness;
pub mod mcp_client;
pub mod opencode;
pub mod paraphrase;
pub mod pi;
pub mod qa;
pub mod relay;
pub mod serve;
pub mod timing;

pub use env::TestEnv;

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The folder holding the workspace binaries for an executable at `exe`: a test
/// executable lives in `target/<profile>/deps/`, the binaries one level up; a
/// binary in `target/<profile>/` has them as siblings.
pub fn bin_dir_for(exe: &Path) -> PathBuf {
    let dir = exe.parent().unwrap_or(Path::new("."));
    if dir.file_name().is_some_and(|name| name == "deps") {
        dir.parent().unwrap_or(dir).to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// The path of workspace binary `name` (e.g. `"mc-transform"`) built with the
/// same profile as the running executable.
///
/// Panics when it is missing, or older than a source file it was built from
/// (what cargo's dep-info beside it lists): build the workspace first.
pub fn bin_path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the path of the running executable");
    let dir = bin_dir_for(&exe);
    let path = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    let build = build_command(&dir);
    assert!(
        path.is_file(),
        "{} not found: build the workspace first: {build}",
        path.display()
    );
    if let Err(why) = fresh::checked(&path, &dir.join(format!("{name}.d")), workspace_root()) {
        panic!("{why}: build the workspace first: {build}");
    }
    path
}

/// The workspace this package sits in: what the binaries must be built from.
pub fn workspace_root() -> &'static Path {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest)
}

/// The command that builds the binaries in `dir` (`target/<profile>`).
fn build_command(dir: &Path) -> String {
    match dir.file_name().and_then(|name| name.to_str()) {
        Some("release") => "cargo build --release --workspace --bins".into(),
        Some("debug") | None => "cargo build --workspace --bins".into(),
        Some(profile) => format!("cargo build --profile {profile} --workspace --bins"),
    }
}

/// The workspace's binaries.
pub const BINARIES: [&str; 6] = [
    "mc-transform",
    "mc-historian",
    "mc-pin",
    "mc-search",
    "mc-dream",
    "mc-doctor",
];

/// `PATH` with the workspace's binaries first, as a user who installed mc
/// has them: what a harness, its hooks and its agent's shell find.
pub fn path_with_bins() -> std::ffi::OsString {
    // Every binary a harness may start is checked, not just the one named.
    let paths: Vec<PathBuf> = BINARIES.iter().map(|name| bin_path(name)).collect();
    let bins = paths
        .first()
        .and_then(|path| path.parent())
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let rest = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(std::iter::once(bins).chain(std::env::split_paths(&rest))).unwrap_or(rest)
}

/// Spawn `command` with piped stdio, feed it `stdin` (from a second thread, so
/// large inputs cannot deadlock against its output), and wait for it.
pub fn pipe(command: &mut Command, stdin: &[u8]) -> io::Result<Output> {
    let child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    feed_and_wait(child, stdin)
}

/// Write `stdin` to a spawned child from a second thread while collecting its
/// output, then wait for it.
fn feed_and_wait(mut child: Child, stdin: &[u8]) -> io::Result<Output> {
    let mut input = child.stdin.take().expect("stdin is piped");
    std::thread::scope(|scope| {
        let writer = scope.spawn(move || {
            // A child that exits without reading everything closes the pipe; its
            // exit status tells the caller more than EPIPE would.
            match input.write_all(stdin) {
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
                other => other,
            }
        });
        let output = child.wait_with_output();
        writer.join().expect("stdin writer panicked")?;
        output
    })
}

/// [`pipe`], but a process still running after `limit` is killed and `None`
/// is returned: for inputs that could make a process read or wait forever.
pub fn pipe_within(
    command: &mut Command,
    stdin: &[u8],
    limit: Duration,
) -> io::Result<Option<Output>> {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut input = child.stdin.take().expect("stdin is piped");
    let mut out = child.stdout.take().expect("stdout is piped");
    let mut err = child.stderr.take().expect("stderr is piped");
    std::thread::scope(|scope| {
        scope.spawn(move || {
            // Ignored: a child that exits (or is killed) without reading closes the pipe.
            let _ = input.write_all(stdin);
        });
        let stdout = scope.spawn(move || {
            let mut bytes = Vec::new();
            out.read_to_end(&mut bytes).map(|_| bytes)
        });
        let stderr = scope.spawn(move || {
            let mut bytes = Vec::new();
            err.read_to_end(&mut bytes).map(|_| bytes)
        });
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break Some(status);
            }
            if Instant::now() >= deadline {
                child.kill()?;
                child.wait()?;
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let stdout = stdout.join().expect("stdout reader panicked")?;
        let stderr = stderr.join().expect("stderr reader panicked")?;
        Ok(status.map(|status| Output {
            status,
            stdout,
            stderr,
        }))
    })
}

/// Spawn every command with piped stdio, and only once all of them run, feed
/// each `stdin` (from threads) and collect their outputs: processes racing
/// for the same work, none of which can deadlock on a full pipe.
pub fn pipe_all(commands: &mut [Command], stdin: &[u8]) -> io::Result<Vec<Output>> {
    let mut children = Vec::with_capacity(commands.len());
    for command in commands.iter_mut() {
        let child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        match child {
            Ok(child) => children.push(child),
            Err(e) => {
                for mut started in children {
                    let _ = started.kill();
                    let _ = started.wait();
                }
                return Err(e);
            }
        }
    }
    std::thread::scope(|scope| {
        let waiting: Vec<_> = children
            .into_iter()
            .map(|child| scope.spawn(move || feed_and_wait(child, stdin)))
            .collect();
        waiting
            .into_iter()
            .map(|handle| handle.join().expect("a child's feeder panicked"))
            .collect()
    })
}

/// [`pipe`] for a workspace binary with arguments; panics when it cannot be run.
pub fn run_bin(name: &str, args: &[&str], stdin: &[u8]) -> Output {
    let path = bin_path(name);
    pipe(Command::new(&path).args(args), stdin)
        .unwrap_or_else(|e| panic!("running {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_sit_beside_binaries_and_above_test_executables() {
        let profile = Path::new("target").join("debug");
        assert_eq!(
            bin_dir_for(&profile.join("deps").join("pipeline-0123abcd")),
            profile
        );
        assert_eq!(bin_dir_for(&profile.join("bench-transform")), profile);
    }

    #[test]
    fn pipe_round_trips_large_input() {
        let input = vec![b'x'; 1 << 20];
        let mut cat = Command::new("cat");
        let output = pipe(&mut cat, &input).expect("cat runs");
        assert!(output.status.success());
        assert_eq!(output.stdout.len(), input.len());
    }

    #[test]
    fn pipe_all_runs_every_command_with_the_same_input() {
        let mut commands: Vec<Command> = (0..3).map(|_| Command::new("cat")).collect();
        let input = vec![b'y'; 1 << 18];
        let outputs = pipe_all(&mut commands, &input).expect("cat runs");
        assert_eq!(outputs.len(), 3);
        for output in outputs {
            assert!(output.status.success());
            assert_eq!(output.stdout, input);
        }
    }
}

//! How long mc's Claude Code and Codex hooks take, as whole processes, on a
//! long session: a generated transcript of N messages (default 2,000: user
//! prompts, replies with a tool call and a 1 KiB result each) in each
//! harness's format, 5 pins, 40 project memories and 30 compartments in the
//! database. Times every hook a user sets up (median and p90 of `--runs`),
//! prints the size of the `additionalContext` they print, and times one
//! `mc-historian run` over the same transcript against a fake model on
//! 127.0.0.1 (mc's own cost: the model answers at once). Nothing is asserted.
//!
//! Build the binaries first: `cargo build --release --workspace --features mc-bench/bench`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use mc_base::identity::project_identity;
use mc_base::store::{Store, StoreOptions};
use mc_history::store::{self as history_store, NewCompartment};
use mc_pin_core::local;
use mc_search_core::memory;
use mc_tests::bin_path;
use mc_tests::fake_provider::FakeProvider;
use serde_json::{Value, json};

/// Times each hook mc puts in Claude Code and Codex (pin restore, the
/// session-start search, the historian's hook) on generated transcripts.
#[derive(clap::Parser)]
#[command(name = "bench-hooks")]
struct Args {
    /// Messages in each generated transcript
    #[arg(long, value_name = "N", default_value_t = 2000)]
    messages: usize,
    /// Timed runs of each hook
    #[arg(long, value_name = "N", default_value_t = 15)]
    runs: usize,
}

const CC_SESSION: &str = "5b0c2a1e-7d3f-4e8a-9b6c-2f1e0d9c8b7a";
const CX_SESSION: &str = "01a23010-0000-7000-8000-000000000001";
const NOW_MS: i64 = 1_796_100_000_000;

fn ts(i: usize) -> String {
    let secs = 1_796_000_000 + i as i64 * 7;
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // 2026-11-29 is day 20_786 since the epoch.
    format!(
        "2026-11-{:02}T{:02}:{:02}:{:02}.000Z",
        29 + (days - 20_786),
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn output(i: usize) -> String {
    format!("{i}: {}", "fn helper(x: u64) -> u64 { x * 2 }\n".repeat(28))
}

/// A Claude Code transcript of `n` messages.
fn claude_transcript(n: usize, cwd: &str) -> String {
    let mut lines = Vec::new();
    let mut parent = Value::Null;
    for i in 0..n / 2 {
        let line = |kind: &str, uuid: String, parent: &Value, extra: Value| {
            let mut v = json!({"parentUuid": parent, "isSidechain": false, "type": kind, "uuid": uuid,
                "timestamp": ts(i), "userType": "external", "cwd": cwd, "sessionId": CC_SESSION,
                "version": "2.1.197"});
            for (k, val) in extra.as_object().unwrap() {
                v[k] = val.clone();
            }
            v
        };
        let u = line(
            "user",
            format!("u-{i}"),
            &parent,
            json!({"message": {"role": "user", "content": format!("Request {i}: read the next module and tell me what it does.")}}),
        );
        let a1 = line(
            "assistant",
            format!("a-{i}"),
            &json!(format!("u-{i}")),
            json!({"message": {"id": format!("msg_{i}"), "role": "assistant", "model": "claude-opus-4-8",
                "content": [{"type": "text", "text": format!("Reading module {i}.")}],
                "usage": {"input_tokens": 10, "cache_read_input_tokens": 20_000, "output_tokens": 40}}}),
        );
        let a2 = line(
            "assistant",
            format!("t-{i}"),
            &json!(format!("a-{i}")),
            json!({"message": {"id": format!("msg_{i}"), "role": "assistant", "model": "claude-opus-4-8",
                "content": [{"type": "tool_use", "id": format!("toolu_{i}"), "name": "Read",
                             "input": {"file_path": format!("{cwd}/src/m{i}.rs")}}],
                "usage": {"input_tokens": 10, "cache_read_input_tokens": 20_000, "output_tokens": 40}}}),
        );
        let r = line(
            "user",
            format!("r-{i}"),
            &json!(format!("t-{i}")),
            json!({"message": {"role": "user", "content": [{"type": "tool_result",
                "tool_use_id": format!("toolu_{i}"), "content": output(i)}]}}),
        );
        parent = json!(format!("r-{i}"));
        lines.extend([u, a1, a2, r]);
    }
    lines.iter().map(|l| format!("{l}\n")).collect::<String>()
}

/// A Codex rollout of `n` messages, with one compaction in the middle.
fn codex_rollout(n: usize, cwd: &str) -> String {
    let mut lines = Vec::new();
    let mut ordinal = 0;
    let mut push = |kind: &str, i: usize, payload: Value| {
        lines.push(
            json!({"timestamp": ts(i), "ordinal": ordinal, "type": kind, "payload": payload}),
        );
        ordinal += 1;
    };
    push(
        "session_meta",
        0,
        json!({"id": CX_SESSION, "cwd": cwd, "cli_version": "0.169.0"}),
    );
    push("turn_context", 0, json!({"cwd": cwd, "model": "gpt-5.5"}));
    let mut kept = Vec::new();
    for i in 0..n / 2 {
        let text = format!("Request {i}: read the next module and tell me what it does.");
        push(
            "response_item",
            i,
            json!({"type": "message", "id": format!("u-{i}"), "role": "user",
            "content": [{"type": "input_text", "text": text}]}),
        );
        kept.push(
            json!({"type": "message", "id": format!("u-{i}"), "role": "user",
            "content": [{"type": "input_text", "text": text}]}),
        );
        push(
            "response_item",
            i,
            json!({"type": "function_call", "id": format!("fc-{i}"),
            "name": "exec_command", "call_id": format!("c-{i}"),
            "arguments": json!({"cmd": format!("cat src/m{i}.rs")}).to_string()}),
        );
        push(
            "response_item",
            i,
            json!({"type": "function_call_output", "call_id": format!("c-{i}"),
            "output": output(i)}),
        );
        push(
            "response_item",
            i,
            json!({"type": "message", "id": format!("a-{i}"), "role": "assistant",
            "content": [{"type": "output_text", "text": format!("Module {i} doubles numbers.")}]}),
        );
        push(
            "event_msg",
            i,
            json!({"type": "token_count", "info": {"last_token_usage": {
            "input_tokens": 20_000, "cached_input_tokens": 19_000, "output_tokens": 40},
            "model_context_window": 258_400}}),
        );
    }
    push(
        "compacted",
        n / 2,
        json!({"message": "Summary of the work so far.", "window_id": "w-1",
        "replacement_history": kept}),
    );
    lines.iter().map(|l| format!("{l}\n")).collect::<String>()
}

struct Bench {
    dir: PathBuf,
    db: PathBuf,
    config: PathBuf,
}

impl Bench {
    fn command(&self, bin: &str, args: &[&str]) -> Command {
        let mut command = Command::new(bin_path(bin));
        mc_tests::env::seal(&mut command)
            .env("HOME", self.dir.join("home"))
            .env("XDG_CONFIG_HOME", self.dir.join("home/.config"))
            .env("XDG_DATA_HOME", self.dir.join("home/.local/share"))
            .env("MC_DB", &self.db)
            .env("MC_CONFIG", &self.config)
            .current_dir(self.dir.join("project"))
            .args(args);
        command
    }

    /// Run once; (wall time, stdout).
    fn time(&self, bin: &str, args: &[&str], stdin: &str) -> (Duration, Vec<u8>) {
        let start = Instant::now();
        let out = mc_tests::pipe(&mut self.command(bin, args), stdin.as_bytes())
            .unwrap_or_else(|e| panic!("running {bin}: {e}"));
        let took = start.elapsed();
        assert!(
            out.status.success(),
            "{bin} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        (took, out.stdout)
    }
}

fn context_chars(stdout: &[u8]) -> usize {
    serde_json::from_slice::<Value>(stdout)
        .ok()
        .and_then(|v| {
            v.pointer("/hookSpecificOutput/additionalContext")
                .and_then(Value::as_str)
                .map(|t| t.encode_utf16().count())
        })
        .unwrap_or(0)
}

fn report(name: &str, mut times: Vec<Duration>, chars: usize) {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let median = times.get(times.len() / 2).copied().unwrap_or_default();
    let p90 = times
        .get((times.len() * 9 / 10).min(times.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default();
    let context = if chars > 0 {
        format!("  additionalContext {chars} chars")
    } else {
        String::new()
    };
    println!(
        "{name:<44} median {:>7.1} ms  p90 {:>7.1} ms{context}",
        ms(median),
        ms(p90)
    );
}

#[allow(
    clippy::too_many_lines,
    reason = "a benchmark's scenario, read top to bottom; the 150-line rule is for mc's own code"
)]
fn main() -> ExitCode {
    let Args { messages, runs } = clap::Parser::parse();
    let dir = tempfile::tempdir().expect("a temp folder");
    let project = dir.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let cwd = project.display().to_string();
    let cc = dir.path().join("claude.jsonl");
    let cx = dir.path().join("rollout.jsonl");
    std::fs::write(&cc, claude_transcript(messages, &cwd)).unwrap();
    std::fs::write(&cx, codex_rollout(messages, &cwd)).unwrap();
    let provider = FakeProvider::start();
    provider.play_historian("mock-historian");
    let root = provider.base_url().trim_end_matches("/v1").to_string();
    let config = dir.path().join("mc.jsonc");
    std::fs::write(
        &config,
        format!(
            r#"{{"providers": {{"fake": {{"kind": "anthropic", "base_url": "{root}"}}}},
               "historian": {{"model": "fake/mock-historian", "retries": 0}}}}"#
        ),
    )
    .unwrap();
    let db = dir.path().join("ctx.db");
    {
        let mut store = Store::open(&db, &StoreOptions::default()).unwrap();
        let identity = project_identity(&project);
        for i in 0..40 {
            let content = format!("Rule {i}: keep module {i} free of side effects.");
            memory::write(
                &mut store,
                &identity,
                "CONSTRAINTS",
                &content,
                "user",
                NOW_MS,
            )
            .unwrap();
        }
        for (harness, session, prefix) in [
            ("claude-code", CC_SESSION, "u-"),
            ("codex", CX_SESSION, "a-"),
        ] {
            let row = local::ensure_session(&mut store, harness, session, Some(&project), NOW_MS)
                .unwrap();
            let pins = [3usize, 200, 500, 800, 990];
            let role = if prefix == "u-" { "user" } else { "assistant" };
            store
                .write(|tx| {
                    for p in pins {
                        history_store::pin(
                            tx,
                            row,
                            &format!("{prefix}{p}"),
                            role,
                            NOW_MS + p as i64,
                        )?;
                    }
                    let compartments: Vec<NewCompartment> = (0..30)
                        .map(|c| NewCompartment {
                            start_ordinal: c * 20 + 1,
                            end_ordinal: c * 20 + 20,
                            start_message_id: format!("u-{c}"),
                            end_message_id: format!("u-{c}"),
                            start_ms: None,
                            end_ms: None,
                            title: format!("Modules {c}0 to {c}9 read"),
                            tiers: [
                                "Read ten modules; each doubles numbers. ".repeat(6),
                                "Read ten modules. ".repeat(4),
                                "Ten modules read.".into(),
                                "Modules".into(),
                            ],
                            importance: 50,
                            episode: Some("investigation".into()),
                        })
                        .collect();
                    history_store::publish_compartments(tx, row, &compartments, NOW_MS).map(|_| ())
                })
                .unwrap();
        }
    }
    let bench = Bench {
        dir: dir.path().to_path_buf(),
        db,
        config,
    };
    let hook =
        |transcript: &Path, session: &str, event: &str, source: &str, prompt: Option<String>| {
            let mut v = json!({"session_id": session, "transcript_path": transcript, "cwd": cwd,
                           "hook_event_name": event, "source": source});
            if let Some(p) = prompt {
                v["prompt_id"] = json!(p);
            }
            v.to_string()
        };
    println!(
        "{messages} messages: Claude Code transcript {} KiB, Codex rollout {} KiB; {runs} runs each",
        std::fs::metadata(&cc).unwrap().len() / 1024,
        std::fs::metadata(&cx).unwrap().len() / 1024
    );
    let timed = |name: &str, bin: &str, args: &[&str], input: &dyn Fn(usize) -> String| {
        let mut times = Vec::new();
        let mut chars = 0;
        for run in 0..runs {
            let (took, out) = bench.time(bin, args, &input(run));
            times.push(took);
            chars = chars.max(context_chars(&out));
        }
        report(name, times, chars);
    };
    timed(
        "claude-code SessionStart compact (mc-pin)",
        "mc-pin",
        &["restore", "--harness", "claude-code"],
        &|run| {
            hook(
                &cc,
                CC_SESSION,
                "SessionStart",
                "compact",
                Some(format!("p-{run}")),
            )
        },
    );
    timed(
        "claude-code SessionStart resume (mc-pin)",
        "mc-pin",
        &["restore", "--harness", "claude-code"],
        &|_| hook(&cc, CC_SESSION, "SessionStart", "resume", None),
    );
    timed(
        "claude-code SessionStart (mc-search)",
        "mc-search",
        &["session-start", "--harness", "claude-code"],
        &|_| hook(&cc, CC_SESSION, "SessionStart", "startup", None),
    );
    timed(
        "claude-code Stop (mc-historian hook)",
        "mc-historian",
        &["hook", "--harness", "claude-code"],
        &|_| hook(&cc, CC_SESSION, "Stop", "", None),
    );
    timed(
        "codex SessionStart compact (mc-pin, dry run)",
        "mc-pin",
        &["restore", "--harness", "codex", "--dry-run"],
        &|_| hook(&cx, CX_SESSION, "SessionStart", "compact", None),
    );
    timed(
        "codex Stop (mc-historian hook)",
        "mc-historian",
        &["hook", "--harness", "codex"],
        &|_| hook(&cx, CX_SESSION, "Stop", "", None),
    );
    // The historian over the Claude Code transcript, on a fresh database.
    let fresh = Bench {
        dir: bench.dir.clone(),
        db: bench.dir.join("fresh.db"),
        config: bench.config.clone(),
    };
    let path = cc.display().to_string();
    let (took, out) = fresh.time(
        "mc-historian",
        &["run", "--transcript", &path, "--context-limit", "200000"],
        "",
    );
    let answer: Value = serde_json::from_slice(&out).unwrap_or(Value::Null);
    println!(
        "mc-historian run (Claude Code transcript)     {:>7.1} ms  status {}, {} compartment(s), {} chunk(s)",
        took.as_secs_f64() * 1000.0,
        answer["status"],
        answer["compartments"].as_array().map_or(0, Vec::len),
        answer["chunks"].as_array().map_or(0, Vec::len)
    );
    ExitCode::SUCCESS
}

//! bench-gateway: the time mc's gateway pass (`gateway::TransformPass`) takes
//! per Claude Code request as the history grows, against a plain JSON parse
//! and write (`serde_json` to a `Value` and back) of the same body, measured
//! in the same run, request by request.
//!
//! The workload is bench-opencode's, as Claude Code would send it: each turn
//! the agent thinks, reads two files of ~10 KB (two `tool_use`, their
//! `tool_result`s), answers, and the user asks again; Claude Code's
//! breakpoint moves to the newest message each call. The provider's usage
//! (the body's size in tokens, ~4 bytes each) is reported back after each
//! call, so the pass defers, executes and drops as it would. A real SQLite
//! file in a temporary folder; no network.

use std::process::ExitCode;
use std::time::Instant;

use mc_base::config::TransformConfig;
use mc_base::domain::envelope::Usage;
use mc_base::domain::gateway::{Answer, Api, Call, Forward, Pass};
use mc_base::store::StoreOptions;
use mc_tests::bench::{claude_code_body as body, claude_code_turn as turn, percentiles};
use mc_transform_core::gateway::TransformPass;
use serde_json::{Value, json};

const T0: i64 = 1_800_000_000_000;

fn ms(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1000.0
}

/// Times mc's gateway pass per Claude Code request as the history grows,
/// against a JSON parse and write of the same body, in the same run.
#[derive(clap::Parser)]
#[command(name = "bench-gateway")]
struct Cli {
    /// Turns of the workload (each: thinking, two reads, an answer, a prompt).
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u64).range(1..))]
    turns: u64,
    /// Size of each file read, in KB.
    #[arg(long = "file-kb", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    file_kb: u64,
}

fn main() -> ExitCode {
    let cli = <Cli as clap::Parser>::parse();
    let (turns, kb) = (cli.turns as usize, cli.file_kb as usize);
    let Ok(dir) = tempfile::tempdir() else {
        eprintln!("bench-gateway: cannot create a temporary folder");
        return ExitCode::FAILURE;
    };
    let pass = match TransformPass::open(
        &dir.path().join("mc.db"),
        &StoreOptions::default(),
        TransformConfig::default(),
    ) {
        Ok(pass) => pass,
        Err(e) => {
            eprintln!("bench-gateway: {e}");
            return ExitCode::FAILURE;
        }
    };
    let headers = vec![("anthropic-version".to_string(), "2023-06-01".to_string())];
    let mut messages =
        vec![json!({"role": "user", "content": [{"type": "text", "text": "Turn 0."}]})];
    let (mut pass_ms, mut json_ms, mut sizes) = (Vec::new(), Vec::new(), Vec::new());
    let mut rewritten = 0;
    for t in 0..turns {
        // Two calls a turn: after the reads, and after the new prompt.
        let [call_a, result, answer, prompt] = turn(t, kb);
        for step in [vec![call_a, result], vec![answer, prompt]] {
            messages.extend(step);
            let request = body(&messages);
            let start = Instant::now();
            let value: Value = serde_json::from_slice(&request).unwrap_or(Value::Null);
            let written = serde_json::to_vec(&value).unwrap_or_default();
            json_ms.push(ms(start));
            std::hint::black_box(written);
            let now_ms = T0 + (pass_ms.len() as i64) * 20_000;
            let call = Call {
                api: Api::AnthropicMessages,
                harness: "claude-code",
                session_id: Some("bench"),
                path: "/v1/messages?beta=true",
                headers: &headers,
                body: &request,
                now_ms,
            };
            let start = Instant::now();
            let forward = pass.run(&call);
            pass_ms.push(ms(start));
            let sent = match forward {
                Ok((Forward::Body(b) | Forward::Fallback(b), _)) => {
                    rewritten += 1;
                    b
                }
                Ok((Forward::Untouched, _)) => request.clone(),
                Err(e) => {
                    eprintln!("bench-gateway: the pass failed: {e}");
                    return ExitCode::FAILURE;
                }
            };
            sizes.push(request.len());
            let tokens = (sent.len() / 4) as u64;
            let usage = Usage {
                input: 50,
                cache_read: tokens.saturating_sub(2_000),
                cache_write: 1_950,
                output: 200,
            };
            let answer = Answer {
                status: 200,
                usage: Some(usage),
                error_body: None,
            };
            pass.answered(&call, &answer);
        }
    }
    let n = pass_ms.len();
    let (first_pass, first_json) = (pass_ms[0], json_ms[0]);
    let (last_pass, last_json) = (pass_ms[n - 1], json_ms[n - 1]);
    println!(
        "bench-gateway: {turns} turns x two {kb} KB reads, {n} requests, largest {:.0} KB (~{}k tokens), {rewritten} rewritten",
        sizes[n - 1] as f64 / 1024.0,
        sizes[n - 1] / 4000
    );
    println!("per request, ms        first   median     p90    largest");
    let (pm, p9) = percentiles(&mut pass_ms.clone());
    let (jm, j9) = percentiles(&mut json_ms.clone());
    println!("gateway pass        {first_pass:>8.2} {pm:>8.2} {p9:>7.2} {last_pass:>10.2}");
    println!("JSON parse+write    {first_json:>8.2} {jm:>8.2} {j9:>7.2} {last_json:>10.2}");
    println!(
        "ratio pass/JSON     {:>8.2} {:>8.2} {:>7.2} {:>10.2}",
        first_pass / first_json,
        pm / jm,
        p9 / j9,
        last_pass / last_json
    );
    // The second half of the session: the largest histories.
    let (mut late_pass, mut late_json) = (pass_ms[n / 2..].to_vec(), json_ms[n / 2..].to_vec());
    let (lpm, lp9) = percentiles(&mut late_pass);
    let (ljm, _) = percentiles(&mut late_json);
    println!(
        "second half: pass median {lpm:.2} ms, p90 {lp9:.2} ms; JSON median {ljm:.2} ms; ratio {:.2} (targets: median <= 5 ms and <= 1.5x)",
        lpm / ljm
    );
    ExitCode::SUCCESS
}

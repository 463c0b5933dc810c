//! What the harness benchmarks (bench-opencode, bench-pi, bench-claude-code)
//! measure the same way: the share of request bytes a provider prefix cache
//! would serve and what mc's busts cost of it, hook time percentiles, the
//! resident mc-transform's memory, the fixed bytes mc adds to a request; and
//! what the per-call record costs a pass (bench-transform, bench-dashboard).

use mc_base::tokens;
use serde_json::{Value, json};

use crate::fake_provider::{Recorded, common_prefix};

/// The most bytes mc may add to every request (issue 32: 0.3× the reference
/// plugin's +11,676), as the harness benchmarks measure it on the first one.
pub const FIXED_BYTES_TARGET: i64 = 3_500;

/// What mc adds to a request, part by part, in bytes and o200k tokens: the
/// request with mc against the same request without it. `tools` holds the
/// five tools' schemas, `system` the guidance, `messages` the head and tags.
pub fn fixed_additions(without: &Recorded, with: &Recorded) -> String {
    let part = |key: &str| {
        let (a, b) = (without.body[key].to_string(), with.body[key].to_string());
        (
            b.len() as i64 - a.len() as i64,
            i64::from(tokens::exact(&b)) - i64::from(tokens::exact(&a)),
        )
    };
    let raw = |r: &Recorded| {
        let text = String::from_utf8_lossy(&r.raw);
        (r.raw.len() as i64, i64::from(tokens::exact(&text)))
    };
    let (total, total_tokens) = {
        let ((a, at), (b, bt)) = (raw(without), raw(with));
        (b - a, bt - at)
    };
    let (schemas, guidance, messages) = (part("tools"), part("system"), part("messages"));
    format!(
        "first request +{total} bytes, +{total_tokens} tokens (target ≤ {FIXED_BYTES_TARGET} bytes{})\n\
         {:21}tool schemas +{} bytes, +{} tokens; guidance (system) +{} bytes, +{} tokens; \
         messages (head, tags) +{} bytes, +{} tokens",
        if total > FIXED_BYTES_TARGET {
            ", MISSED"
        } else {
            ""
        },
        "",
        schemas.0,
        schemas.1,
        guidance.0,
        guidance.1,
        messages.0,
        messages.1
    )
}

/// Share of request bytes (as a cache keys them) that the previous request's prefix covers.
pub fn cache_share(keys: &[String]) -> f64 {
    let total: usize = keys.iter().skip(1).map(String::len).sum();
    let served: usize = keys
        .windows(2)
        .map(|w| common_prefix(w[0].as_bytes(), w[1].as_bytes()))
        .sum();
    served as f64 / total.max(1) as f64
}

/// The share if every request extended the previous one (no bust at all):
/// what is left of the loss is new content, which no prefix cache serves.
/// The smaller mc keeps the context, the larger a share the new bytes are.
pub fn growth_only_share(keys: &[String]) -> f64 {
    let lens: Vec<usize> = keys.iter().map(String::len).collect();
    let total: usize = lens.iter().skip(1).sum();
    let served: usize = lens.windows(2).map(|w| w[0].min(w[1])).sum();
    served as f64 / total.max(1) as f64
}

/// A run with mc against the same script without it, as a prefix cache sees
/// them: both shares, the share mc would have had with no bust at all, and
/// what its busts cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CacheFigures {
    pub without: f64,
    pub with: f64,
    /// [`growth_only_share`] of the run with mc.
    pub no_bust: f64,
}

impl CacheFigures {
    pub fn of(keys_without: &[String], keys_with: &[String]) -> CacheFigures {
        CacheFigures {
            without: cache_share(keys_without),
            with: cache_share(keys_with),
            no_bust: growth_only_share(keys_with),
        }
    }

    /// mc's share as a part of the share without mc.
    pub fn ratio(&self) -> f64 {
        self.with / self.without.max(f64::MIN_POSITIVE)
    }

    /// The bust cost in percentage points: the share with no bust at all
    /// minus the share measured.
    pub fn bust_cost_points(&self) -> f64 {
        (self.no_bust - self.with) * 100.0
    }

    /// The benchmarks' three lines on it; `target` (say `"≥ 98 %"`) follows the ratio.
    pub fn lines(&self, target: Option<&str>) -> [String; 3] {
        [
            format!(
                "  prefix-cache share without mc {:>5.1}%  with mc {:>5.1}%  → {:.1}% of the without-mc figure{}",
                self.without * 100.0,
                self.with * 100.0,
                self.ratio() * 100.0,
                target.map(|t| format!(" (target {t})")).unwrap_or_default()
            ),
            format!(
                "  share without any bust        with mc {:>5.1}%  (the rest is new content: the smaller the context, the larger its share)",
                self.no_bust * 100.0
            ),
            format!(
                "  bust cost          {:.2} points (the share with no bust minus the share measured; target ≤ 0.3)",
                self.bust_cost_points()
            ),
        ]
    }
}

/// The requests whose previous request's prefix covered less than 90 % (why the share drops).
pub fn misses(keys: &[String]) -> Vec<String> {
    keys.windows(2)
        .enumerate()
        .filter_map(|(i, w)| {
            let shared = common_prefix(w[0].as_bytes(), w[1].as_bytes());
            let share = shared as f64 / w[1].len() as f64;
            (share < 0.9)
                .then(|| format!("#{} {:.0}% of {}k", i + 1, share * 100.0, w[1].len() / 4000))
        })
        .collect()
}

/// (median, p90) of `values` (sorted in place; the first value is read before).
pub fn percentiles(values: &mut [f64]) -> (f64, f64) {
    values.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let n = values.len();
        if n == 0 {
            return f64::NAN;
        }
        let i = ((n as f64 * q).ceil() as usize).clamp(1, n) - 1;
        values[i]
    };
    (at(0.5), at(0.9))
}

/// The resident set (now, peak) in KiB of the child of `parent` running
/// `mc-transform serve`, if there is one (Linux).
pub fn serve_rss(parent: u32) -> Option<(u64, u64)> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let serves = args.first().is_some_and(|a| a.ends_with(b"mc-transform"))
            && args.iter().any(|a| *a == b"serve");
        if ppid != Some(parent) || !serves {
            continue;
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let kib = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        };
        return Some((kib("VmRSS:")?, kib("VmHWM:")?));
    }
    None
}

/// What the per-call record costs a pass, in µs (medians).
#[derive(Debug, Clone, Copy)]
pub struct RecordCost {
    /// A defer pass, in-process on a warm file store (bench-transform's
    /// 200k-token session).
    pub pass_us: f64,
    /// `calls::record`'s statements (one select, one insert, the usage
    /// update) inside a transaction: what they add to the pass's own.
    pub record_us: f64,
    /// The same as a transaction of its own (begin and commit included):
    /// an upper bound.
    pub alone_us: f64,
}

/// Time [`RecordCost`]: `runs` defer passes after three warm-ups, then
/// `runs` records onto the same session, on a SQLite file in `dir`.
pub fn record_cost(dir: &std::path::Path, runs: usize) -> mc_base::Result<RecordCost> {
    use std::time::Instant;

    use mc_base::domain::envelope::{Envelope, Usage};
    use mc_base::store::{Store, StoreOptions};
    use mc_transform_core::calls::{self, HeadMove, Keep, NewCall, Prompt, Sources};
    use mc_transform_core::{Bust, Decision};

    use crate::generate::{self, SessionSpec};

    let mut store = Store::open(&dir.join("record-cost.db"), &StoreOptions::default())?;
    let config = mc_base::config::TransformConfig::default();
    let messages = generate::session(&SessionSpec::bench());
    let now = generate::last_time_ms(&messages) + 1_000;
    let value = generate::envelope(
        &messages,
        "ses_bench",
        generate::usage_at_percent(30.0),
        now,
    );
    let mut pass = Vec::new();
    for k in 0..runs + 3 {
        let envelope = Envelope::from_value(value.clone())?;
        let t = Instant::now();
        mc_transform_core::run_pass(&mut store, envelope, &config, now)?;
        if k >= 3 {
            pass.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    let session = mc_base::domain::sessions::find_session(store.conn(), "opencode", "ses_bench")?
        .map_or(1, |s| s.id);
    let call = |k: usize| NewCall {
        session,
        at_ms: now + k as i64,
        decision: Decision::Defer,
        reason: "cache_warm",
        bust: Bust::None,
        head: HeadMove::Replayed,
        head_reason: None,
        usage_percent: 30.0,
        context_window: 200_000,
        model: Some("anthropic/m"),
        prompt: Prompt::default(),
        messages: messages.len(),
        first_message: Some("msg_000_u"),
        sources: Sources::default(),
        drops: 0,
        // A new sample each time: the usage update runs too.
        sample: Some(Usage {
            input: 10 + k as u64,
            cache_read: 30_000,
            cache_write: 100,
            output: 50,
        }),
    };
    let keep = Keep::of(&config);
    let (mut inside, mut alone) = (Vec::new(), Vec::new());
    for k in 0..runs {
        let started = Instant::now();
        let statements = store.write(|tx| {
            let t = Instant::now();
            calls::record(tx, &call(2 * k), keep)?;
            Ok(t.elapsed())
        })?;
        alone.push(started.elapsed().as_secs_f64() * 1e6);
        inside.push(statements.as_secs_f64() * 1e6);
    }
    Ok(RecordCost {
        pass_us: percentiles(&mut pass).0,
        record_us: percentiles(&mut inside).0,
        alone_us: percentiles(&mut alone).0,
    })
}

/// A file `Read` returns in the workload: ~`kb` KB of code-like lines.
fn workload_file(turn: usize, which: usize, kb: usize) -> String {
    let line = format!(
        "{turn:>4}.{which} | pub fn item_{turn}_{which}(input: &str) -> usize {{ input.len() }}\n"
    );
    line.repeat(kb * 1024 / line.len() + 1)
}

/// Turn `turn` of bench-opencode's workload as Claude Code sends it (what
/// bench-gateway and bench-gateway-http replay): the agent thinks and reads
/// two files of ~`kb` KB, answers, and the user asks again.
pub fn claude_code_turn(turn: usize, kb: usize) -> [Value; 4] {
    [
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": format!("Turn {turn}: read both files."),
             "signature": format!("EqQBCkYIBxgCKkD{turn:08}+/==")},
            {"type": "tool_use", "id": format!("toolu_{turn}_a"), "name": "Read",
             "input": {"file_path": format!("src/a{turn}.rs")}},
            {"type": "tool_use", "id": format!("toolu_{turn}_b"), "name": "Read",
             "input": {"file_path": format!("src/b{turn}.rs")}}]}),
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": format!("toolu_{turn}_a"), "content": workload_file(turn, 0, kb)},
            {"type": "tool_result", "tool_use_id": format!("toolu_{turn}_b"), "content": workload_file(turn, 1, kb)}]}),
        json!({"role": "assistant", "content": [{"type": "text", "text": format!("Both files of turn {turn} read.")}]}),
        json!({"role": "user", "content": [{"type": "text", "text": format!("Now turn {}.", turn + 1)}]}),
    ]
}

/// The body Claude Code sends for `messages`: its system prompt's three
/// parts, 24 tools, its breakpoint on the newest block.
pub fn claude_code_body(messages: &[Value]) -> Vec<u8> {
    let mut messages = messages.to_vec();
    if let Some(block) = messages
        .last_mut()
        .and_then(|m| m["content"].as_array_mut())
        .and_then(|b| b.last_mut())
    {
        block["cache_control"] = json!({"type": "ephemeral"});
    }
    let system = [
        json!({"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197;"}),
        json!({"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}),
        json!({"type": "text", "text": "Instructions ".repeat(500), "cache_control": {"type": "ephemeral", "ttl": "1h"}}),
    ];
    let tools: Vec<Value> = (0..24)
        .map(|i| json!({"name": format!("Tool{i}"), "description": "A tool. ".repeat(40),
                        "input_schema": {"type": "object", "properties": {"x": {"type": "string"}}}}))
        .collect();
    serde_json::to_vec(
        &json!({"model": "claude-sonnet-4-5", "messages": messages, "system": system,
        "tools": tools, "metadata": {"user_id": "bench"}, "max_tokens": 32000, "stream": true}),
    )
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bust_costs_what_the_cache_could_have_served() {
        let grow: Vec<String> = ["aaaa", "aaaabb", "aaaabbcc"].map(String::from).into();
        let figures = CacheFigures::of(&grow, &grow);
        assert_eq!(figures.bust_cost_points(), 0.0);
        assert_eq!(figures.ratio(), 1.0);
        // The third request rewrites its first byte: 8 bytes the cache could
        // serve 6 of, and served none.
        let bust: Vec<String> = ["aaaa", "aaaabb", "xaaabbcc"].map(String::from).into();
        let figures = CacheFigures::of(&grow, &bust);
        assert!((figures.bust_cost_points() - 6.0 / 14.0 * 100.0).abs() < 1e-9);
        assert!(figures.ratio() < 1.0);
    }
}

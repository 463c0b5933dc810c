//! What the harness benchmarks (bench-opencode, bench-pi) measure the same
//! way: the share of request bytes a provider prefix cache would serve, hook
//! time percentiles, the resident mc-transform's memory, the fixed bytes mc
//! adds to a request.

use mc_base::tokens;

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

//! What the harness benchmarks (bench-opencode, bench-pi) measure the same
//! way: the share of request bytes a provider prefix cache would serve, hook
//! time percentiles, the resident mc-transform's memory.

use crate::fake_provider::common_prefix;

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

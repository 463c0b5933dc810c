//! The crontab line that runs `mc-dream tick`, and adding it to (or taking it
//! out of) a crontab's text. Pure: the binary reads and writes the crontab
//! through the `crontab` program it resolved.

use std::path::Path;

/// The schedule of the line: every 15 minutes.
pub const EVERY: &str = "*/15 * * * *";

/// Ends every line mc-dream installs, so install and uninstall find their
/// own line and nothing else.
pub const MARKER: &str = "# mc-dream tick";

/// What the line needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineSpec<'a> {
    /// The absolute path of the mc-dream binary.
    pub binary: &'a Path,
    /// `NAME=value` pairs cron must set (cron starts jobs with an almost
    /// empty environment): PATH, and mc's own variables when set.
    pub env: &'a [(String, String)],
    /// Where stderr (warnings, failures) is appended.
    pub log: Option<&'a Path>,
}

/// `*/15 * * * * NAME='value' … '/abs/mc-dream' tick >/dev/null 2>>'log' # mc-dream tick`.
pub fn line(spec: &LineSpec<'_>) -> String {
    let mut out = String::from(EVERY);
    for (name, value) in spec.env {
        out.push(' ');
        out.push_str(name);
        out.push('=');
        out.push_str(&quote(value));
    }
    out.push(' ');
    out.push_str(&quote(&spec.binary.to_string_lossy()));
    out.push_str(" tick >/dev/null");
    match spec.log {
        Some(log) => {
            out.push_str(" 2>>");
            out.push_str(&quote(&log.to_string_lossy()));
        }
        None => out.push_str(" 2>/dev/null"),
    }
    out.push(' ');
    out.push_str(MARKER);
    out
}

/// A shell word in single quotes; `%` escaped, since cron turns a bare `%`
/// into a newline.
fn quote(value: &str) -> String {
    let escaped = value.replace('\'', r"'\''").replace('%', r"\%");
    format!("'{escaped}'")
}

fn ours(line: &str) -> bool {
    line.trim_end().ends_with(MARKER)
}

/// `existing` with mc-dream's line in place (any older mc-dream line
/// replaced, every other line kept in order), and whether anything changed.
pub fn install(existing: &str, line: &str) -> (String, bool) {
    let mut kept: Vec<&str> = existing.lines().filter(|l| !ours(l)).collect();
    while kept.last().is_some_and(|l| l.trim().is_empty()) {
        kept.pop();
    }
    kept.push(line);
    let text = kept.join("\n") + "\n";
    let changed = text != existing;
    (text, changed)
}

/// `existing` without mc-dream's lines, and whether anything changed.
pub fn uninstall(existing: &str) -> (String, bool) {
    if !existing.lines().any(ours) {
        return (existing.to_string(), false);
    }
    let kept: Vec<&str> = existing.lines().filter(|l| !ours(l)).collect();
    let text = if kept.is_empty() {
        String::new()
    } else {
        kept.join("\n") + "\n"
    };
    (text, true)
}

/// Whether `existing` holds an mc-dream line.
pub fn installed(existing: &str) -> bool {
    existing.lines().any(ours)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec_line() -> String {
        let env = vec![
            ("PATH".to_string(), "/opt/mc/bin:/usr/bin:/bin".to_string()),
            ("MC_DB".to_string(), "/data/it's 100%.db".to_string()),
        ];
        line(&LineSpec {
            binary: Path::new("/opt/mc/bin/mc-dream"),
            env: &env,
            log: Some(Path::new("/home/u/.local/state/mc/dream.log")),
        })
    }

    #[test]
    fn the_line_quotes_values_and_escapes_percent() {
        assert_eq!(
            spec_line(),
            "*/15 * * * * PATH='/opt/mc/bin:/usr/bin:/bin' MC_DB='/data/it'\\''s 100\\%.db' \
             '/opt/mc/bin/mc-dream' tick >/dev/null 2>>'/home/u/.local/state/mc/dream.log' \
             # mc-dream tick"
        );
    }

    #[test]
    fn install_is_idempotent_and_uninstall_keeps_other_lines() {
        let line = spec_line();
        let existing = "MAILTO=me\n0 1 * * * backup\n";
        let (once, changed) = install(existing, &line);
        assert!(changed);
        assert_eq!(once, format!("MAILTO=me\n0 1 * * * backup\n{line}\n"));
        let (twice, changed) = install(&once, &line);
        assert!(!changed, "installing again changes nothing");
        assert_eq!(twice, once);
        // A newer line replaces the old one in place of appending a second.
        let (moved, changed) = install(&once, "*/15 * * * * '/new/mc-dream' tick # mc-dream tick");
        assert!(changed);
        assert_eq!(moved.matches(MARKER).count(), 1);
        assert!(installed(&moved));
        let (removed, changed) = uninstall(&once);
        assert!(changed);
        assert_eq!(removed, existing);
        assert!(!installed(&removed));
        assert_eq!(uninstall(&removed), (removed.clone(), false));
        assert_eq!(install("", &line).0, format!("{line}\n"));
        assert_eq!(uninstall(&format!("{line}\n")).0, "");
    }
}

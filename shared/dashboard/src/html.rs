//! Small HTML helpers: escaping, numbers, times, the page frame.

use std::fmt::Write as _;

/// The stylesheet, compiled in.
pub const STYLE: &str = include_str!("style.css");

/// Text as HTML (element content or a quoted attribute).
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A query-string value.
pub fn url(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// `12,345`.
pub fn num(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

/// `12.3k`, `1.2M`.
pub fn short(n: i64) -> String {
    let x = n as f64;
    if x.abs() >= 1e6 {
        format!("{:.1}M", x / 1e6)
    } else if x.abs() >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        n.to_string()
    }
}

pub fn dollars(x: f64) -> String {
    if x >= 100.0 {
        format!("${x:.0}")
    } else {
        format!("${x:.2}")
    }
}

pub fn percent(x: Option<f64>) -> String {
    x.map_or_else(|| "—".to_string(), |x| format!("{x:.1} %"))
}

/// A time in UTC, to the minute.
pub fn time(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_else(|_| ms.to_string())
}

/// How long ago, in words.
pub fn ago(ms: i64, now_ms: i64) -> String {
    let s = (now_ms - ms).max(0) / 1000;
    match s {
        0..60 => format!("{s}s ago"),
        60..3600 => format!("{}m ago", s / 60),
        3600..86_400 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86_400),
    }
}

/// The navigation's pages: path and label.
pub const NAV: &[(&str, &str)] = &[
    ("/", "Sessions"),
    ("/memory", "Memory"),
    ("/dream", "Dreamer"),
    ("/spend", "Spend"),
    ("/doctor", "Doctor"),
];

/// What a page frame needs.
pub struct Frame<'a> {
    pub title: &'a str,
    /// The path of the navigation entry to mark.
    pub nav: &'a str,
    /// Reload the page every this many seconds (a live session).
    pub refresh: Option<u32>,
    /// Inline the stylesheet (the export) instead of linking it.
    pub inline_style: bool,
    pub footer: &'a str,
}

/// A whole page around `body`.
pub fn page(frame: &Frame<'_>, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + 4096);
    out.push_str("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">");
    out.push_str("<meta name=\"referrer\" content=\"no-referrer\">");
    if let Some(s) = frame.refresh {
        let _ = write!(out, "<meta http-equiv=\"refresh\" content=\"{s}\">");
    }
    let _ = write!(out, "<title>{} · mc</title>", esc(frame.title));
    if frame.inline_style {
        let _ = write!(out, "<style>{STYLE}</style>");
    } else {
        out.push_str("<link rel=\"stylesheet\" href=\"/assets/style.css\">");
    }
    out.push_str("</head><body><header><span class=\"brand\">mc</span><nav>");
    for (path, label) in NAV {
        let class = if *path == frame.nav {
            " class=\"on\""
        } else {
            ""
        };
        if frame.inline_style {
            let _ = write!(out, "<span{class}>{label}</span>");
        } else {
            let _ = write!(out, "<a href=\"{path}\"{class}>{label}</a>");
        }
    }
    out.push_str("</nav></header><main>");
    let _ = write!(out, "<h1>{}</h1>", esc(frame.title));
    out.push_str(body);
    let _ = writeln!(
        out,
        "</main><footer>{}</footer></body></html>",
        esc(frame.footer)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_numbers_read_well() {
        assert_eq!(
            esc("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(num(1_234_567), "1,234,567");
        assert_eq!(num(-999), "-999");
        assert_eq!(short(12_345), "12.3k");
        assert_eq!(url("a b&c"), "a+b%26c");
        assert_eq!(time(0), "1970-01-01 00:00 UTC");
        assert_eq!(ago(0, 90_000), "1m ago");
    }
}

//! Charts as SVG written here, on the server: a page stays one document
//! with nothing to fetch or run (no script, no CDN), draws the same in the
//! export, and the few shapes a timeline needs (stacked bars, two lines, a
//! marker per bust) are a screenful of code.

use std::fmt::Write as _;

use mc_transform_core::status::CallView;

use crate::html::{esc, num, short};

/// The sources a bar is stacked from, bottom up: label, CSS class.
pub const SOURCES: &[(&str, &str)] = &[
    ("system", "s-system"),
    ("tools", "s-tools"),
    ("head", "s-head"),
    ("memory", "s-memory"),
    ("pins", "s-pins"),
    ("conversation", "s-conv"),
    ("tool output", "s-tool"),
];

fn stack(call: &CallView) -> [i64; 7] {
    let c = &call.call;
    let s = &c.sources;
    [
        c.system_tokens.unwrap_or(0),
        c.tools_tokens.unwrap_or(0),
        s.head,
        s.memory,
        s.pins,
        s.conversation,
        s.tool_output,
    ]
}

const W: f64 = 960.0;
const H: f64 = 280.0;
const LEFT: f64 = 52.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 18.0;
const BOTTOM: f64 = 22.0;

/// The timeline of `calls` against the window: each call's tokens by
/// source (bars), what the provider read from and wrote to its cache
/// (lines), the window (dashed), and a marker on every bust with its cause.
pub fn timeline(calls: &[CallView]) -> String {
    let mut out = String::new();
    if calls.is_empty() {
        return "<p class=\"empty\">No calls recorded yet.</p>".into();
    }
    let window = calls
        .iter()
        .map(|c| c.call.context_window)
        .max()
        .unwrap_or(0);
    let tallest = calls
        .iter()
        .map(|c| {
            let sum: i64 = stack(c).iter().sum();
            let usage = c
                .call
                .usage
                .map_or(0, |u| i64::try_from(u.prompt_tokens()).unwrap_or(i64::MAX));
            sum.max(usage)
        })
        .max()
        .unwrap_or(0);
    let top = window.max(tallest).max(1) as f64;
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let step = plot_w / calls.len() as f64;
    let y = |v: i64| TOP + plot_h - (v as f64 / top * plot_h).min(plot_h);
    let _ = write!(
        out,
        "<div class=\"scroll\"><svg class=\"timeline\" viewBox=\"0 0 {W} {H}\" role=\"img\" \
         aria-label=\"Context fill by source, cache reads and writes, per call\">"
    );
    // Grid: the window and quarters of the scale.
    for q in 1..=4 {
        let v = (top * f64::from(q) / 4.0) as i64;
        let yy = y(v);
        let _ = write!(
            out,
            "<line class=\"grid\" x1=\"{LEFT}\" x2=\"{}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\"/>\
             <text class=\"axis\" x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            W - RIGHT,
            LEFT - 4.0,
            yy + 4.0,
            short(v)
        );
    }
    if window > 0 {
        let yy = y(window);
        let _ = write!(
            out,
            "<line class=\"window\" x1=\"{LEFT}\" x2=\"{}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\"/>\
             <text class=\"axis\" x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">window {}</text>",
            W - RIGHT,
            W - RIGHT,
            yy - 4.0,
            short(window)
        );
    }
    let bar = (step * 0.8).max(0.5);
    let mut read_points = Vec::new();
    let mut write_points = Vec::new();
    for (i, call) in calls.iter().enumerate() {
        let x = LEFT + step * i as f64 + (step - bar) / 2.0;
        let mut base = 0i64;
        let parts = stack(call);
        let _ = write!(
            out,
            "<g><title>call {} · {} · {}: {} tokens sent by mc's count</title>",
            call.call.id,
            esc(&call.call.decision),
            esc(&call.call.reason),
            num(parts.iter().sum())
        );
        for (value, (_, class)) in parts.iter().zip(SOURCES) {
            if *value <= 0 {
                continue;
            }
            let y1 = y(base + value);
            let y0 = y(base);
            let _ = write!(
                out,
                "<rect class=\"{class}\" x=\"{x:.1}\" y=\"{y1:.1}\" width=\"{bar:.1}\" height=\"{:.1}\"/>",
                (y0 - y1).max(0.0)
            );
            base += value;
        }
        out.push_str("</g>");
        let cx = x + bar / 2.0;
        if let Some(u) = call.call.usage {
            read_points.push(format!("{cx:.1},{:.1}", y(u.cache_read as i64)));
            write_points.push(format!("{cx:.1},{:.1}", y(u.cache_write as i64)));
        }
        if call.cache.state.is_bust() {
            let cause = call.cache.cause.map_or("unknown", |c| c.as_str());
            let _ = write!(
                out,
                "<g class=\"bust\"><title>bust ({}): {} — {}</title>\
                 <path d=\"M{:.1} {:.1} l5 -9 l-10 0 z\"/></g>",
                call.cache.state.as_str(),
                esc(cause),
                esc(&call.cache.evidence),
                cx,
                TOP - 1.0
            );
        }
    }
    for (class, points) in [("read", &read_points), ("write", &write_points)] {
        if points.len() > 1 {
            let _ = write!(
                out,
                "<polyline class=\"{class}\" points=\"{}\"/>",
                points.join(" ")
            );
        }
    }
    let _ = write!(
        out,
        "<text class=\"axis\" x=\"{LEFT}\" y=\"{}\">call {}</text>\
         <text class=\"axis\" x=\"{}\" y=\"{}\" text-anchor=\"end\">call {}</text></svg></div>",
        H - 6.0,
        calls.first().map_or(0, |c| c.call.id),
        W - RIGHT,
        H - 6.0,
        calls.last().map_or(0, |c| c.call.id)
    );
    out.push_str("<ul class=\"legend\">");
    for (label, class) in SOURCES {
        let _ = write!(out, "<li><i class=\"{class}\"></i>{label}</li>");
    }
    out.push_str(
        "<li><i class=\"l-read\"></i>cache read</li><li><i class=\"l-write\"></i>cache write</li>\
         <li><i class=\"l-window\"></i>window</li><li><i class=\"l-bust\"></i>bust</li></ul>",
    );
    out
}

/// A horizontal bar of shares (the context now, by source).
pub fn fill(parts: &[(&str, &str, i64)], window: i64) -> String {
    let total: i64 = parts.iter().map(|p| p.2).sum();
    let scale = window.max(total).max(1) as f64;
    let mut out = String::from(
        "<svg class=\"fill\" viewBox=\"0 0 1000 28\" preserveAspectRatio=\"none\" role=\"img\" \
         aria-label=\"Context fill by source\"><rect class=\"free\" x=\"0\" y=\"0\" width=\"1000\" height=\"28\"/>",
    );
    let mut x = 0.0;
    for (label, class, value) in parts {
        if *value <= 0 {
            continue;
        }
        let w = *value as f64 / scale * 1000.0;
        let _ = write!(
            out,
            "<rect class=\"{class}\" x=\"{x:.1}\" y=\"0\" width=\"{w:.1}\" height=\"28\">\
             <title>{label}: {} tokens</title></rect>",
            num(*value)
        );
        x += w;
    }
    out.push_str("</svg>");
    out
}

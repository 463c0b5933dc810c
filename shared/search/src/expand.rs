//! `ctx_expand`: the original content behind a dropped tag (`§N§`), a
//! compartment (its raw message range) or an ordinal range, read from the raw
//! content mc kept at first sight — bounded by a token budget, and any cut
//! said in the answer with where to continue.

use std::fmt::Write as _;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use mc_base::domain::content::{self, RawPart};
use mc_base::domain::notation::placeholder;
use mc_base::error::{Error, Result};
use mc_base::tokens;

use super::{Scope, find_scoped_session};

/// The budget when the caller names none (tokens).
pub const DEFAULT_BUDGET: u64 = 15_000;
/// The most one expand may return (tokens).
pub const MAX_BUDGET: u64 = 100_000;
/// The widest ordinal range one expand accepts.
pub const MAX_RANGE: i64 = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Tag(i64),
    Compartment(i64),
    Range { from: i64, to: i64 },
}

impl Target {
    fn label(self) -> String {
        match self {
            Target::Tag(n) => format!("tag §{n}§"),
            Target::Compartment(s) => format!("compartment {s}"),
            Target::Range { from, to } => format!("messages {from}-{to}"),
        }
    }
}

/// Read `§12§`, `12`, `c3` / `compartment 3`, `10-20` into a target.
pub fn parse_target(spec: &str) -> Result<Target> {
    let s = spec.trim();
    let bad = || {
        Error::input(format!(
            "cannot read {spec:?} as something to expand: give a tag (§12§ or 12), a \
             compartment (c3) or a message range (10-20)"
        ))
    };
    if let Some(rest) = s
        .strip_prefix("compartment")
        .or_else(|| s.strip_prefix('c'))
        .or_else(|| s.strip_prefix('C'))
    {
        let n: i64 = rest.trim().parse().map_err(|_| bad())?;
        return positive(n).map(Target::Compartment);
    }
    if let Some((a, b)) = s.split_once('-') {
        let from: i64 = a.trim().parse().map_err(|_| bad())?;
        let to: i64 = b.trim().parse().map_err(|_| bad())?;
        return range(from, to);
    }
    let digits = s.trim_matches('§');
    let n: i64 = digits.parse().map_err(|_| bad())?;
    positive(n).map(Target::Tag)
}

fn positive(n: i64) -> Result<i64> {
    if n < 1 {
        return Err(Error::input(format!("{n} is not a positive number")));
    }
    Ok(n)
}

/// A checked ordinal range.
pub fn range(from: i64, to: i64) -> Result<Target> {
    positive(from)?;
    positive(to)?;
    if from > to {
        return Err(Error::input(format!(
            "the range {from}-{to} ends before it starts"
        )));
    }
    if to - from >= MAX_RANGE {
        return Err(Error::input(format!(
            "the range {from}-{to} is wider than {MAX_RANGE} messages; ask for less"
        )));
    }
    Ok(Target::Range { from, to })
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Expanded {
    /// What was asked for, e.g. `tag §12§`, `compartment 3`, `messages 10-20`.
    pub target: String,
    /// The message range the answer covers (`from..=through` of `from..=to`).
    pub from: i64,
    pub to: i64,
    pub through: Option<i64>,
    pub messages: usize,
    pub tokens: u64,
    /// True when the budget cut the answer short.
    pub truncated: bool,
    /// Where to continue after a cut (a range, or the same tag with a larger budget).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub continue_with: Option<String>,
    pub text: String,
}

pub fn expand(conn: &Connection, scope: &Scope, target: Target, budget: u64) -> Result<Expanded> {
    let budget = budget.clamp(100, MAX_BUDGET);
    let session = find_scoped_session(conn, scope, "expand")?;
    match target {
        Target::Tag(number) => expand_tag(conn, session.id, number, budget),
        Target::Compartment(sequence) => {
            let (from, to): (i64, i64) = conn
                .prepare_cached(
                    "SELECT start_ordinal, end_ordinal FROM compartments
                     WHERE session = ?1 AND sequence = ?2",
                )?
                .query_row(params![session.id, sequence], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .optional()?
                .ok_or_else(|| {
                    Error::input(format!("no compartment {sequence} in this session"))
                })?;
            expand_range(conn, session.id, target, from, to, budget)
        }
        Target::Range { from, to } => expand_range(conn, session.id, target, from, to, budget),
    }
}

fn count(text: &str) -> u64 {
    u64::from(tokens::estimate(text))
}

/// `text` cut to about `budget` tokens (on a character boundary) and whether it was cut.
fn fit(text: &str, budget: u64) -> (String, bool) {
    if count(text) <= budget {
        return (text.to_string(), false);
    }
    // Estimate the byte length that fits, then trim until it does.
    let mut max = (text.len() as u64 * budget / count(text).max(1)) as usize;
    loop {
        let cut = content::floor_boundary(text, max);
        let kept = text.get(..cut).unwrap_or_default();
        if count(kept) <= budget || cut == 0 {
            return (kept.to_string(), true);
        }
        max = cut * 9 / 10;
    }
}

fn expand_tag(conn: &Connection, session: i64, number: i64, budget: u64) -> Result<Expanded> {
    let part = content::part_of_tag(conn, session, number)?.ok_or_else(|| {
        Error::input(format!(
            "mc kept no content for {} in this session",
            placeholder(number)
        ))
        .with_hint("tags seen before mc kept raw content (schema 8) cannot be expanded")
    })?;
    let dropped: Option<String> = conn
        .prepare_cached("SELECT status FROM tags WHERE session = ?1 AND number = ?2")?
        .query_row(params![session, number], |r| r.get(0))
        .optional()?;
    let mut text = String::new();
    let state = match dropped.as_deref() {
        Some("dropped") => "dropped from the prompt",
        _ => "still in the prompt",
    };
    // Not `§N§ …` at the start: a harness's transform re-tags a tool output
    // that begins with a tag, and the number asked for would be lost.
    let _ = writeln!(
        text,
        "Original of §{number}§ ({}, message {}, {state}):",
        describe(&part),
        part.ordinal
    );
    let body = body_of(&part);
    let (body, cut) = fit(&body, budget);
    text.push_str(&body);
    if cut {
        let _ = write!(
            text,
            "\n[cut here: the budget of {budget} tokens was reached; ask again with a larger budget]"
        );
    }
    if part.truncated_bytes > 0 {
        let _ = write!(
            text,
            "\n[mc kept only the first {} bytes of this part; {} more were not kept]",
            part.content.len(),
            part.truncated_bytes
        );
    }
    Ok(Expanded {
        target: Target::Tag(number).label(),
        from: part.ordinal,
        to: part.ordinal,
        through: (!cut).then_some(part.ordinal),
        messages: 1,
        tokens: count(&text),
        truncated: cut,
        continue_with: cut.then(|| format!("§{number}§ with a budget over {budget}")),
        text,
    })
}

fn describe(part: &RawPart) -> String {
    match (part.kind.as_str(), part.tool_name.as_deref()) {
        ("tool", Some(name)) => format!("tool {name}"),
        ("tool", None) => "tool".into(),
        ("file", _) => "file".into(),
        _ => part.role.clone().unwrap_or_else(|| "message".into()),
    }
}

fn body_of(part: &RawPart) -> String {
    match (part.kind.as_str(), part.tool_input.as_deref()) {
        ("tool", Some(input)) => format!("input: {input}\noutput:\n{}", part.content),
        ("tool", None) => format!("output:\n{}", part.content),
        _ => part.content.clone(),
    }
}

fn render_message(ordinal: i64, parts: &[&RawPart]) -> String {
    let role = parts
        .iter()
        .find_map(|p| p.role.clone())
        .unwrap_or_else(|| "message".into());
    let mut out = format!("[{ordinal}] {role}:");
    for part in parts {
        out.push('\n');
        match part.kind.as_str() {
            "tool" => {
                let tag = part.tag.map(|n| format!(" §{n}§")).unwrap_or_default();
                let _ = write!(
                    out,
                    "tool {}{tag}\n{}",
                    part.tool_name.as_deref().unwrap_or("?"),
                    body_of(part)
                );
            }
            "file" => {
                let _ = write!(out, "file: {}", part.content);
            }
            _ => out.push_str(&part.content),
        }
        if part.truncated_bytes > 0 {
            let _ = write!(out, "\n[{} more bytes were not kept]", part.truncated_bytes);
        }
    }
    out
}

fn expand_range(
    conn: &Connection,
    session: i64,
    target: Target,
    from: i64,
    to: i64,
    budget: u64,
) -> Result<Expanded> {
    let parts = content::parts_in_range(conn, session, from, to)?;
    let mut grouped: Vec<(i64, Vec<&RawPart>)> = Vec::new();
    for part in &parts {
        match grouped.last_mut() {
            Some((ordinal, list)) if *ordinal == part.ordinal => list.push(part),
            _ => grouped.push((part.ordinal, vec![part])),
        }
    }
    let mut blocks = Vec::new();
    let mut used = 0;
    let mut through = None;
    let mut truncated = false;
    let mut continue_with = None;
    for (ordinal, list) in &grouped {
        let block = render_message(*ordinal, list);
        let cost = count(&block) + 1;
        if used + cost > budget {
            truncated = true;
            if blocks.is_empty() {
                // One message larger than the budget: give what fits of it.
                let (kept, _) = fit(&block, budget.saturating_sub(used));
                blocks.push(format!(
                    "{kept}\n[cut here: message {ordinal} is larger than the budget of {budget} tokens]"
                ));
                continue_with = (*ordinal < to).then(|| format!("{}-{to}", ordinal + 1));
            } else {
                continue_with = Some(format!("{ordinal}-{to}"));
            }
            break;
        }
        used += cost;
        blocks.push(block);
        through = Some(*ordinal);
    }
    let shown = blocks.len();
    let mut text = if grouped.is_empty() {
        format!("No kept content for messages {from}-{to} in this session.")
    } else {
        format!(
            "Messages {from}-{to} ({shown} with content{}):\n\n{}",
            if truncated { ", cut by the budget" } else { "" },
            blocks.join("\n\n")
        )
    };
    if let Some(next) = &continue_with {
        let _ = write!(
            text,
            "\n\n[The budget of {budget} tokens was reached; continue with {next}.]"
        );
    }
    Ok(Expanded {
        target: target.label(),
        from,
        to,
        through,
        messages: shown,
        tokens: count(&text),
        truncated,
        continue_with,
        text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_read_the_forms_an_agent_writes() {
        assert_eq!(parse_target("§12§").unwrap(), Target::Tag(12));
        assert_eq!(parse_target(" 7 ").unwrap(), Target::Tag(7));
        assert_eq!(parse_target("c3").unwrap(), Target::Compartment(3));
        assert_eq!(
            parse_target("compartment 4").unwrap(),
            Target::Compartment(4)
        );
        assert_eq!(
            parse_target("10-20").unwrap(),
            Target::Range { from: 10, to: 20 }
        );
        for bad in ["", "x", "0", "§-1§", "20-10", "c", "1-999999"] {
            assert!(parse_target(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn fit_cuts_within_the_budget_on_characters() {
        let text = "é".repeat(10_000);
        let (kept, cut) = fit(&text, 100);
        assert!(cut);
        assert!(count(&kept) <= 100);
        assert!(!kept.is_empty());
        assert_eq!(fit("short", 100), ("short".to_string(), false));
    }
}

//! Rendering the prompt's head: m[0], the frozen baseline, and m[1], the
//! delta since. Pure functions of their inputs; the transform decides when to
//! call them and caches the bytes.

use std::collections::BTreeMap;
use std::path::Path;

use super::decay::{self, Compartment, RenderOptions, Tier};
use super::store::{CATEGORIES, Memory, MemoryMutation, ProfileItem};

/// m[0] when there is nothing to render.
pub const M0_EMPTY: &str = "<session-history></session-history>";
/// m[1] when nothing changed since m[0] (m[1] is never empty).
pub const M1_PLACEHOLDER: &str = "<session-history-since>(nothing new)</session-history-since>";
/// Project docs rendered into m[0], from the project root.
pub const PROJECT_DOCS: [&str; 2] = ["ARCHITECTURE.md", "STRUCTURE.md"];
const MAX_DOC_BYTES: u64 = 256 * 1024;
/// Default token budgets of the memory block and the user profile.
pub const MEMORY_BUDGET: u64 = 4_000;
pub const PROFILE_BUDGET: u64 = 4_000;

pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProjectDoc {
    pub name: &'static str,
    pub content: String,
}

/// `ARCHITECTURE.md` and `STRUCTURE.md` of `root` when they are regular files
/// of at most 256 KiB (a symbolic link is not followed: `repo_fs`),
/// canonicalised (no BOM, LF, no trailing blanks).
pub fn read_project_docs(root: &Path) -> Vec<ProjectDoc> {
    PROJECT_DOCS
        .iter()
        .filter_map(|name| {
            let bytes = mc_base::repo_fs::read(root, Path::new(name), MAX_DOC_BYTES).ok()??;
            let text = String::from_utf8(bytes).ok()?;
            Some(ProjectDoc {
                name,
                content: canonical_doc(&text),
            })
        })
        .filter(|d| !d.content.is_empty())
        .collect()
}

fn canonical_doc(text: &str) -> String {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let lines: Vec<&str> = text
        .split('\n')
        .map(|l| {
            l.strip_suffix('\r')
                .unwrap_or(l)
                .trim_end_matches([' ', '\t'])
        })
        .collect();
    lines.join("\n").trim_end_matches('\n').to_string()
}

/// A pinned message's text, rendered verbatim once the historian covers it.
#[derive(Debug, Clone, PartialEq)]
pub struct PinnedText {
    pub id: String,
    pub role: String,
    pub created_ms: i64,
    pub text: String,
}

fn pinned_block(pinned: &[PinnedText]) -> Option<String> {
    if pinned.is_empty() {
        return None;
    }
    let mut sorted: Vec<&PinnedText> = pinned.iter().collect();
    sorted.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
    let body: Vec<String> = sorted
        .iter()
        .map(|p| {
            format!(
                "<pinned id=\"{}\" role=\"{}\">\n{}\n</pinned>",
                escape(&p.id),
                escape(&p.role),
                escape(&p.text)
            )
        })
        .collect();
    Some(format!(
        "<pinned-messages>\n{}\n</pinned-messages>",
        body.join("\n")
    ))
}

/// Admit memories greedily in priority order within `budget` tokens, then
/// group them by category in the fixed order, by id inside a category.
fn memory_lines(
    memories: &[Memory],
    budget: u64,
    count: &dyn Fn(&str) -> u64,
) -> (Vec<i64>, String) {
    let mut used = 0;
    let mut admitted: Vec<&Memory> = Vec::new();
    for m in memories {
        let cost = count(&m.content) + 6;
        if used + cost > budget {
            continue;
        }
        used += cost;
        admitted.push(m);
    }
    let mut blocks = Vec::new();
    for category in CATEGORIES {
        let mut items: Vec<&&Memory> = admitted.iter().filter(|m| m.category == category).collect();
        if items.is_empty() {
            continue;
        }
        items.sort_by_key(|m| m.id);
        let lines: Vec<String> = items
            .iter()
            .map(|m| format!("#{}: {}", m.id, escape(&m.content)))
            .collect();
        blocks.push(format!("<{category}>\n{}\n</{category}>", lines.join("\n")));
    }
    let ids = {
        let mut ids: Vec<i64> = admitted.iter().map(|m| m.id).collect();
        ids.sort_unstable();
        ids
    };
    (ids, blocks.join("\n"))
}

fn profile_lines(items: &[ProfileItem], budget: u64, count: &dyn Fn(&str) -> u64) -> Vec<String> {
    let mut used = 0;
    let mut lines = Vec::new();
    for item in items {
        let line = format!("- {}", escape(&item.content));
        let cost = count(&line) + 4;
        if used + cost > budget {
            break;
        }
        used += cost;
        lines.push(line);
    }
    lines
}

pub struct M0Inputs<'a> {
    pub docs: &'a [ProjectDoc],
    pub profile: &'a [ProfileItem],
    pub compartments: &'a [Compartment],
    pub memories: &'a [Memory],
    pub pinned: &'a [PinnedText],
    pub history_budget: u64,
    pub memory_budget: u64,
    pub dates: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct M0 {
    pub text: String,
    pub memory_ids: Vec<i64>,
    /// Tier number (1–5) → how many compartments render at it.
    pub tiers: BTreeMap<u8, usize>,
}

/// Re-render at most this many times, tightening, while the history slice is over budget.
const TIGHTEN_ATTEMPTS: usize = 3;

pub fn render_m0(inputs: &M0Inputs<'_>, count: &dyn Fn(&str) -> u64) -> M0 {
    let mut sections = Vec::new();
    if !inputs.docs.is_empty() {
        let files: Vec<String> = inputs
            .docs
            .iter()
            .map(|d| {
                format!(
                    "<file name=\"{}\">\n{}\n</file>",
                    d.name,
                    escape(&d.content)
                )
            })
            .collect();
        sections.push(format!(
            "<project-docs>\n{}\n</project-docs>",
            files.join("\n\n")
        ));
    }
    let profile = profile_lines(inputs.profile, PROFILE_BUDGET, count);
    if !profile.is_empty() {
        sections.push(format!(
            "<user-profile>\n{}\n</user-profile>",
            profile.join("\n")
        ));
    }
    let mut options = RenderOptions {
        budget_tokens: inputs.history_budget,
        pressure_multiplier: 1.0,
        dates: inputs.dates,
        utc_offset_minutes: 0,
    };
    let mut rendered = decay::render(inputs.compartments, &options, count);
    for _ in 1..TIGHTEN_ATTEMPTS {
        if (rendered.tokens as f64) <= inputs.history_budget as f64 * 1.05 {
            break;
        }
        options.pressure_multiplier *= 1.15;
        rendered = decay::render(inputs.compartments, &options, count);
    }
    let mut tiers = BTreeMap::new();
    for (_, tier) in &rendered.tiers {
        *tiers.entry(tier.number()).or_insert(0) += 1;
    }
    if rendered.text.is_empty() {
        sections.push(M0_EMPTY.to_string());
    } else {
        sections.push(format!(
            "<session-history>\n{}\n</session-history>",
            rendered.text
        ));
    }
    if let Some(block) = pinned_block(inputs.pinned) {
        sections.push(block);
    }
    let (memory_ids, memory_text) = memory_lines(inputs.memories, inputs.memory_budget, count);
    if !memory_text.is_empty() {
        sections.push(format!(
            "<project-memory>\n{memory_text}\n</project-memory>"
        ));
    }
    M0 {
        text: sections.join("\n\n"),
        memory_ids,
        tiers,
    }
}

/// What a harness's `SessionStart` hook is given of mc's record: the text
/// (empty when there is nothing to say) and what did not fit.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StartHead {
    pub text: String,
    /// Compartments rendered at some tier.
    pub compartments_shown: usize,
    /// Compartments left out (archived by age or to fit).
    pub compartments_left_out: usize,
    pub memories_shown: usize,
    pub memories_left_out: usize,
    pub profile_left_out: bool,
}

/// The tag a session-start head is wrapped in; a hook finds its own earlier
/// injections in a transcript by it.
pub const START_TAG: &str = "mc-history";

/// Length as JavaScript counts it (UTF-16 code units), the unit of Claude
/// Code's 10,000-character cap on `additionalContext`.
pub fn utf16_len(text: &str) -> usize {
    text.encode_utf16().count()
}

/// mc's head for a harness that cannot rewrite its messages (Claude Code,
/// Codex), injected by their `SessionStart` hook: the session's compartments
/// at their decay tiers, the project's memory and the user profile, rendered
/// by [`render_m0`] with budgets in UTF-16 units, wrapped in `<mc-history>`,
/// at most `limit` units. Nothing is cut mid-item: the decay curve archives
/// the oldest compartments and low-priority memories stay out until it fits,
/// and a closing line says what was left out. Empty when there is nothing
/// to render (no compartment, memory or profile line) or nothing fits.
pub fn render_session_start(
    compartments: &[Compartment],
    memories: &[Memory],
    profile: &[ProfileItem],
    dates: bool,
    limit: usize,
) -> StartHead {
    if compartments.is_empty() && memories.is_empty() && profile.is_empty() {
        return StartHead::default();
    }
    let count = |text: &str| utf16_len(text) as u64;
    const INTRO: &str = "mc's record of this session and project: history folded by mc's \
historian (older parts fade; ctx_expand and ctx_search reach the detail) and the project's \
memory. Context, not a request.";
    // The wrapper, the intro and the closing note (at most this long).
    const RESERVED: usize = 520;
    let room = limit.saturating_sub(RESERVED);
    let mut memory_budget = (room / 2) as u64;
    let mut history_budget = room as u64;
    let mut with_profile = true;
    for attempt in 0..8 {
        let shown_profile: &[ProfileItem] = if with_profile { profile } else { &[] };
        let m0 = render_m0(
            &M0Inputs {
                docs: &[],
                profile: shown_profile,
                compartments,
                memories,
                pinned: &[],
                history_budget: history_budget.max(1),
                memory_budget,
                dates,
            },
            &count,
        );
        let archived = m0.tiers.get(&5).copied().unwrap_or(0);
        let head = StartHead {
            text: String::new(),
            compartments_shown: compartments.len() - archived.min(compartments.len()),
            compartments_left_out: archived.min(compartments.len()),
            memories_shown: m0.memory_ids.len(),
            memories_left_out: memories.len().saturating_sub(m0.memory_ids.len()),
            profile_left_out: !with_profile && !profile.is_empty(),
        };
        let body = m0
            .text
            .split("\n\n")
            .filter(|section| *section != M0_EMPTY)
            .collect::<Vec<_>>()
            .join("\n\n");
        let mut text = format!("<{START_TAG}>\n{INTRO}");
        if !body.is_empty() {
            text.push_str("\n\n");
            text.push_str(&body);
        }
        let mut left = Vec::new();
        if head.compartments_left_out > 0 {
            left.push(format!(
                "{} older compartment(s) of this session",
                head.compartments_left_out
            ));
        }
        if head.memories_left_out > 0 {
            left.push(format!(
                "{} memory(ies) (ctx_memory list shows them)",
                head.memories_left_out
            ));
        }
        if head.profile_left_out {
            left.push("the user profile".to_string());
        }
        if !left.is_empty() {
            text.push_str(&format!(
                "\n\n(Not shown, to stay within {limit} characters: {}.)",
                left.join(", ")
            ));
        }
        text.push_str(&format!("\n</{START_TAG}>"));
        if utf16_len(&text) <= limit {
            if head.compartments_shown == 0 && head.memories_shown == 0 && shown_profile.is_empty()
            {
                return StartHead {
                    text: String::new(),
                    ..head
                };
            }
            return StartHead { text, ..head };
        }
        // Over: tighten what grows, the history first, then the memory, then
        // leave the profile out.
        let over = (utf16_len(&text) - limit) as u64 + 64;
        match attempt {
            0..=3 => history_budget = history_budget.saturating_sub(over.max(history_budget / 4)),
            4..=5 => memory_budget = memory_budget.saturating_sub(over.max(memory_budget / 3)),
            _ => with_profile = false,
        }
    }
    StartHead::default()
}

pub struct M1Inputs<'a> {
    /// Mutations of memories that m[0] renders, newest last.
    pub updates: &'a [MemoryMutation],
    pub new_compartments: &'a [Compartment],
    pub new_memories: &'a [Memory],
    pub new_profile: &'a [ProfileItem],
    pub pinned: &'a [PinnedText],
    pub memory_budget: u64,
    pub dates: bool,
}

pub fn render_m1(inputs: &M1Inputs<'_>, count: &dyn Fn(&str) -> u64) -> String {
    let mut blocks = Vec::new();
    if !inputs.updates.is_empty() {
        // The newest mutation of a memory wins.
        let mut latest: BTreeMap<i64, &MemoryMutation> = BTreeMap::new();
        for m in inputs.updates {
            latest.insert(m.memory, m);
        }
        let mut lines = vec![
            "These memories changed after the snapshot above; these versions win:".to_string(),
        ];
        for m in latest.values() {
            lines.push(match (m.kind.as_str(), m.superseded_by) {
                ("superseded", Some(by)) => {
                    format!("  <superseded id=\"{}\" by=\"{by}\"/>", m.memory)
                }
                ("update", _) => format!(
                    "  <updated id=\"{}\">{}</updated>",
                    m.memory,
                    escape(m.content.as_deref().unwrap_or_default())
                ),
                _ => format!("  <removed id=\"{}\"/>", m.memory),
            });
        }
        blocks.push(format!(
            "<memory-updates>\n{}\n</memory-updates>",
            lines.join("\n")
        ));
    }
    if !inputs.new_compartments.is_empty() {
        let options = RenderOptions {
            budget_tokens: u64::MAX,
            pressure_multiplier: 1.0,
            dates: inputs.dates,
            utc_offset_minutes: 0,
        };
        let rendered: Vec<String> = inputs
            .new_compartments
            .iter()
            .map(|c| decay::render_one(c, Tier::P1, &options))
            .collect();
        blocks.push(format!(
            "<new-compartments>\n{}\n</new-compartments>",
            rendered.join("\n\n")
        ));
    }
    if let Some(block) = pinned_block(inputs.pinned) {
        blocks.push(block);
    }
    let (_, memory_text) = memory_lines(inputs.new_memories, inputs.memory_budget / 4, count);
    if !memory_text.is_empty() {
        blocks.push(format!("<new-memories>\n{memory_text}\n</new-memories>"));
    }
    let profile = profile_lines(inputs.new_profile, PROFILE_BUDGET / 4, count);
    if !profile.is_empty() {
        blocks.push(format!(
            "<new-user-profile>\n{}\n</new-user-profile>",
            profile.join("\n")
        ));
    }
    if blocks.is_empty() {
        return M1_PLACEHOLDER.to_string();
    }
    format!(
        "<session-history-since>\n{}\n</session-history-since>",
        blocks.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compartment(sequence: i64) -> Compartment {
        Compartment {
            sequence,
            start_ordinal: sequence * 10,
            end_ordinal: sequence * 10 + 9,
            start_ms: None,
            end_ms: None,
            title: format!("Work item {sequence}"),
            tiers: [
                format!("{sequence}: {}", "verbose account of the work. ".repeat(30)),
                format!("{sequence}: {}", "shorter account. ".repeat(12)),
                format!("{sequence}: a few lines of it."),
                format!("{sequence}: one line."),
            ],
            importance: 50,
        }
    }

    fn memory(id: i64) -> Memory {
        Memory {
            id,
            category: "CONSTRAINTS".into(),
            content: format!(
                "Memory {id}: {}",
                "a durable fact about the project. ".repeat(4)
            ),
            status: "active".into(),
            importance: None,
        }
    }

    #[test]
    fn the_session_start_record_fits_whole_items_and_says_what_it_left_out() {
        let compartments: Vec<Compartment> = (1..=60).map(compartment).collect();
        let memories: Vec<Memory> = (1..=120).map(memory).collect();
        let head = render_session_start(&compartments, &memories, &[], false, 10_000);
        assert!(utf16_len(&head.text) <= 10_000, "{}", utf16_len(&head.text));
        assert!(head.text.starts_with("<mc-history>") && head.text.ends_with("</mc-history>"));
        assert!(
            head.compartments_shown > 0 && head.memories_shown > 0,
            "{head:?}"
        );
        assert!(head.compartments_left_out > 0 && head.memories_left_out > 0);
        assert!(
            head.text.contains(&format!(
                "{} older compartment(s) of this session",
                head.compartments_left_out
            )),
            "{}",
            head.text
        );
        // Every memory is there whole or not at all.
        for m in &memories {
            let line = format!("#{}: {}", m.id, escape(&m.content));
            let head_of_line = format!("#{}: Memory {}:", m.id, m.id);
            assert_eq!(
                head.text.contains(&head_of_line),
                head.text.contains(&line),
                "memory {} was cut",
                m.id
            );
        }
        // The newest compartment is the most vivid.
        assert!(head.text.contains("Work item 60"));
        // Small enough: everything, nothing said about leaving out.
        let small = render_session_start(&compartments[..2], &memories[..2], &[], false, 10_000);
        assert!(!small.text.contains("Not shown"), "{}", small.text);
        assert_eq!(
            (small.compartments_left_out, small.memories_left_out),
            (0, 0)
        );
        // Nothing to say: nothing at all.
        assert_eq!(
            render_session_start(&[], &[], &[], false, 10_000),
            StartHead::default()
        );
    }
}

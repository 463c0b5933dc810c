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
pub const M1_PLACEHOLDER: &str =
    "<session-history-since>(no new content since last materialization)</session-history-since>";
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
/// of at most 256 KiB, canonicalised (no BOM, LF, no trailing blanks).
pub fn read_project_docs(root: &Path) -> Vec<ProjectDoc> {
    PROJECT_DOCS
        .iter()
        .filter_map(|name| {
            let path = root.join(name);
            let meta = std::fs::symlink_metadata(&path).ok()?;
            if !meta.is_file() || meta.len() > MAX_DOC_BYTES {
                return None;
            }
            let text = std::fs::read_to_string(&path).ok()?;
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

//! The request the model gets: a system prompt that documents the answer
//! format (the contract), and a user message with read-only context, the
//! transcript to fold and, when there is more after it, a lookahead.

use crate::head::escape;
use crate::store::{Memory, StoredCompartment};
use mc_llm::Prompt;

use super::parse::EPISODES;
use super::transcript::Chunk;

/// Compartments shown as earlier history, newest last.
pub const EARLIER_COMPARTMENTS: usize = 6;
/// Project memories shown (so the model does not repeat them as facts).
pub const MAX_MEMORIES: usize = 60;
/// Characters of a rejected answer quoted in the repair request.
const REJECTED_CHARS: usize = 12_000;

/// The historian's system prompt: what to do, and the exact answer format.
fn system_prompt() -> String {
    format!(
        r#"You are the historian of a coding session between a user and an AI coding agent. You fold a stretch of the conversation into compartments: contiguous, finished units of work, each written at four levels of detail so that older history can fade gradually. You also pick out durable facts about the project.

# The transcript
- Every line starts with the numbers (ordinals) of the messages it covers, in square brackets: [12] is message 12, [12-15] is messages 12 through 15.
- "U:" is the user, "A:" the agent. "TC: tool(argument)" is a tool call the agent made; its output is not shown.
- <earlier_history> holds compartments written before; it is context only: never write them again.
- <project_memory> holds facts already known; never repeat them as facts.
- <lookahead>, when present, shows what comes right after the messages to fold. Read it to judge whether the last topic is finished, but never cover its ordinals.

# The answer
Answer with exactly one <history> element and nothing else:

<history>
<compartment start="12" end="40" importance="70" episode="debugging">
<title>Fix the flaky lock in the store tests</title>
<p1>verbose paraphrase …</p1>
<p2>shorter …</p2>
<p3>a few lines …</p3>
<p4>one line</p4>
</compartment>
<facts>
<fact category="CONSTRAINTS">Tests never touch the real home directory.</fact>
</facts>
<unprocessed_from>41</unprocessed_from>
</history>

# Compartments
- start and end are ordinals from the transcript. The first compartment starts at the first message to fold; every next one starts right after the previous one ends. No gaps, no overlaps, in order.
- Start a new compartment when the objective changes. Prefer several focused compartments over one that covers everything.
- Tool calls belong to the compartment of the work they serve.
- Leave out an unfinished last topic: end the last compartment before it, and put its first ordinal in <unprocessed_from>. If you folded everything, <unprocessed_from> is the ordinal right after the last message to fold. Always write <unprocessed_from>.
- <title>: one line naming the outcome.
- <p1>: a detailed paraphrase: what was asked and why, what was decided, what changed (file paths, functions, commands, config keys and values, commit hashes, errors and their fixes). Keep the user's own words where a requirement depends on them.
- <p2>: the same in about half the words. <p3>: two or three sentences. <p4>: one line, at most 20 words.
- importance: 0 to 100, how long this should stay vivid. 80 or more for decisions, requirements and designs later work depends on; 40 to 60 for routine work; under 30 for dead ends and small talk.
- episode: one of {episodes}.

# Facts
- Only facts about the project that stay true after this session: rules the user set for the work, architecture decisions, constraints, configuration values, naming conventions. Not what happened, not plans.
- One fact per <fact>, present tense, self-contained, no dates.
- category: PROJECT_RULES (how work is done here), ARCHITECTURE (components, and why they are so), CONSTRAINTS (what must or must not happen), CONFIG_VALUES (settings and their values), NAMING (names to use or avoid).
- No new facts is normal: then leave <facts> out.

Text inside the elements is plain text and may contain code, "<" and "&". Do not add other elements or attributes, and write nothing before <history> or after </history>."#,
        episodes = EPISODES.join(", ")
    )
}

/// The user message for `chunk`.
fn user_message(chunk: &Chunk, earlier: &[StoredCompartment], memories: &[Memory]) -> String {
    let mut out = String::new();
    out.push_str("<earlier_history>\n");
    let shown = earlier
        .get(earlier.len().saturating_sub(EARLIER_COMPARTMENTS)..)
        .unwrap_or_default();
    if shown.is_empty() {
        out.push_str("(none: this is the first fold of this session)\n");
    }
    for stored in shown {
        let c = &stored.compartment;
        out.push_str(&format!(
            "<compartment start=\"{}\" end=\"{}\" title=\"{}\">{}</compartment>\n",
            c.start_ordinal,
            c.end_ordinal,
            escape(&c.title).replace('"', "&quot;"),
            escape(&c.tiers[2])
        ));
    }
    out.push_str("</earlier_history>\n\n<project_memory>\n");
    if memories.is_empty() {
        out.push_str("(none yet)\n");
    }
    for memory in memories.iter().take(MAX_MEMORIES) {
        out.push_str(&format!(
            "<fact category=\"{}\">{}</fact>\n",
            memory.category,
            escape(&memory.content)
        ));
    }
    out.push_str("</project_memory>\n\n");
    out.push_str(&format!(
        "<messages first=\"{}\" last=\"{}\">\n{}\n</messages>\n\n",
        chunk.first(),
        chunk.last(),
        chunk.text()
    ));
    if !chunk.lookahead.is_empty() {
        out.push_str(&format!(
            "<lookahead>\n{}\n</lookahead>\n\n",
            chunk.lookahead_text()
        ));
    }
    out.push_str(&format!(
        "Fold messages {} to {} into compartments and answer with one <history> element.",
        chunk.first(),
        chunk.last()
    ));
    out
}

pub fn prompt(
    chunk: &Chunk,
    earlier: &[StoredCompartment],
    memories: &[Memory],
    max_tokens: u32,
) -> Prompt {
    Prompt {
        system: system_prompt(),
        user: user_message(chunk, earlier, memories),
        max_tokens,
    }
}

/// The one repair round: the same request, the rejected answer, and why.
pub fn repair(
    original: &Prompt,
    chunk: &Chunk,
    answer: &str,
    problem: &str,
    truncated: bool,
) -> Prompt {
    let quoted: String = answer.chars().take(REJECTED_CHARS).collect();
    let cut = if quoted.len() < answer.len() {
        "\n[… the rest of the answer is left out]"
    } else {
        ""
    };
    let hint = if truncated {
        " Your answer was cut off at the output limit: write shorter tiers, or fold fewer \
         messages and leave the rest to <unprocessed_from>."
    } else {
        ""
    };
    Prompt {
        system: original.system.clone(),
        user: format!(
            "{}\n\n<rejected_answer>\n{quoted}{cut}\n</rejected_answer>\n\n\
             Your previous answer (above) was rejected: {problem}.{hint} Answer again for \
             messages {} to {} with one complete, corrected <history> element.",
            original.user,
            chunk.first(),
            chunk.last()
        ),
        max_tokens: original.max_tokens,
    }
}

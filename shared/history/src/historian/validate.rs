//! Checking a parsed answer against the chunk it answers.
//!
//! Compartments must be in order, must not overlap, must stay inside the
//! chunk, and must cover it without gaps from its first message up to
//! `unprocessed_from`, the first message left for a later run. A gap made
//! only of tool calls (and messages with nothing to show), at most
//! [`MAX_HEALED_GAP`] messages long, heals: the compartment before it (or
//! after it, at the start) is stretched over it. Ordinals missing from the
//! session (messages the harness no longer sends) are no gap.
//!
//! The last compartment is held back when it reaches the end of a chunk the
//! model saw nothing after (no lookahead): whether its topic was finished is
//! unknown, so the next run reads it again, with what follows. Never the only
//! compartment (a run must make progress), never in the emergency band.

use std::collections::BTreeSet;

use super::parse::{Answer, RawCompartment, RawFact};

/// The longest tool-only gap that heals.
pub const MAX_HEALED_GAP: usize = 15;

/// What validation needs to know about the chunk.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkView {
    /// Every ordinal of the chunk, ascending.
    pub ordinals: Vec<i64>,
    /// Ordinals in tool-only blocks or with nothing to show.
    pub tool_only: BTreeSet<i64>,
    /// The first ordinal shown after the chunk (lookahead), if any.
    pub next_shown: Option<i64>,
    /// Whether the last compartment may be held back (no lookahead, not an emergency).
    pub hold_back: bool,
}

impl ChunkView {
    /// Chunk ordinals within `[from, to]`.
    fn within(&self, from: i64, to: i64) -> &[i64] {
        let lo = self.ordinals.partition_point(|&o| o < from);
        let hi = self.ordinals.partition_point(|&o| o <= to);
        self.ordinals.get(lo..hi.max(lo)).unwrap_or_default()
    }

    fn heals(&self, gap: &[i64]) -> bool {
        gap.len() <= MAX_HEALED_GAP && gap.iter().all(|o| self.tool_only.contains(o))
    }
}

/// A compartment ready to publish: its range snapped to real messages.
#[derive(Debug, Clone, PartialEq)]
pub struct Folded {
    pub start: i64,
    pub end: i64,
    pub importance: i64,
    pub episode: String,
    pub title: String,
    pub tiers: [String; 4],
}

#[derive(Debug, Clone, PartialEq)]
pub struct Validated {
    pub compartments: Vec<Folded>,
    pub facts: Vec<RawFact>,
    /// The compartment held back at the chunk edge, if any.
    pub held_back: Option<Folded>,
    /// Gaps healed, as (first, last) ordinals.
    pub healed: Vec<(i64, i64)>,
}

fn span(gap: &[i64]) -> String {
    match gap {
        [one] => format!("message {one}"),
        [first, .., last] => format!("messages {first}-{last}"),
        [] => "nothing".into(),
    }
}

pub fn validate(answer: Answer, view: &ChunkView) -> Result<Validated, String> {
    let (Some(&first), Some(&last)) = (view.ordinals.first(), view.ordinals.last()) else {
        return Err("the chunk to fold has no messages".into());
    };
    if answer.compartments.is_empty() {
        return Err(format!(
            "no compartments: fold at least the first finished piece of work of messages \
             {first}-{last} (an unfinished trailing topic goes to <unprocessed_from>)"
        ));
    }
    // Shape first: each range sane and inside the chunk, all in order.
    let mut previous: Option<(i64, i64)> = None;
    for c in &answer.compartments {
        let name = format!("compartment {}-{}", c.start, c.end);
        if c.start > c.end {
            return Err(format!("{name}: start is after end"));
        }
        if c.start < first || c.end > last {
            return Err(format!(
                "{name} reaches outside the messages to fold ({first}-{last})"
            ));
        }
        if let Some((s, e)) = previous
            && c.start <= e
        {
            return Err(if c.start < s {
                format!("compartments are out of order: {name} comes after {s}-{e}")
            } else {
                format!("{name} overlaps compartment {s}-{e}")
            });
        }
        previous = Some((c.start, c.end));
    }
    let mut folded: Vec<Folded> = Vec::with_capacity(answer.compartments.len());
    let mut healed = Vec::new();
    // The first chunk ordinal not yet covered.
    let mut expected = Some(first);
    for raw in answer.compartments {
        let RawCompartment {
            start,
            end,
            importance,
            episode,
            title,
            tiers,
        } = raw;
        let name = format!("compartment {start}-{end}");
        let covered = view.within(start, end);
        let (Some(&cover_first), Some(&cover_last)) = (covered.first(), covered.last()) else {
            return Err(format!("{name} covers no message"));
        };
        // The shape checks make this impossible (a compartment after the last
        // message would start after its own end); never panic on an answer.
        let Some(from) = expected else {
            return Err(format!("{name} comes after every message is covered"));
        };
        let gap = view.within(from, cover_first - 1);
        let mut start = cover_first;
        if let (Some(&gap_first), Some(&gap_last)) = (gap.first(), gap.last()) {
            if !view.heals(gap) {
                return Err(format!(
                    "{} {} in no compartment: each compartment must start right after the \
                     previous one ends (the first at {first})",
                    span(gap),
                    if gap.len() == 1 { "is" } else { "are" }
                ));
            }
            healed.push((gap_first, gap_last));
            match folded.last_mut() {
                Some(prev) => prev.end = gap_last,
                None => start = gap_first,
            }
        }
        folded.push(Folded {
            start,
            end: cover_last,
            importance,
            episode,
            title,
            tiers,
        });
        expected = view.within(cover_last + 1, last).first().copied();
    }
    // What the model left for later must start right where coverage stops.
    let u = answer.unprocessed_from;
    // Every compartment was folded or returned an error, and there is one.
    let Some(last_end) = folded.last().map(|c| c.end) else {
        return Err("no compartments".into());
    };
    match expected {
        None => {
            let allowed_to = view.next_shown.unwrap_or(last + 1).max(last + 1);
            if u <= last || u > allowed_to {
                return Err(format!(
                    "<unprocessed_from> is {u}, but the compartments cover every message \
                     through {last}, so it must be {}",
                    last + 1
                ));
            }
        }
        Some(next) => {
            if u <= last_end {
                return Err(format!(
                    "<unprocessed_from> {u} lies inside the compartments (they end at {last_end}); \
                     it must be the first message left out, {next}"
                ));
            }
            let gap = view.within(next, u - 1);
            if let (Some(&gap_first), Some(&gap_last)) = (gap.first(), gap.last()) {
                if !view.heals(gap) {
                    return Err(format!(
                        "{} {} in no compartment and before <unprocessed_from> {u}: \
                         <unprocessed_from> must be {next}",
                        span(gap),
                        if gap.len() == 1 { "is" } else { "are" }
                    ));
                }
                healed.push((gap_first, gap_last));
                if let Some(prev) = folded.last_mut() {
                    prev.end = gap_last;
                }
            }
        }
    }
    let held_back =
        if view.hold_back && folded.len() >= 2 && folded.last().is_some_and(|c| c.end == last) {
            folded.pop()
        } else {
            None
        };
    Ok(Validated {
        compartments: folded,
        facts: answer.facts,
        held_back,
        healed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(start: i64, end: i64) -> RawCompartment {
        RawCompartment {
            start,
            end,
            importance: 50,
            episode: "feature".into(),
            title: format!("t{start}"),
            tiers: ["a".into(), "b".into(), "c".into(), "d".into()],
        }
    }

    fn answer(ranges: &[(i64, i64)], u: i64) -> Answer {
        Answer {
            compartments: ranges.iter().map(|&(s, e)| raw(s, e)).collect(),
            facts: Vec::new(),
            unprocessed_from: u,
        }
    }

    fn view(ordinals: impl IntoIterator<Item = i64>, tool_only: &[i64]) -> ChunkView {
        ChunkView {
            ordinals: ordinals.into_iter().collect(),
            tool_only: tool_only.iter().copied().collect(),
            next_shown: None,
            hold_back: false,
        }
    }

    fn ranges(v: &Validated) -> Vec<(i64, i64)> {
        v.compartments.iter().map(|c| (c.start, c.end)).collect()
    }

    #[test]
    fn an_empty_chunk_is_an_error_not_a_panic() {
        let err = validate(answer(&[(1, 2)], 3), &view([], &[])).unwrap_err();
        assert_eq!(err, "the chunk to fold has no messages");
    }

    #[test]
    fn contiguous_answers_pass() {
        let v = validate(answer(&[(10, 14), (15, 20)], 21), &view(10..=20, &[])).unwrap();
        assert_eq!(ranges(&v), [(10, 14), (15, 20)]);
        // Stopping early is fine when unprocessed_from says where.
        let v = validate(answer(&[(10, 14)], 15), &view(10..=20, &[])).unwrap();
        assert_eq!(ranges(&v), [(10, 14)]);
        // Ordinals the session no longer has are no gap: 13 and 14 are missing.
        let ords = [10, 11, 12, 15, 16];
        let v = validate(answer(&[(10, 13), (14, 16)], 17), &view(ords, &[])).unwrap();
        assert_eq!(
            ranges(&v),
            [(10, 12), (15, 16)],
            "ranges snap to real messages"
        );
    }

    #[test]
    fn the_validation_matrix() {
        let v = view(10..=20, &[]);
        type Case<'a> = (&'a [(i64, i64)], i64, &'a str);
        let cases: &[Case] = &[
            (&[], 10, "no compartments"),
            (&[(10, 14), (14, 20)], 21, "overlaps compartment 10-14"),
            (&[(15, 20), (10, 14)], 21, "out of order"),
            (&[(10, 14), (16, 20)], 21, "message 15 is in no compartment"),
            (&[(11, 20)], 21, "message 10 is in no compartment"),
            (&[(10, 21)], 22, "reaches outside"),
            (&[(5, 12)], 13, "reaches outside"),
            (&[(14, 12)], 15, "start is after end"),
            (&[(10, 20)], 20, "must be 21"),
            (&[(10, 20)], 30, "must be 21"),
            (&[(10, 14)], 14, "lies inside"),
            (
                &[(10, 14)],
                18,
                "messages 15-17 are in no compartment and before",
            ),
        ];
        for (ranges, u, expected) in cases {
            let err = validate(answer(ranges, *u), &v).expect_err(expected);
            assert!(err.contains(expected), "{ranges:?}/{u}: {err}");
        }
    }

    #[test]
    fn small_tool_only_gaps_heal() {
        // 15 and 16 are tool-only: the gap heals into the first compartment.
        let v = validate(answer(&[(10, 14), (17, 20)], 21), &view(10..=20, &[15, 16])).unwrap();
        assert_eq!(ranges(&v), [(10, 16), (17, 20)]);
        assert_eq!(v.healed, [(15, 16)]);
        // A leading tool-only gap stretches the first compartment back.
        let v = validate(answer(&[(12, 20)], 21), &view(10..=20, &[10, 11])).unwrap();
        assert_eq!(ranges(&v), [(10, 20)]);
        // A tool-only remainder before unprocessed_from joins the last one.
        let v = validate(answer(&[(10, 18)], 21), &view(10..=20, &[19, 20])).unwrap();
        assert_eq!(ranges(&v), [(10, 20)]);
        // A gap with narrative in it does not heal…
        let err = validate(answer(&[(10, 14), (17, 20)], 21), &view(10..=20, &[15])).unwrap_err();
        assert!(err.contains("messages 15-16"), "{err}");
        // …and neither does a long tool-only one.
        let tools: Vec<i64> = (11..=30).collect();
        let err = validate(answer(&[(10, 10), (31, 40)], 41), &view(10..=40, &tools)).unwrap_err();
        assert!(err.contains("messages 11-30"), "{err}");
        let tools: Vec<i64> = (11..=25).collect();
        let v = validate(answer(&[(10, 10), (26, 40)], 41), &view(10..=40, &tools)).unwrap();
        assert_eq!(
            ranges(&v),
            [(10, 25), (26, 40)],
            "exactly {MAX_HEALED_GAP} heals"
        );
    }

    #[test]
    fn unprocessed_from_may_name_the_lookahead() {
        let mut v = view(10..=20, &[]);
        v.next_shown = Some(23);
        assert!(validate(answer(&[(10, 20)], 21), &v).is_ok());
        assert!(validate(answer(&[(10, 20)], 23), &v).is_ok());
        assert!(validate(answer(&[(10, 20)], 24), &v).is_err());
    }

    #[test]
    fn hold_back_at_the_edge_without_lookahead() {
        let mut v = view(10..=20, &[]);
        v.hold_back = true;
        let out = validate(answer(&[(10, 14), (15, 20)], 21), &v).unwrap();
        assert_eq!(ranges(&out), [(10, 14)]);
        assert_eq!(
            out.held_back.as_ref().map(|c| (c.start, c.end)),
            Some((15, 20))
        );
        // The only compartment is never held back: a run must make progress.
        let out = validate(answer(&[(10, 20)], 21), &v).unwrap();
        assert_eq!(ranges(&out), [(10, 20)]);
        assert_eq!(out.held_back, None);
        // Not at the edge: nothing to hold back.
        let out = validate(answer(&[(10, 14), (15, 18)], 19), &v).unwrap();
        assert_eq!(out.compartments.len(), 2);
        // With lookahead (or in an emergency) the caller turns hold-back off.
        v.hold_back = false;
        let out = validate(answer(&[(10, 14), (15, 20)], 21), &v).unwrap();
        assert_eq!(out.compartments.len(), 2);
    }
}

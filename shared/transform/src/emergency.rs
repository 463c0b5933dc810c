//! The tiered emergency drop: at or above the force band, evict tool outputs
//! until the prompt is back to a target well under the threshold. Pure
//! selection; the pass applies it with the ordinary drop primitives.

/// A droppable tool tag (closed, visible, outside the protected window).
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub number: i64,
    pub tool_name: Option<String>,
    /// Tokens dropping it gives back (bytes of output and input / 4).
    pub reclaim: u64,
}

/// Drop nothing unless at least this much must go.
pub const MIN_RECLAIM: u64 = 2_000;
/// Drop nothing unless the picked tags give back at least this much: a
/// smaller drop changes cached bytes (a bust) for almost no room.
pub const MIN_SAVING: u64 = 2_000;
const RESERVE_SHARE: f64 = 0.20;

/// 1 = keep longest (navigation), 2 = edits and searches, 3 = drop first.
pub fn tier(tool_name: Option<&str>) -> u8 {
    let name = tool_name.unwrap_or_default().to_ascii_lowercase();
    let name = name.strip_prefix("mcp_").unwrap_or(&name);
    match name {
        "read" | "todowrite" | "task" | "aft_outline" | "aft_zoom" => 1,
        "edit" | "write" | "apply_patch" | "grep" | "glob" | "aft_search" => 2,
        _ => 3,
    }
}

/// How many tokens must go: `current − (floor + 0.30 × (ceiling − floor))`
/// where the floor is what isn't tagged content (system, tools, head).
pub fn reclaim_needed(current: u64, tagged_tokens: u64, ceiling: u64) -> u64 {
    let floor = current.saturating_sub(tagged_tokens);
    let target = floor as f64 + 0.30 * ceiling.saturating_sub(floor) as f64;
    let need = (current as f64 - target).round();
    if need <= MIN_RECLAIM as f64 {
        0
    } else {
        need as u64
    }
}

/// Pick tags to drop: tier 3 first, then 2, then 1, oldest first inside a
/// tier, never the newest 20 % of tier 1 or tier 2, until `needed` is covered.
/// Nothing when all of that together gives back under `min_saving`
/// ([`MIN_SAVING`], or 0 after an overflow: that request fails anyway).
pub fn plan(candidates: &[Candidate], needed: u64, min_saving: u64) -> Vec<i64> {
    plan_with(candidates, needed, min_saving, Reserve::Newest)
}

/// Whether a drop keeps the newest 20 % of tier 1 and tier 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserve {
    /// The force band, the emergency band, an overflow: keep them.
    Newest,
    /// Relief on a pass that busts anyway: the protected window is reserve
    /// enough, and every tag it keeps on the wire is re-sent uncached after
    /// the bust and brings the next threshold nearer.
    None,
}

/// The lowest tag number of the protected window relief keeps: of the
/// protected tool outputs `(number, tokens)`, the newest always, then older
/// ones while they all fit `budget`; the first that does not, and all
/// older, may go. `None` when there are none.
pub fn relief_floor(protected: &[(i64, u64)], budget: u64) -> Option<i64> {
    let mut newest_first = protected.to_vec();
    newest_first.sort_unstable_by_key(|&(number, _)| std::cmp::Reverse(number));
    let (&(newest, first), older) = newest_first.split_first()?;
    let mut floor = newest;
    let mut kept = first;
    for &(number, tokens) in older {
        kept = kept.saturating_add(tokens);
        if kept > budget {
            break;
        }
        floor = number;
    }
    Some(floor)
}

/// [`plan`] with the given [`Reserve`].
pub fn plan_with(
    candidates: &[Candidate],
    needed: u64,
    min_saving: u64,
    keep: Reserve,
) -> Vec<i64> {
    if needed == 0 {
        return Vec::new();
    }
    let mut picked = Vec::new();
    let mut reclaimed = 0;
    for t in [3u8, 2, 1] {
        let mut in_tier: Vec<&Candidate> = candidates
            .iter()
            .filter(|c| tier(c.tool_name.as_deref()) == t)
            .collect();
        in_tier.sort_by_key(|c| c.number);
        let reserve = if t == 3 || keep == Reserve::None {
            0
        } else {
            (in_tier.len() as f64 * RESERVE_SHARE).ceil() as usize
        };
        let evictable = in_tier.len() - reserve;
        for c in in_tier.iter().take(evictable) {
            if reclaimed >= needed {
                break;
            }
            picked.push(c.number);
            reclaimed += c.reclaim;
        }
    }
    if reclaimed < min_saving {
        return Vec::new();
    }
    picked.sort_unstable();
    picked
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(number: i64, name: &str, reclaim: u64) -> Candidate {
        Candidate {
            number,
            tool_name: Some(name.into()),
            reclaim,
        }
    }

    #[test]
    fn tiers_normalise_names() {
        assert_eq!(tier(Some("mcp_Read")), 1);
        assert_eq!(tier(Some("grep")), 2);
        assert_eq!(tier(Some("bash")), 3);
        assert_eq!(tier(None), 3);
    }

    #[test]
    fn worked_example_of_the_target() {
        // limit 150,000 at threshold 65: ceiling 97,500; 130,000 in use, 100,000 tagged.
        assert_eq!(reclaim_needed(130_000, 100_000, 97_500), 79_750);
        assert_eq!(
            reclaim_needed(30_000, 20_000, 97_500),
            0,
            "already under target"
        );
        assert_eq!(
            reclaim_needed(36_000, 28_000, 97_500),
            0,
            "within the minimum worth dropping"
        );
    }

    #[test]
    fn misc_goes_first_then_edits_then_reads_with_a_reserve() {
        let candidates = vec![
            c(1, "read", 1000),
            c(2, "read", 1000),
            c(3, "read", 1000),
            c(4, "read", 1000),
            c(5, "read", 1000),
            c(6, "grep", 1000),
            c(7, "bash", 1000),
            c(8, "bash", 1000),
        ];
        assert_eq!(plan(&candidates, 1500, MIN_SAVING), vec![7, 8]);
        // Tier 2 has one tag: its 20 % reserve (rounded up) keeps it, so reads go next.
        assert_eq!(plan(&candidates, 2500, MIN_SAVING), vec![1, 7, 8]);
        assert_eq!(plan(&candidates, 3500, MIN_SAVING), vec![1, 2, 7, 8]);
        // Everything needed: the newest read (20 % of 5) and the lone grep stay.
        assert_eq!(
            plan(&candidates, 100_000, MIN_SAVING),
            vec![1, 2, 3, 4, 7, 8]
        );
        assert!(plan(&candidates, 0, MIN_SAVING).is_empty());
    }

    #[test]
    fn relief_goes_without_the_reserve_and_the_emergency_keeps_it() {
        let reads: Vec<Candidate> = (1..=10).map(|n| c(n, "read", 1000)).collect();
        let all: Vec<i64> = (1..=10).collect();
        // The emergency keeps the newest two reads (20 % of 10) on the wire.
        assert_eq!(plan(&reads, 100_000, MIN_SAVING), all[..8].to_vec());
        // Relief reclaims them too: 2,000 tokens more headroom before the
        // next threshold, and 2,000 fewer re-sent after this bust.
        assert_eq!(plan_with(&reads, 100_000, MIN_SAVING, Reserve::None), all);
        // Still oldest first, and no more than is needed.
        assert_eq!(
            plan_with(&reads, 2_500, MIN_SAVING, Reserve::None),
            vec![1, 2, 3]
        );
    }

    #[test]
    fn relief_keeps_the_newest_protected_outputs_that_fit_the_budget() {
        // Ten protected reads of 2,500 tokens (five turns of 10 KB), budget
        // 6,000: the newest two stay, the third would not fit.
        let reads: Vec<(i64, u64)> = (1..=10).map(|n| (n * 4, 2_500)).collect();
        assert_eq!(relief_floor(&reads, 6_000), Some(36));
        // Order of the input does not matter.
        let mut shuffled = reads.clone();
        shuffled.reverse();
        assert_eq!(relief_floor(&shuffled, 6_000), Some(36));
        // A budget they all fit keeps the whole window.
        assert_eq!(relief_floor(&reads, 25_000), Some(4));
        // The newest stays whatever its size, and a large one in the middle
        // ends the window even if smaller older ones would fit.
        assert_eq!(relief_floor(&[(9, 50_000), (5, 10)], 6_000), Some(9));
        assert_eq!(
            relief_floor(&[(9, 1_000), (7, 9_000), (5, 10)], 6_000),
            Some(9)
        );
        assert_eq!(relief_floor(&[], 6_000), None);
    }

    #[test]
    fn a_drop_that_would_give_back_under_the_minimum_is_skipped() {
        // 5,000 tokens are needed, but the droppable outputs hold 1,900.
        let small = vec![c(1, "bash", 900), c(2, "bash", 600), c(3, "bash", 400)];
        assert!(plan(&small, 5_000, MIN_SAVING).is_empty());
        // At the minimum exactly, the drop goes ahead.
        let enough = vec![c(1, "bash", 1_000), c(2, "bash", 1_000)];
        assert_eq!(plan(&enough, 5_000, MIN_SAVING), vec![1, 2]);
        // After an overflow any saving counts.
        assert_eq!(plan(&small, 5_000, 0), vec![1, 2, 3]);
    }
}

//! Reasoning by budget: beside the age rule, only the newest
//! `transform.keep_reasoning_tokens` of reasoning stay. Pure: the pass moves
//! the session's reasoning watermark to what this returns, and the render
//! clears by the watermark, so a defer pass replays the same bytes.

use mc_base::codec::{Message, PartKind, Role};

/// Tokens of a message's reasoning, at 4 bytes a token (no tokenizer on
/// old content: the invariant that no pass re-tokenizes it).
fn reasoning_tokens(message: &Message) -> u64 {
    let bytes: usize = message
        .parts
        .iter()
        .filter(|p| p.kind == PartKind::Reasoning)
        .map(|p| p.text().map_or(0, str::len))
        .sum();
    (bytes as u64).div_ceil(4)
}

/// The reasoning watermark the budget asks for: the age (per message, as
/// `render::age_tags` gives it) of the newest message whose reasoning lies
/// beyond the newest `budget` tokens of reasoning, walking back from the
/// newest message; 0 when all of it fits. The current turn (from the last
/// user message on) counts towards the budget but is never cleared: a
/// provider wants the thinking of the turn it is in.
pub fn budget_watermark(messages: &[Message], ages: &[i64], budget: u32) -> i64 {
    let last_user = messages.iter().rposition(|m| m.role() == Role::User);
    // Anything at or above the current turn's age would clear it too.
    let ceiling = last_user
        .and_then(|i| ages.get(i))
        .map_or(i64::MAX, |age| age - 1);
    let mut kept = 0u64;
    for (index, message) in messages.iter().enumerate().rev() {
        let tokens = reasoning_tokens(message);
        if tokens == 0 {
            continue;
        }
        kept += tokens;
        let in_turn = last_user.is_none_or(|u| index > u);
        if kept > u64::from(budget) && !in_turn {
            let age = ages.get(index).copied().unwrap_or(0);
            return age.min(ceiling).max(0);
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(role: &str, reasoning: usize) -> Message {
        let mut parts = vec![json!({"type": "text", "text": "t"})];
        if reasoning > 0 {
            parts.insert(
                0,
                json!({"type": "reasoning", "text": "r".repeat(reasoning)}),
            );
        }
        Message::decode(json!({"info": {"id": "m", "role": role}, "parts": parts})).unwrap()
    }

    #[test]
    fn the_newest_reasoning_within_the_budget_stays() {
        // user, assistant (400 tokens), user, assistant (400), user, assistant (400, this turn).
        let messages = vec![
            message("user", 0),
            message("assistant", 1600),
            message("user", 0),
            message("assistant", 1600),
            message("user", 0),
            message("assistant", 1600),
        ];
        let ages = [1, 2, 3, 4, 5, 6];
        assert_eq!(budget_watermark(&messages, &ages, 10_000), 0, "all fits");
        // 800 tokens: this turn and the one before fit; the oldest goes.
        assert_eq!(budget_watermark(&messages, &ages, 800), 2);
        assert_eq!(budget_watermark(&messages, &ages, 799), 4);
        // The current turn alone is over budget: everything before it goes,
        // never the turn itself.
        assert_eq!(budget_watermark(&messages, &ages, 0), 4);
        // An assistant message of this turn that shares the user's age
        // (it has no tag of its own) is not reached.
        let ages = [1, 2, 3, 5, 5, 5];
        assert_eq!(budget_watermark(&messages, &ages, 0), 4);
    }
}

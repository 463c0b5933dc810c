//! The restoration text: a short preamble, then the pinned messages in
//! chronological order, each under a `## <role> — <ISO time>` heading and
//! separated by `---` rules. One message, so the agent is interrupted once.

use serde::Serialize;

/// Claude Code's cap on a hook's `additionalContext` (longer text is spilled
/// to a file and replaced by a preview).
pub const HOOK_CONTEXT_LIMIT: usize = 10_000;

/// At most this many left-out ids are named; the rest are counted.
const NAMED_OMISSIONS: usize = 12;

/// What the agent is told before the pinned messages (our own words).
pub const PREAMBLE: &str = "\
Pinned context, restored after compaction.

The conversation was just compacted. The user pinned the messages below because they must \
stay in context word for word, and the compaction did not keep them. Some were written by the \
user, some by you. They are here so you can carry on with the work that was under way before \
the compaction; they are not a new request.

- While any task or next step remains, use them silently as context: do not acknowledge, \
repeat or summarise them, and add no recap; just continue the work.
- Only if no work remains, reply with a brief summary of them in at most one short \
paragraph, without lists.

The pinned messages follow in chronological order.";

/// One pinned message with its text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PinnedText {
    pub id: String,
    pub role: String,
    pub created_at: i64,
    pub text: String,
}

/// `2025-10-09T09:20:00.000Z` for epoch milliseconds.
pub fn iso8601(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let (year, month, day) = civil_from_days(days);
    let (h, rest) = (in_day / 3_600_000, in_day % 3_600_000);
    let (m, rest) = (rest / 60_000, rest % 60_000);
    let (s, millis) = (rest / 1_000, rest % 1_000);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{millis:03}Z")
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Sort pinned texts chronologically (creation time, then id).
pub fn sort(pins: &mut [PinnedText]) {
    pins.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
}

/// The restoration text for `pins`, which must already be in chronological order.
pub fn restoration(pins: &[PinnedText]) -> String {
    render(pins, &[], None)
}

fn entry(pin: &PinnedText) -> String {
    format!(
        "## {} — {}\n\n{}",
        pin.role,
        iso8601(pin.created_at),
        pin.text
    )
}

fn omission_note(omitted: &[String]) -> String {
    let mut named: Vec<&str> = omitted
        .iter()
        .take(NAMED_OMISSIONS)
        .map(String::as_str)
        .collect();
    let more = omitted.len().saturating_sub(NAMED_OMISSIONS);
    let more_text = format!("{more} more");
    if more > 0 {
        named.push(&more_text);
    }
    let noun = if omitted.len() == 1 {
        "message was"
    } else {
        "messages were"
    };
    format!(
        "(To fit the {HOOK_CONTEXT_LIMIT}-character limit, the {} oldest pinned {noun} left out: {}.)",
        omitted.len(),
        named.join(", ")
    )
}

fn render(pins: &[PinnedText], omitted: &[String], cut_note: Option<&str>) -> String {
    let mut out = String::from(PREAMBLE);
    if !omitted.is_empty() {
        out.push(' ');
        out.push_str(&omission_note(omitted));
    }
    for (i, pin) in pins.iter().enumerate() {
        out.push_str(if i == 0 { "\n\n" } else { "\n\n---\n\n" });
        out.push_str(&entry(pin));
    }
    if let Some(note) = cut_note {
        out.push_str(note);
    }
    out
}

/// Length as JavaScript counts it (UTF-16 code units): never less than the
/// number of characters, so a text within the limit by this measure is within
/// it by either.
fn js_len(text: &str) -> usize {
    text.encode_utf16().count()
}

/// The longest prefix of `text` of at most `units` UTF-16 code units.
fn prefix_within(text: &str, units: usize) -> &str {
    let mut used = 0;
    for (i, c) in text.char_indices() {
        used += c.len_utf16();
        if used > units {
            // `i` is a char boundary (it comes from char_indices).
            return text.get(..i).unwrap_or(text);
        }
    }
    text
}

/// The restoration text within `limit`, and what had to give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fitted {
    pub text: String,
    /// Ids restored whole or cut.
    pub kept: Vec<String>,
    /// Ids left out (the oldest).
    pub omitted: Vec<String>,
    /// The id of the one message whose text was cut, when even it alone did not fit.
    pub cut: Option<String>,
}

/// [`restoration`] within `limit` UTF-16 units (`pins` chronological). When
/// the whole does not fit, the newest pins are kept whole and the oldest are
/// left out, and the text says which; when even the newest alone does not
/// fit, its text is cut, and the text says so.
pub fn fit(pins: &[PinnedText], limit: usize) -> Fitted {
    let ids = |p: &[PinnedText]| p.iter().map(|p| p.id.clone()).collect::<Vec<_>>();
    for start in 0..pins.len() {
        let (left_out, kept) = pins.split_at(start);
        let omitted = ids(left_out);
        let text = render(kept, &omitted, None);
        if js_len(&text) <= limit {
            return Fitted {
                text,
                kept: ids(kept),
                omitted,
                cut: None,
            };
        }
    }
    let Some((newest, older)) = pins.split_last() else {
        return Fitted {
            text: prefix_within(PREAMBLE, limit).to_string(),
            kept: Vec::new(),
            omitted: Vec::new(),
            cut: None,
        };
    };
    let omitted = ids(older);
    let note = format!(
        "\n\n[… the rest of this pinned message ({} characters in all) did not fit]",
        newest.text.chars().count()
    );
    let mut shell = newest.clone();
    shell.text = String::new();
    let overhead = js_len(&render(std::slice::from_ref(&shell), &omitted, Some(&note)));
    shell.text = prefix_within(&newest.text, limit.saturating_sub(overhead))
        .trim_end()
        .to_string();
    let text = render(std::slice::from_ref(&shell), &omitted, Some(&note));
    // Only a limit smaller than the preamble itself can leave it too long.
    let text = prefix_within(&text, limit).to_string();
    Fitted {
        text,
        kept: vec![newest.id.clone()],
        omitted,
        cut: Some(newest.id.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin(id: &str, role: &str, at: i64, text: &str) -> PinnedText {
        PinnedText {
            id: id.into(),
            role: role.into(),
            created_at: at,
            text: text.into(),
        }
    }

    #[test]
    fn iso_times_are_utc_with_millis() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(1_772_445_600_100), "2026-03-02T10:00:00.100Z");
        assert_eq!(iso8601(951_868_799_999), "2000-02-29T23:59:59.999Z");
        assert_eq!(iso8601(-1), "1969-12-31T23:59:59.999Z");
        for ms in [0, 1_760_001_200_000, 4_102_444_800_000] {
            assert_eq!(
                mc_base::codec::claude::parse_timestamp(&iso8601(ms)),
                Some(ms)
            );
        }
    }

    #[test]
    fn the_text_says_what_to_do_and_lists_pins_in_order() {
        let mut pins = vec![
            pin("msg_b", "assistant", 20_000, "Second: the agreed plan."),
            pin("msg_a", "user", 10_000, "First: always run just check."),
        ];
        sort(&mut pins);
        let text = restoration(&pins);
        assert!(text.starts_with(PREAMBLE));
        for phrase in [
            "chronological order",
            "use them silently as context",
            "Only if no work remains",
            "at most one short paragraph",
            "not a new request",
        ] {
            assert!(text.contains(phrase), "{phrase}");
        }
        let first = text.find("First:").unwrap();
        let second = text.find("Second:").unwrap();
        assert!(first < second);
        assert!(text.contains(
            "## user — 1970-01-01T00:00:10.000Z\n\nFirst: always run just check.\n\n---\n\n## assistant — 1970-01-01T00:00:20.000Z\n\nSecond"
        ));
    }

    #[test]
    fn within_the_limit_nothing_changes() {
        let pins = vec![pin("a", "user", 1, "short")];
        let fitted = fit(&pins, HOOK_CONTEXT_LIMIT);
        assert_eq!(fitted.text, restoration(&pins));
        assert_eq!(
            (fitted.kept.len(), fitted.omitted.len(), fitted.cut),
            (1, 0, None)
        );
    }

    #[test]
    fn over_the_limit_the_newest_pins_stay_whole() {
        let pins: Vec<PinnedText> = (0..6)
            .map(|i| {
                pin(
                    &format!("msg_{i}"),
                    "user",
                    i,
                    &format!("{i}").repeat(2_800),
                )
            })
            .collect();
        let fitted = fit(&pins, HOOK_CONTEXT_LIMIT);
        assert!(js_len(&fitted.text) <= HOOK_CONTEXT_LIMIT);
        assert_eq!(fitted.kept, ["msg_3", "msg_4", "msg_5"]);
        assert_eq!(fitted.omitted, ["msg_0", "msg_1", "msg_2"]);
        assert!(
            fitted
                .text
                .contains("3 oldest pinned messages were left out: msg_0, msg_1, msg_2")
        );
        for kept in 3..6 {
            assert!(fitted.text.contains(&format!("{kept}").repeat(2_800)));
        }
        assert!(!fitted.text.contains(&"2".repeat(2_800)));
    }

    #[test]
    fn a_single_pin_over_the_limit_is_cut_and_says_so() {
        // Wide characters: 2 UTF-16 units each, so counting chars would overshoot.
        let pins = vec![
            pin("old", "user", 1, "keep me"),
            pin("huge", "assistant", 2, &"😀".repeat(8_000)),
        ];
        let fitted = fit(&pins, HOOK_CONTEXT_LIMIT);
        assert!(
            js_len(&fitted.text) <= HOOK_CONTEXT_LIMIT,
            "{}",
            js_len(&fitted.text)
        );
        assert!(js_len(&fitted.text) > HOOK_CONTEXT_LIMIT - 10);
        assert_eq!(fitted.cut.as_deref(), Some("huge"));
        assert_eq!(fitted.omitted, ["old"]);
        assert!(fitted.text.contains("8000 characters in all) did not fit"));
        assert!(fitted.text.contains("pinned message was left out: old"));
    }

    #[test]
    fn many_omissions_are_counted_not_all_named() {
        let pins: Vec<PinnedText> = (0..40)
            .map(|i| pin(&format!("m{i:02}"), "user", i, &"x".repeat(900)))
            .collect();
        let fitted = fit(&pins, HOOK_CONTEXT_LIMIT);
        assert!(js_len(&fitted.text) <= HOOK_CONTEXT_LIMIT);
        let n = fitted.omitted.len();
        assert!(
            fitted
                .text
                .contains(&format!("the {n} oldest pinned messages were left out"))
        );
        assert!(
            fitted
                .text
                .contains(&format!("{} more.)", n - NAMED_OMISSIONS))
        );
    }
}

//! Temporal markers: a user message that arrives five minutes or more after
//! the previous message starts with `<!-- +2h 15m -->`. Derived from immutable
//! timestamps, so every pass renders the same marker.

use mc_base::codec::{Message, Role};

const MIN_GAP_MS: i64 = 5 * 60 * 1000;

/// `+Xm`, `+Xh Ym`, `+Xd Yh`, `+Xw Yd` (zero remainders dropped); `None` under five minutes.
fn gap_label(gap_ms: i64) -> Option<String> {
    if gap_ms < MIN_GAP_MS {
        return None;
    }
    let minutes = gap_ms / 60_000;
    let (hour, day, week) = (60, 60 * 24, 60 * 24 * 7);
    let pair = |big: i64, big_unit: &str, small: i64, small_unit: &str| {
        if small == 0 {
            format!("+{big}{big_unit}")
        } else {
            format!("+{big}{big_unit} {small}{small_unit}")
        }
    };
    Some(if minutes < hour {
        format!("+{minutes}m")
    } else if minutes < day {
        pair(minutes / hour, "h", minutes % hour, "m")
    } else if minutes < week {
        pair(minutes / day, "d", (minutes % day) / hour, "h")
    } else {
        pair(minutes / week, "w", (minutes % week) / day, "d")
    })
}

/// Per message, the marker line its first text part gets (user messages only).
pub fn markers(messages: &[Message]) -> Vec<Option<String>> {
    let mut out = Vec::with_capacity(messages.len());
    let mut previous_end: Option<i64> = None;
    for message in messages {
        let marker = match (message.role(), previous_end, message.created_ms()) {
            (Role::User, Some(prev), Some(created)) => {
                // Harness timestamps may be anything: the gap saturates.
                gap_label(created.saturating_sub(prev)).map(|g| format!("<!-- {g} -->\n"))
            }
            _ => None,
        };
        out.push(marker);
        if let Some(end) = message.completed_ms().or(message.created_ms()) {
            previous_end = Some(end);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use mc_base::codec::opencode::decode_all;
    use serde_json::json;

    #[test]
    fn labels_at_every_unit_boundary() {
        let m = 60_000;
        assert_eq!(gap_label(5 * m - 1), None);
        assert_eq!(gap_label(5 * m).as_deref(), Some("+5m"));
        assert_eq!(gap_label(59 * m).as_deref(), Some("+59m"));
        assert_eq!(gap_label(60 * m).as_deref(), Some("+1h"));
        assert_eq!(gap_label(135 * m).as_deref(), Some("+2h 15m"));
        assert_eq!(gap_label(24 * 60 * m).as_deref(), Some("+1d"));
        assert_eq!(gap_label((26 * 60 + 59) * m).as_deref(), Some("+1d 2h"));
        assert_eq!(gap_label(7 * 24 * 60 * m).as_deref(), Some("+1w"));
        assert_eq!(gap_label(17 * 24 * 60 * m).as_deref(), Some("+2w 3d"));
    }

    #[test]
    fn gaps_run_from_the_previous_message_completion() {
        let messages = decode_all(vec![
            json!({"info": {"role": "user", "time": {"created": 0}}, "parts": []}),
            json!({"info": {"role": "assistant", "time": {"created": 1000, "completed": 600_000}}, "parts": []}),
            json!({"info": {"role": "user", "time": {"created": 600_000 + 299_999}}, "parts": []}),
            json!({"info": {"role": "user", "time": {"created": 600_000 + 299_999 + 3_600_000}}, "parts": []}),
        ])
        .unwrap();
        assert_eq!(
            markers(&messages),
            vec![None, None, None, Some("<!-- +1h -->\n".to_string())]
        );
    }
}

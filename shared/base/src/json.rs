//! Small JSON helpers: for the codecs and the config loader, and the repair
//! of lone surrogates every binary applies to the JSON it reads.

use std::borrow::Cow;

use serde_json::Value;

/// "a string", "an object", ...: for error messages about a wrong JSON type.
pub fn kind_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `text` with every lone UTF-16 surrogate escape (`\ud800` with no low half
/// after it, or a `\udc00` with no high half before it) replaced by `\ufffd`.
///
/// JavaScript's `JSON.stringify` writes such escapes for a string cut in the
/// middle of a character (harnesses truncate long tool output that way), and
/// a strict parser rejects the whole document. The replacement is a pure
/// function of the text, so a message that carries one renders the same bytes
/// on every pass. Text with nothing to replace is returned as it is.
pub fn repair_lone_surrogates(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    let mut out: Option<String> = None;
    // Bytes up to `copied` are already in `out` (when there is one).
    let mut copied = 0;
    // The low half of a pair already seen is no candidate of its own.
    let mut skip_until = 0;
    // Every pass reads the whole envelope: a vectorised search for `\u`
    // keeps text without surrogate escapes at memchr speed.
    for at in memchr::memmem::find_iter(bytes, b"\\u") {
        if at < skip_until || escaped(bytes, at) {
            continue;
        }
        let Some(unit) = hex_escape(bytes, at) else {
            continue;
        };
        let lone = match unit {
            0xD800..=0xDBFF => {
                if hex_escape(bytes, at + 6).is_some_and(|low| (0xDC00..=0xDFFF).contains(&low)) {
                    skip_until = at + 12;
                    continue;
                }
                true
            }
            0xDC00..=0xDFFF => true,
            _ => false,
        };
        if lone {
            let buffer = out.get_or_insert_with(|| String::with_capacity(text.len()));
            // `at` and `at + 6` sit on ASCII bytes, so both are char boundaries.
            buffer.push_str(text.get(copied..at).unwrap_or_default());
            buffer.push_str("\\ufffd");
            copied = at + 6;
        }
    }
    match out {
        None => Cow::Borrowed(text),
        Some(mut buffer) => {
            buffer.push_str(text.get(copied..).unwrap_or_default());
            Cow::Owned(buffer)
        }
    }
}

/// Whether the backslash at `at` is itself escaped: an odd number of
/// backslashes right before it.
fn escaped(bytes: &[u8], at: usize) -> bool {
    let before = bytes.get(..at).unwrap_or_default();
    before.iter().rev().take_while(|&&b| b == b'\\').count() % 2 == 1
}

/// The code unit of a `\uXXXX` escape starting at `at`, if there is one.
fn hex_escape(bytes: &[u8], at: usize) -> Option<u32> {
    let escape = bytes.get(at..at + 6)?;
    if escape.get(..2)? != b"\\u" {
        return None;
    }
    let digits = std::str::from_utf8(escape.get(2..)?).ok()?;
    u32::from_str_radix(digits, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> serde_json::Value {
        serde_json::from_str(&repair_lone_surrogates(text)).unwrap()
    }

    #[test]
    fn lone_surrogates_become_the_replacement_character() {
        // serde_json refuses each of these as it stands.
        for (text, expected) in [
            (r#"["a\ud800b"]"#, "a\u{fffd}b"),
            (r#"["a\udc00"]"#, "a\u{fffd}"),
            (r#"["\ud83d"]"#, "\u{fffd}"),
            (r#"["\uD83D\u0041"]"#, "\u{fffd}A"),
            (r#"["\udc00\ud800"]"#, "\u{fffd}\u{fffd}"),
        ] {
            assert!(
                serde_json::from_str::<serde_json::Value>(text).is_err(),
                "{text}"
            );
            assert_eq!(parsed(text), serde_json::json!([expected]), "{text}");
        }
    }

    #[test]
    fn valid_text_is_left_alone() {
        for text in [
            r#"["\ud83d\ude00 smile"]"#,
            r#"["\\ud800 is an escaped backslash"]"#,
            r#"["\\\\", "\u00e9", "\n\t\"", "plain"]"#,
            "[\"é ü 字\"]",
        ] {
            assert!(
                matches!(repair_lone_surrogates(text), Cow::Borrowed(_)),
                "{text}"
            );
        }
        // An escaped backslash before a real lone escape still counts the escape.
        assert_eq!(parsed(r#"["\\\ud800"]"#), serde_json::json!(["\\\u{fffd}"]));
    }

    #[test]
    fn truncated_escapes_are_left_for_the_parser_to_reject() {
        for text in [r#"["\ud8"#, r#"["\"#, r#"["\ud800\u"#] {
            let repaired = repair_lone_surrogates(text);
            assert!(serde_json::from_str::<serde_json::Value>(&repaired).is_err());
        }
    }
}

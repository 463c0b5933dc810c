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

/// `text` parsed as [`serde_json::from_str`] parses it into a [`Value`],
/// the same value, but with no spare room in its objects and arrays.
///
/// serde_json grows an object as it reads it (room for three entries,
/// then seven, of about 110 bytes each) and an array likewise, and keeps
/// the slack; over an envelope of many small messages the slack is a third
/// of the tree. Here the entries and items are gathered on one scratch
/// stack shared by the whole document, and each object or array is made
/// from its run of it at its exact size (same order, and a repeated key
/// keeps its first place and its last value, as `Map::insert` does).
pub fn parse_compact(text: &str) -> serde_json::Result<Value> {
    let mut scratch = Scratch::default();
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value = serde::de::DeserializeSeed::deserialize(Compact(&mut scratch), &mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

/// The stacks [`parse_compact`] gathers objects and arrays on.
#[derive(Default)]
pub(crate) struct Scratch {
    pub(crate) entries: Vec<(String, Value)>,
    items: Vec<Value>,
}

/// One value of a [`parse_compact`] document.
pub(crate) struct Compact<'s>(pub(crate) &'s mut Scratch);

impl<'de> serde::de::DeserializeSeed<'de> for Compact<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Compact<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        // As serde_json's own visitor: a number it cannot hold is null.
        Ok(serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let start = self.0.items.len();
        while let Some(item) = seq.next_element_seed(Compact(&mut *self.0))? {
            self.0.items.push(item);
        }
        // A drain knows its length: the array is allocated once, exactly.
        Ok(Value::Array(self.0.items.drain(start..).collect()))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let start = self.0.entries.len();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(Compact(&mut *self.0))?;
            self.0.entries.push((key, value));
        }
        // `collect` sizes the map by the entries and inserts them in order.
        Ok(Value::Object(self.0.entries.drain(start..).collect()))
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
    fn a_compact_parse_gives_serde_jsons_value_and_its_errors() {
        for text in [
            r#"{"b":1,"a":[1,-2,3.5,1e300,18446744073709551615,18446744073709551616,true,null,"s"],"c":{}}"#,
            r#"{"k":1,"j":2,"k":3}"#,
            r#"[[],[{}],{"x":{"y":[{"z":"\u00e9\n"}]}}]"#,
            "  \"top\"  ",
            "-0",
        ] {
            let want: Value = serde_json::from_str(text).unwrap();
            let got = parse_compact(text).unwrap();
            assert_eq!(got, want, "{text}");
            // Same order of keys, so the same bytes out.
            assert_eq!(
                serde_json::to_string(&got).unwrap(),
                serde_json::to_string(&want).unwrap(),
                "{text}"
            );
        }
        for bad in [
            "",
            "{",
            "[1e400]",
            "[1,]",
            "{\"a\" 1}",
            "1 2",
            "nul",
            &"[".repeat(200),
        ] {
            let want = serde_json::from_str::<Value>(bad).unwrap_err().to_string();
            assert_eq!(parse_compact(bad).unwrap_err().to_string(), want, "{bad}");
        }
    }

    #[test]
    fn a_compact_parse_leaves_no_room_to_spare() {
        let value = parse_compact(r#"{"a":[1,2,3,4,5],"b":{"c":1}}"#).unwrap();
        let Value::Array(items) = &value["a"] else {
            panic!("an array")
        };
        assert_eq!(items.capacity(), items.len());
        // The same document through serde_json keeps room to grow.
        let loose: Value = serde_json::from_str(r#"{"a":[1,2,3,4,5]}"#).unwrap();
        assert!(loose["a"].as_array().unwrap().capacity() > 5);
    }

    #[test]
    fn truncated_escapes_are_left_for_the_parser_to_reject() {
        for text in [r#"["\ud8"#, r#"["\"#, r#"["\ud800\u"#] {
            let repaired = repair_lone_surrogates(text);
            assert!(serde_json::from_str::<serde_json::Value>(&repaired).is_err());
        }
    }
}

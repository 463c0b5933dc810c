//! The `§N§` tag notation and the one drop placeholder.

/// The only drop placeholder: a pure function of the tag number.
pub fn placeholder(number: i64) -> String {
    format!("[dropped §{number}§]")
}

/// `§N§ ` + the text without any tag notation it already started with.
pub fn prefixed(number: i64, text: &str) -> String {
    let body = strip_leading_tags(text);
    let mut out = String::with_capacity(body.len() + 12);
    out.push('§');
    out.push_str(&number.to_string());
    out.push_str("§ ");
    out.push_str(body);
    out
}

/// Strip leading `§N§` runs (and the space after each), at most 8 rounds, so a
/// text the model echoed with tags does not accumulate prefixes.
pub fn strip_leading_tags(mut text: &str) -> &str {
    for _ in 0..8 {
        match after_leading_tag(text) {
            Some(rest) => text = rest.trim_start_matches(' '),
            None => break,
        }
    }
    text
}

/// The text after a leading `§N§` (1 to 12 digits), if it starts with one.
fn after_leading_tag(text: &str) -> Option<&str> {
    let rest = text.strip_prefix('§')?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 12 {
        return None;
    }
    rest.get(digits..)?.strip_prefix('§')
}

/// Parse a reduce spec such as `"3-5,12"` or `"§3§, §7§-§9§"`.
pub fn parse_ranges(spec: &str) -> Result<Vec<i64>, String> {
    const MAX_RANGE: i64 = 1000;
    let cleaned: String = spec
        .chars()
        .filter(|c| *c != '§' && !c.is_whitespace())
        .collect();
    let mut out = Vec::new();
    for piece in cleaned.split(',').filter(|p| !p.is_empty()) {
        let number = |s: &str| {
            s.parse::<i64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{s:?} is not a tag number (expected e.g. 3-5,12)"))
        };
        match piece.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (number(a)?, number(b)?);
                if b < a {
                    return Err(format!("range {a}-{b} is reversed; write {b}-{a}"));
                }
                if b - a + 1 > MAX_RANGE {
                    return Err(format!("range {a}-{b} spans more than {MAX_RANGE} tags"));
                }
                out.extend(a..=b);
            }
            None => out.push(number(piece)?),
        }
    }
    if out.is_empty() {
        return Err("no tag numbers given (expected e.g. 3-5,12)".into());
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholder_is_pure() {
        assert_eq!(placeholder(7), "[dropped §7§]");
        assert_eq!(placeholder(7), placeholder(7));
    }

    #[test]
    fn prefix_is_idempotent_over_echoed_tags() {
        assert_eq!(prefixed(3, "hello"), "§3§ hello");
        assert_eq!(prefixed(3, "§3§ hello"), "§3§ hello");
        assert_eq!(prefixed(4, "§3§ §2§ hello"), "§4§ hello");
        assert_eq!(prefixed(5, "§x§ hi"), "§5§ §x§ hi", "not a tag: kept");
        assert_eq!(prefixed(5, "§12 hi"), "§5§ §12 hi");
        assert_eq!(prefixed(6, ""), "§6§ ");
    }

    #[test]
    fn ranges() {
        assert_eq!(parse_ranges("3-5,12").unwrap(), vec![3, 4, 5, 12]);
        assert_eq!(parse_ranges("§3§, §5§-§6§ ,3").unwrap(), vec![3, 5, 6]);
        assert!(parse_ranges("5-3").unwrap_err().contains("reversed"));
        assert!(parse_ranges("1-5000").unwrap_err().contains("1000"));
        assert!(parse_ranges("abc").is_err());
        assert!(parse_ranges("0").is_err());
        assert!(parse_ranges("").is_err());
    }
}

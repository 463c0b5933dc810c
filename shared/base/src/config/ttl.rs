//! The provider prompt-cache lifetime, `transform.cache_ttl`.

use std::fmt;

use serde::{Serialize, Serializer};

const SECOND: u64 = 1_000;
const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;

/// How long the provider keeps a prompt cached after the last response.
///
/// Written in config as `"30s"`, `"5m"`, `"1h"` (a whole number and a unit),
/// as bare digits meaning milliseconds (a string `"1500"` or a JSON number
/// `1500`), or as `"never"` (the cache is never assumed to have expired).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CacheTtl {
    /// Expires this many milliseconds after the last response.
    Millis(u64),
    /// Never expires: idle time alone never makes a pass execute.
    Never,
}

impl CacheTtl {
    /// Parses the config spelling. Surrounding whitespace is ignored and
    /// `never` is case-insensitive; units are lowercase `s`, `m`, `h`.
    /// Anything else (fractions, signs, other units, overflow) is `None`.
    pub fn parse(s: &str) -> Option<CacheTtl> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("never") {
            return Some(CacheTtl::Never);
        }
        let (digits, unit) = [('s', SECOND), ('m', MINUTE), ('h', HOUR)]
            .into_iter()
            .find_map(|(suffix, unit)| Some((s.strip_suffix(suffix)?, unit)))
            .unwrap_or((s, 1));
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let n: u64 = digits.parse().ok()?;
        n.checked_mul(unit).map(CacheTtl::Millis)
    }

    /// The lifetime in milliseconds; `None` for [`CacheTtl::Never`].
    pub fn as_millis(&self) -> Option<u64> {
        match *self {
            CacheTtl::Millis(ms) => Some(ms),
            CacheTtl::Never => None,
        }
    }
}

/// The shortest spelling [`CacheTtl::parse`] reads back to the same value:
/// `5m`, `90s`, `1500`, `never`.
impl fmt::Display for CacheTtl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            CacheTtl::Never => f.write_str("never"),
            CacheTtl::Millis(0) => f.write_str("0"),
            CacheTtl::Millis(ms) if ms % HOUR == 0 => write!(f, "{}h", ms / HOUR),
            CacheTtl::Millis(ms) if ms % MINUTE == 0 => write!(f, "{}m", ms / MINUTE),
            CacheTtl::Millis(ms) if ms % SECOND == 0 => write!(f, "{}s", ms / SECOND),
            CacheTtl::Millis(ms) => write!(f, "{ms}"),
        }
    }
}

/// Serialised as its config spelling (see `Display`).
impl Serialize for CacheTtl {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

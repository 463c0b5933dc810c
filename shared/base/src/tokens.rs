//! Token counts for stored content.
//!
//! The transform stores a token count for every tagged piece of content once, when
//! it first sees it, and never re-tokenizes old content. Two counters serve that:
//!
//! - [`exact`] is the reference: OpenAI's `o200k_base` BPE via `tiktoken-rs`.
//!   Building its tables costs on the order of 100–150 ms per process, so the
//!   per-call path must not touch it.
//! - [`estimate`] is a fast, allocation-free O(n) approximation of the same count,
//!   calibrated against `o200k_base`. It is deterministic: the same text always
//!   gives the same number.
//!
//! # How the estimator works
//!
//! `o200k_base` first splits text with a regular expression (words with an optional
//! leading space or symbol, digit groups of up to three, symbol runs, whitespace
//! runs) and then runs BPE inside each piece, never across pieces. The scanner
//! below reproduces that split in one forward pass (on a 40 MB mixed corpus the
//! per-piece counts add up to the whole-text count in every file but one of
//! binary junk; see `split_matches_the_o200k_pattern`), so only the BPE step is
//! modelled:
//!
//! - a digit group (`\p{N}{1,3}`) costs one token;
//! - a whitespace piece costs one token, plus one per ~100 spaces, ~20 line
//!   breaks or tabs, or 4 carriage returns;
//! - in word and symbol pieces every char is mapped to one of 48 symbols
//!   (26 case-folded ASCII letters, 8 ASCII punctuation groups, whitespace kinds,
//!   scripts of non-ASCII letters, non-ASCII symbols by UTF-8 length) and adds
//!   `PAIR[previous symbol][symbol]`: the mean number of tokens that start at a
//!   char of that kind after that predecessor, measured with `o200k_base`. The
//!   first char of a piece is preceded by a "start" symbol, so each piece costs at
//!   least about one token. A small `CASE` term corrects ASCII letters for the
//!   case of the previous letter (runs of capitals split more often).
//!
//! The table was fitted on about 40 MB of local text (Rust, Python and JavaScript
//! sources, JSON, Markdown and plain-text documentation, man pages in ten
//! languages including Japanese, Korean and Chinese, logs, file listings,
//! minified JavaScript, random base64 and hex), weighting English prose and code
//! above the other groups. Measured against `o200k_base` on the calibration
//! samples in the tests (written for this crate, not part of the fit):
//!
//! | sample     | error  |   | sample     | error  |
//! |------------|--------|---|------------|--------|
//! | prose      | +6.5 % |   | listing    | −4.4 % |
//! | markdown   | +2.0 % |   | minified   | +2.6 % |
//! | rust       | +4.2 % |   | cjk        | +6.3 % |
//! | typescript | +6.3 % |   | accented   | +3.1 % |
//! | python     | +5.4 % |   | emoji      | +2.6 % |
//! | json       | +2.4 % |   | base64     | −6.0 % |
//! | shell      | +0.3 % |   | hex        | −0.2 % |
//! | log        | +1.0 % |   | **total**  | +0.8 % |
//!
//! On the fitting corpus the per-file error stays within ±10 %; the largest
//! errors are for languages whose words the table cannot tell apart (Turkish
//! −9.6 %, Russian +9.6 %). Common English words are slightly overcounted and
//! random base64 slightly undercounted. Run the ignored test
//! `report_calibration` with `--nocapture` to reprint the table.
//!
//! Throughput in release builds is roughly 150–340 MB/s depending on the kind of
//! text (short pieces such as base64 are the slowest), against ~10 MB/s for
//! [`exact`].
//!
//! To recalibrate, run a corpus through `scan` with a `Sink` that records, for
//! every (previous symbol, symbol) pair, how many chars it saw and how many
//! tokens started inside them (token offsets from `encode_ordinary` and
//! `decode_bytes`), and divide. Stored counts are computed once, so a new table
//! only affects content seen after the change.

use serde::{Deserialize, Serialize};

/// A token count and how it was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Counted {
    pub tokens: u32,
    /// `true` when counted with `o200k_base`, `false` when estimated.
    pub exact: bool,
}

impl Counted {
    /// Counts `text` with the fast estimator.
    pub fn estimated(text: &str) -> Self {
        Self {
            tokens: estimate(text),
            exact: false,
        }
    }

    /// Counts `text` with the reference tokenizer (slow on first use; see [`exact`]).
    pub fn measured(text: &str) -> Self {
        Self {
            tokens: exact(text),
            exact: true,
        }
    }
}

/// Exact `o200k_base` token count of `text`.
///
/// Special-token text such as `<|endoftext|>` is counted as ordinary text. The
/// first call in a process builds the tokenizer (roughly 100–150 ms); later calls
/// reuse it.
pub fn exact(text: &str) -> u32 {
    let n = tiktoken_rs::o200k_base_singleton()
        .encode_ordinary(text)
        .len();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Fast estimate of the `o200k_base` token count of `text`: O(n), no allocation,
/// deterministic. See the module documentation for the method and its accuracy.
pub fn estimate(text: &str) -> u32 {
    let mut e = Estimator {
        milli: 0,
        prev: S_START,
        prev_upper: 0,
    };
    scan(text, &mut e);
    u32::try_from((e.milli.max(0) + 500) / 1000).unwrap_or(u32::MAX)
}

/// Sums the cost model over the pieces the scanner reports, in thousandths of a token.
struct Estimator {
    milli: i64,
    prev: u8,
    prev_upper: u8,
}

impl Sink for Estimator {
    #[inline(always)]
    fn start(&mut self, _at: usize) {
        self.prev = S_START;
        self.prev_upper = 0;
    }

    #[inline(always)]
    fn ch(&mut self, _at: usize, c: Ch) {
        self.milli += i64::from(pair(self.prev, c.sym)) + i64::from(case(self.prev_upper, c.case));
        self.prev = c.sym;
        self.prev_upper = u8::from(c.case == UPPER);
    }

    #[inline(always)]
    fn fixed(&mut self, _at: usize, _end: usize, milli: u32) {
        self.milli += i64::from(milli);
    }
}

// ---------------------------------------------------------------------------
// The pre-tokenizer split.
//
// `o200k_base` splits text with this pattern (alternatives tried in order):
//   1. [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//   2. [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//   3. \p{N}{1,3}
//   4.  ?[^\s\p{L}\p{N}]+[\r\n/]*
//   5. \s*[\r\n]+
//   6. \s+(?!\S)
//   7. \s+
// The scanner below reproduces it in one forward pass without backtracking.
// ---------------------------------------------------------------------------

// How the pattern sees a char, as bit flags. Letters in Lm or Lo (e.g. CJK
// ideographs, kana, Hangul) are in both letter sets.
/// `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]`
const UPPER_SET: u8 = 1;
/// `[\p{Ll}\p{Lm}\p{Lo}\p{M}]`
const LOWER_SET: u8 = 2;
const LETTER: u8 = UPPER_SET | LOWER_SET;
/// `\p{N}`
const DIGIT: u8 = 4;
/// `\r` or `\n`
const NEWLINE: u8 = 8;
/// any other `\s`
const SPACE: u8 = 16;
/// everything else
const PUNCT: u8 = 32;
/// `\p{M}` is in both letter sets and, not being `\p{L}`, also counts as a symbol.
const MARK: u8 = LETTER | PUNCT;

/// One char as the scanner and the cost model see it.
#[derive(Clone, Copy, Debug)]
struct Ch {
    /// The class flags above.
    class: u8,
    /// Symbol index for the cost table, `< NSYM`.
    sym: u8,
    /// `NOT_LETTER`, `LOWER` or `UPPER` (ASCII letters only).
    case: u8,
    /// Length in bytes.
    len: u8,
}

const NOT_LETTER: u8 = 0;
const LOWER: u8 = 1;
const UPPER: u8 = 2;

/// ASCII punctuation groups; each group is one symbol.
const PUNCT_GROUPS: [&[u8]; 8] = [
    b"\"'`",
    b"([{<",
    b")]}>",
    b",;:",
    b".",
    b"=+-*%&|^!?~",
    b"/\\",
    b"#$@_", // and ASCII control chars
];

// Symbol layout: a..z, punctuation groups, whitespace, scripts, symbols, start.
const S_PUNCT: u8 = 26;
const S_SPACE: u8 = S_PUNCT + PUNCT_GROUPS.len() as u8;
const S_NEWLINE: u8 = S_SPACE + 1;
const S_OTHER_WS: u8 = S_SPACE + 2;
/// Non-ASCII letters by script: Latin, Greek/Cyrillic, other alphabets, Han, kana,
/// Hangul, anything else.
const S_SCRIPT: u8 = S_SPACE + 3;
const S_HAN: u8 = S_SCRIPT + 3;
const S_KANA: u8 = S_SCRIPT + 4;
const S_HANGUL: u8 = S_SCRIPT + 5;
/// Non-ASCII non-letters by UTF-8 length 2, 3, 4 (4 is mostly emoji).
const S_SYMBOL: u8 = S_SCRIPT + 7;
const S_START: u8 = S_SYMBOL + 3;
/// Number of symbols of the cost model.
const NSYM: usize = S_START as usize + 1;

/// An ASCII char of no punctuation group (the control chars).
const ASCII_OTHER: Ch = Ch {
    class: PUNCT,
    sym: S_SPACE - 1,
    case: NOT_LETTER,
    len: 1,
};

#[allow(
    clippy::indexing_slicing,
    reason = "only evaluated at compile time (for `ASCII`), where an index out of range fails the build"
)]
const fn ascii_table() -> [Ch; 128] {
    let mut t = [ASCII_OTHER; 128];
    let mut i = 0;
    while i < 128 {
        let c = i as u8;
        let (class, sym, case) = if c.is_ascii_uppercase() {
            (UPPER_SET, c - b'A', UPPER)
        } else if c.is_ascii_lowercase() {
            (LOWER_SET, c - b'a', LOWER)
        } else if c.is_ascii_digit() {
            (DIGIT, S_SYMBOL, NOT_LETTER) // digits never reach the cost table
        } else if c == b'\n' || c == b'\r' {
            (NEWLINE, S_NEWLINE, NOT_LETTER)
        } else if c == b' ' {
            (SPACE, S_SPACE, NOT_LETTER)
        } else if c == b'\t' || c == 0x0b || c == 0x0c {
            (SPACE, S_OTHER_WS, NOT_LETTER)
        } else {
            let mut sym = S_SPACE - 1;
            let mut g = 0;
            while g < PUNCT_GROUPS.len() {
                let mut k = 0;
                while k < PUNCT_GROUPS[g].len() {
                    if PUNCT_GROUPS[g][k] == c {
                        sym = S_PUNCT + g as u8;
                    }
                    k += 1;
                }
                g += 1;
            }
            (PUNCT, sym, NOT_LETTER)
        };
        t[i] = Ch {
            class,
            sym,
            case,
            len: 1,
        };
        i += 1;
    }
    t
}

static ASCII: [Ch; 128] = ascii_table();

/// The table entry of the ASCII byte `x` (`x < 0x80`, which lets the compiler
/// drop the bounds check).
#[inline(always)]
fn ascii(x: u8) -> Ch {
    ASCII.get(usize::from(x)).copied().unwrap_or(ASCII_OTHER)
}

/// Byte `i` of `b`, or 0 past its end. The scanner only asks for positions it
/// has checked against the length, or continuation bytes of a char that valid
/// UTF-8 guarantees.
#[inline(always)]
fn byte(b: &[u8], i: usize) -> u8 {
    b.get(i).copied().unwrap_or(0)
}

/// The char starting at byte `i` of valid UTF-8.
#[inline(always)]
fn at(b: &[u8], i: usize) -> Ch {
    let x = byte(b, i);
    if x < 0x80 { ascii(x) } else { wide(b, i) }
}

/// Decodes the multi-byte char at `i`. `b` is valid UTF-8 and `i` a char boundary.
#[inline(always)]
fn decode(b: &[u8], i: usize) -> (u32, u8) {
    let x = u32::from(byte(b, i));
    let cont = |k: usize| u32::from(byte(b, i + k) & 0x3F);
    if x < 0xE0 {
        (((x & 0x1F) << 6) | cont(1), 2)
    } else if x < 0xF0 {
        (((x & 0x0F) << 12) | (cont(1) << 6) | cont(2), 3)
    } else {
        (
            ((x & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3),
            4,
        )
    }
}

#[inline]
fn wide(b: &[u8], i: usize) -> Ch {
    let (cp, len) = decode(b, i);
    let symbol = S_SYMBOL + len - 2;
    let ch = char::from_u32(cp).unwrap_or(char::REPLACEMENT_CHARACTER);
    // Fast paths for the bulk of accented Latin, Cyrillic and CJK text; everything
    // else asks the Unicode tables.
    let (class, sym) = match cp {
        0xC0..=0xD6 | 0xD8..=0xDE => (UPPER_SET, S_SCRIPT),
        0xDF..=0xF6 | 0xF8..=0xFF => (LOWER_SET, S_SCRIPT),
        0x100..=0x24F => (letter_case(ch), S_SCRIPT),
        0x400..=0x481 | 0x48A..=0x52F => (letter_case(ch), S_SCRIPT + 1),
        0x4E00..=0x9FFF | 0x3400..=0x4DBF => (LETTER, S_HAN),
        0xAC00..=0xD7A3 => (LETTER, S_HANGUL),
        0x3041..=0x3096 | 0x309D..=0x309F | 0x30A1..=0x30FA | 0x30FC..=0x30FF => (LETTER, S_KANA),
        0x3001..=0x3003 | 0x3008..=0x3011 | 0xFF01..=0xFF0F | 0xFF1A..=0xFF20 => (PUNCT, symbol),
        _ => classify(ch, symbol),
    };
    Ch {
        class,
        sym,
        case: NOT_LETTER,
        len,
    }
}

fn classify(ch: char, symbol: u8) -> (u8, u8) {
    let cp = u32::from(ch);
    if ch.is_whitespace() {
        (SPACE, S_OTHER_WS)
    } else if ch.is_numeric() {
        (DIGIT, symbol)
    } else if ch.is_alphabetic() && !is_letter_symbol(cp) {
        (letter_case(ch), S_SCRIPT + script(cp))
    } else if is_mark(cp) {
        (MARK, symbol)
    } else {
        (PUNCT, symbol)
    }
}

/// The letter set(s) of a letter: Ll, Lu/Lt, or both for the rest.
fn letter_case(ch: char) -> u8 {
    if ch.is_lowercase() {
        LOWER_SET
    } else if ch.is_uppercase() {
        UPPER_SET
    } else {
        LETTER
    }
}

/// Marks (`\p{M}`) that `char::is_alphabetic` does not already cover: combining
/// blocks, variation selectors, and the non-letters of the Hebrew to Sinhala,
/// Thai and Lao blocks apart from their punctuation and symbols. An
/// approximation: the standard library has no general-category lookup.
fn is_mark(cp: u32) -> bool {
    match cp {
        0x0300..=0x036F
        | 0x0483..=0x0489
        | 0x1AB0..=0x1AFF
        | 0x1DC0..=0x1DFF
        | 0x20D0..=0x20FF
        | 0x302A..=0x302F
        | 0x3099..=0x309A
        | 0xFE00..=0xFE0F
        | 0xFE20..=0xFE2F
        | 0xE0100..=0xE01EF
        | 0x0E31
        | 0x0E34..=0x0E3A
        | 0x0E47..=0x0E4E
        | 0x0EB1
        | 0x0EB4..=0x0EBC
        | 0x0EC8..=0x0ECE => true,
        0x0591..=0x0DFF => !matches!(
            cp,
            0x05BE
                | 0x05C0
                | 0x05C3
                | 0x05C6
                | 0x05F3..=0x060F
                | 0x061B..=0x061F
                | 0x066A..=0x066D
                | 0x06D4
                | 0x06DD..=0x06DE
                | 0x06E9
                | 0x06FD..=0x06FE
                | 0x0700..=0x070F
                | 0x07F6..=0x07F9
                | 0x07FE..=0x07FF
                | 0x0830..=0x083E
                | 0x085E
                | 0x0888
                | 0x0964..=0x0965
                | 0x0970
                | 0x09F2..=0x09FB
                | 0x09FD
                | 0x0A76
                | 0x0AF0..=0x0AF1
                | 0x0B70
                | 0x0BF3..=0x0BFA
                | 0x0C77
                | 0x0C7F
                | 0x0C84
                | 0x0D4F
                | 0x0D79
                | 0x0DF4
        ),
        _ => false,
    }
}

/// Letters by `char::is_alphabetic` that the pattern sees as symbols (So):
/// circled and squared Latin letters.
fn is_letter_symbol(cp: u32) -> bool {
    matches!(cp, 0x24B6..=0x24E9 | 0x1F130..=0x1F149 | 0x1F150..=0x1F169 | 0x1F170..=0x1F189)
}

/// Script bucket of a non-ASCII letter, an offset from `S_SCRIPT`.
fn script(cp: u32) -> u8 {
    match cp {
        0x00C0..=0x024F | 0x1E00..=0x1EFF => 0,
        0x0370..=0x052F => 1,
        0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x20000.. => 3,
        0x3040..=0x30FF | 0x31F0..=0x31FF | 0xFF66..=0xFF9F => 4,
        0xAC00..=0xD7AF | 0x1100..=0x11FF | 0x3130..=0x318F => 5,
        0x0530..=0x2E7F => 2,
        _ => 6,
    }
}

/// Receives the pieces of the split. The byte positions are unused by the
/// estimator; they let a calibration harness line pieces up with real tokens.
trait Sink {
    /// A word or symbol piece starts at byte `at`.
    fn start(&mut self, at: usize);
    /// The next char of the current word or symbol piece.
    fn ch(&mut self, at: usize, c: Ch);
    /// A digit group or whitespace piece `[at, end)` with a fixed cost in
    /// thousandths of a token.
    fn fixed(&mut self, at: usize, end: usize, milli: u32);
}

/// Splits `text` like the `o200k_base` pattern and reports every piece to `sink`.
fn scan(text: &str, sink: &mut impl Sink) {
    let b = text.as_bytes();
    let n = b.len();
    let mut i = 0;
    while i < n {
        let c = at(b, i);
        if c.class & LETTER != 0 {
            sink.start(i);
            i = word(b, i, sink);
            continue;
        }
        let next = i + usize::from(c.len);
        let next_class = if next < n { at(b, next).class } else { 0 };
        i = if c.class & (SPACE | PUNCT) != 0 && next_class & LETTER != 0 {
            // alternatives 1/2: one non-letter, non-digit, non-newline char in
            // front of a word
            sink.start(i);
            sink.ch(i, c);
            word(b, next, sink)
        } else if c.class & PUNCT != 0 {
            // alternative 4
            sink.start(i);
            punct(b, i, sink)
        } else if byte(b, i) == b' ' && next_class & PUNCT != 0 {
            sink.start(i);
            sink.ch(i, c);
            punct(b, next, sink)
        } else if c.class == DIGIT {
            digits(b, i, sink)
        } else {
            // alternatives 5–7
            whitespace(b, i, sink)
        };
    }
}

/// Letters from `j`: capitals, then lower case (Lm, Lo and M fit either), then an
/// optional English contraction. Returns the end of the piece.
#[inline(always)]
fn word(b: &[u8], mut j: usize, sink: &mut impl Sink) -> usize {
    let n = b.len();
    // capitals, then lower case; once lower case starts, a capital ends the word
    let mut allowed = LETTER;
    j = run(b, j, sink, |class| {
        if class == LOWER_SET {
            allowed = LOWER_SET;
        }
        class & allowed != 0
    });
    if j + 1 < n && byte(b, j) == b'\'' {
        let lower = |k: usize| b.get(j + k).map(u8::to_ascii_lowercase);
        let m = match (lower(1), lower(2)) {
            (Some(b's' | b't' | b'm' | b'd'), _) => 2,
            (Some(b'r' | b'v'), Some(b'e')) | (Some(b'l'), Some(b'l')) => 3,
            _ => 0,
        };
        for (k, &x) in b.iter().enumerate().skip(j).take(m) {
            sink.ch(k, ascii(x));
        }
        j += m;
    }
    j
}

/// Feeds the chars from `j` to `sink` while `take` accepts their class; returns
/// where it stopped.
#[inline(always)]
fn run(b: &[u8], mut j: usize, sink: &mut impl Sink, mut take: impl FnMut(u8) -> bool) -> usize {
    while let Some(&x) = b.get(j) {
        if x < 0x80 {
            // ASCII: the next position does not wait for the table lookup
            let c = ascii(x);
            if !take(c.class) {
                break;
            }
            sink.ch(j, c);
            j += 1;
        } else {
            let c = wide(b, j);
            if !take(c.class) {
                break;
            }
            sink.ch(j, c);
            j += usize::from(c.len);
        }
    }
    j
}

/// Up to three digits: one token when ASCII, about one per char otherwise.
#[inline(always)]
fn digits(b: &[u8], i: usize, sink: &mut impl Sink) -> usize {
    let n = b.len();
    let mut j = i;
    let mut count = 0u32;
    while j < n && count < 3 {
        let c = at(b, j);
        if c.class != DIGIT {
            break;
        }
        j += usize::from(c.len);
        count += 1;
    }
    let milli = if j - i == count as usize {
        1000
    } else {
        1000 * count
    };
    sink.fixed(i, j, milli);
    j
}

/// A run of symbols from `j`, then any line breaks and slashes right after it.
#[inline(always)]
fn punct(b: &[u8], j: usize, sink: &mut impl Sink) -> usize {
    let mut j = run(b, j, sink, |class| class & PUNCT != 0);
    while let Some(&x @ (b'\n' | b'\r' | b'/')) = b.get(j) {
        sink.ch(j, ascii(x));
        j += 1;
    }
    j
}

/// A whitespace piece from `start`: up to the last line break of the run if it
/// has one; else the whole run at the end of the text or when it is one char;
/// else all but its last char, which goes with what follows.
#[inline(always)]
fn whitespace(b: &[u8], start: usize, sink: &mut impl Sink) -> usize {
    let n = b.len();
    let first_len = usize::from(at(b, start).len);
    let mut j = start;
    let mut last = start; // where the run's last char starts
    let mut after_break = start; // end of the run's last line break, if any
    while let Some(&x) = b.get(j) {
        let (class, len) = if x < 0x80 {
            (ascii(x).class, 1)
        } else {
            let c = wide(b, j);
            (c.class, usize::from(c.len))
        };
        if class & (NEWLINE | SPACE) == 0 {
            break;
        }
        last = j;
        j += len;
        if class == NEWLINE {
            after_break = j;
        }
    }
    let end = if after_break > start {
        after_break
    } else if j >= n || last == start {
        j
    } else {
        last
    };
    // o200k has single tokens for runs of up to ~80 spaces and ~16 line breaks
    // or tabs; "\r\n" pairs merge less well. Count the chars after the first.
    let (mut chars, mut spaces, mut crs) = (0u32, 0u32, 0u32);
    for &x in b.get(start + first_len..end).unwrap_or_default() {
        chars += u32::from(x & 0xC0 != 0x80);
        spaces += u32::from(x == b' ');
        crs += u32::from(x == b'\r');
    }
    let others = chars - spaces - crs;
    sink.fixed(
        start,
        end,
        1000 * (1 + spaces / 100 + crs / 4 + others / 20),
    );
    end
}

/// `PAIR[p][c]`; the masks keep both indices inside the padded table, so the
/// compiler drops the bounds checks.
#[inline(always)]
fn pair(p: u8, c: u8) -> u16 {
    PAIR64
        .get(usize::from(p & 63))
        .and_then(|row| row.get(usize::from(c & 63)))
        .copied()
        .unwrap_or(0)
}

/// `CASE[previous is a capital][case]`, masked like [`pair`].
#[inline(always)]
fn case(prev_upper: u8, kind: u8) -> i16 {
    CASE.get(usize::from(prev_upper & 1))
        .and_then(|row| row.get(usize::from(kind & 3)))
        .copied()
        .unwrap_or(0)
}

/// `PAIR` padded to 64×64 so that masked indices need no bounds checks.
#[allow(
    clippy::indexing_slicing,
    reason = "evaluated at compile time, where an index out of range fails the build"
)]
static PAIR64: [[u16; 64]; 64] = {
    let mut t = [[0u16; 64]; 64];
    let mut p = 0;
    while p < NSYM {
        let mut c = 0;
        while c < NSYM {
            t[p][c] = PAIR[p][c];
            c += 1;
        }
        p += 1;
    }
    t
};

/// Thousandths of a token that start at a char of symbol `c` after symbol `p`:
/// `PAIR[p][c]`. Fitted with `o200k_base`; see the module documentation.
#[rustfmt::skip]
const PAIR: [[u16; NSYM]; NSYM] = [
    // after a
    [390, 7, 16, 1, 350, 35, 1, 493, 28, 149, 17, 0, 2, 0, 467, 10, 401, 0, 0, 0, 31, 1, 47, 17,
     4, 110, 1000, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 293, 1000, 1800, 2000, 610, 1000, 2000, 1333, 417, 2836, 500],
    // after b
    [149, 282, 367, 379, 17, 516, 582, 492, 123, 44, 578, 12, 719, 569, 99, 746, 853, 46, 198, 501, 43, 581, 593, 759,
     9, 704, 1000, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 380, 2000, 2000, 3000, 610, 1000, 2000, 2000, 417, 2836, 500],
    // after c
    [89, 424, 145, 241, 10, 270, 487, 2, 110, 880, 5, 9, 287, 292, 22, 502, 601, 18, 32, 4, 71, 417, 572, 577,
     108, 431, 1000, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 591, 1000, 1857, 2500, 610, 1000, 2333, 1857, 417, 2836, 500],
    // after d
    [110, 188, 203, 26, 16, 38, 541, 468, 101, 341, 84, 231, 400, 280, 22, 512, 761, 57, 140, 275, 74, 288, 580, 234,
     40, 460, 757, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 337, 1400, 1556, 3000, 1000, 1190, 2500, 2000, 417, 2836, 500],
    // after e
    [53, 186, 58, 4, 72, 46, 47, 293, 265, 859, 206, 18, 17, 0, 249, 196, 41, 0, 2, 11, 330, 56, 60, 3,
     38, 309, 421, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 524, 1750, 1833, 2000, 1000, 1048, 2000, 1500, 417, 2836, 500],
    // after f
    [46, 388, 333, 226, 42, 25, 95, 652, 47, 781, 344, 87, 245, 43, 13, 343, 804, 31, 154, 30, 57, 661, 498, 231,
     90, 801, 1000, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 132, 1333, 1571, 2000, 1000, 1000, 2000, 2000, 417, 2836, 500],
    // after g
    [246, 302, 918, 713, 15, 694, 171, 36, 80, 603, 882, 55, 447, 59, 57, 657, 996, 92, 60, 88, 99, 478, 560, 596,
     370, 36, 1000, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 514, 1750, 1667, 739, 610, 1250, 1500, 2000, 2000, 2836, 500],
    // after h
    [48, 607, 741, 479, 7, 811, 510, 481, 30, 654, 625, 281, 356, 440, 57, 461, 652, 62, 304, 14, 111, 429, 461, 457,
     242, 416, 538, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 441, 1667, 1429, 1889, 610, 1000, 2000, 2000, 417, 2836, 500],
    // after i
    [56, 4, 2, 0, 10, 5, 3, 280, 130, 207, 19, 1, 0, 0, 5, 5, 224, 5, 0, 0, 508, 5, 515, 12,
     521, 6, 280, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 289, 1200, 1727, 2000, 610, 1222, 1982, 335, 417, 2836, 500],
    // after j
    [57, 575, 547, 507, 13, 660, 679, 673, 355, 469, 343, 396, 609, 440, 102, 465, 725, 640, 10, 634, 31, 782, 675, 846,
     604, 1000, 1000, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 307, 1600, 1833, 2000, 610, 399, 3000, 2000, 417, 2836, 500],
    // after k
    [171, 216, 767, 460, 59, 812, 130, 379, 108, 783, 480, 453, 575, 42, 288, 676, 995, 439, 172, 454, 249, 422, 240, 879,
     255, 979, 1000, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 583, 1400, 1800, 2000, 610, 1667, 1982, 335, 417, 2836, 500],
    // after l
    [67, 84, 310, 27, 8, 15, 283, 468, 96, 711, 520, 9, 544, 367, 27, 102, 953, 247, 63, 42, 39, 136, 243, 736,
     6, 754, 1000, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 513, 1600, 1800, 1000, 610, 1222, 2500, 335, 417, 2836, 500],
    // after m
    [41, 22, 581, 103, 18, 585, 471, 454, 162, 879, 470, 50, 55, 312, 46, 39, 412, 687, 90, 211, 61, 779, 583, 393,
     64, 716, 1000, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 247, 1600, 1600, 2000, 1000, 1000, 2000, 1667, 417, 2836, 500],
    // after n
    [154, 576, 53, 3, 26, 158, 2, 406, 158, 497, 32, 131, 337, 71, 43, 252, 930, 665, 39, 10, 94, 114, 338, 428,
     55, 482, 43, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 440, 1750, 1333, 1571, 1000, 1000, 2000, 2000, 417, 2836, 500],
    // after o
    [115, 15, 8, 3, 180, 20, 16, 260, 74, 186, 10, 5, 1, 0, 22, 10, 732, 1, 19, 7, 3, 24, 5, 123,
     84, 413, 1000, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 623, 1667, 1300, 2000, 610, 1235, 2000, 1000, 417, 2836, 500],
    // after p
    [46, 402, 307, 158, 24, 535, 329, 38, 132, 683, 516, 21, 254, 486, 45, 30, 609, 18, 52, 15, 203, 252, 472, 333,
     27, 905, 662, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 264, 2000, 1900, 2333, 1000, 1000, 2000, 335, 417, 2836, 500],
    // after q
    [527, 645, 419, 592, 742, 1000, 828, 755, 462, 1000, 1000, 85, 623, 760, 597, 686, 345, 231, 501, 315, 7, 786, 800, 721,
     813, 1000, 1000, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 935, 1250, 1667, 2000, 610, 1800, 2500, 335, 417, 2836, 500],
    // after r
    [92, 472, 82, 44, 4, 247, 23, 501, 64, 838, 46, 153, 39, 31, 11, 415, 355, 22, 30, 14, 98, 55, 864, 441,
     19, 703, 656, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 344, 1500, 1692, 739, 610, 1480, 1982, 2000, 417, 2836, 500],
    // after s
    [97, 556, 195, 147, 14, 349, 209, 53, 88, 638, 141, 166, 237, 266, 78, 82, 312, 39, 16, 1, 58, 631, 218, 733,
     132, 474, 1000, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 367, 1500, 1636, 1960, 610, 1065, 2000, 2000, 417, 2836, 500],
    // after t
    [73, 595, 168, 137, 24, 40, 801, 2, 56, 756, 340, 154, 262, 555, 32, 91, 999, 15, 62, 44, 52, 602, 201, 84,
     18, 396, 127, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 448, 1482, 1800, 739, 1000, 1000, 1750, 2000, 417, 2836, 500],
    // after u
    [95, 5, 41, 7, 16, 14, 19, 425, 30, 491, 105, 2, 2, 1, 262, 22, 832, 1, 1, 2, 559, 165, 311, 31,
     395, 218, 11, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 472, 1667, 1800, 2500, 610, 1000, 2250, 2000, 417, 2836, 500],
    // after v
    [26, 586, 462, 589, 9, 745, 497, 670, 224, 842, 473, 469, 189, 560, 72, 586, 831, 308, 399, 680, 459, 552, 573, 762,
     552, 682, 1000, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 413, 1571, 1545, 2000, 610, 2000, 2000, 2000, 417, 2836, 500],
    // after w
    [95, 581, 667, 272, 37, 652, 501, 4, 39, 798, 612, 495, 568, 45, 24, 453, 1000, 86, 47, 416, 595, 666, 153, 33,
     268, 992, 1000, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 609, 1250, 1444, 1800, 610, 1000, 2000, 2000, 417, 2836, 500],
    // after x
    [99, 550, 179, 367, 249, 534, 1000, 777, 125, 1000, 1000, 729, 312, 689, 721, 85, 999, 985, 613, 31, 783, 836, 996, 243,
     238, 785, 1000, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 833, 1500, 1500, 1000, 610, 1435, 2000, 2000, 417, 2836, 500],
    // after y
    [94, 619, 901, 633, 217, 942, 524, 783, 199, 891, 628, 213, 206, 27, 48, 18, 1000, 245, 105, 91, 621, 900, 296, 659,
     394, 437, 453, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 729, 1600, 1400, 739, 1000, 2263, 2000, 2000, 417, 2836, 500],
    // after z
    [182, 787, 782, 481, 20, 716, 698, 273, 228, 798, 746, 856, 771, 375, 223, 846, 999, 667, 768, 498, 281, 802, 348, 563,
     281, 287, 1000, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 783, 2000, 1455, 2000, 610, 1000, 2000, 2000, 417, 2836, 500],
    // after quote " ' `
    [617, 866, 973, 663, 513, 975, 882, 934, 378, 1000, 981, 322, 695, 949, 713, 990, 944, 490, 67, 59, 589, 342, 1000, 479,
     623, 655, 252, 345, 269, 3, 93, 539, 74, 607, 500, 16, 500, 453, 862, 2000, 739, 1000, 1444, 2000, 1371, 1042, 1875, 500],
    // after open ( [ { <
    [137, 67, 114, 308, 69, 75, 120, 148, 88, 115, 85, 153, 111, 26, 132, 115, 740, 213, 72, 47, 266, 44, 210, 18,
     219, 349, 18, 274, 95, 294, 570, 62, 137, 165, 500, 1, 500, 1976, 1223, 1667, 1182, 1000, 1032, 2167, 1059, 1000, 2836, 500],
    // after close ) ] } >
    [356, 756, 794, 555, 716, 1000, 1000, 616, 928, 1000, 779, 828, 871, 667, 829, 724, 1000, 566, 451, 858, 1000, 834, 963, 547,
     1000, 778, 379, 78, 293, 150, 133, 375, 358, 772, 500, 1, 500, 1750, 1559, 1000, 1000, 1000, 679, 1982, 1860, 957, 2836, 500],
    // after sep , ; :
    [888, 743, 685, 648, 251, 291, 361, 444, 300, 289, 717, 433, 769, 76, 204, 823, 472, 282, 360, 426, 262, 787, 718, 234,
     42, 353, 11, 220, 551, 4, 664, 538, 132, 436, 500, 0, 500, 1000, 1412, 2000, 1000, 610, 1062, 1982, 1784, 996, 2836, 500],
    // after dot .
    [13, 0, 5, 0, 9, 0, 0, 4, 22, 0, 28, 6, 0, 2, 5, 0, 138, 5, 8, 17, 162, 28, 1, 0,
     20, 7, 297, 342, 741, 480, 10, 700, 430, 87, 500, 1, 500, 642, 1459, 1000, 1000, 610, 1000, 1982, 1765, 922, 2836, 500],
    // after op = + - * % & | ^ ! ? ~
    [483, 188, 127, 296, 326, 153, 530, 303, 342, 295, 418, 127, 153, 103, 269, 124, 688, 66, 111, 181, 441, 491, 163, 24,
     463, 307, 343, 283, 117, 277, 701, 44, 484, 782, 500, 251, 500, 1276, 622, 1714, 1178, 1000, 1038, 1933, 1428, 956, 4000, 500],
    // after slash / \
    [437, 150, 354, 81, 346, 230, 36, 331, 491, 258, 351, 424, 9, 38, 357, 136, 155, 340, 27, 172, 27, 57, 162, 35,
     230, 703, 344, 807, 817, 484, 509, 424, 26, 339, 500, 17, 500, 1899, 1345, 2000, 1000, 1000, 1000, 2250, 1902, 1004, 2836, 500],
    // after misc # $ @ _
    [86, 35, 43, 41, 92, 34, 34, 55, 65, 169, 124, 33, 28, 35, 75, 39, 367, 78, 32, 77, 100, 52, 61, 330,
     357, 430, 865, 215, 850, 577, 376, 783, 601, 123, 500, 169, 500, 1550, 1557, 1500, 2667, 2000, 1222, 2083, 1668, 1003, 4000, 500],
    // after space
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
     0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 500, 9, 500, 16, 0, 1000, 502, 279, 29, 333, 7, 159, 1000, 500],
    // after newline
    [76, 85, 92, 34, 21, 59, 48, 35, 75, 313, 99, 38, 46, 14, 34, 75, 337, 30, 28, 16, 69, 97, 155, 82,
     49, 261, 71, 144, 192, 64, 101, 96, 202, 254, 500, 0, 500, 642, 187, 1628, 739, 610, 399, 1982, 335, 417, 2836, 500],
    // after other whitespace
    [398, 355, 436, 247, 312, 320, 69, 537, 218, 299, 434, 244, 324, 617, 647, 281, 587, 316, 140, 288, 764, 267, 571, 257,
     691, 487, 71, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 1271, 1034, 1375, 1554, 1000, 1023, 2000, 2000, 417, 2836, 500],
    // after latin letter
    [371, 366, 314, 251, 140, 287, 220, 120, 277, 575, 405, 284, 161, 109, 46, 507, 324, 64, 139, 148, 531, 137, 79, 351,
     115, 358, 71, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 1028, 1800, 1700, 739, 610, 3000, 1625, 1000, 417, 2836, 500],
    // after greek/cyrillic letter
    [1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000,
     1000, 1000, 71, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 1000, 198, 1500, 2333, 1000, 2000, 1667, 2000, 417, 2836, 500],
    // after other script letter
    [1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000,
     1000, 1000, 71, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 1750, 2000, 1429, 3000, 610, 399, 2250, 2000, 417, 2836, 500],
    // after han
    [1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 313, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 16, 1000, 97, 1000, 1000,
     1000, 1000, 71, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 2000, 1000, 1000, 652, 981, 3000, 1148, 335, 417, 2836, 500],
    // after kana
    [1000, 85, 92, 34, 21, 59, 48, 35, 75, 313, 1000, 38, 1000, 14, 34, 75, 337, 1000, 1000, 16, 69, 97, 155, 82,
     49, 261, 71, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 642, 187, 1628, 1013, 562, 399, 1982, 335, 417, 2836, 500],
    // after hangul
    [1000, 1000, 1000, 1000, 21, 59, 48, 1000, 75, 1000, 99, 1000, 1000, 1000, 34, 75, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000,
     1000, 1000, 71, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 642, 2000, 1628, 739, 610, 555, 1982, 335, 417, 2836, 500],
    // after other letter
    [1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 75, 1000, 1000, 1000, 1000, 1000, 1000, 75, 1000, 30, 1000, 1000, 1000, 1000, 1000, 1000,
     1000, 261, 71, 144, 192, 64, 101, 96, 76, 254, 500, 9, 500, 642, 2000, 1500, 1667, 1000, 2000, 1778, 335, 417, 2836, 500],
    // after 2-byte symbol
    [1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 883, 1000, 1000, 1000, 1000, 1000,
     1000, 1000, 1000, 1000, 900, 458, 208, 996, 1000, 1000, 500, 603, 500, 1964, 1000, 1800, 739, 610, 399, 2000, 1377, 1000, 2836, 500],
    // after 3-byte symbol
    [615, 1000, 1000, 610, 998, 1000, 1000, 1000, 991, 1000, 1000, 884, 637, 609, 564, 1000, 1000, 526, 290, 458, 1000, 977, 1000, 1000,
     1000, 1000, 996, 997, 986, 960, 914, 967, 1000, 1000, 500, 403, 500, 1562, 1561, 1687, 876, 777, 2136, 1923, 1867, 70, 4000, 500],
    // after 4-byte symbol
    [76, 85, 92, 34, 21, 59, 1000, 1000, 75, 313, 1000, 38, 46, 1000, 34, 75, 337, 30, 28, 16, 69, 97, 155, 82,
     49, 261, 1000, 144, 1000, 64, 1000, 1000, 76, 1000, 500, 1000, 500, 642, 187, 1628, 739, 610, 399, 1982, 335, 1000, 2000, 500],
    // after start of piece
    [1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000,
     1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1488, 1433, 1604, 1376, 1000, 1122, 2038, 1567, 1004, 3316, 1000],
];
/// Correction for ASCII letters by the case of the previous char: `CASE[previous is a capital][NOT_LETTER, LOWER, UPPER]`.
static CASE: [[i16; 4]; 2] = [[0, -6, 17, 0], [0, 68, 69, 0]];

#[cfg(test)]
mod tests {
    use super::*;

    /// xorshift64*: deterministic bytes for the synthetic samples.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn bytes(&mut self, n: usize) -> Vec<u8> {
            (0..n).map(|_| (self.next() >> 56) as u8).collect()
        }
    }

    fn base64(data: &[u8]) -> String {
        const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for c in data.chunks(3) {
            let v = (u32::from(c[0]) << 16)
                | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
                | u32::from(*c.get(2).unwrap_or(&0));
            for k in 0..4 {
                if k <= c.len() {
                    out.push(A[(v >> (18 - 6 * k)) as usize & 63] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    fn hex(data: &[u8]) -> String {
        data.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// A PEM-like block and a data URL: base64 wrapped at 64 columns, then one long line.
    fn synthetic_base64() -> String {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let b = base64(&rng.bytes(1500));
        let mut s = String::from("-----BEGIN CERTIFICATE-----\n");
        for line in b.as_bytes().chunks(64) {
            s.push_str(std::str::from_utf8(line).unwrap());
            s.push('\n');
        }
        s.push_str("-----END CERTIFICATE-----\n<img src=\"data:image/png;base64,");
        s.push_str(&base64(&rng.bytes(900)));
        s.push_str("\">\n");
        s
    }

    /// Checksum listings, a hexdump and some ids.
    fn synthetic_hex() -> String {
        let mut rng = Rng(0xD1B5_4A32_D192_ED03);
        let mut s = String::new();
        for i in 0..16 {
            s.push_str(&format!("{}  dist/chunk-{i:03}.js\n", hex(&rng.bytes(32))));
        }
        for row in 0..24 {
            let d = rng.bytes(16);
            let cols: Vec<String> = d.iter().map(|b| format!("{b:02x}")).collect();
            let ascii: String = d
                .iter()
                .map(|&b| {
                    if (0x20..0x7f).contains(&b) {
                        b as char
                    } else {
                        '.'
                    }
                })
                .collect();
            s.push_str(&format!(
                "{:08x}  {}  {}  |{ascii}|\n",
                row * 16,
                cols[..8].join(" "),
                cols[8..].join(" ")
            ));
        }
        for _ in 0..10 {
            let h = hex(&rng.bytes(16));
            s.push_str(&format!(
                "commit {} id={}-{}-{}-{}-{}\n",
                hex(&rng.bytes(20)),
                &h[..8],
                &h[8..12],
                &h[12..16],
                &h[16..20],
                &h[20..]
            ));
        }
        s
    }

    fn corpus() -> Vec<(&'static str, String)> {
        let mut v: Vec<(&'static str, String)> = [
            ("prose", include_str!("../testdata/tokens/prose_en.txt")),
            (
                "markdown",
                include_str!("../testdata/tokens/markdown_doc.md"),
            ),
            ("rust", include_str!("../testdata/tokens/rust.rs")),
            (
                "typescript",
                include_str!("../testdata/tokens/typescript.ts"),
            ),
            ("python", include_str!("../testdata/tokens/python.py")),
            ("json", include_str!("../testdata/tokens/config.json")),
            (
                "shell",
                include_str!("../testdata/tokens/shell_session.txt"),
            ),
            ("log", include_str!("../testdata/tokens/server.log")),
            ("listing", include_str!("../testdata/tokens/listing.txt")),
            ("minified", include_str!("../testdata/tokens/minified.js")),
            ("cjk", include_str!("../testdata/tokens/cjk.txt")),
            ("accented", include_str!("../testdata/tokens/accented.txt")),
            ("emoji", include_str!("../testdata/tokens/chat_emoji.txt")),
        ]
        .into_iter()
        .map(|(k, s)| (k, s.to_string()))
        .collect();
        v.push(("base64", synthetic_base64()));
        v.push(("hex", synthetic_hex()));
        v
    }

    #[test]
    #[ignore = "reports the calibration table; run with --ignored --nocapture"]
    fn report_calibration() {
        let (mut te, mut tx) = (0u64, 0u64);
        eprintln!(
            "{:<11} {:>6} {:>6} {:>6} {:>7}",
            "sample", "bytes", "exact", "est", "error"
        );
        for (name, text) in corpus() {
            let (e, x) = (estimate(&text), exact(&text));
            te += u64::from(e);
            tx += u64::from(x);
            let err = 100.0 * (f64::from(e) - f64::from(x)) / f64::from(x);
            eprintln!("{name:<11} {:>6} {x:>6} {e:>6} {err:>+6.1}%", text.len());
        }
        let err = 100.0 * (te as f64 - tx as f64) / tx as f64;
        eprintln!("{:<11} {:>6} {tx:>6} {te:>6} {err:>+6.1}%", "total", "");
    }

    /// Relative error of the estimate, in percent.
    fn error_percent(estimated: u32, exact: u32) -> f64 {
        100.0 * (f64::from(estimated) - f64::from(exact)) / f64::from(exact)
    }

    #[test]
    fn exact_matches_pinned_o200k_counts() {
        // Values computed once with tiktoken's o200k_base; they pin the reference.
        let cases = [
            ("", 0),
            ("hello world", 2),
            ("Hello, world!\n", 4),
            ("fn main() {\n    println!(\"{}\", 1 + 2);\n}\n", 14),
            ("東京タワーは高い。", 8),
            ("naïve café déjà vu", 6),
            ("🙂👍🏽", 4),
            ("12345678901", 4),
            ("   indented\r\n\r\n\ttab", 5),
            ("I'M sure it's fine, isn't it?", 9),
        ];
        for (text, want) in cases {
            assert_eq!(exact(text), want, "{text:?}");
        }
    }

    #[test]
    fn special_token_text_is_ordinary_text() {
        // As a special token this would be the single token 199999.
        assert_eq!(exact("<|endoftext|>"), 7);
        assert_eq!(exact("a<|endoftext|>b"), exact("a") + 7 + exact("b"));
    }

    #[test]
    fn empty_and_tiny_inputs() {
        assert_eq!(estimate(""), 0);
        assert_eq!(estimate("a"), 1);
        assert_eq!(estimate(" "), 1);
        assert_eq!(estimate("\n"), 1);
        assert_eq!(estimate("7"), 1);
        assert_eq!(estimate("hello world"), 2);
    }

    #[test]
    fn counted_records_how_it_was_counted() {
        let text = "The quick brown fox jumps over the lazy dog.";
        assert_eq!(
            Counted::estimated(text),
            Counted {
                tokens: estimate(text),
                exact: false
            }
        );
        assert_eq!(
            Counted::measured(text),
            Counted {
                tokens: 10,
                exact: true
            }
        );
    }

    #[test]
    fn estimate_tracks_o200k_on_the_calibration_corpus() {
        let (mut total_estimated, mut total_exact) = (0u32, 0u32);
        for (name, text) in corpus() {
            let (e, x) = (estimate(&text), exact(&text));
            assert!(x > 200, "{name}: sample too small ({x} tokens)");
            let err = error_percent(e, x);
            assert!(
                err.abs() <= 12.0,
                "{name}: estimate {e}, exact {x} ({err:+.1} %)"
            );
            total_estimated += e;
            total_exact += x;
        }
        let err = error_percent(total_estimated, total_exact);
        assert!(
            err.abs() <= 5.0,
            "total: estimate {total_estimated}, exact {total_exact} ({err:+.1} %)"
        );
    }

    /// Collects the piece boundaries of the split.
    struct Boundaries(Vec<usize>);

    impl Sink for Boundaries {
        fn start(&mut self, at: usize) {
            self.0.push(at);
        }
        fn ch(&mut self, _at: usize, _c: Ch) {}
        fn fixed(&mut self, at: usize, _end: usize, _milli: u32) {
            self.0.push(at);
        }
    }

    fn pieces(text: &str) -> Vec<&str> {
        let mut b = Boundaries(Vec::new());
        scan(text, &mut b);
        b.0.push(text.len());
        b.0.windows(2).map(|w| &text[w[0]..w[1]]).collect()
    }

    #[test]
    fn split_covers_the_text_in_order() {
        for (name, text) in corpus() {
            let p = pieces(&text);
            assert!(p.iter().all(|s| !s.is_empty()), "{name}: empty piece");
            assert_eq!(p.concat(), text, "{name}");
        }
    }

    /// BPE never merges across pre-tokenizer pieces, so if the scanner splits
    /// exactly like o200k's pattern, the per-piece counts add up to the whole.
    #[test]
    fn split_matches_the_o200k_pattern() {
        let tricky = "don't DON'T we'll they'RE o'clock 'quoted' HTTPServer parseJSONValue \
            x=1234567 v2.0.1 ½ ²³ ①② ４５６ Ⅻ \t\tfoo  \n\n  bar \r\n\r\n  \u{3000}全角\u{a0}nbsp \
            e\u{301}te\u{301} Ελληνικά Привет мир שלום עולם مرحبا नमस्ते ไทย \
            👩‍💻 🇫🇷 ✔︎ ... ?! --flag=value /usr/local/bin path\\to\\file \
            {\"a\":[1,2,{\"b\":null}]}\n    }\n}\n\n\n   ";
        let mut samples = corpus();
        samples.push(("tricky", tricky.to_string()));
        for (name, text) in samples {
            let sum: u32 = pieces(&text).iter().map(|p| exact(p)).sum();
            assert_eq!(sum, exact(&text), "{name}");
        }
    }

    #[test]
    fn longer_text_does_not_estimate_less() {
        for (name, text) in corpus() {
            // at line ends: never less
            let mut prev = 0;
            for (i, _) in text.match_indices('\n') {
                let e = estimate(&text[..=i]);
                assert!(e >= prev, "{name}: {e} < {prev} at byte {i}");
                prev = e;
            }
            // at any char: a merge can save at most one token
            let mut prev = 0;
            for (i, _) in text.char_indices().take(600) {
                let e = estimate(&text[..i]);
                assert!(e + 1 >= prev, "{name}: {e} after {prev} at byte {i}");
                prev = e;
            }
            // more of the same
            let (one, two) = (estimate(&text), estimate(&text.repeat(2)));
            assert!(
                two >= 2 * one - 1 && two <= 2 * one + 1,
                "{name}: {one} then {two}"
            );
        }
    }

    #[test]
    fn estimate_is_linear_in_long_runs() {
        for unit in ["a", " ", "\n", "=", "7", "日", "🙂", "ab ", "\r\n"] {
            let small = estimate(&unit.repeat(1_000));
            let large = estimate(&unit.repeat(10_000));
            assert!(
                large >= 9 * small && large <= 11 * small + 10,
                "{unit:?}: {small} then {large}"
            );
        }
    }
}

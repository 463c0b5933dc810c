//! Bounded lines of a byte stream: how a resident process (`mc-transform
//! serve`'s JSON Lines) and the MCP server (JSON-RPC over stdio) read their
//! requests. A line longer than the bound is consumed to its end without
//! being kept, so a runaway writer cannot exhaust memory; lines of ASCII
//! whitespace only are skipped; a line is handed over as text only when it
//! is UTF-8.

use std::io::{self, BufRead};

/// One line of input.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A line without its `\n` (a `\r` before it is kept: JSON reads it as
    /// whitespace).
    Text(String),
    /// A line longer than the bound (its whole length), skipped.
    TooLong(usize),
    /// A line that is not UTF-8: its length, and how far it was valid.
    NotUtf8 { length: usize, valid_up_to: usize },
    /// The input ended.
    End,
}

/// The lines of `reader`, each at most `bound` bytes (its `\n` not counted).
pub struct Lines<R> {
    reader: R,
    bound: usize,
}

impl<R: BufRead> Lines<R> {
    pub fn new(reader: R, bound: usize) -> Lines<R> {
        Lines { reader, bound }
    }

    /// The next line that is not blank, or [`Line::End`]. A line cut by the
    /// end of input counts as a line.
    pub fn next_line(&mut self) -> io::Result<Line> {
        loop {
            let mut bytes = Vec::new();
            let mut length = 0usize;
            let mut read_any = false;
            loop {
                let chunk = match self.reader.fill_buf() {
                    Ok(chunk) => chunk,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                };
                if chunk.is_empty() {
                    break;
                }
                read_any = true;
                let (take, newline) = match memchr::memchr(b'\n', chunk) {
                    Some(at) => (at, true),
                    None => (chunk.len(), false),
                };
                length = length.saturating_add(take);
                if length <= self.bound {
                    bytes.extend_from_slice(chunk.get(..take).unwrap_or_default());
                } else if bytes.capacity() > 0 {
                    // Over the bound: the rest of the line is consumed, not kept.
                    bytes = Vec::new();
                }
                self.reader.consume(take + usize::from(newline));
                if newline {
                    break;
                }
            }
            if !read_any {
                return Ok(Line::End);
            }
            if length > self.bound {
                return Ok(Line::TooLong(length));
            }
            if bytes.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Ok(match String::from_utf8(bytes) {
                Ok(text) => Line::Text(text),
                Err(e) => Line::NotUtf8 {
                    length: e.as_bytes().len(),
                    valid_up_to: e.utf8_error().valid_up_to(),
                },
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line of `input` under `bound`, read through a 4-byte buffer so
    /// that lines span many reads.
    fn lines(input: &[u8], bound: usize) -> Vec<Line> {
        let mut reader = Lines::new(io::BufReader::with_capacity(4, input), bound);
        let mut out = Vec::new();
        loop {
            let line = reader.next_line().unwrap();
            let end = line == Line::End;
            out.push(line);
            if end {
                return out;
            }
        }
    }

    fn text(s: &str) -> Line {
        Line::Text(s.into())
    }

    #[test]
    fn lines_are_split_and_blank_ones_skipped() {
        assert_eq!(
            lines(b"{\"a\":1}\n\n   \n0123456789abc\n{\"b\":2}", 10),
            [
                text("{\"a\":1}"),
                Line::TooLong(13),
                text("{\"b\":2}"),
                Line::End
            ]
        );
        assert_eq!(
            lines(b"{\"a\":1}\n\n   \n\t\r\n{\"b\":2}\n", 10),
            [text("{\"a\":1}"), text("{\"b\":2}"), Line::End]
        );
        assert_eq!(lines(b"", 10), [Line::End]);
        assert_eq!(lines(b"\n\n", 10), [Line::End]);
    }

    #[test]
    fn a_line_over_the_bound_is_skipped_whole_and_the_next_one_read() {
        assert_eq!(
            lines(b"0123456789abc\nok\n", 10),
            [Line::TooLong(13), text("ok"), Line::End]
        );
        // Exactly the bound is a line; the newline does not count.
        assert_eq!(lines(b"0123456789\n", 10), [text("0123456789"), Line::End]);
        // Blank but too long is still too long.
        assert_eq!(lines(&[b' '; 12], 10), [Line::TooLong(12), Line::End]);
    }

    #[test]
    fn a_line_cut_by_the_end_of_input_is_a_line() {
        assert_eq!(
            lines(b"a\n{\"b\":2}", 10),
            [text("a"), text("{\"b\":2}"), Line::End]
        );
        assert_eq!(lines(b"0123456789abc", 10), [Line::TooLong(13), Line::End]);
    }

    #[test]
    fn crlf_keeps_its_carriage_return() {
        assert_eq!(
            lines(b"{}\r\n[]\r\n", 10),
            [text("{}\r"), text("[]\r"), Line::End]
        );
    }

    #[test]
    fn invalid_utf8_is_refused_with_where_it_went_wrong_and_reading_goes_on() {
        assert_eq!(
            lines(b"ab\xffcd\nok\n", 10),
            [
                Line::NotUtf8 {
                    length: 5,
                    valid_up_to: 2
                },
                text("ok"),
                Line::End
            ]
        );
        // A character cut at the end of the line.
        assert_eq!(
            lines("é".as_bytes().get(..1).unwrap(), 10),
            [
                Line::NotUtf8 {
                    length: 1,
                    valid_up_to: 0
                },
                Line::End
            ]
        );
    }

    #[test]
    fn a_read_error_is_returned() {
        struct Broken;
        impl io::Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::other("gone"))
            }
        }
        let mut reader = Lines::new(io::BufReader::new(Broken), 10);
        assert_eq!(reader.next_line().unwrap_err().to_string(), "gone");
    }
}

//! Reading a harness's transcript file (JSONL) without trusting it.
//!
//! A transcript path comes from a flag, a request on stdin or a hook input, so
//! it may name anything: a FIFO that never ends, `/dev/zero`, a folder, a file
//! far larger than any session. [`for_each_line`] reads only a regular file,
//! at most `max_bytes` of it, one line at a time, and decodes each line on its
//! own with invalid UTF-8 replaced, so a bad byte costs at most its own line.

use std::fs::{File, Metadata};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use crate::error::{Error, Result};

/// The default cap on a transcript's size (`transcript.max_bytes`): 256 MiB.
/// A long Claude Code session's transcript reaches tens of MB (tool outputs
/// and pasted images are stored whole); this leaves room for several times
/// that while bounding what a wrong path can make mc read and hold.
pub const DEFAULT_MAX_BYTES: u64 = 256 * 1024 * 1024;

/// One line of a transcript file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Line<'a> {
    /// 1-based line number.
    pub number: usize,
    /// The line without its `\n` (or `\r\n`).
    pub text: &'a str,
    /// Whether invalid UTF-8 in the line was replaced by U+FFFD.
    pub replaced: bool,
}

/// What a non-regular file is, for the error message.
fn kind_of(meta: &Metadata) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if meta.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

fn not_regular(path: &Path, meta: &Metadata) -> Error {
    Error::input(format!(
        "transcript {} is {}, not a regular file; pass the session's .jsonl file",
        path.display(),
        kind_of(meta)
    ))
}

fn too_big(path: &Path, size: u64, max_bytes: u64) -> Error {
    Error::input(format!(
        "transcript {} is larger than {max_bytes} bytes ({size} or more), the limit \
         transcript.max_bytes sets",
        path.display()
    ))
    .with_hint(
        "raise transcript.max_bytes in the user config if this file is really the session's \
         transcript",
    )
}

/// Call `each` with every line of the regular file at `path`, in order. The
/// file is refused before anything is read when it is not a regular file (a
/// FIFO, a device, a folder) or is larger than `max_bytes`; a file that grows
/// past `max_bytes` while it is read is refused too. An error from `each`
/// stops the reading and is returned.
pub fn for_each_line(
    path: &Path,
    max_bytes: u64,
    mut each: impl FnMut(Line<'_>) -> Result<()>,
) -> Result<()> {
    let cannot =
        |e: std::io::Error| Error::input(format!("cannot read transcript {}: {e}", path.display()));
    // Look before opening: opening a FIFO for reading blocks until a writer comes.
    let meta = std::fs::metadata(path).map_err(cannot)?;
    if !meta.is_file() {
        return Err(not_regular(path, &meta));
    }
    if meta.len() > max_bytes {
        return Err(too_big(path, meta.len(), max_bytes));
    }
    let file = File::open(path).map_err(cannot)?;
    // The path may have been replaced between the look and the open.
    let meta = file.metadata().map_err(cannot)?;
    if !meta.is_file() {
        return Err(not_regular(path, &meta));
    }
    let mut reader = BufReader::with_capacity(1 << 16, file.take(max_bytes.saturating_add(1)));
    let mut buf = Vec::new();
    let mut total: u64 = 0;
    let mut number = 0usize;
    loop {
        buf.clear();
        let read = reader.read_until(b'\n', &mut buf).map_err(|e| {
            Error::Io(std::io::Error::new(
                e.kind(),
                format!("reading transcript {}: {e}", path.display()),
            ))
        })?;
        if read == 0 {
            return Ok(());
        }
        total = total.saturating_add(read as u64);
        if total > max_bytes {
            return Err(too_big(path, total, max_bytes));
        }
        number += 1;
        let mut bytes = buf.as_slice();
        if let Some(rest) = bytes.strip_suffix(b"\n") {
            bytes = rest.strip_suffix(b"\r").unwrap_or(rest);
        }
        let text = String::from_utf8_lossy(bytes);
        each(Line {
            number,
            text: &text,
            replaced: matches!(text, std::borrow::Cow::Owned(_)),
        })?;
    }
}

/// A transcript's lines as JSON objects: [`read_objects`].
#[derive(Debug, Clone, Default)]
pub struct Objects {
    /// Each line that holds a JSON object, with its 1-based line number.
    pub lines: Vec<(usize, serde_json::Value)>,
    /// Lines skipped (not a JSON object) or repaired (invalid UTF-8 replaced).
    pub warnings: Vec<String>,
}

/// How many skipped or repaired lines are named one by one; the rest are counted.
const NAMED_LINE_WARNINGS: usize = 5;

/// Every line of the file at `path` that holds a JSON object (the file rules
/// and the cap are [`for_each_line`]'s). Blank lines are skipped silently; a
/// line that is not a JSON object is skipped with a warning naming it, and a
/// line with invalid UTF-8 is read with it replaced (and a warning), so a bad
/// line never makes another one unreadable. `what` names the file kind in
/// the warnings ("transcript line 3 …", "rollout line 3 …").
pub fn read_objects(path: &Path, max_bytes: u64, what: &str) -> Result<Objects> {
    let mut out = Objects::default();
    let mut noted = 0usize;
    let mut note = |warnings: &mut Vec<String>, text: String| {
        noted += 1;
        if noted <= NAMED_LINE_WARNINGS {
            warnings.push(text);
        }
    };
    for_each_line(path, max_bytes, |line| {
        if line.replaced {
            note(
                &mut out.warnings,
                format!(
                    "{}: line {} holds invalid UTF-8; replaced it with U+FFFD",
                    path.display(),
                    line.number
                ),
            );
        }
        match parse_object(line.number, line.text, what) {
            Ok(Some(value)) => out.lines.push((line.number, value)),
            Ok(None) => {}
            Err(e) => note(
                &mut out.warnings,
                format!("{}: {e}; skipped it", path.display()),
            ),
        }
        Ok(())
    })?;
    if noted > NAMED_LINE_WARNINGS {
        out.warnings.push(format!(
            "{}: {} more lines skipped or repaired",
            path.display(),
            noted - NAMED_LINE_WARNINGS
        ));
    }
    Ok(out)
}

/// One line as a JSON object: `None` for a blank line, an input error naming
/// the line for anything that is not an object.
pub fn parse_object(number: usize, line: &str, what: &str) -> Result<Option<serde_json::Value>> {
    if line.trim().is_empty() {
        return Ok(None);
    }
    match serde_json::from_str::<serde_json::Value>(line) {
        Ok(value @ serde_json::Value::Object(_)) => Ok(Some(value)),
        Ok(_) => Err(Error::input(format!(
            "{what} line {number} is not a JSON object"
        ))),
        Err(e) => Err(Error::input(format!(
            "{what} line {number} is not valid JSON: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(path: &Path, max: u64) -> Result<Vec<(usize, String, bool)>> {
        let mut out = Vec::new();
        for_each_line(path, max, |l| {
            out.push((l.number, l.text.to_string(), l.replaced));
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn lines_are_decoded_one_by_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        std::fs::write(&path, b"{\"a\":1}\r\n{\"b\":\"x\xffy\"}\n\n{\"c\":3}").unwrap();
        assert_eq!(
            lines(&path, 1000).unwrap(),
            [
                (1, "{\"a\":1}".to_string(), false),
                (2, "{\"b\":\"x\u{fffd}y\"}".to_string(), true),
                (3, String::new(), false),
                (4, "{\"c\":3}".to_string(), false),
            ]
        );
    }

    #[test]
    fn the_size_cap_is_exact() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        std::fs::write(&path, "0123456789\n").unwrap();
        assert_eq!(lines(&path, 11).unwrap().len(), 1);
        let err = lines(&path, 10).unwrap_err();
        assert_eq!(err.kind(), crate::error::ErrorKind::Input);
        assert!(err.to_string().contains("transcript.max_bytes"), "{err}");
        assert!(err.hints()[0].starts_with("raise transcript.max_bytes"));
    }

    #[test]
    fn folders_and_missing_files_are_input_errors() {
        let dir = tempfile::tempdir().unwrap();
        let err = lines(dir.path(), 1000).unwrap_err();
        assert!(
            matches!(&err, Error::Input(m) if m.contains("a directory")),
            "{err}"
        );
        let err = lines(&dir.path().join("none.jsonl"), 1000).unwrap_err();
        assert!(
            matches!(&err, Error::Input(m) if m.contains("cannot read transcript")),
            "{err}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn devices_are_refused_without_reading() {
        let err = lines(Path::new("/dev/zero"), DEFAULT_MAX_BYTES).unwrap_err();
        assert!(
            matches!(&err, Error::Input(m) if m.contains("a character device")),
            "{err}"
        );
    }

    #[test]
    fn an_error_from_the_callback_stops_the_reading() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        std::fs::write(&path, "a\nb\nc\n").unwrap();
        let mut seen = 0;
        let err = for_each_line(&path, 100, |l| {
            seen += 1;
            if l.number == 2 {
                Err(Error::input("stop"))
            } else {
                Ok(())
            }
        });
        assert!(err.is_err());
        assert_eq!(seen, 2);
    }
}

//! The usage an answer reports, read as the bytes pass by. Anthropic: a
//! stream's `message_start` (input, cache read, cache write) and
//! `message_delta` (output, and any figure it repeats). OpenAI Responses: a
//! stream's `response.completed` (`input_tokens`, cached ones included, and
//! `input_tokens_details.cached_tokens`, `output_tokens`), and the error of
//! a `response.failed`. Or a whole JSON message's `usage`.

use mc_base::domain::envelope::Usage;
use serde_json::Value;

/// An SSE line longer than this is not a usage event; it is skipped unread.
const MAX_LINE: usize = 1024 * 1024;

/// Reads usage out of an answer fed to it in pieces, as they arrive.
#[derive(Debug, Default)]
pub struct UsageScanner {
    /// The unfinished last line of the bytes seen so far.
    line: Vec<u8>,
    /// The current line grew past [`MAX_LINE`]: drop it up to its end.
    skipping: bool,
    usage: Option<Usage>,
    /// The `error` of a Responses stream's `response.failed` event.
    failure: Option<Vec<u8>>,
}

impl UsageScanner {
    /// Feed the next piece of a streamed (SSE) answer.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            match memchr::memchr(b'\n', bytes) {
                Some(end) => {
                    if !self.skipping {
                        if self.line.is_empty() {
                            self.line_done(bytes.get(..end).unwrap_or_default());
                        } else {
                            self.line
                                .extend_from_slice(bytes.get(..end).unwrap_or_default());
                            let line = std::mem::take(&mut self.line);
                            self.line_done(&line);
                        }
                    }
                    self.line.clear();
                    self.skipping = false;
                    bytes = bytes.get(end + 1..).unwrap_or_default();
                }
                None => {
                    if !self.skipping {
                        self.line.extend_from_slice(bytes);
                        if self.line.len() > MAX_LINE {
                            self.line.clear();
                            self.skipping = true;
                        }
                    }
                    bytes = &[];
                }
            }
        }
    }

    fn line_done(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(data) = line.strip_prefix(b"data:") else {
            return;
        };
        // Only the two events that carry usage are parsed.
        let interesting = memchr::memmem::find(data, b"\"message_start\"").is_some()
            || memchr::memmem::find(data, b"\"message_delta\"").is_some()
            || memchr::memmem::find(data, b"\"response.completed\"").is_some()
            || memchr::memmem::find(data, b"\"response.failed\"").is_some();
        if !interesting {
            return;
        }
        let Ok(event) = serde_json::from_slice::<Value>(data) else {
            return;
        };
        let usage = match event.get("type").and_then(Value::as_str) {
            Some("message_start") => event.get("message").and_then(|m| m.get("usage")),
            Some("message_delta") => event.get("usage"),
            Some("response.completed") => event.get("response").and_then(|r| r.get("usage")),
            Some("response.failed") => {
                self.failure = event
                    .get("response")
                    .and_then(|r| r.get("error"))
                    .map(|e| serde_json::json!({ "error": e }).to_string().into_bytes());
                None
            }
            _ => None,
        };
        if let Some(usage) = usage {
            self.merge(usage);
        }
    }

    fn merge(&mut self, usage: &Value) {
        if !usage.is_object() {
            return;
        }
        let mut current = self.usage.unwrap_or_default();
        let field = |name: &str| usage.get(name).and_then(Value::as_u64);
        if let Some(details) = usage.get("input_tokens_details") {
            // OpenAI: the input counts the cached tokens too.
            let cached = details
                .get("cached_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            let input = field("input_tokens").unwrap_or(0);
            current.input = input.saturating_sub(cached);
            current.cache_read = cached;
            current.output = field("output_tokens").unwrap_or(current.output);
            self.usage = Some(current);
            return;
        }
        if let Some(n) = field("input_tokens") {
            current.input = n;
        }
        if let Some(n) = field("cache_read_input_tokens") {
            current.cache_read = n;
        }
        if let Some(n) = field("cache_creation_input_tokens") {
            current.cache_write = n;
        }
        if let Some(n) = field("output_tokens") {
            current.output = n;
        }
        self.usage = Some(current);
    }

    /// The usage of a whole (not streamed) JSON message.
    pub fn from_message(body: &[u8]) -> Option<Usage> {
        let message: Value = serde_json::from_slice(body).ok()?;
        let mut scanner = UsageScanner::default();
        scanner.merge(message.get("usage")?);
        scanner.usage
    }

    /// The error of a failed Responses stream, as an error body
    /// (`{"error": …}`), if the stream said it failed.
    pub fn failure(&self) -> Option<&[u8]> {
        self.failure.as_deref()
    }

    /// The usage seen so far, if the answer reported any.
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &str = "event: message_start\n\
        data: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":12,\"cache_creation_input_tokens\":300,\"cache_read_input_tokens\":4000,\"output_tokens\":1}}}\n\n\
        event: content_block_delta\n\
        data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"message_delta\"}}\n\n\
        event: message_delta\r\n\
        data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":57}}\r\n\r\n";

    fn expected() -> Usage {
        Usage {
            input: 12,
            cache_read: 4000,
            cache_write: 300,
            output: 57,
        }
    }

    #[test]
    fn a_stream_gives_its_usage_however_it_is_cut() {
        let bytes = STREAM.as_bytes();
        for size in [1, 2, 7, 64, bytes.len()] {
            let mut scanner = UsageScanner::default();
            for piece in bytes.chunks(size) {
                scanner.feed(piece);
            }
            assert_eq!(scanner.usage(), Some(expected()), "pieces of {size}");
        }
    }

    #[test]
    fn a_whole_message_gives_its_usage() {
        let body = br#"{"type":"message","usage":{"input_tokens":12,"cache_creation_input_tokens":300,"cache_read_input_tokens":4000,"output_tokens":57}}"#;
        assert_eq!(UsageScanner::from_message(body), Some(expected()));
        assert_eq!(UsageScanner::from_message(b"not json"), None);
        assert_eq!(UsageScanner::from_message(b"{\"type\":\"error\"}"), None);
    }

    #[test]
    fn a_responses_stream_gives_its_usage_and_its_failure() {
        let stream = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\"}}\n\n\
            event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"response.completed\"}\n\n\
            event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"usage\":{\"input_tokens\":5000,\"input_tokens_details\":{\"cached_tokens\":4096},\"output_tokens\":33,\"total_tokens\":5033}}}\n\n";
        for size in [1, 5, stream.len()] {
            let mut scanner = UsageScanner::default();
            for piece in stream.as_bytes().chunks(size) {
                scanner.feed(piece);
            }
            let expected = Usage {
                input: 904,
                cache_read: 4096,
                cache_write: 0,
                output: 33,
            };
            assert_eq!(scanner.usage(), Some(expected), "pieces of {size}");
            assert_eq!(scanner.failure(), None);
        }
        let mut scanner = UsageScanner::default();
        scanner.feed(b"data: {\"type\":\"response.failed\",\"response\":{\"error\":{\"code\":\"context_length_exceeded\",\"message\":\"Your input exceeds the context window of this model.\"}}}\n");
        let failure: Value = serde_json::from_slice(scanner.failure().unwrap()).unwrap();
        assert_eq!(failure["error"]["code"], "context_length_exceeded");
    }

    #[test]
    fn garbage_and_huge_lines_give_no_usage() {
        let mut scanner = UsageScanner::default();
        scanner.feed(b"data: {\"type\":\"message_start\", broken\n");
        scanner.feed(&vec![b'x'; MAX_LINE + 10]);
        scanner.feed(b"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":3}}\n");
        // The huge line ended at that newline, so the delta on it was skipped.
        assert_eq!(scanner.usage(), None);
        scanner.feed(b"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":3}}\n");
        assert_eq!(scanner.usage().map(|u| u.output), Some(3));
    }
}

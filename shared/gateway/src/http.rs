//! The HTTP/1.1 the gateway speaks with its client: reading a request head
//! (httparse), and writing an answer's head, its body chunks and the
//! gateway's own errors in Anthropic's error shape.

use std::io::{self, Read, Write};

/// Headers that belong to one connection, never forwarded either way
/// (RFC 9110 §7.6.1), with the framing the gateway sets itself.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "host",
    "expect",
];

/// Whether a header (lower-case name) stays on this hop. `connection` may
/// name more of them.
pub(crate) fn is_hop_by_hop(name: &str, connection: &[String]) -> bool {
    HOP_BY_HOP.contains(&name) || connection.iter().any(|c| c == name)
}

/// Headers that carry a secret: forwarded, but never shown to the pass.
pub(crate) fn is_credential(name: &str) -> bool {
    matches!(
        name,
        "authorization" | "proxy-authorization" | "x-api-key" | "cookie" | "set-cookie"
    ) || ["key", "token", "secret", "auth", "password", "session-key"]
        .iter()
        .any(|part| name.contains(part) && name != "x-claude-code-session-id")
}

/// A request head as received.
pub(crate) struct Head {
    pub method: String,
    pub target: String,
    /// Names as sent, values as bytes.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Bytes read past the head: the start of the body.
    pub rest: Vec<u8>,
}

impl Head {
    /// The first value of a header, by its lower-case name, when it is text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }

    /// The tokens of every `connection` header, lower-case.
    pub fn connection_tokens(&self) -> Vec<String> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
            .filter_map(|(_, v)| std::str::from_utf8(v).ok())
            .flat_map(|v| v.split(','))
            .map(|t| t.trim().to_ascii_lowercase())
            .filter(|t| !t.is_empty())
            .collect()
    }
}

pub(crate) enum HeadError {
    /// The client closed before sending a whole head.
    Closed,
    TooLarge,
    Bad(String),
    Io,
}

/// Read one request head from `stream`, at most `max` bytes of it.
pub(crate) fn read_head(stream: &mut impl Read, max: usize) -> Result<Head, HeadError> {
    let mut buffer = Vec::with_capacity(8 * 1024);
    let mut piece = [0u8; 8 * 1024];
    loop {
        let n = match stream.read(&mut piece) {
            Ok(0) => return Err(HeadError::Closed),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return Err(HeadError::Io),
        };
        buffer.extend_from_slice(piece.get(..n).unwrap_or_default());
        let mut headers = [httparse::EMPTY_HEADER; 128];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(&buffer) {
            Ok(httparse::Status::Complete(length)) => {
                let head = Head {
                    method: request.method.unwrap_or_default().to_string(),
                    target: request.path.unwrap_or_default().to_string(),
                    headers: request
                        .headers
                        .iter()
                        .map(|h| (h.name.to_string(), h.value.to_vec()))
                        .collect(),
                    rest: buffer.get(length..).unwrap_or_default().to_vec(),
                };
                if request.version != Some(1) {
                    return Err(HeadError::Bad("only HTTP/1.1 is served".into()));
                }
                return Ok(head);
            }
            Ok(httparse::Status::Partial) if buffer.len() > max => {
                return Err(HeadError::TooLarge);
            }
            Ok(httparse::Status::Partial) => {}
            Err(e) => return Err(HeadError::Bad(format!("not an HTTP request ({e})"))),
        }
    }
}

/// The reason phrase of a status, or an empty one.
fn reason(status: u16) -> &'static str {
    ureq::http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("")
}

/// Write a response head: the status, `headers` (already filtered), the
/// framing, and `connection: close`.
pub(crate) fn write_head(
    out: &mut impl Write,
    status: u16,
    headers: &[(String, Vec<u8>)],
    framing: Framing,
) -> io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    head.extend_from_slice(format!("HTTP/1.1 {status} {}\r\n", reason(status)).as_bytes());
    for (name, value) in headers {
        head.extend_from_slice(name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value);
        head.extend_from_slice(b"\r\n");
    }
    match framing {
        Framing::Length(n) => head.extend_from_slice(format!("content-length: {n}\r\n").as_bytes()),
        Framing::Chunked => head.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        Framing::None => {}
    }
    head.extend_from_slice(b"connection: close\r\n\r\n");
    out.write_all(&head)?;
    out.flush()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    Length(u64),
    Chunked,
    /// No body and no length (an answer to HEAD keeps the upstream's own).
    None,
}

/// Write one chunk of a chunked body in a single write, and flush it.
pub(crate) fn write_chunk(out: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    let mut chunk = Vec::with_capacity(bytes.len() + 16);
    chunk.extend_from_slice(format!("{:x}\r\n", bytes.len()).as_bytes());
    chunk.extend_from_slice(bytes);
    chunk.extend_from_slice(b"\r\n");
    out.write_all(&chunk)?;
    out.flush()
}

/// The gateway's own error, in the shape Anthropic answers errors with, so
/// the harness shows its message.
pub(crate) fn write_error(
    out: &mut impl Write,
    status: u16,
    kind: &str,
    message: &str,
) -> io::Result<()> {
    let body = serde_json::json!({
        "type": "error",
        "error": {"type": kind, "message": format!("mc gateway: {message}")},
    })
    .to_string();
    let headers = [("content-type".to_string(), b"application/json".to_vec())];
    write_head(out, status, &headers, Framing::Length(body.len() as u64))?;
    out.write_all(body.as_bytes())?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_is_read_with_its_headers_and_the_start_of_the_body() {
        let raw = b"POST /v1/messages?beta=true HTTP/1.1\r\nHost: x\r\nX-Api-Key: k\r\nConnection: keep-alive, X-Thing\r\n\r\n{\"a\"";
        let head = read_head(&mut &raw[..], 1024).ok().unwrap();
        assert_eq!(head.method, "POST");
        assert_eq!(head.target, "/v1/messages?beta=true");
        assert_eq!(head.header("x-api-key"), Some("k"));
        assert_eq!(head.rest, b"{\"a\"");
        assert_eq!(head.connection_tokens(), ["keep-alive", "x-thing"]);
        assert!(is_hop_by_hop("x-thing", &head.connection_tokens()));
        assert!(!is_hop_by_hop("anthropic-beta", &head.connection_tokens()));
    }

    #[test]
    fn a_head_too_large_or_not_http_is_refused() {
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n", "a".repeat(5000));
        assert!(matches!(
            read_head(&mut big.as_bytes(), 1024),
            Err(HeadError::TooLarge)
        ));
        assert!(matches!(
            read_head(&mut &b"\x16\x03\x01garbage\r\n\r\n"[..], 1024),
            Err(HeadError::Bad(_))
        ));
        assert!(matches!(
            read_head(&mut &b"GET / HT"[..], 1024),
            Err(HeadError::Closed)
        ));
    }

    #[test]
    fn credentials_are_known_by_name() {
        for name in [
            "x-api-key",
            "authorization",
            "cookie",
            "x-goog-api-key",
            "x-auth-token",
        ] {
            assert!(is_credential(name), "{name}");
        }
        for name in [
            "anthropic-beta",
            "anthropic-version",
            "x-claude-code-session-id",
            "user-agent",
        ] {
            assert!(!is_credential(name), "{name}");
        }
    }
}

//! Reading a request from where it stops repeating the previous one gives
//! the bytes reading it whole gives: two passes on two databases take the
//! same random sequence of Claude Code-shaped calls (grown at the tail,
//! rewritten by Claude Code, other sessions between, another model, bodies
//! with spaces or a key given twice), one reusing what it kept, one reading
//! every request whole, and must forward the same bytes every time.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

const T0: i64 = 1_800_000_000_000;
const MINUTE: i64 = 60_000;

/// What happens before one call.
#[derive(Debug, Clone)]
enum Step {
    /// The agent reads a file of this many bytes (a thinking block, a
    /// `tool_use`, its `tool_result`).
    Read(usize),
    /// The agent answers and the user asks again.
    Turn,
    /// Claude Code clears an old tool result in place.
    Clear(usize),
    /// Claude Code compacts: a summary and the newest messages.
    Compact(usize),
    /// Its system prompt changes (after `messages` in the body).
    System,
    /// Another model (before `messages`).
    Model,
    /// The same conversation with spaces between everything.
    Spaced,
    /// A top-level key given twice after `messages`.
    Twice,
    /// A call of another session between two of this one.
    Other,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (50usize..4000).prop_map(Step::Read),
        3 => Just(Step::Turn),
        1 => (0usize..40).prop_map(Step::Clear),
        1 => (1usize..6).prop_map(Step::Compact),
        1 => Just(Step::System),
        1 => Just(Step::Model),
        1 => Just(Step::Spaced),
        1 => Just(Step::Twice),
        1 => Just(Step::Other),
    ]
}

#[derive(Clone)]
struct Conversation {
    messages: Vec<Value>,
    system: String,
    model: String,
    reads: usize,
}

impl Conversation {
    fn new() -> Conversation {
        Conversation {
            messages: vec![json!({"role": "user", "content": [
                {"type": "text", "text": "<system-reminder>context</system-reminder>"},
                {"type": "text", "text": "find the bug in the parser"}]})],
            system: "Instructions.".into(),
            model: "claude-sonnet-4-5".into(),
            reads: 0,
        }
    }

    fn read(&mut self, size: usize) {
        let k = self.reads;
        self.reads += 1;
        self.messages.push(json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": format!("step {k}"), "signature": format!("sig{k}+/==")},
            {"type": "tool_use", "id": format!("toolu_{k}"), "name": "Read",
             "input": {"file_path": format!("src/f{k}.rs")}}]}));
        let line = format!("{k}: fn item() {{ \"body\" }}\n");
        self.messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": format!("toolu_{k}"),
             "content": line.repeat(size / line.len() + 1)}]}));
    }

    fn turn(&mut self) {
        let n = self.messages.len();
        self.messages.push(json!({"role": "assistant", "content": [
            {"type": "text", "text": format!("Done with {n}.")}]}));
        self.messages
            .push(json!({"role": "user", "content": format!("Go on after {n}.")}));
    }

    fn clear(&mut self, which: usize) {
        let results: Vec<usize> = (0..self.messages.len())
            .filter(|&i| self.messages[i]["content"][0]["type"] == "tool_result")
            .collect();
        if let Some(&i) = results.get(which % results.len().max(1)) {
            self.messages[i]["content"][0]["content"] = json!("[Old tool result content cleared]");
        }
    }

    fn compact(&mut self, keep: usize) {
        // Keep whole steps: start the kept tail on a user message that
        // holds no tool result.
        let mut from = self.messages.len().saturating_sub(keep);
        while from < self.messages.len()
            && (self.messages[from]["role"] != "user"
                || self.messages[from]["content"][0]["type"] == "tool_result")
        {
            from += 1;
        }
        let mut messages = vec![json!({"role": "user", "content": [
            {"type": "text", "text": "This session is being continued. Summary: the parser."}]})];
        messages.extend(self.messages.drain(from..));
        self.messages = messages;
    }

    /// The body Claude Code sends: its breakpoint on the newest block.
    fn body(&self, spaced: bool, twice: bool) -> Vec<u8> {
        let mut messages = self.messages.clone();
        if let Some(block) = messages
            .last_mut()
            .and_then(|m| m["content"].as_array_mut())
            .and_then(|b| b.last_mut())
        {
            block["cache_control"] = json!({"type": "ephemeral"});
        }
        let value = json!({
            "model": self.model,
            "messages": messages,
            "system": [
                {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197;"},
                {"type": "text", "text": self.system, "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
            "tools": [{"name": "Read", "input_schema": {"type": "object"}}],
            "max_tokens": 32000,
            "stream": true
        });
        let mut bytes = if spaced {
            serde_json::to_vec_pretty(&value).unwrap()
        } else {
            serde_json::to_vec(&value).unwrap()
        };
        if twice {
            // `"stream": false` given again, last: a map keeps the last one.
            bytes.pop();
            bytes.extend_from_slice(br#","stream":false}"#);
        }
        bytes
    }
}

struct Side {
    pass: TransformPass,
    _dir: tempfile::TempDir,
}

fn side(whole: bool) -> Side {
    let dir = tempfile::tempdir().unwrap();
    let config = TransformConfig {
        relief_drop: false,
        ..TransformConfig::default()
    };
    let pass =
        TransformPass::open(&dir.path().join("mc.db"), &StoreOptions::default(), config).unwrap();
    let pass = if whole { pass.reading_whole() } else { pass };
    Side { pass, _dir: dir }
}

/// One call of `session` on both sides, answered with `percent` of the
/// window; the bytes each side forwarded must be the same.
fn both(
    sides: &[Side; 2],
    session: &str,
    body: &[u8],
    percent: u64,
    now_ms: i64,
) -> std::result::Result<(), TestCaseError> {
    let headers = vec![("anthropic-version".to_string(), "2023-06-01".to_string())];
    let call = Call {
        api: Api::AnthropicMessages,
        harness: "claude-code",
        session_id: Some(session),
        path: "/v1/messages?beta=true",
        headers: &headers,
        body,
        now_ms,
    };
    let mut sent = Vec::new();
    for side in sides {
        let (forward, report) = side.pass.run(&call).unwrap();
        let bytes = match forward {
            Forward::Untouched => body.to_vec(),
            Forward::Body(b) | Forward::Fallback(b) => b,
        };
        let answer = Answer {
            status: 200,
            usage: Some(Usage {
                input: 100,
                cache_read: DEFAULT_WINDOW * percent / 100,
                cache_write: 0,
                output: 50,
            }),
            error_body: None,
        };
        side.pass.learn(&call, &answer).unwrap();
        sent.push((bytes, report.map(|r| (r.decision, r.bust, r.dropped))));
    }
    prop_assert_eq!(&sent[0].1, &sent[1].1, "the two passes decided apart");
    prop_assert!(
        sent[0].0 == sent[1].0,
        "reusing the previous request forwarded other bytes than reading it whole: {}",
        String::from_utf8_lossy(&sent[0].0)
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn reading_from_the_repeated_prefix_forwards_the_bytes_reading_whole_does(
        steps in prop::collection::vec((step(), 0u64..95, 0i64..8), 1..30)
    ) {
        let sides = [side(false), side(true)];
        let mut conversation = Conversation::new();
        let mut other = Conversation::new();
        let mut now = T0;
        let mut before: Option<(Vec<u8>, Layout)> = None;
        for (step, percent, minutes) in steps {
            let (mut spaced, mut twice) = (false, false);
            match step {
                Step::Read(size) => conversation.read(size),
                Step::Turn => conversation.turn(),
                Step::Clear(which) => conversation.clear(which),
                Step::Compact(keep) => conversation.compact(keep),
                Step::System => conversation.system.push_str(" More."),
                Step::Model => conversation.model = "claude-opus-4-1".into(),
                Step::Spaced => spaced = true,
                Step::Twice => twice = true,
                Step::Other => {
                    other.read(300);
                    both(&sides, "s2", &other.body(false, false), percent, now)?;
                }
            }
            now += minutes * MINUTE;
            let body = conversation.body(spaced, twice);
            // The codec's reading: the same spans either way.
            if let Some((before_body, layout)) = &before {
                let (read, _) = Request::parse_after(&body, before_body, layout).unwrap();
                let whole = Request::parse(&body).unwrap();
                prop_assert_eq!(format!("{:?}", read.layout()), format!("{:?}", whole.layout()));
                prop_assert_eq!(read.model, whole.model);
            }
            before = Some((body.clone(), Request::parse(&body).unwrap().layout()));
            both(&sides, "s1", &body, percent, now)?;
        }
    }
}

#[test]
fn a_request_that_grows_at_the_tail_is_read_from_where_it_stops_repeating() {
    let mut conversation = Conversation::new();
    conversation.read(500);
    let first = conversation.body(false, false);
    conversation.read(500);
    let second = conversation.body(false, false);
    let layout = Request::parse(&first).unwrap().layout();
    // All but the newest message (its breakpoint moved) are repeated.
    let (read, repeated) = Request::parse_after(&second, &first, &layout).unwrap();
    assert_eq!(repeated, 2);
    assert_eq!(read.items.len(), 5);
    // Another start, or a key given twice, is read whole.
    let (_, repeated) = Request::parse_after(&second, b"{}", &layout).unwrap();
    assert_eq!(repeated, 0);
    let twice = conversation.body(false, true);
    let (read, repeated) = Request::parse_after(&twice, &second, &layout).unwrap();
    assert_eq!(repeated, 0);
    assert_eq!(
        format!("{:?}", read.layout()),
        format!("{:?}", Request::parse(&twice).unwrap().layout())
    );
    // A body that is not JSON after the repeated part is refused as whole.
    let mut cut = second.clone();
    cut.truncate(second.len() - 3);
    assert!(Request::parse_after(&cut, &first, &layout).is_err());
}

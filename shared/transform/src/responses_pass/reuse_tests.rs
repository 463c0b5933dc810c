//! Reading a Codex request from where it stops repeating the previous one
//! gives the bytes reading it whole gives: two passes on two databases take
//! the same random sequence of Codex-shaped calls (grown at the tail, its
//! own compaction under a new window, other sessions between, another model,
//! another tool set, bodies with spaces or a key given twice), one reusing
//! what it kept, one reading every request whole, and must forward the same
//! bytes every time.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use mc_base::domain::envelope::Usage;

const T0: i64 = 1_800_000_000_000;
const MINUTE: i64 = 60_000;

/// What happens before one call.
#[derive(Debug, Clone)]
enum Step {
    /// The agent reads a file of this many bytes (reasoning, a call, its output).
    Read(usize),
    /// The agent answers and the user asks again.
    Turn,
    /// Codex compacts: the user's messages and a summary, a new window.
    Compact,
    /// Another tool set (after `input` in Codex's bodies).
    Tools,
    /// Another model (before `input`).
    Model,
    /// The same conversation with spaces between everything.
    Spaced,
    /// A top-level key given twice after `input`.
    Twice,
    /// A call of another session between two of this one.
    Other,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (50usize..4000).prop_map(Step::Read),
        3 => Just(Step::Turn),
        1 => Just(Step::Compact),
        1 => Just(Step::Tools),
        1 => Just(Step::Model),
        1 => Just(Step::Spaced),
        1 => Just(Step::Twice),
        1 => Just(Step::Other),
    ]
}

#[derive(Clone)]
struct Conversation {
    session: &'static str,
    items: Vec<Value>,
    tools: usize,
    model: String,
    window: u64,
    steps: usize,
}

impl Conversation {
    fn new(session: &'static str) -> Conversation {
        Conversation {
            session,
            items: vec![
                json!({"type": "message", "id": "msg_dev", "role": "developer",
                       "content": [{"type": "input_text", "text": "You are Codex."}]}),
                json!({"type": "message", "id": "msg_u0", "role": "user",
                       "content": [{"type": "input_text", "text": "find the bug in the parser"}]}),
            ],
            tools: 1,
            model: "gpt-5-codex".into(),
            window: 0,
            steps: 0,
        }
    }

    fn read(&mut self, size: usize) {
        let k = self.steps;
        self.steps += 1;
        let line = format!("{k}: fn item() {{ body }}\n");
        self.items.extend([
            json!({"type": "reasoning", "id": format!("rs_{k}"), "summary": [],
                   "content": null, "encrypted_content": format!("gAAAA{k}+/==")}),
            json!({"type": "function_call", "id": format!("fc_{k}"), "name": "exec_command",
                   "arguments": format!("{{\"cmd\":\"cat f{k}\"}}"), "call_id": format!("call_{k}")}),
            json!({"type": "function_call_output", "id": format!("fco_{k}"),
                   "call_id": format!("call_{k}"), "output": line.repeat(size / line.len() + 1)}),
        ]);
    }

    fn turn(&mut self) {
        let k = self.steps;
        self.steps += 1;
        self.items.extend([
            json!({"type": "message", "id": format!("msg_a{k}"), "role": "assistant",
                   "content": [{"type": "output_text", "text": format!("Done with {k}.")}]}),
            json!({"type": "message", "id": format!("msg_u{k}"), "role": "user",
                   "content": [{"type": "input_text", "text": format!("Go on after {k}.")}]}),
        ]);
    }

    fn compact(&mut self) {
        let mut kept: Vec<Value> = self
            .items
            .iter()
            .filter(|i| i["role"] == "user" || i["role"] == "developer")
            .cloned()
            .collect();
        kept.push(json!({"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": format!("Summary {}: the parser.", self.window)}]}));
        self.items = kept;
        self.window += 1;
    }

    fn body(&self, spaced: bool, twice: bool) -> Vec<u8> {
        let tools: Vec<Value> = (0..self.tools)
            .map(|t| json!({"type": "function", "name": format!("tool_{t}"), "parameters": {"type": "object"}}))
            .collect();
        let value = json!({
            "model": self.model,
            "instructions": "You are Codex, a coding agent.",
            "input": self.items,
            "tools": tools,
            "tool_choice": "auto",
            "store": false,
            "stream": true,
            "prompt_cache_key": self.session
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
    pass: ResponsesPass,
    _dir: tempfile::TempDir,
}

fn side(whole: bool) -> Side {
    let dir = tempfile::tempdir().unwrap();
    let config = TransformConfig {
        relief_drop: false,
        ..TransformConfig::default()
    };
    let pass =
        ResponsesPass::open(&dir.path().join("mc.db"), &StoreOptions::default(), config).unwrap();
    let pass = if whole { pass.reading_whole() } else { pass };
    Side { pass, _dir: dir }
}

/// One turn of `conversation` on both sides, answered with `percent` of
/// the window; the bytes each side forwarded must be the same.
fn both(
    sides: &[Side; 2],
    conversation: &Conversation,
    body: &[u8],
    percent: u64,
    now_ms: i64,
) -> std::result::Result<(), TestCaseError> {
    let session = conversation.session;
    let headers = vec![
        ("session-id".to_string(), session.to_string()),
        (
            "x-codex-window-id".to_string(),
            format!("{session}:{}", conversation.window),
        ),
        (
            "x-codex-turn-metadata".to_string(),
            json!({"session_id": session, "request_kind": "turn"}).to_string(),
        ),
    ];
    let call = Call {
        api: Api::OpenAiResponses,
        harness: HARNESS,
        session_id: Some(session),
        path: "/openai/responses",
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
        let mut conversation = Conversation::new("thread-1");
        let mut other = Conversation::new("thread-2");
        let mut now = T0;
        let mut before: Option<(Vec<u8>, Layout)> = None;
        for (step, percent, minutes) in steps {
            let (mut spaced, mut twice) = (false, false);
            match step {
                Step::Read(size) => conversation.read(size),
                Step::Turn => conversation.turn(),
                Step::Compact => conversation.compact(),
                Step::Tools => conversation.tools += 1,
                Step::Model => conversation.model = "gpt-5.1-codex".into(),
                Step::Spaced => spaced = true,
                Step::Twice => twice = true,
                Step::Other => {
                    other.read(300);
                    both(&sides, &other, &other.body(false, false), percent, now)?;
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
                prop_assert_eq!(read.tools, whole.tools);
            }
            before = Some((body.clone(), Request::parse(&body).unwrap().layout()));
            both(&sides, &conversation, &body, percent, now)?;
        }
    }
}

#[test]
fn a_defer_turn_keeps_what_it_did_not_render_again_for_the_next() {
    let sides = [side(false), side(true)];
    let mut conversation = Conversation::new("thread-1");
    for k in 0..4 {
        conversation.read(500);
        let body = conversation.body(false, false);
        both(&sides, &conversation, &body, 10, T0 + k * MINUTE).unwrap();
    }
    // The reusing side kept the previous request's reading, the messages
    // it did not render again (decoded, not decoded the next time) and the
    // renderings to replay.
    let memory = sides[0].pass.memory.lock().unwrap();
    let kept = memory.sessions.get("thread-1").unwrap();
    assert!(kept.layout.is_some());
    assert_eq!(kept.ids.len(), 2 + 2 * 4);
    assert!(kept.unused.len() >= 2 * 3, "{}", kept.unused.len());
    assert!(kept.for_next.is_some());
}

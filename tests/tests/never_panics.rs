//! Never panics: every parser of outside input, fed arbitrary bytes,
//! arbitrary JSON and structure-aware mutations of real samples, either
//! answers or returns an error. A panic fails the property (proptest catches
//! it and shrinks the input).
//!
//! Outside input, by entry point:
//!
//! - the pass's envelope, whole: `Envelope::from_value`, then `run_pass` on a
//!   store (and `record_passthrough` when it fails, as the binary does), then
//!   `status`, `reduce` and the system hook on the same store; also under
//!   any config the loader accepts, and `recount`;
//! - `ReduceRequest` and `SystemRequest` parsing, the reduce range notation;
//! - the historian: its input from an envelope or an OpenCode server's
//!   message list (`check`, `run`), the model's answer (`parse`,
//!   `validate`, then publish through `run` with a scripted model whose
//!   answers and token counts are mutated), a provider's HTTP answer
//!   (Anthropic and OpenAI wire formats from a loopback server);
//! - the config loader (JSONC text and files);
//! - an OpenCode server's answers (`opencode_api`, from a loopback server);
//! - `mc-pin`'s stdin: OpenCode events (bare, `/global/event`, plugin
//!   forms), Claude Code / Codex `SessionStart` hook inputs, pin requests,
//!   session metadata;
//! - Anthropic Messages requests as the gateway receives them
//!   (`codec::anthropic`, then `gateway::TransformPass` on a store): an
//!   unchanged request also encodes to its own bytes;
//! - Claude Code transcripts (`codec::claude`) and Codex rollouts
//!   (`codec::codex`), and what pins and the `SessionStart` hook read from
//!   them (every source, both harnesses);
//! - the dreamer: each task's manifest (`consolidate`, `verify`, `classify`,
//!   `archive-stale`), team memory files from a repository, `git log`
//!   output, a crontab's text, and the secret, pointer and similarity rules
//!   over any memory text;
//! - the dashboard's requests (`mc_dashboard::Server::answer`): any method,
//!   path, query, header and form body, on a store a real pass filled.
//!
//! Pi transcripts have no parser in mc yet, so there is nothing of theirs to feed.
//!
//! The samples come from `../shared/samples` beside the repository and from
//! `examples/`; a property whose sample is missing says so on stderr and
//! skips. Each property prints its case count and run time on stderr
//! (`cargo test -p mc-core never_panics -- --nocapture`);
//! `MC_NEVER_PANICS_SCALE=N` multiplies every case count for a soak run.

#[path = "never_panics/fuzz.rs"]
mod fuzz;

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config as RunnerConfig, TestCaseError, TestRunner};
use serde_json::{Value, json};

use mc_base::codec::{claude, codex};
use mc_base::config::{self, Tier, TransformConfig};
use mc_base::domain::notation::parse_ranges;
use mc_base::store::Store;
use mc_history::historian::parse::{Answer, RawCompartment, RawFact, parse};
use mc_history::historian::validate::{ChunkView, validate};
use mc_history::historian::{self, Input, RunParams, Settings};
use mc_llm::opencode_api::OpenCode;
use mc_llm::{self as llm, Completion, LlmError, Model, ModelRef, Prompt};
use mc_pin_core as pin;
use mc_transform_core::{
    self as transform, Envelope, ReduceRequest, SystemRequest, record_passthrough, run_pass,
};

use fuzz::Edit;

/// The fixed clock when an envelope has no `now_ms`.
const NOW: i64 = 1_796_030_516_205;

/// Run a property for `cases` cases; report the count and the time taken.
fn property<S: Strategy>(
    name: &str,
    cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    // A soak run multiplies every count: MC_NEVER_PANICS_SCALE=20 cargo test …
    #[allow(
        clippy::disallowed_methods,
        reason = "the soak switch is the test's own"
    )]
    let scale = std::env::var("MC_NEVER_PANICS_SCALE")
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .unwrap_or(1)
        .max(1);
    let cases = cases.saturating_mul(scale);
    let config = RunnerConfig {
        cases,
        source_file: Some(file!()),
        max_shrink_iters: 2_000,
        ..RunnerConfig::default()
    };
    let mut runner = TestRunner::new(config);
    let start = Instant::now();
    if let Err(e) = runner.run(&strategy, test) {
        panic!("{name}: {e}");
    }
    eprintln!(
        "never_panics: {name}: {cases} cases in {:.2} s",
        start.elapsed().as_secs_f64()
    );
}

/// Bytes as a harness might send them: lossy UTF-8 text.
fn bytes_text() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..512)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        fuzz::json().prop_map(|v| v.to_string()),
    ]
}

/// The envelopes the pass is fed: the repository's example and the shared sample.
fn envelope_samples() -> Vec<Value> {
    let mut out = vec![fuzz::example_envelope()];
    if let Some(text) = fuzz::sample("mc-transform-envelope.json") {
        out.push(serde_json::from_str(&text).expect("the sample envelope is JSON"));
    }
    out.push(pi_envelope());
    out
}

/// A Pi envelope: the codec's test context (every role Pi sends).
fn pi_envelope() -> Value {
    let messages: Value =
        serde_json::from_str(mc_base::testkit::PI_CONTEXT).expect("the Pi sample is JSON");
    json!({"harness": "pi", "session_id": "pi-session", "now_ms": NOW,
           "model": {"provider": "anthropic", "id": "m", "context_limit": 200_000},
           "messages": messages})
}

#[test]
fn pi_codec_over_arbitrary_and_mutated_messages() {
    let sample = pi_envelope()["messages"].clone();
    // A session file's entries mutated too: parent links, types, timestamps.
    let session: Value = mc_base::testkit::PI_SESSION
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    let session_changes = fuzz::changes(6);
    property(
        "pi_codec_over_arbitrary_and_mutated_messages",
        256,
        (fuzz::json(), fuzz::changes(6), session_changes),
        |(arbitrary, changes, entries)| {
            for value in [arbitrary, changes.apply(&sample), entries.apply(&session)] {
                let Value::Array(items) = value else { continue };
                // The same values as a session file's lines.
                let lines = items.iter().cloned().enumerate().collect();
                let file = mc_base::codec::pi::SessionFile::from_lines(lines);
                for whole in [false, true] {
                    let _ = mc_base::codec::pi::to_grouped_messages(&file, "s", whole);
                }
                let _ = (
                    file.newest_compaction(),
                    mc_base::codec::pi::last_model(&file),
                );
                let text = serde_json::to_string(&items).unwrap_or_default();
                if let Ok((messages, layout)) = mc_base::codec::pi::decode(items, Some("s")) {
                    // Untouched, the messages come back byte for byte.
                    let back = mc_base::codec::pi::encode(messages, layout);
                    prop_assert_eq!(serde_json::to_string(&back).unwrap_or_default(), text);
                }
            }
            Ok(())
        },
    );
}

#[test]
fn the_fallback_over_arbitrary_and_mutated_messages() {
    let samples: Vec<(String, Value)> = envelope_samples()
        .into_iter()
        .map(|e| {
            let harness = e["harness"].as_str().unwrap_or("opencode").to_string();
            (harness, e["messages"].clone())
        })
        .collect();
    property(
        "the_fallback_over_arbitrary_and_mutated_messages",
        256,
        (
            fuzz::json(),
            fuzz::changes(6),
            0..samples.len(),
            0u64..50_000,
        ),
        |(arbitrary, changes, which, window)| {
            let (harness, sample) = &samples[which];
            for value in [arbitrary, changes.apply(sample)] {
                let Value::Array(items) = value else { continue };
                let (out, fallback) =
                    transform::fallback::fit_raw(harness, Some("s"), items.clone(), window);
                // Unchanged, or a marker and a suffix of the input.
                if fallback.shape == "raw" {
                    prop_assert_eq!(&out, &items);
                }
                let kept = transform::incremental::kept(&items);
                let unchanged = transform::fallback::unchanged_prefix(&items, &items);
                let _ = transform::fallback::last_shape(&kept, items.len(), unchanged, &items);
            }
            Ok(())
        },
    );
}

/// What `mc-transform` does with one stdin document: parse, pass, and on
/// failure record the passthrough. Returns the session id it named.
fn pass_like_the_binary(
    store: &mut Store,
    value: &Value,
    config: &TransformConfig,
) -> Option<String> {
    let text = value.to_string();
    let value: Value = serde_json::from_str(&text).ok()?;
    let envelope = Envelope::from_value(value).ok()?;
    let now = envelope.now_ms.unwrap_or(NOW);
    let harness = envelope.harness.clone();
    let session = envelope.session_id.clone();
    match run_pass(store, envelope, config, now) {
        Ok(output) => {
            let _ = output.into_value();
        }
        Err(error) => {
            if let Some(session) = &session {
                let _ = record_passthrough(store, &harness, session, &error.to_string(), now);
            }
        }
    }
    session
}

/// The other commands on the session the pass saw: status, reduce, system.
fn session_commands(store: &mut Store, session: &str, drop: &str, system: &Value) {
    let config = TransformConfig::default();
    let _ = transform::status(store, "opencode", session);
    let request = json!({"session_id": session, "drop": drop});
    if let Ok(request) = ReduceRequest::from_value(request) {
        let _ = transform::reduce(store, &request, &config, NOW);
    }
    let request = json!({"session_id": session, "system": system});
    if let Ok(request) = SystemRequest::from_value(request) {
        let _ = transform::system_hook(store, &request, &config);
    }
}

/// The envelope with usage in the force band, so the pass executes.
fn busting(envelope: &Value) -> Value {
    let mut envelope = envelope.clone();
    if let Value::Object(map) = &mut envelope {
        let limit = map
            .get("model")
            .and_then(|m| m.get("context_limit"))
            .and_then(Value::as_u64)
            .unwrap_or(200_000);
        map.insert("usage".into(), json!({"input": limit / 100 * 92}));
    }
    envelope
}

/// The index of the first element, whatever the collection's size.
fn first_index() -> Index {
    use proptest::strategy::ValueTree;
    let mut runner = TestRunner::deterministic();
    let mut tree = any::<Index>().new_tree(&mut runner).expect("an index");
    while tree.simplify() {}
    tree.current()
}

fn store() -> Store {
    Store::open_in_memory().expect("an in-memory store opens")
}

#[test]
fn envelope_and_pass_over_arbitrary_bytes() {
    property(
        "envelope_and_pass_over_arbitrary_bytes",
        512,
        prop_oneof![
            bytes_text(),
            // Bytes where the messages go, so some documents get past the envelope.
            (bytes_text(), bytes_text()).prop_map(|(a, b)| format!(
                "{{\"session_id\":\"s\",\"messages\":[{a},{{\"info\":{b}}}]}}"
            )),
        ],
        |text| {
            // The binaries parse without slack: the same value (and bytes), or
            // the same error, as serde_json's own parse.
            let compact = mc_base::json::parse_compact(&text);
            let Ok(value) = serde_json::from_str::<Value>(&text) else {
                prop_assert_eq!(
                    compact.map_err(|e| e.to_string()).err(),
                    serde_json::from_str::<Value>(&text)
                        .err()
                        .map(|e| e.to_string())
                );
                return Ok(());
            };
            let compact = compact.map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(compact.to_string(), value.to_string());
            prop_assert_eq!(&compact, &value);
            if Envelope::from_value(value.clone()).is_ok() {
                pass_like_the_binary(&mut store(), &value, &TransformConfig::default());
            }
            Ok(())
        },
    );
}

/// Envelopes whose every field may be anything, messages shaped loosely
/// like OpenCode's.
fn arbitrary_envelope() -> impl Strategy<Value = Value> {
    let maybe = |s: BoxedStrategy<Value>| prop::option::weighted(0.7, s);
    let model = prop_oneof![
        fuzz::json(),
        (fuzz::json(), fuzz::json(), fuzz::number(), fuzz::number()).prop_map(|(p, i, c, o)| {
            json!({"provider": p, "id": i, "context_limit": c, "output_limit": o})
        }),
    ]
    .boxed();
    let usage = prop_oneof![
        fuzz::json(),
        (
            fuzz::number(),
            fuzz::number(),
            fuzz::number(),
            fuzz::number()
        )
            .prop_map(|(a, b, c, d)| {
                json!({"input": a, "cache_read": b, "cache_write": c, "output": d})
            }),
    ]
    .boxed();
    (
        maybe(prop_oneof![Just(json!("opencode")), fuzz::json()].boxed()),
        maybe(prop_oneof![Just(json!("ses_x")), fuzz::json()].boxed()),
        maybe(model),
        maybe(usage),
        maybe(prop_oneof![fuzz::number(), fuzz::json()].boxed()),
        maybe(fuzz::json().boxed()),
        maybe(
            prop_oneof![
                prop::collection::vec(fuzz::text().prop_map(Value::String), 0..4)
                    .prop_map(Value::Array),
                fuzz::json()
            ]
            .boxed(),
        ),
        prop::collection::vec(
            prop_oneof![4 => fuzz::message_like(), 1 => fuzz::json()],
            0..8,
        ),
    )
        .prop_map(
            |(harness, session, model, usage, now, subagent, system, messages)| {
                let mut map = serde_json::Map::new();
                for (key, value) in [
                    ("harness", harness),
                    ("session_id", session),
                    ("model", model),
                    ("usage", usage),
                    ("now_ms", now),
                    ("subagent", subagent),
                    ("system", system),
                ] {
                    if let Some(value) = value {
                        map.insert(key.into(), value);
                    }
                }
                map.insert("messages".into(), Value::Array(messages));
                Value::Object(map)
            },
        )
}

#[test]
fn pass_over_arbitrary_envelopes() {
    property(
        "pass_over_arbitrary_envelopes",
        128,
        (arbitrary_envelope(), fuzz::text(), fuzz::json()),
        |(envelope, drop, system)| {
            let mut store = store();
            let config = TransformConfig::default();
            // Twice: the second pass replays what the first stored.
            pass_like_the_binary(&mut store, &envelope, &config);
            if let Some(session) = pass_like_the_binary(&mut store, &envelope, &config) {
                session_commands(&mut store, &session, &drop, &system);
                pass_like_the_binary(&mut store, &busting(&envelope), &config);
            }
            Ok(())
        },
    );
}

#[test]
fn pass_over_mutated_sample_envelopes() {
    let samples = envelope_samples();
    property(
        "pass_over_mutated_sample_envelopes",
        128,
        (
            any::<Index>(),
            fuzz::changes(6),
            fuzz::changes(6),
            fuzz::text(),
            fuzz::json(),
        ),
        |(which, first, second, drop, system)| {
            let original = &samples[which.index(samples.len())];
            let mut store = store();
            let config = TransformConfig::default();
            // The unmutated session first, so the mutated passes meet stored state.
            pass_like_the_binary(&mut store, original, &config);
            pass_like_the_binary(&mut store, &first.apply(original), &config);
            let again = second.apply(original);
            if let Some(session) = pass_like_the_binary(&mut store, &again, &config) {
                session_commands(&mut store, &session, &drop, &system);
                // Queued drops apply on the next pass that executes.
                pass_like_the_binary(&mut store, &busting(&again), &config);
            }
            Ok(())
        },
    );
}

/// A full config document, every key set to one of its extremes or its
/// default (all valid), as JSONC text.
fn extreme_config() -> impl Strategy<Value = Value> {
    let pick = |values: Vec<Value>| prop::sample::select(values);
    (
        (
            pick(vec![json!(20), json!(90), json!(65), json!(20.000001)]),
            pick(vec![
                json!("0"),
                json!(0),
                json!("1"),
                json!("never"),
                json!("18446744073709551615"),
                json!(u64::MAX),
                json!("5124095576030431h"),
                json!("5m"),
            ]),
            pick(vec![json!(1), json!(100), json!(20)]),
            pick(vec![json!(10), json!(100_000)]),
            pick(vec![json!(0), json!(100_000)]),
            any::<[bool; 6]>(),
        ),
        (
            pick(vec![json!(0.05), json!(0.5)]),
            pick(vec![json!(500), json!(20_000)]),
            pick(vec![json!(100), json!(10_000)]),
            pick(vec![json!(5_000), json!(600_000)]),
        ),
    )
        .prop_map(
            |((threshold, ttl, protected, age, reclaim_min, flags), (budget, memory, cave, busy))| {
                json!({
                    "$schema": "https://example.invalid/config.schema.json",
                    "transform": {
                        "execute_threshold_percentage": threshold,
                        "cache_ttl": ttl,
                        "protected_tags": protected,
                        "clear_reasoning_age": age,
                        "tool_reclaim_min_tokens": reclaim_min,
                        "tool_reclaim": flags[0],
                        "relief_drop": flags[1],
                        "temporal_awareness": flags[2],
                        "history_budget_percentage": budget,
                        "memory_budget_tokens": memory,
                        "caveman": flags[3],
                        "caveman_min_chars": cave,
                        "system_prompt_guidance": flags[4],
                    },
                    "sqlite": {"busy_timeout_ms": busy},
                    "historian": {
                        "model": "local/m", "fallback_models": ["cmd/x", "local/m"],
                        "connect_timeout_ms": if flags[5] { 100 } else { 120_000 },
                        "timeout_ms": if flags[5] { 100 } else { 3_600_000 },
                        "retries": if flags[5] { 0 } else { 5 },
                        "retry_backoff_ms": if flags[5] { 0 } else { 60_000 },
                        "max_output_tokens": 8_000, "chunk_tokens": 20_000, "max_chunks": 50
                    },
                    "providers": {
                        "local": {"kind": "openai", "base_url": "http://127.0.0.1:9", "api_key_env": "K"},
                        "cmd": {"kind": "command", "command": ["true", "{model}"]}
                    }
                })
            },
        )
}

/// JSONC text of a config document, with a comment and a trailing comma.
fn jsonc(value: &Value) -> String {
    let text = serde_json::to_string_pretty(value).expect("a value serialises");
    match text.strip_suffix("\n}") {
        Some(body) => format!("// mc config\n{body},\n  /* end */\n}}"),
        None => text,
    }
}

#[test]
fn config_loader_over_arbitrary_text() {
    property(
        "config_loader_over_arbitrary_text",
        512,
        (bytes_text(), bytes_text()),
        |(a, b)| {
            let _ = config::from_str_layers(&[
                (Tier::User, "user.jsonc", &a),
                (Tier::Project, "project.jsonc", &b),
                (Tier::Override, "override.jsonc", &a),
            ]);
            Ok(())
        },
    );
}

/// The doctor's edits of harness files (JSONC, TOML) and its redaction, over
/// arbitrary text: an error or a result, never a panic.
#[test]
fn doctor_edits_and_redaction_over_arbitrary_text() {
    use mc_doctor_core::{edit, redact};
    let keys: Vec<String> = vec!["hooks".into(), "Stop".into()];
    property(
        "doctor_edits_and_redaction_over_arbitrary_text",
        256,
        bytes_text(),
        |text| {
            let item = serde_json::json!({"hooks": [{"command": "mc-pin restore"}]});
            let _ = edit::json_value(&text, "f");
            if let Ok(out) = edit::json_push(&text, &keys, &item, "f") {
                let _ = edit::json_pull(&out, &keys, &|v| v == &item, 0, "f");
            }
            if let Ok(out) = edit::json_set(&text, &keys, &item, "f") {
                let _ = edit::json_remove(&out, &keys, 0, "f");
            }
            if let Ok(out) = edit::toml_set(&text, &keys, &item, "f") {
                let _ = edit::toml_remove(&out, &keys, 0, "f");
            }
            let _ = edit::toml_get(&text, &keys, "f");
            let _ = redact::secrets(&text);
            let _ = edit::diff("f", &text, "x");
            Ok(())
        },
    );
}

#[test]
fn config_loader_over_mutated_configs_and_files() {
    property(
        "config_loader_over_mutated_configs_and_files",
        192,
        (
            extreme_config(),
            fuzz::mutations(5),
            fuzz::edits(4),
            prop::collection::vec(any::<u8>(), 0..64),
        ),
        |(document, mutations, edits, raw)| {
            let mutated = jsonc(&fuzz::mutate(document.clone(), &mutations));
            let edited = fuzz::edit(&jsonc(&document), &edits);
            for tier in [Tier::User, Tier::Project] {
                let _ = config::from_str_layers(&[(tier, "a.jsonc", &mutated)]);
                let _ = config::from_str_layers(&[(tier, "b.jsonc", &edited)]);
            }
            // From files too: the reader refuses invalid UTF-8 and non-files.
            let dir = tempfile::tempdir().expect("a temp dir");
            let file = dir.path().join("config.jsonc");
            let mut bytes = mutated.into_bytes();
            bytes.extend_from_slice(&raw);
            std::fs::write(&file, &bytes).expect("the temp file is written");
            let _ = config::load(&[
                config::Layer::new(Tier::User, &file),
                config::Layer::new(Tier::Project, dir.path()),
            ]);
            Ok(())
        },
    );
}

#[test]
fn pass_under_any_config_the_loader_accepts() {
    let samples = envelope_samples();
    property(
        "pass_under_any_config_the_loader_accepts",
        64,
        (
            extreme_config(),
            fuzz::mutations(2),
            any::<Index>(),
            fuzz::changes(4),
        ),
        |(document, config_mutations, which, changes)| {
            let text = jsonc(&fuzz::mutate(document, &config_mutations));
            let loaded = config::from_str_layers(&[(Tier::User, "user.jsonc", &text)]);
            let config = loaded.config;
            // What the historian derives from the config: timeouts, the chain.
            let options = llm::Options::from_config(
                &config.historian,
                llm::ProxyEnv::default(),
                llm::Sleeper::new(|_| {}),
            );
            let _ = options.worst_case(config.historian.chain().len());
            let _ = llm::Client::new(
                &config.providers,
                &config.historian.chain(),
                &BTreeMap::new(),
                options,
            );
            let original = &samples[which.index(samples.len())];
            let mutated = changes.apply(original);
            let mut store = store();
            pass_like_the_binary(&mut store, original, &config.transform);
            pass_like_the_binary(&mut store, &mutated, &config.transform);
            Ok(())
        },
    );
}

#[test]
fn recount_over_mutated_sample_envelopes() {
    let samples = envelope_samples();
    property(
        "recount_over_mutated_sample_envelopes",
        16,
        (any::<Index>(), fuzz::changes(6)),
        |(which, changes)| {
            let original = &samples[which.index(samples.len())];
            let mut store = store();
            pass_like_the_binary(&mut store, original, &TransformConfig::default());
            if let Ok(envelope) = Envelope::from_value(changes.apply(original)) {
                let _ = transform::recount::recount(&mut store, envelope);
            }
            Ok(())
        },
    );
}

#[test]
fn reduce_and_system_requests_over_arbitrary_input() {
    let drop_spec = prop_oneof![
        fuzz::text(),
        prop::collection::vec(
            prop_oneof![
                fuzz::number().prop_map(|n| n.to_string()),
                (fuzz::number(), fuzz::number()).prop_map(|(a, b)| format!("{a}-{b}")),
                (any::<i64>(), any::<i64>()).prop_map(|(a, b)| format!("§{a}§-§{b}§")),
                fuzz::text(),
            ],
            0..6,
        )
        .prop_map(|pieces| pieces.join(",")),
    ];
    property(
        "reduce_and_system_requests_over_arbitrary_input",
        512,
        (
            drop_spec,
            fuzz::json(),
            prop::collection::vec(
                prop_oneof![
                    fuzz::number(),
                    fuzz::text().prop_map(Value::String),
                    fuzz::json()
                ],
                0..5,
            ),
        ),
        |(spec, value, items)| {
            let _ = parse_ranges(&spec);
            let _ = transform::reduce::parse_drop(&spec);
            for request in [
                value.clone(),
                json!({"session_id": "s", "drop": spec}),
                json!({"session_id": "s", "drop": items}),
                json!({"session_id": value, "harness": value, "drop": value}),
            ] {
                let _ = ReduceRequest::from_value(request.clone());
                let _ = SystemRequest::from_value(request);
            }
            let _ = SystemRequest::from_value(json!({"session_id": "s", "system": items}));
            let _ = transform::system::today_line(&value);
            let _ = transform::system::render(&value, Some("guidance"), Some("Today's date: x"));
            Ok(())
        },
    );
}

#[test]
fn incremental_deltas_over_arbitrary_input() {
    use mc_transform_core::incremental::{Baselines, Delta, delta_of, fingerprint, kept, same};
    property(
        "incremental_deltas_over_arbitrary_input",
        512,
        (
            fuzz::json(),
            prop::collection::vec(fuzz::json(), 0..6),
            prop::collection::vec(
                prop_oneof![fuzz::number(), fuzz::json(), Just(json!(0)), Just(json!(1))],
                0..8,
            ),
            any::<Option<u64>>(),
        ),
        |(value, base, items, base_len)| {
            let _ = Delta::from_value(value.clone());
            let mut baselines = Baselines::new(2);
            baselines.remember(
                "opencode",
                "s",
                "k".into(),
                base.clone(),
                base.clone(),
                None,
            );
            let delta = Delta {
                base: Some("k".into()),
                key: "k2".into(),
                base_len: base_len.map(|n| n as usize),
                messages: Some(items.clone()),
            };
            if let Ok(input) = baselines.resolve("opencode", "s", delta) {
                prop_assert_eq!(input.len(), items.len());
            }
            // An index in the output (a message the pass replayed) stays
            // that index, if the previous output has it.
            let fits = items.iter().all(|item| match item {
                Value::Number(n) => n.as_u64().is_some_and(|i| (i as usize) < base.len()),
                _ => true,
            });
            let mut spent = Vec::new();
            let answered = delta_of(&kept(&base), items.clone(), &mut spent);
            prop_assert_eq!(answered.is_some(), fits);
            if let Some((answer, now)) = answered {
                prop_assert_eq!(answer.len(), items.len());
                prop_assert_eq!(now.len(), items.len());
                // Every message named by its index is the same bytes there.
                for (sent, item) in answer.iter().zip(&items) {
                    match item {
                        Value::Number(_) => prop_assert_eq!(sent, item),
                        _ => {
                            if let Some(at) = sent.as_u64() {
                                prop_assert!(same(&base[at as usize], item));
                            }
                        }
                    }
                }
            }
            prop_assert!(same(&value, &value));
            prop_assert_eq!(fingerprint(&value), fingerprint(&value.clone()));
            Ok(())
        },
    );
}

#[test]
fn caveman_and_token_estimates_over_arbitrary_text() {
    use mc_transform_core::caveman::{Level, compress};
    // Prose the rules act on, with the regions they must shield.
    let prose = "Well, I think that we should just basically read the file at src/main.rs \
                 and then the tests, `cargo test`, see https://example.com/a?b=c and §12§; \
                 in order to fix it we are going to rewrite msg_01 as a matter of fact.\n\
                 ```rust\nfn main() {}\n```\nU: the user said so. A test is being run.";
    property(
        "caveman_and_token_estimates_over_arbitrary_text",
        384,
        prop_oneof![
            1 => any::<String>(),
            1 => fuzz::text(),
            3 => fuzz::edits(6).prop_map(move |edits| fuzz::edit(prose, &edits)),
        ],
        |text| {
            for level in [Level::Lite, Level::Full, Level::Ultra] {
                let _ = compress(&text, level);
            }
            let _ = mc_base::tokens::estimate(&text);
            let _ = mc_base::domain::notation::strip_leading_tags(&text);
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------
// The historian

/// A model answering from a script: the answer the chunk asks for, edited,
/// with token counts the provider reported (any u64).
struct Scripted {
    edits: Vec<Vec<Edit>>,
    tokens: (u64, u64),
    calls: Cell<usize>,
}

impl Scripted {
    fn new(edits: Vec<Vec<Edit>>, tokens: (u64, u64)) -> Scripted {
        Scripted {
            edits,
            tokens,
            calls: Cell::new(0),
        }
    }
}

/// The `first`/`last` of the prompt's `<messages>` element.
fn chunk_range(prompt: &Prompt) -> Option<(i64, i64)> {
    let attribute = |name: &str| {
        let at = prompt.user.find(&format!("{name}=\""))? + name.len() + 2;
        let rest = prompt.user.get(at..)?;
        rest.get(..rest.find('"')?)?.parse::<i64>().ok()
    };
    Some((attribute("first")?, attribute("last")?))
}

fn answer_for(first: i64, last: i64) -> String {
    let mid = first / 2 + last / 2;
    let compartment = |s: i64, e: i64| {
        format!(
            "<compartment start=\"{s}\" end=\"{e}\" importance=\"60\" episode=\"feature\">\
             <title>Work {s}</title><p1>Long &amp; detailed</p1><p2>Shorter</p2><p3>Brief</p3>\
             <p4>Line</p4></compartment>\n"
        )
    };
    let compartments = if mid < first || mid >= last {
        compartment(first, last)
    } else {
        compartment(first, mid) + &compartment(mid.saturating_add(1), last)
    };
    format!(
        "<history>\n{compartments}<facts><fact category=\"NAMING\">Tests use ses_ ids.</fact></facts>\n\
         <unprocessed_from>{}</unprocessed_from>\n</history>",
        last.saturating_add(1)
    )
}

impl Model for Scripted {
    fn complete(
        &self,
        prompt: &Prompt,
        _events: &mut dyn FnMut(llm::Event),
    ) -> Result<Completion, LlmError> {
        let n = self.calls.get();
        self.calls.set(n + 1);
        let (first, last) = chunk_range(prompt).unwrap_or((1, 2));
        let edits = self
            .edits
            .get(n % self.edits.len().max(1))
            .cloned()
            .unwrap_or_default();
        Ok(Completion {
            text: fuzz::edit(&answer_for(first, last), &edits),
            model: ModelRef::parse("fake/model").expect("a model name"),
            tokens_in: self.tokens.0,
            tokens_out: self.tokens.1,
            truncated: n % 3 == 2,
        })
    }
}

/// `check`, then `run` with the scripted model, on `store`.
fn historian_on(store: &mut Store, input: &Input, model: &Scripted) {
    let transform = TransformConfig::default();
    let _ = historian::check(store.conn(), input, &transform);
    let historian = config::HistorianConfig::default();
    let now = || NOW;
    let params = RunParams {
        settings: Settings {
            historian: &historian,
            transform: &transform,
        },
        job: Default::default(),
        lease_ms: 60_000,
        holder: "never-panics".into(),
        now: &now,
    };
    let _ = historian::prompt(store.conn(), input, &params.settings, None, NOW);
    let _ = historian::run(store, input, model, &params, &mut |_| {});
}

fn token_counts() -> impl Strategy<Value = (u64, u64)> {
    let count = prop_oneof![
        Just(u64::MAX),
        Just(u64::MAX / 2 + 1),
        Just(0u64),
        any::<u64>()
    ];
    (count.clone(), count)
}

/// An envelope whose window is small enough, and whose texts are long
/// enough, that the historian has work.
fn small_window(mut envelope: Value, limit: u64) -> Value {
    if let Some(messages) = envelope["messages"].as_array_mut() {
        for part in messages
            .iter_mut()
            .filter_map(|m| m["parts"].as_array_mut())
            .flatten()
        {
            if let Some(text) = part["text"].as_str() {
                part["text"] = json!(format!("{text}{}", " and then some more work".repeat(30)));
            }
        }
    }
    envelope["model"]["context_limit"] = json!(limit);
    envelope["model"]["output_limit"] = json!(0);
    envelope["usage"]["input"] = json!(limit * 9 / 10);
    envelope
}

#[test]
fn the_historian_property_reaches_publish() {
    // The property below is worth something only if unmutated input makes the
    // scripted model answer and the answer publish.
    for sample in envelope_samples() {
        let mut store = store();
        let envelope = small_window(sample, 2_000);
        pass_like_the_binary(&mut store, &envelope, &TransformConfig::default());
        let input = Input::from_envelope(Envelope::from_value(envelope).unwrap()).unwrap();
        let model = Scripted::new(Vec::new(), (10, 10));
        historian_on(&mut store, &input, &model);
        assert!(model.calls.get() > 0, "the model was asked");
        let session = mc_base::domain::sessions::find_session(
            store.conn(),
            &input.harness,
            &input.session_id,
        )
        .unwrap()
        .unwrap();
        assert!(
            historian::publish::covered_through(store.conn(), session.id).unwrap() > 0,
            "the answer was published"
        );
    }
}

#[test]
fn historian_over_mutated_envelopes_and_answers() {
    let samples = envelope_samples();
    property(
        "historian_over_mutated_envelopes_and_answers",
        48,
        (
            any::<Index>(),
            prop::sample::select(vec![400u64, 2_000, 200_000]),
            fuzz::changes(4),
            prop::collection::vec(fuzz::edits(3), 1..3),
            token_counts(),
        ),
        |(which, limit, changes, edits, tokens)| {
            let original = small_window(samples[which.index(samples.len())].clone(), limit);
            let mut store = store();
            pass_like_the_binary(&mut store, &original, &TransformConfig::default());
            let mutated = changes.apply(&original);
            let model = Scripted::new(edits, tokens);
            let text = mutated.to_string();
            if let Some(input) = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| Envelope::from_value(v).ok())
                .and_then(|e| Input::from_envelope(e).ok())
            {
                historian_on(&mut store, &input, &model);
            }
            // The next passes render whatever was published into the head.
            pass_like_the_binary(&mut store, &mutated, &TransformConfig::default());
            pass_like_the_binary(&mut store, &original, &TransformConfig::default());
            Ok(())
        },
    );
}

#[test]
fn historian_over_mutated_server_message_lists() {
    let Some(text) = fuzz::sample("opencode-session-messages.json") else {
        return;
    };
    let messages: Value = serde_json::from_str(&text).expect("the sample is JSON");
    // The pass saw the session first (with a small window): the historian
    // takes the model from the store, as `mc-historian --opencode-url` does.
    let first_pass = small_window(
        json!({"session_id": "ses_server", "messages": messages}),
        2_000,
    );
    let messages = first_pass["messages"].clone();
    property(
        "historian_over_mutated_server_message_lists",
        32,
        (fuzz::changes(5), fuzz::edits(2), token_counts()),
        |(changes, edits, tokens)| {
            let mutated = changes.apply(&messages);
            let Value::Array(list) = mutated else {
                return Ok(());
            };
            let _ = pin::newest_pinnable(&list, "user");
            for message in &list {
                let _ = pin::message_text(message);
            }
            let mut store = store();
            pass_like_the_binary(&mut store, &first_pass, &TransformConfig::default());
            if let Ok(input) = Input::from_messages("opencode", "ses_server", list) {
                let model = Scripted::new(vec![edits], tokens);
                historian_on(&mut store, &input, &model);
            }
            pass_like_the_binary(&mut store, &first_pass, &TransformConfig::default());
            Ok(())
        },
    );
}

/// A chunk view as the historian builds one: ascending positive ordinals.
fn chunk_view() -> impl Strategy<Value = ChunkView> {
    (
        prop::collection::btree_set(1i64..400, 1..40),
        any::<Index>(),
        prop::option::of(1i64..500),
        any::<bool>(),
    )
        .prop_map(|(ordinals, tool_share, next, hold_back)| {
            let ordinals: Vec<i64> = ordinals.into_iter().collect();
            let every = tool_share.index(4) + 1;
            let tool_only: BTreeSet<i64> = ordinals.iter().copied().step_by(every).collect();
            let last = *ordinals.last().unwrap_or(&0);
            ChunkView {
                next_shown: next.map(|n| n.max(last + 1)),
                ordinals,
                tool_only,
                hold_back,
            }
        })
}

fn ordinal() -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => -2i64..420,
        1 => prop::sample::select(vec![i64::MIN, i64::MIN + 1, i64::MAX, i64::MAX - 1, 0]),
        1 => any::<i64>(),
    ]
}

#[test]
fn historian_answer_parse_and_validate_over_text() {
    property(
        "historian_answer_parse_and_validate_over_text",
        1024,
        (
            prop_oneof![
                1 => any::<String>(),
                1 => bytes_text(),
                4 => (ordinal(), ordinal(), fuzz::edits(5))
                    .prop_map(|(a, b, edits)| fuzz::edit(&answer_for(a.min(b), a.max(b)), &edits)),
            ],
            chunk_view(),
        ),
        |(text, view)| {
            let _ = mc_base::xml::unescape(&text);
            if let Ok(answer) = parse(&text) {
                let _ = validate(answer, &view);
            }
            Ok(())
        },
    );
}

#[test]
fn historian_validate_over_arbitrary_answers() {
    let compartment = (ordinal(), ordinal(), any::<i64>(), fuzz::text()).prop_map(
        |(start, end, importance, title)| RawCompartment {
            start,
            end,
            importance,
            episode: "feature".into(),
            title: title.clone(),
            tiers: [title.clone(), title.clone(), title.clone(), title],
        },
    );
    let answer = (
        prop::collection::vec(compartment, 0..6),
        prop::collection::vec(
            (fuzz::text(), fuzz::text())
                .prop_map(|(category, content)| RawFact { category, content }),
            0..3,
        ),
        ordinal(),
    )
        .prop_map(|(mut compartments, facts, unprocessed_from)| {
            // Half the time in order, as a model mostly answers.
            if unprocessed_from % 2 == 0 {
                compartments.sort_by_key(|c| c.start);
            }
            Answer {
                compartments,
                facts,
                unprocessed_from,
            }
        });
    property(
        "historian_validate_over_arbitrary_answers",
        1024,
        (answer, chunk_view()),
        |(answer, view)| {
            let _ = validate(answer, &view);
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------
// Loopback servers: an OpenCode server and model providers that answer
// whatever the property says.

/// One scripted HTTP answer, served to every request until dropped.
struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    fn start(response: Vec<u8>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let addr = listener.local_addr().expect("the port");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut stream) = stream else {
                    continue;
                };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                read_request(&mut stream);
                let _ = stream.write_all(&response);
            }
        });
        Server {
            addr,
            stop,
            thread: Some(thread),
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Read one request: headers, then a body of `Content-Length` bytes.
fn read_request(stream: &mut TcpStream) {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    let header_end = loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => data.extend_from_slice(&buf[..n]),
        }
        if let Some(at) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&data[..header_end]).to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    while data.len() < header_end + length {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => data.extend_from_slice(&buf[..n]),
        }
    }
}

fn status() -> impl Strategy<Value = u16> {
    prop_oneof![
        3 => prop::sample::select(vec![200u16, 201, 204, 299, 302, 400, 401, 404, 408, 413, 429, 500, 502, 503, 529]),
        1 => 200u16..600,
    ]
}

/// An HTTP response: status, extra header lines, body, with or without a length.
fn response(status: u16, headers: &str, body: &str, with_length: bool) -> Vec<u8> {
    let length = if with_length {
        format!("Content-Length: {}\r\n", body.len())
    } else {
        String::new()
    };
    format!(
        "HTTP/1.1 {status} Scripted\r\nContent-Type: application/json\r\n{headers}{length}\
         Connection: close\r\n\r\n{body}"
    )
    .into_bytes()
}

#[test]
fn opencode_api_over_arbitrary_server_answers() {
    let messages: Option<Value> = fuzz::sample("opencode-session-messages.json")
        .map(|t| serde_json::from_str(&t).expect("the sample is JSON"));
    let session = json!({
        "id": "ses_1", "title": "t", "parentID": null,
        "metadata": {"openchamber": {
            "context_obligatory_messages": [{"id": "msg_1", "createdAt": 1_760_001_200_000i64, "role": "user"}],
            "context_obligatory_last_compaction_message_id": "msg_9"}}
    });
    let mut documents = vec![session];
    documents.extend(messages);
    property(
        "opencode_api_over_arbitrary_server_answers",
        48,
        (
            status(),
            prop_oneof![
                1 => bytes_text(),
                3 => (any::<Index>(), fuzz::changes(4)).prop_map(move |(which, changes)| {
                    changes.apply(&documents[which.index(documents.len())]).to_string()
                }),
            ],
            any::<bool>(),
            fuzz::text(),
        ),
        |(status, body, with_length, id)| {
            let server = Server::start(response(status, "", &body, with_length));
            let api = OpenCode::new(&server.url())
                .with_directory(Some(&id))
                .with_timeout(Duration::from_secs(3));
            if let Ok(session) = api.get_session(&id) {
                let metadata = pin::metadata::of_session(&session);
                let pins = pin::metadata::pins(&metadata);
                let _ = pin::metadata::cursor(&metadata);
                let pin = pin::Pin {
                    id: id.clone(),
                    created_at: NOW,
                    role: "user".into(),
                };
                let _ = pin::metadata::with_pin(&metadata, &pin);
                let _ = pin::metadata::without_pin(&metadata, &id);
                let _ = pin::metadata::with_cursor(&metadata, &id);
                for p in &pins {
                    let _ = pin::text::iso8601(p.created_at);
                }
            }
            let _ = api.get_message(&id, &id);
            let _ = api.prompt_async(&id, &json!({"parts": []}));
            if let Ok(list) = api.list_messages(&id) {
                let _ = pin::newest_pinnable(&list, "assistant");
                if let Ok(input) = Input::from_messages("opencode", &id, list) {
                    let _ = historian::check(store().conn(), &input, &TransformConfig::default());
                }
            }
            Ok(())
        },
    );
}

#[test]
fn model_providers_over_arbitrary_answers() {
    let anthropic = json!({
        "id": "msg_1", "type": "message", "role": "assistant",
        "content": [{"type": "text", "text": "<history></history>"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 1, "cache_read_input_tokens": 2}
    });
    let openai = json!({
        "id": "c1", "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "<history></history>"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5}
    });
    let documents = vec![anthropic, openai];
    // Usage numbers a provider (or a router in front of one) may report.
    let count = || {
        prop_oneof![
            fuzz::number(),
            Just(json!(u64::MAX)),
            (u64::MAX / 2..=u64::MAX).prop_map(Value::from)
        ]
    };
    let usage = (count(), count(), count(), count()).prop_map(
        |(a, b, c, d)| {
            let mut both = documents.clone();
            both[0]["usage"] = json!({"input_tokens": a, "output_tokens": b,
                                      "cache_creation_input_tokens": c, "cache_read_input_tokens": d});
            both[1]["usage"] = json!({"prompt_tokens": a, "completion_tokens": b});
            both
        },
    );
    let retry_after = prop_oneof![
        Just(String::new()),
        prop::sample::select(vec![
            "0",
            "-1",
            "1e308",
            "NaN",
            "inf",
            "3601",
            "0.5",
            "18446744073709551616"
        ])
        .prop_map(|v| format!("Retry-After: {v}\r\n")),
    ];
    property(
        "model_providers_over_arbitrary_answers",
        64,
        (
            any::<bool>(),
            prop_oneof![Just(200u16), status()],
            retry_after,
            prop_oneof![
                1 => bytes_text(),
                3 => (usage, any::<Index>(), fuzz::mutations(3)).prop_map(|(documents, which, mutations)| {
                    fuzz::mutate(documents[which.index(documents.len())].clone(), &mutations).to_string()
                }),
            ],
        ),
        |(openai_kind, status, retry_after, body)| {
            let server = Server::start(response(status, &retry_after, &body, true));
            let kind = if openai_kind {
                config::ProviderKind::Openai
            } else {
                config::ProviderKind::Anthropic
            };
            let providers = BTreeMap::from([(
                "p".to_string(),
                config::ProviderConfig {
                    kind,
                    base_url: Some(server.url()),
                    api_key_env: None,
                    command: None,
                },
            )]);
            let options = llm::Options {
                connect_timeout: Duration::from_secs(1),
                timeout: Duration::from_secs(3),
                retries: 0,
                backoff: Duration::ZERO,
                proxy: llm::ProxyEnv::default(),
                sleep: llm::Sleeper::new(|_| {}),
            };
            let client =
                llm::Client::new(&providers, &["p/m".to_string()], &BTreeMap::new(), options)
                    .expect("the client builds");
            let prompt = Prompt {
                system: "s".into(),
                user: "u".into(),
                max_tokens: 100,
            };
            let _ = client.complete(&prompt, &mut |_| {});
            Ok(())
        },
    );
}

#[test]
fn opencode_answers_and_model_lists_over_arbitrary_documents() {
    let answer = json!({
        "info": {"role": "assistant", "providerID": "p", "modelID": "m", "finish": "stop",
                 "error": {"name": "APIError", "data": {"message": "x", "statusCode": 529}},
                 "tokens": {"input": 1, "output": 2, "reasoning": 3, "cache": {"read": 4, "write": 5}}},
        "parts": [{"type": "text", "text": "<history></history>", "synthetic": false}],
    });
    let config = json!({"model": "p/m", "small_model": "p/s"});
    let providers = json!({"providers": [{"id": "p", "models": {
        "m": {"cost": {"input": 3.0, "output": 15.0}}, "s": {"cost": {"input": 1, "output": 5}}}}]});
    let documents = [answer, config, providers];
    property(
        "opencode_answers_and_model_lists_over_arbitrary_documents",
        256,
        (
            prop_oneof![
                1 => bytes_text().prop_map(|t| serde_json::from_str::<Value>(&t).unwrap_or(Value::String(t))),
                3 => (any::<Index>(), fuzz::mutations(4)).prop_map(move |(which, mutations)| {
                    fuzz::mutate(documents[which.index(documents.len())].clone(), &mutations)
                }),
            ],
            any::<bool>(),
        ),
        |(document, with_session)| {
            let model = ModelRef::parse("opencode/p/m").expect("a model name");
            let _ = llm::opencode::parse(&model, &document);
            let server = llm::ServerModels::from_answers(&document, &document);
            let _ = server.pick(with_session.then_some("p/m"));
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------
// mc-pin's stdin: events, hook inputs, requests

#[test]
fn pin_events_and_requests_over_arbitrary_input() {
    property(
        "pin_events_and_requests_over_arbitrary_input",
        512,
        prop_oneof![
            bytes_text()
                .prop_map(|t| serde_json::from_str::<Value>(&t).unwrap_or(Value::String(t))),
            fuzz::json(),
        ],
        |value| {
            let _ = pin::classify(&value);
            let _ = pin::RequestFields::from_value(&value);
            let _ = pin::metadata::pins(&value);
            let _ = pin::metadata::with_cursor(&value, "c");
            Ok(())
        },
    );
}

#[test]
fn pin_events_over_mutated_samples() {
    let mut samples = Vec::new();
    for name in [
        "opencode-compaction-events.jsonl",
        "claude-code-hook-inputs.jsonl",
    ] {
        if let Some(text) = fuzz::sample(name) {
            samples.extend(fuzz::jsonl(&text));
        }
    }
    if samples.is_empty() {
        return;
    }
    // The plugin's `{event}` form of each OpenCode event too.
    let wrapped: Vec<Value> = samples
        .iter()
        .filter(|s| s.get("type").is_some())
        .map(|s| json!({"event": s}))
        .collect();
    samples.extend(wrapped);
    property(
        "pin_events_over_mutated_samples",
        512,
        (any::<Index>(), fuzz::changes(4)),
        |(which, changes)| {
            let value = changes.apply(&samples[which.index(samples.len())]);
            let _ = pin::classify(&value);
            let _ = pin::RequestFields::from_value(&value);
            Ok(())
        },
    );
}

#[test]
fn pin_texts_over_arbitrary_pins() {
    let pinned = (fuzz::text(), fuzz::text(), any::<i64>(), fuzz::text()).prop_map(
        |(id, role, created_at, text)| pin::PinnedText {
            id,
            role,
            created_at,
            text,
        },
    );
    property(
        "pin_texts_over_arbitrary_pins",
        256,
        (prop::collection::vec(pinned, 0..5), 0usize..12_000),
        |(mut pins, limit)| {
            pin::text::sort(&mut pins);
            let _ = pin::text::restoration(&pins);
            let _ = pin::text::fit(&pins, limit);
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------
// Claude Code transcripts (codec/claude.rs)

fn transcript_samples() -> Vec<String> {
    [
        "claude-code-transcript-short.jsonl",
        "claude-code-transcript-autocompact.jsonl",
    ]
    .into_iter()
    .filter_map(fuzz::sample)
    .collect()
}

/// Everything mc does with a transcript: parse (strict and lossy), convert,
/// fold (the historian's input), and what the pin hook reads from it.
fn read_transcript(text: &str) {
    let _ = claude::parse_transcript(text);
    let (entries, _) = claude::parse_transcript_lossy(text);
    let grouped = claude::to_grouped_messages(&entries, "e93c");
    let messages: Vec<Value> = grouped.into_iter().map(|m| m.message).collect();
    let compaction = pin::hook::newest_compaction(&entries, NOW);
    let _ = pin::hook::already_restored("at:0", &compaction);
    // The file reader too: line by line, lossy per line, under a cap.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    std::fs::write(&path, text).unwrap();
    if let Ok(transcript) = pin::local::Transcript::load(&path, "e93c", 1 << 20) {
        let _ = transcript.cwd();
    }
    session_start_hooks(&path, "e93c", pin::Harness::ClaudeCode);
    if messages.is_empty() {
        return;
    }
    if let Ok(input) = Input::from_messages(historian::CLAUDE_CODE, "e93c", messages) {
        let _ = historian::check(store().conn(), &input, &TransformConfig::default());
    }
}

/// The `SessionStart` hook of every source over the transcript at `path`,
/// with a pin and a memory to print.
fn session_start_hooks(path: &std::path::Path, session: &str, harness: pin::Harness) {
    let mut store = store();
    let Ok(row) = pin::local::ensure_session(&mut store, harness.as_str(), session, None, NOW)
    else {
        return;
    };
    let _ = store.write(|tx| mc_history::store::pin(tx, row, "u1", "user", NOW).map(|_| ()));
    for (source, prompt) in [
        ("compact", Some("p-1")),
        ("compact", None),
        ("resume", None),
    ] {
        let input = pin::HookInput {
            session_id: session.into(),
            transcript_path: Some(path.to_path_buf()),
            cwd: Some("/home/dev/shop".into()),
            source: source.into(),
            prompt_id: prompt.map(str::to_string),
        };
        let options = pin::hook::HookOptions {
            transcript: None,
            max_transcript_bytes: 1 << 20,
            dry_run: false,
            history: true,
            memory: true,
            dates: true,
            wait: std::time::Duration::from_millis(50),
        };
        if let Ok(report) = pin::hook::restore(&mut store, harness, &input, options, NOW) {
            let _ = pin::hook::commit(&mut store, &report, NOW);
        }
    }
}

/// A Codex rollout in the shape Codex 0.169.0 writes (ids, tools, a compaction).
fn rollout_sample() -> String {
    let line = |ordinal: i64, kind: &str, payload: Value| {
        json!({"timestamp": "2026-12-01T04:45:30.833Z", "ordinal": ordinal, "type": kind, "payload": payload})
            .to_string()
    };
    [
        line(0, "session_meta", json!({"id": "019a", "cwd": "/home/dev/shop", "cli_version": "0.169.0"})),
        line(1, "turn_context", json!({"cwd": "/home/dev/shop", "model": "gpt-5.5"})),
        line(2, "response_item", json!({"type": "message", "id": "u1", "role": "user",
             "content": [{"type": "input_text", "text": "Rule one."}]})),
        line(3, "response_item", json!({"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": "Think."}]})),
        line(4, "response_item", json!({"type": "function_call", "id": "fc", "name": "exec_command",
             "call_id": "c1", "arguments": "{\"cmd\":\"ls\"}"})),
        line(5, "response_item", json!({"type": "function_call_output", "call_id": "c1", "output": "a.rs"})),
        line(6, "response_item", json!({"type": "message", "id": "a1", "role": "assistant",
             "content": [{"type": "output_text", "text": "Done."}]})),
        line(7, "event_msg", json!({"type": "token_count", "info": {"last_token_usage": {"input_tokens": 900,
             "cached_input_tokens": 800, "output_tokens": 9}, "model_context_window": 258400}})),
        line(8, "response_item", json!({"type": "message", "id": "s1", "role": "assistant",
             "content": [{"type": "output_text", "text": "Summary."}], "metadata": {"compaction_output": true}})),
        line(9, "compacted", json!({"message": "Summary.", "window_id": "w1", "replacement_history": [
             {"type": "message", "id": "u1", "role": "user", "content": [{"type": "input_text", "text": "Rule one."}]}]})),
        line(10, "response_item", json!({"type": "message", "id": "d1", "role": "developer",
             "content": [{"type": "input_text", "text": "<mc-history>\n</mc-history>"}]})),
    ]
    .join("\n")
}

/// Everything mc does with a rollout: parse, convert, what the hook and
/// the historian read.
fn read_rollout(text: &str) {
    let (lines, _) = codex::parse_rollout(text);
    let _ = (
        codex::session_id(&lines),
        codex::cwd(&lines),
        codex::context_window(&lines),
    );
    let _ = codex::newest_compaction(&lines);
    let messages = codex::to_messages(&lines, "019a");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rollout.jsonl");
    std::fs::write(&path, text).unwrap();
    if let Ok(transcript) = pin::local::Transcript::load(&path, "019a", 1 << 20) {
        let _ = transcript.cwd();
    }
    session_start_hooks(&path, "019a", pin::Harness::Codex);
    if messages.is_empty() {
        return;
    }
    if let Ok(input) = Input::from_messages(historian::CODEX, "019a", messages) {
        let _ = historian::check(store().conn(), &input, &TransformConfig::default());
    }
}

#[test]
fn codex_rollouts_over_arbitrary_bytes() {
    property(
        "codex_rollouts_over_arbitrary_bytes",
        128,
        prop::collection::vec(bytes_text(), 0..6).prop_map(|lines| lines.join("\n")),
        |text| {
            read_rollout(&text);
            Ok(())
        },
    );
}

#[test]
fn codex_rollouts_over_mutated_samples() {
    let samples = vec![rollout_sample()];
    property(
        "codex_rollouts_over_mutated_samples",
        96,
        mutated_transcript(&samples),
        |text| {
            read_rollout(&text);
            Ok(())
        },
    );
}

/// A transcript with some lines mutated as JSON and some edited as text.
fn mutated_transcript(samples: &[String]) -> impl Strategy<Value = String> + '_ {
    (
        any::<Index>(),
        prop::collection::vec((any::<Index>(), fuzz::changes(3)), 0..4),
        prop::collection::vec((any::<Index>(), fuzz::edits(3)), 0..3),
        prop::collection::vec((any::<Index>(), fuzz::timestamp()), 0..3),
    )
        .prop_map(move |(which, line_mutations, line_edits, stamps)| {
            let text = &samples[which.index(samples.len())];
            let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
            if lines.is_empty() {
                return String::new();
            }
            for (line, mutations) in line_mutations {
                let at = line.index(lines.len());
                if let Ok(value) = serde_json::from_str::<Value>(&lines[at]) {
                    lines[at] = mutations.apply(&value).to_string();
                }
            }
            for (line, stamp) in stamps {
                let at = line.index(lines.len());
                if let Ok(Value::Object(mut map)) = serde_json::from_str::<Value>(&lines[at]) {
                    map.insert("timestamp".into(), Value::String(stamp));
                    lines[at] = Value::Object(map).to_string();
                }
            }
            for (line, edits) in line_edits {
                let at = line.index(lines.len());
                lines[at] = fuzz::edit(&lines[at], &edits);
            }
            lines.join("\n")
        })
}

/// A request's messages decoded and encoded back untouched: its own bytes.
fn anthropic_round_trip(body: &[u8]) -> Result<(), TestCaseError> {
    use mc_base::codec::anthropic::{Piece, Request};
    let Ok(request) = Request::parse(body) else {
        return Ok(());
    };
    let _ = (request.breakpoints(), request.head_cache());
    let encoded: Vec<Vec<u8>> = (0..request.items.len())
        .map(|i| {
            let message = request.decode(i, &request.message_id(i), "s", Some(NOW));
            request.encode(i, &message)
        })
        .collect();
    let pieces: Vec<Piece<'_>> = encoded
        .iter()
        .enumerate()
        .map(|(i, bytes)| {
            if request.item_bytes(i) == bytes.as_slice() {
                Piece::Original(i)
            } else {
                Piece::Bytes(bytes)
            }
        })
        .collect();
    let back = request.assemble(&pieces);
    prop_assert_eq!(
        String::from_utf8_lossy(&back),
        String::from_utf8_lossy(body)
    );
    Ok(())
}

/// Read after `before` (as a resident gateway reads a session's next
/// request), a body reads as it does whole: the same spans, or an error both ways.
fn anthropic_reread(body: &[u8], before: &[u8]) -> Result<(), TestCaseError> {
    use mc_base::codec::anthropic::Request;
    let Ok(previous) = Request::parse(before) else {
        return Ok(());
    };
    let whole = Request::parse(body);
    let after = Request::parse_after(body, before, &previous.layout());
    match (whole, after) {
        (Ok(whole), Ok((after, _))) => {
            prop_assert_eq!(
                format!("{:?}", whole.layout()),
                format!("{:?}", after.layout())
            );
        }
        (Err(_), Err(_)) => {}
        (whole, after) => prop_assert!(
            false,
            "read whole: {:?}; read after the previous body: {:?}",
            whole.map(|r| r.items.len()),
            after.map(|(r, _)| r.items.len())
        ),
    }
    Ok(())
}

#[test]
fn anthropic_requests_over_arbitrary_and_mutated_bodies() {
    use mc_base::domain::gateway::{Api, Call, Forward};
    use mc_transform_core::gateway::TransformPass;
    let sample: Value = serde_json::from_str(mc_base::testkit::ANTHROPIC_REQUEST)
        .expect("the Anthropic sample is JSON");
    let pass = TransformPass::new(
        Store::open_in_memory().expect("an in-memory store"),
        TransformConfig::default(),
    );
    let headers = vec![("anthropic-version".to_string(), "2023-06-01".to_string())];
    property(
        "anthropic_requests_over_arbitrary_and_mutated_bodies",
        192,
        (bytes_text(), fuzz::changes(6), fuzz::edits(4)),
        |(arbitrary, changes, edits)| {
            let mutated = changes.apply(&sample).to_string();
            let edited = fuzz::edit(mc_base::testkit::ANTHROPIC_REQUEST, &edits);
            for body in [arbitrary, mutated, edited] {
                anthropic_round_trip(body.as_bytes())?;
                anthropic_reread(
                    body.as_bytes(),
                    mc_base::testkit::ANTHROPIC_REQUEST.as_bytes(),
                )?;
                let call = Call {
                    api: Api::AnthropicMessages,
                    harness: "claude-code",
                    session_id: Some("s"),
                    path: "/v1/messages",
                    headers: &headers,
                    body: body.as_bytes(),
                    now_ms: NOW,
                };
                if let Ok(Forward::Body(out)) = pass.run(&call).map(|(f, _)| f) {
                    prop_assert!(serde_json::from_slice::<Value>(&out).is_ok());
                }
            }
            Ok(())
        },
    );
}

/// A Responses request's messages decoded and encoded back untouched: its
/// own bytes.
fn responses_round_trip(body: &[u8]) -> Result<(), TestCaseError> {
    use mc_base::codec::anthropic::Piece;
    use mc_base::codec::responses::Request;
    let Ok(request) = Request::parse(body) else {
        return Ok(());
    };
    let encoded: Vec<Vec<u8>> = request
        .message_ids()
        .iter()
        .enumerate()
        .map(|(g, id)| request.encode(g, &request.decode(g, id, "s", Some(NOW))))
        .collect();
    // As the pass does: an item encoded to its own bytes stays the original,
    // so the whitespace between items (which mc does not keep) is kept too.
    let pieces: Vec<Piece<'_>> = encoded
        .iter()
        .enumerate()
        .map(|(g, bytes)| {
            if request.group_bytes(g) == bytes.as_slice() {
                Piece::Original(g)
            } else {
                Piece::Bytes(bytes)
            }
        })
        .collect();
    let back = request.assemble(&pieces);
    prop_assert_eq!(
        String::from_utf8_lossy(&back),
        String::from_utf8_lossy(body)
    );
    for bytes in &encoded {
        let _ = Request::without_results(bytes);
    }
    Ok(())
}

#[test]
fn responses_requests_over_arbitrary_and_mutated_bodies() {
    use mc_base::domain::gateway::{Api, Call, Forward};
    use mc_transform_core::responses_pass::ResponsesPass;
    const SAMPLE: &str = include_str!("../testdata/codex/02-call-output.body.json");
    let sample: Value = serde_json::from_str(SAMPLE).expect("the Codex sample is JSON");
    let pass = ResponsesPass::new(
        Store::open_in_memory().expect("an in-memory store"),
        TransformConfig::default(),
    );
    let headers = vec![(
        "x-codex-turn-metadata".to_string(),
        r#"{"request_kind":"turn"}"#.to_string(),
    )];
    property(
        "responses_requests_over_arbitrary_and_mutated_bodies",
        128,
        (bytes_text(), fuzz::changes(6), fuzz::edits(4)),
        |(arbitrary, changes, edits)| {
            let mutated = changes.apply(&sample).to_string();
            let edited = fuzz::edit(SAMPLE, &edits);
            for body in [arbitrary, mutated, edited] {
                responses_round_trip(body.as_bytes())?;
                let call = Call {
                    api: Api::OpenAiResponses,
                    harness: "codex",
                    session_id: Some("s"),
                    path: "/openai/responses",
                    headers: &headers,
                    body: body.as_bytes(),
                    now_ms: NOW,
                };
                if let Ok(Forward::Body(out)) = pass.run(&call).map(|(f, _)| f) {
                    prop_assert!(serde_json::from_slice::<Value>(&out).is_ok());
                }
            }
            Ok(())
        },
    );
}

#[test]
fn claude_transcripts_over_arbitrary_bytes() {
    property(
        "claude_transcripts_over_arbitrary_bytes",
        256,
        prop::collection::vec(bytes_text(), 0..6).prop_map(|lines| lines.join("\n")),
        |text| {
            read_transcript(&text);
            Ok(())
        },
    );
}

/// Timestamps that panicked `codec::claude::parse_timestamp` when it sliced
/// the `+hh:mm` offset by byte index: a multi-byte character there.
const PANICKING_TIMESTAMPS: [&str; 3] = [
    // `&rest[3..4]` (claude.rs:170) inside the 4-byte character
    "2025-10-09T09:20:00𝄞00",
    // `&rest[..1]` (claude.rs:171) inside the 2-byte character
    "2025-10-09T09:20:00é0:00",
    "2025-10-09T09:20:00.1é0:00",
];

#[test]
fn claude_transcripts_over_mutated_samples() {
    for stamp in PANICKING_TIMESTAMPS {
        let line = json!({"type": "user", "uuid": "u1", "timestamp": stamp,
                          "message": {"role": "user", "content": "hi"}});
        read_transcript(&line.to_string());
    }
    let samples = transcript_samples();
    if samples.is_empty() {
        return;
    }
    property(
        "claude_transcripts_over_mutated_samples",
        96,
        mutated_transcript(&samples),
        |text| {
            read_transcript(&text);
            Ok(())
        },
    );
}

#[test]
fn claude_timestamps_over_arbitrary_text() {
    for stamp in PANICKING_TIMESTAMPS {
        assert_eq!(claude::parse_timestamp(stamp), None, "{stamp:?}");
    }
    property(
        "claude_timestamps_over_arbitrary_text",
        1024,
        fuzz::timestamp(),
        |text| {
            let _ = claude::parse_timestamp(&text);
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------
// What the properties found, pinned as plain tests (each panicked before its fix)

#[test]
fn found_usage_sums_saturate() {
    let usage = mc_base::domain::envelope::Usage {
        input: u64::MAX,
        cache_read: 8_000,
        cache_write: 1,
        output: 0,
    };
    assert_eq!(usage.prompt_tokens(), u64::MAX);
    let message = mc_base::codec::Message::decode(json!({
        "info": {"role": "assistant", "tokens": {"input": u64::MAX, "cache": {"read": 1, "write": 1}}},
        "parts": []
    }))
    .unwrap();
    assert_eq!(message.usage_input_tokens(), Some(u64::MAX));
}

#[test]
fn found_a_pass_with_extreme_numbers_answers() {
    for sample in envelope_samples() {
        let session = sample["session_id"].as_str().unwrap().to_string();
        for (path, value) in [
            (&["usage", "input"][..], json!(u64::MAX)),
            (&["now_ms"][..], json!(i64::MIN)),
            (&["model", "context_limit"][..], json!(u64::MAX)),
        ] {
            let mut store = store();
            pass_like_the_binary(&mut store, &sample, &TransformConfig::default());
            let mut envelope = sample.clone();
            let mut node = &mut envelope;
            for key in path {
                node = &mut node[*key];
            }
            *node = value.clone();
            let envelope = Envelope::from_value(envelope).unwrap();
            let now = envelope.now_ms.unwrap_or(NOW);
            let out = run_pass(&mut store, envelope, &TransformConfig::default(), now)
                .unwrap_or_else(|e| panic!("{path:?} = {value}: {e}"));
            assert!(!out.messages.is_empty(), "{path:?} = {value}");
            let harness = sample["harness"].as_str().unwrap_or("opencode");
            let status = transform::status(&store, harness, &session)
                .unwrap()
                .unwrap();
            let status = serde_json::to_value(status).unwrap().to_string();
            assert!(!status.contains(":-1,"), "nothing wraps negative: {status}");
        }
    }
}

#[test]
fn found_the_ttl_and_gap_arithmetic_saturates() {
    use mc_base::config::CacheTtl;
    use mc_transform_core::scheduler::ttl_expired;
    assert!(!ttl_expired(CacheTtl::Millis(300_000), NOW, i64::MIN));
    assert!(ttl_expired(CacheTtl::Millis(300_000), 1, i64::MAX));
    // A TTL beyond i64 is "not expired yet", not a negative TTL.
    assert!(!ttl_expired(CacheTtl::Millis(u64::MAX), 1, NOW));
    let messages = mc_base::codec::opencode::decode_all(vec![
        json!({"info": {"role": "assistant", "time": {"created": i64::MIN}}, "parts": []}),
        json!({"info": {"role": "user", "time": {"created": i64::MAX}}, "parts": []}),
    ])
    .unwrap();
    let markers = transform::temporal::markers(&messages);
    assert!(
        markers[1]
            .as_deref()
            .is_some_and(|m| m.starts_with("<!-- +")),
        "{markers:?}"
    );
}

#[test]
fn found_provider_token_counts_saturate() {
    let body = json!({
        "content": [{"type": "text", "text": "ok"}],
        "usage": {"input_tokens": u64::MAX, "output_tokens": 1, "cache_read_input_tokens": i64::MAX}
    })
    .to_string();
    let server = Server::start(response(200, "", &body, true));
    let providers = BTreeMap::from([(
        "p".to_string(),
        config::ProviderConfig {
            kind: config::ProviderKind::Anthropic,
            base_url: Some(server.url()),
            api_key_env: None,
            command: None,
        },
    )]);
    let options = llm::Options {
        connect_timeout: Duration::from_secs(2),
        timeout: Duration::from_secs(5),
        retries: 0,
        backoff: Duration::ZERO,
        proxy: llm::ProxyEnv::default(),
        sleep: llm::Sleeper::new(|_| {}),
    };
    let client =
        llm::Client::new(&providers, &["p/m".to_string()], &BTreeMap::new(), options).unwrap();
    let prompt = Prompt {
        system: "s".into(),
        user: "u".into(),
        max_tokens: 10,
    };
    let completion = client.complete(&prompt, &mut |_| {}).unwrap();
    assert_eq!(completion.tokens_in, u64::MAX);

    // Two calls (an answer and its repair) reporting u64::MAX each.
    let mut store = store();
    let envelope = small_window(fuzz::example_envelope(), 2_000);
    let input = Input::from_envelope(Envelope::from_value(envelope).unwrap()).unwrap();
    // An empty answer is rejected, so the model is asked twice.
    let model = Scripted::new(
        vec![vec![fuzz::Edit::Delete(first_index(), usize::MAX)]],
        (u64::MAX, u64::MAX),
    );
    historian_on(&mut store, &input, &model);
    assert_eq!(model.calls.get(), 2, "asked, then asked to repair");
    let session =
        mc_base::domain::sessions::find_session(store.conn(), "opencode", &input.session_id)
            .unwrap()
            .unwrap();
    let run = historian::publish::last_run(store.conn(), session.id)
        .unwrap()
        .unwrap();
    assert_eq!(
        (run.tokens_in, run.tokens_out),
        (i64::MAX, i64::MAX),
        "{run:?}"
    );
}

/// The MCP server and the agent tools over whatever a client sends: arbitrary
/// lines, arbitrary JSON-RPC messages and tool arguments, against a store
/// with a session, a tag, a memory and a note in it. Every answer is an
/// answer (a result or a JSON-RPC error), never a panic.
#[test]
fn mcp_server_and_tools_over_arbitrary_messages() {
    use mc_search_core::mcp::{self, ServerInfo};
    use mc_search_core::tools::{SessionSource, TOOL_NAMES, ToolServer};

    let info = ServerInfo {
        name: "mc",
        version: "0",
        instructions: None,
    };
    let mut store = store();
    let envelope = fuzz::example_envelope();
    let session = pass_like_the_binary(&mut store, &envelope, &TransformConfig::default());
    let project = mc_base::domain::sessions::find_session(
        store.conn(),
        "opencode",
        session.as_deref().unwrap_or_default(),
    )
    .ok()
    .flatten()
    .and_then(|s| s.project_identity)
    .unwrap_or_else(|| "dir:test".into());
    let _ = mc_search_core::memory::write(&mut store, &project, "NAMING", "a fact", "user", NOW);
    let clock = || NOW;
    let server = std::cell::RefCell::new(ToolServer {
        store,
        project,
        harness: "opencode".into(),
        session: SessionSource::Fixed(
            fuzz::example_envelope()["session_id"]
                .as_str()
                .map(str::to_string),
        ),
        transform: TransformConfig::default(),
        clock: &clock,
        embeddings: None,
    });
    let tool_name = prop_oneof![
        prop::sample::select(TOOL_NAMES.to_vec()).prop_map(str::to_string),
        fuzz::text(),
    ];
    let arguments = prop_oneof![
        fuzz::json(),
        (
            prop::sample::select(vec![
                "write", "update", "archive", "merge", "list", "show", "dismiss", "x"
            ]),
            fuzz::json(),
            fuzz::json(),
            fuzz::number(),
        )
            .prop_map(|(action, content, target, id)| json!({
                "action": action, "content": content, "category": "NAMING", "id": id,
                "ids": [id, 1], "target": target, "query": content, "drop": target,
                "budget": id, "limit": id, "sources": [content]
            })),
    ];
    property(
        "mcp_server_and_tools_over_arbitrary_messages",
        256,
        (bytes_text(), tool_name, arguments, fuzz::json()),
        |(line, name, args, id)| {
            let mut server = server.borrow_mut();
            let _ = mcp::handle_text(&line, &mut *server, &info);
            let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                              "params": {"name": name, "arguments": args}});
            let answer = mcp::handle_text(&call.to_string(), &mut *server, &info);
            if id.is_i64() || id.is_string() {
                let answer = answer.expect("a request with an id is answered");
                prop_assert!(answer.get("result").is_some() || answer.get("error").is_some());
            }
            Ok(())
        },
    );
}

/// Whatever a user types is a query FTS5 accepts (never a syntax error), and
/// the index's text helpers never panic, over arbitrary text.
#[test]
fn search_queries_over_arbitrary_text_are_valid_fts5() {
    use mc_search_core::{index, query};
    let store = store();
    let text = prop_oneof![
        bytes_text(),
        fuzz::text(),
        prop::collection::vec(
            prop::sample::select(vec![
                "\"",
                "-",
                "*",
                "(",
                ")",
                "NOT",
                "AND",
                "OR",
                "NEAR",
                ":",
                "^",
                "+",
                "{",
                "}",
                "col:",
                "\u{0}",
                "é",
                "RetryPolicy",
                "a_b",
                " ",
                "-\"x y\"",
            ]),
            0..12,
        )
        .prop_map(|pieces| pieces.concat()),
    ];
    property(
        "search_queries_over_arbitrary_text_are_valid_fts5",
        512,
        text,
        |text| {
            let _ = index::identifier_pieces(&text);
            let _ = index::index_text("tool", Some(&text), Some(&text), &text);
            let _ = query::snippet(&text, &text, 50);
            if let Some(expression) = query::fts_expression(&text) {
                for table in [
                    "memories_fts",
                    "messages_fts",
                    "notes_fts",
                    "compartments_fts",
                ] {
                    let result: rusqlite::Result<i64> = store.conn().query_row(
                        &format!("SELECT count(*) FROM {table} WHERE {table} MATCH ?1"),
                        [&expression],
                        |r| r.get(0),
                    );
                    prop_assert!(result.is_ok(), "{expression:?} on {table}: {result:?}");
                }
            }
            let hits = query::query(store.conn(), "git:p", &text, &[], 10);
            prop_assert!(
                hits.is_ok() || query::fts_expression(&text).is_none(),
                "{text:?}: {hits:?}"
            );
            Ok(())
        },
    );
}

/// A manifest each dreamer task might answer, for mutation.
fn dream_answers() -> Vec<String> {
    vec![
        "<consolidate>\n<merge ids=\"1,2\">Never log API keys.</merge>\n</consolidate>".into(),
        "<verify><memory id=\"1\" verdict=\"verified\"/><memory id='2' verdict=\"update\">x &amp; y</memory>\
         <memory id=\"3\" verdict=\"archive\">gone</memory></verify>"
            .into(),
        "<classify><memory id=\"1\" importance=\"80\" scope=\"project\"/></classify>".into(),
        "<archive_stale><memory id=\"2\" verdict=\"keep\"/><!-- c --></archive_stale>".into(),
        mc_dream_core::team::render_file("CONSTRAINTS", &[("a1", "Never log API keys."), ("b", "two\n## x")]),
        "\u{1e}502ce4f09d13391600ab556b15fc3474c3577dc8\u{1f}A <a@x>\u{1f}1700259200\u{1f}s\u{1f}b\u{1d}\n\nf\n"
            .into(),
        "MAILTO=x\n*/15 * * * * 'mc-dream' tick # mc-dream tick\n".into(),
    ]
}

#[test]
fn dream_parsers_over_text() {
    use mc_dream_core::{
        classify, consolidate, crontab, gitlog, secrets, similar, stale, team, verify,
    };
    let samples = dream_answers();
    property(
        "dream_parsers_over_text",
        1024,
        prop_oneof![
            1 => any::<String>(),
            1 => bytes_text(),
            4 => (prop::sample::select(samples), fuzz::edits(6))
                .prop_map(|(text, edits)| fuzz::edit(&text, &edits)),
        ],
        |text| {
            let _ = consolidate::parse(&text, &[vec![1, 2], vec![3]]);
            let _ = verify::parse(&text, &[1, 2, 3]);
            let _ = classify::parse(&text, &[1]);
            let _ = stale::parse(&text, &[2]);
            let _ = team::parse_file(&text);
            let _ = gitlog::parse_log(&text);
            let _ = secrets::secret_reason(&text);
            let _ = secrets::redact_lines(&text);
            let _ = verify::path_words(&text);
            let _ = verify::symbols(&text);
            let _ = verify::withheld(&text);
            let _ = similar::words(&text);
            let _ = crontab::install(&text, "*/15 * * * * x tick # mc-dream tick");
            let _ = crontab::uninstall(&text);
            let _ = mc_base::config::parse_cron(&text);
            Ok(())
        },
    );
}

#[test]
fn dashboard_requests_over_arbitrary_paths_queries_headers_and_forms() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("mc.db");
    let mut store = Store::open(&db, &mc_base::store::StoreOptions::default()).unwrap();
    let _ = pass_like_the_binary(
        &mut store,
        &fuzz::example_envelope(),
        &TransformConfig::default(),
    );
    drop(store);
    let dash = mc_dashboard::Dashboard {
        db,
        store_options: mc_base::store::StoreOptions::default(),
        config: mc_base::config::Config::default(),
        doctor: mc_doctor_core::Env::default(),
        checks: mc_doctor_core::checks::Options::default(),
        logs: Vec::new(),
        token: "t0k".into(),
        csrf: "c5f".into(),
        clock: Arc::new(|| NOW),
    };
    let server = std::cell::RefCell::new(
        mc_dashboard::Server::bind(SocketAddr::from(([127, 0, 0, 1], 0)), dash).unwrap(),
    );
    let port = server.borrow().addr().port();
    let paths = [
        "/",
        "/session",
        "/memory",
        "/spend",
        "/dream",
        "/export",
        "/assets/style.css",
        "/memory/update",
        "/memory/archive",
        "/memory/merge",
        "/nope",
    ];
    property(
        "dashboard_requests_over_arbitrary_paths_queries_headers_and_forms",
        96,
        (
            0..3usize,
            0..paths.len(),
            bytes_text(),
            bytes_text(),
            prop::collection::vec(any::<u8>(), 0..256),
            any::<bool>(),
        ),
        |(method, path, query, header, body, csrf)| {
            let method = ["GET", "POST", "HEAD"][method];
            let url = format!("{}?{query}", paths[path]);
            let mut body = body;
            if csrf {
                body.extend_from_slice(b"&csrf=c5f&project=");
                body.extend_from_slice(query.as_bytes());
            }
            let mut headers = vec![
                ("Host".to_string(), format!("127.0.0.1:{port}")),
                (
                    "Cookie".to_string(),
                    format!("mc_dashboard_{port}=t0k; {header}"),
                ),
                (
                    "Content-Type".to_string(),
                    "application/x-www-form-urlencoded".to_string(),
                ),
                (header.clone(), header.clone()),
            ];
            // With the CSRF token the form reaches its action; else any Origin.
            if !csrf {
                headers.push(("Origin".to_string(), header));
            }
            let request = mc_dashboard::server::Incoming {
                method,
                url: &url,
                headers,
                body,
            };
            let _ = server.borrow_mut().answer(&request);
            Ok(())
        },
    );
}

//! Recall hints (`transform.recall_hints`) on the recall sets: each question
//! asked as the new prompt of a fresh session of the set's project, decided
//! by the pass's own step (`mc_transform_core::recall::decide` over
//! mc-search's `recall::Search`). Per set: how often a hint shows, how
//! often it names the question's evidence, how often it shows something
//! when the evidence is not in the store (the same sessions without the
//! evidence messages, distractors kept) and for ordinary coding prompts
//! that need no recall; its size in bytes and the time the decision adds
//! to the pass. Nothing is asserted: the figures decide the default.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use mc_base::codec::Message;
use mc_base::codec::opencode::decode_all;
use mc_base::domain::{content, messages, sessions};
use mc_base::identity::project_identity;
use mc_base::store::{Store, StoreOptions};
use mc_search_core::index;
use mc_search_core::recall::Search;
use mc_tests::qa;
use mc_transform_core::recall::{self, Outcome, Prompt};

use super::{Result, err};

const NOW_MS: i64 = 1_796_100_000_000;

/// Prompts of an ordinary coding session: none asks about something said
/// before, so a hint on one of them is a false hint.
pub const ORDINARY: &[&str] = &[
    "add a --verbose flag to the command line parser and print each step",
    "write a unit test for the date formatting helper with a leap year",
    "rename the function load_settings to read_settings everywhere",
    "the build fails with a missing semicolon in main.rs, fix it",
    "refactor this loop into an iterator chain with filter and map",
    "explain what this regular expression matches",
    "make the README's install section shorter",
    "run cargo fmt and commit the result",
    "add pagination to the list endpoint, 50 items per page",
    "why does this closure need to be move here?",
    "convert the callbacks in fetch_user to async/await",
    "bump the version to 0.4.0 and update the changelog",
    "add a docstring to every public function in this module",
    "the CSS grid overflows on a phone screen, make it wrap",
    "split this 400-line file into two modules",
    "replace the unwrap calls in the parser with proper errors",
    "add a Dockerfile that builds the release binary",
    "sort the imports in every file of the src folder",
    "what does the borrow checker complain about on line 42?",
    "write a shell script that runs the tests twice",
    "add a dark mode toggle to the settings page",
    "make the log lines include the request id",
    "implement Display for the Point struct",
    "delete the unused helper functions in utils.rs",
];

/// One set's figures.
#[derive(Default)]
struct Tally {
    asked: usize,
    hints: usize,
    /// Hints naming at least one evidence message.
    hits: usize,
    /// Hints naming every evidence message.
    whole: usize,
    bytes: Vec<usize>,
    times: Vec<Duration>,
    /// Decisions that gave no hint because the search overran its budget.
    slow: usize,
    /// Per question kind: (hints naming the evidence, questions).
    kinds: BTreeMap<&'static str, (usize, usize)>,
}

impl Tally {
    fn rate(n: usize, of: usize) -> String {
        if of == 0 {
            return "-".into();
        }
        format!("{n}/{of} ({:.0} %)", 100.0 * n as f64 / of as f64)
    }
}

/// A store holding `all`'s sessions under one project, indexed; with
/// `without` the messages whose text is one of them are left out.
fn store_of(
    work: &Path,
    name: &str,
    all: &[Vec<serde_json::Value>],
    without: &[&str],
) -> Result<(Store, String)> {
    let db = work.join(format!("hints-{}.db", name.replace(' ', "-")));
    let _ = std::fs::remove_file(&db);
    let project = work.join("recall-project");
    std::fs::create_dir_all(&project).map_err(err("creating the project folder"))?;
    let identity = project_identity(&project);
    let mut store = Store::open(&db, &StoreOptions::default()).map_err(err("opening the DB"))?;
    store
        .write(|tx| {
            for (i, values) in all.iter().enumerate() {
                let decoded: Vec<Message> = decode_all(values.clone())?
                    .into_iter()
                    .filter(|m| {
                        !m.parts
                            .iter()
                            .any(|p| p.text().is_some_and(|t| without.contains(&t)))
                    })
                    .collect();
                let mut session = sessions::create_session(
                    tx,
                    "opencode",
                    &format!("qa-{i:02}"),
                    false,
                    Some(&identity),
                    NOW_MS,
                )?;
                let (ordinals, _) = messages::register_messages(tx, &mut session, &decoded)?;
                content::record_messages(tx, session.id, &decoded, &ordinals)?;
            }
            Ok(())
        })
        .map_err(err("recording the sessions"))?;
    index::catch_up(&mut store, None, &mut |_, _| {}).map_err(err("indexing"))?;
    Ok((store, identity))
}

/// How a hint names each evidence message: `message N of session qa-XX`.
fn evidence_names(store: &Store, evidence: &[&str]) -> Result<Vec<String>> {
    evidence
        .iter()
        .map(|text| {
            store
                .conn()
                .query_row(
                    "SELECT s.session_id, p.ordinal FROM raw_parts p
                     JOIN sessions s ON s.id = p.session WHERE p.content = ?1",
                    [text],
                    |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)),
                )
                .map(|(s, o)| format!("message {o} of session {s}"))
                .map_err(err("finding an evidence message"))
        })
        .collect()
}

/// What one decision showed: the hint's bytes and names (none: no hint),
/// how long it took, whether the search overran its budget.
type Asked = (Option<(String, Vec<String>)>, Duration, bool);

/// `prompt` as the first prompt of a fresh session `ask-N` of the project,
/// decided as the pass decides it: (the hint's bytes and names, if one
/// shows; the time the decision took, search and stored row included).
fn ask(store: &mut Store, identity: &str, n: usize, prompt: &str) -> Result<Asked> {
    let session_id = format!("ask-{n:03}");
    let message_id = format!("msg_ask_{n:03}");
    let message = Message::decode(serde_json::json!({
        "info": {"id": message_id, "role": "user", "sessionID": session_id},
        "parts": [{"type": "text", "text": prompt}]
    }))
    .map_err(err("building the prompt"))?;
    store
        .write(|tx| {
            let session = sessions::create_session(
                tx,
                "opencode",
                &session_id,
                false,
                Some(identity),
                NOW_MS,
            )?;
            let started = Instant::now();
            let outcome = recall::decide(
                tx,
                &Prompt {
                    session: session.id,
                    project: identity,
                    harness: "opencode",
                    session_id: &session_id,
                    message: &message,
                    now_ms: NOW_MS,
                },
                &Search,
            )?;
            let took = started.elapsed();
            let shown = if outcome == Outcome::Hint {
                let (hint, names): (String, String) = tx.query_row(
                    "SELECT hint, names FROM recall_hints WHERE session = ?1 AND message_id = ?2",
                    rusqlite::params![session.id, message_id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?;
                let names: Vec<String> = serde_json::from_str(&names).unwrap_or_default();
                Some((hint, names))
            } else {
                None
            };
            Ok((shown, took, outcome == Outcome::Slow))
        })
        .map_err(err("deciding a prompt"))
}

/// The recall-hint figures of one set (its questions and sessions).
pub fn run(
    work: &Path,
    set: &str,
    questions: &[qa::Question],
    all: &[Vec<serde_json::Value>],
) -> Result<()> {
    let (mut full, identity) = store_of(work, set, all, &[])?;
    let evidence: Vec<&str> = questions
        .iter()
        .flat_map(|q| q.evidence.iter().copied())
        .collect();
    let (mut bare, bare_identity) = store_of(work, &format!("{set} bare"), all, &evidence)?;

    let mut found = Tally::default();
    let mut n = 0;
    let mut missed = Vec::new();
    for q in questions {
        let want = evidence_names(&full, &q.evidence)?;
        n += 1;
        let (shown, took, slow) = ask(&mut full, &identity, n, q.text)?;
        found.slow += usize::from(slow);
        found.asked += 1;
        found.times.push(took);
        let kind = found.kinds.entry(q.kind).or_default();
        kind.1 += 1;
        match shown {
            Some((hint, names)) => {
                found.hints += 1;
                found.bytes.push(hint.len());
                let named = want.iter().filter(|w| names.contains(w)).count();
                kind.0 += usize::from(named > 0);
                found.hits += usize::from(named > 0);
                found.whole += usize::from(named == want.len());
                if named == 0 {
                    missed.push(format!("{} — {:?}: named {names:?}", q.kind, q.text));
                }
            }
            None => missed.push(format!("{} — {:?}: no hint", q.kind, q.text)),
        }
    }
    let mut absent = Tally::default();
    for q in questions {
        n += 1;
        let (shown, took, slow) = ask(&mut bare, &bare_identity, n, q.text)?;
        absent.slow += usize::from(slow);
        absent.asked += 1;
        absent.times.push(took);
        if let Some((hint, _)) = shown {
            absent.hints += 1;
            absent.bytes.push(hint.len());
        }
    }
    let mut ordinary = Tally::default();
    for prompt in ORDINARY {
        n += 1;
        let (shown, took, slow) = ask(&mut full, &identity, n, prompt)?;
        ordinary.slow += usize::from(slow);
        ordinary.asked += 1;
        ordinary.times.push(took);
        if let Some((hint, _)) = shown {
            ordinary.hints += 1;
            ordinary.bytes.push(hint.len());
        }
    }
    print(set, &found, &absent, &ordinary, &missed);
    Ok(())
}

fn print(set: &str, found: &Tally, absent: &Tally, ordinary: &Tally, missed: &[String]) {
    println!("\nrecall hints on the {set} (each question the first prompt of a fresh session):");
    println!(
        "  questions: a hint shows {}, names the evidence {} (all of it {}); of the hints shown, {} name it",
        Tally::rate(found.hints, found.asked),
        Tally::rate(found.hits, found.asked),
        Tally::rate(found.whole, found.asked),
        Tally::rate(found.hits, found.hints),
    );
    let kinds: Vec<String> = found
        .kinds
        .iter()
        .map(|(k, (hits, of))| format!("{k} {hits}/{of}"))
        .collect();
    println!("  the evidence named, by kind: {}", kinds.join(", "));
    println!(
        "  false hints: evidence not in the store {}, ordinary coding prompts {}",
        Tally::rate(absent.hints, absent.asked),
        Tally::rate(ordinary.hints, ordinary.asked),
    );
    let mut bytes: Vec<usize> = [found, absent, ordinary]
        .iter()
        .flat_map(|t| t.bytes.iter().copied())
        .collect();
    bytes.sort_unstable();
    if let (Some(min), Some(max)) = (bytes.first(), bytes.last()) {
        println!(
            "  hint size: median {} bytes, min {min}, max {max} (cap {})",
            bytes.get(bytes.len() / 2).copied().unwrap_or_default(),
            recall::HINT_MAX_BYTES
        );
    }
    let mut times: Vec<Duration> = [found, absent, ordinary]
        .iter()
        .flat_map(|t| t.times.iter().copied())
        .collect();
    times.sort_unstable();
    println!(
        "  time the decision adds to the pass (search, rule, stored row), {} prompts: median {:.2} ms, p90 {:.2} ms, max {:.2} ms",
        times.len(),
        super::ms(super::percentile(&times, 50)),
        super::ms(super::percentile(&times, 90)),
        super::ms(times.last().copied().unwrap_or_default()),
    );
    println!(
        "  searches over the {} ms budget (no hint): {} of the questions, {} evidence absent, {} ordinary",
        recall::BUDGET.as_millis(),
        found.slow,
        absent.slow,
        ordinary.slow
    );
    println!("  questions whose hint does not name the evidence:");
    for m in missed {
        println!("    {m}");
    }
}

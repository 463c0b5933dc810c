//! Retrieval quality on the QA set of `mc_tests::qa`: evidence recall@5 and
//! @10 per question kind for a plain BM25 index, mc's ranking, and (with
//! an embeddings endpoint) mc's hybrid ranking; and a tokenizer comparison
//! (recall of bare `ORDER BY rank` over indexes built with each).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use mc_base::codec::opencode::decode_all;
use mc_base::domain::{content, messages, sessions};
use mc_base::identity::project_identity;
use mc_base::store::{Store, StoreOptions};
use mc_dream_core::gitlog;
use mc_search_core::{embed, index, query};
use mc_tests::qa;

use super::{Result, err};

const NOW_MS: i64 = 1_796_100_000_000;

/// A full-text index to compare: its name, FTS5 tokenizer, and whether the
/// camel-case pieces of identifiers are added to the text (as mc does).
struct Variant {
    name: &'static str,
    tokenize: &'static str,
    pieces: bool,
}

const VARIANTS: [Variant; 5] = [
    Variant {
        name: "unicode61 (plain BM25)",
        tokenize: "unicode61 remove_diacritics 2",
        pieces: false,
    },
    Variant {
        name: "unicode61 + identifier pieces (mc)",
        tokenize: "unicode61 remove_diacritics 2",
        pieces: true,
    },
    Variant {
        name: "porter unicode61 + pieces",
        tokenize: "porter unicode61 remove_diacritics 2",
        pieces: true,
    },
    Variant {
        name: "unicode61 tokenchars _ + pieces",
        tokenize: "unicode61 remove_diacritics 2 tokenchars '_'",
        pieces: true,
    },
    Variant {
        name: "trigram",
        tokenize: "trigram",
        pieces: false,
    },
];

/// A kept part: id, kind, tool name, tool input, content.
type Part = (i64, String, Option<String>, Option<String>, String);

/// Recall of one ranker: per kind, the sums of recall@5 and @10 and the count.
#[derive(Default)]
struct Tally(BTreeMap<&'static str, (f64, f64, usize)>);

impl Tally {
    fn add(&mut self, kind: &'static str, evidence: &[i64], ranked: &[i64]) {
        let found = |k: usize| {
            let top: Vec<i64> = ranked.iter().take(k).copied().collect();
            evidence.iter().filter(|e| top.contains(e)).count() as f64 / evidence.len() as f64
        };
        let entry = self.0.entry(kind).or_default();
        entry.0 += found(5);
        entry.1 += found(10);
        entry.2 += 1;
    }

    fn cell(&self, kind: Option<&str>) -> String {
        let (a, b, n) = self
            .0
            .iter()
            .filter(|(k, _)| kind.is_none_or(|want| **k == want))
            .fold((0.0, 0.0, 0), |(a, b, n), (_, (x, y, m))| {
                (a + x, b + y, n + m)
            });
        if n == 0 {
            return "-".into();
        }
        format!("{:.2} / {:.2}", a / n as f64, b / n as f64)
    }
}

/// The embedding models a recall run compares: (row name, provider).
pub type Models = Vec<(String, embed::Provider)>;

/// Fusions compared on each set: (weight of the vector rank, candidates
/// per source, full-text top kept in place, vector-only candidates taken
/// from the index, their weight). The first is the hybrid before vector-only
/// candidates (re-ranking alone).
const FUSIONS: [(f64, usize, usize, usize, f64); 10] = [
    (1.0, 50, 0, 0, 0.0),
    (1.0, 50, 0, 20, 1.0),
    (1.0, 50, 0, 20, 2.0),
    (1.0, 50, 3, 20, 2.0),
    (1.0, 30, 3, 20, 2.0),
    (1.0, 50, 3, 10, 2.0),
    (1.0, 50, 3, 50, 2.0),
    (1.0, 50, 3, 20, 3.0),
    (1.0, 50, 5, 20, 2.0),
    (1.0, 50, 3, 20, 1.5),
];

/// Recall on the QA set and the paraphrase set, full text against hybrid
/// with each model, then the commit field weights.
pub fn run(work: &Path, turns: usize, embed_url: Option<&str>, local: Option<&Path>) -> Result<()> {
    let _server;
    let mut models: Models = Vec::new();
    if let Some(dir) = local {
        let spec = &embed::local::WORDLLAMA_L2_256;
        models.push((
            "local wordllama (in process)".into(),
            embed::Provider {
                name: format!("{}{}", embed::LOCAL_PREFIX, spec.name),
                backend: embed::Backend::Local(std::sync::Arc::new(embed::LocalModel::new(
                    spec,
                    dir.to_path_buf(),
                ))),
                dimensions: Some(spec.dimensions),
                batch_size: 256,
                timeout: std::time::Duration::from_secs(60),
                query_timeout: std::time::Duration::from_secs(5),
                retries: 0,
                index: Default::default(),
            },
        ));
    }
    let url = match embed_url {
        Some("spawn") => {
            let (child, url) = super::spawn_embed_server()?;
            _server = Some(child);
            Some(url)
        }
        Some(u) => Some(u.to_string()),
        None => None,
    };
    if let Some(url) = url {
        models.push((
            "endpoint wordllama (HTTP)".into(),
            embed::Provider {
                name: "local/wordllama-l2-supercat-256".into(),
                backend: embed::Backend::Endpoint {
                    url: format!("{}/embeddings", url.trim_end_matches('/')),
                    model: "wordllama-l2-supercat-256".into(),
                    key: None,
                    connect_timeout: std::time::Duration::from_secs(5),
                },
                dimensions: None,
                batch_size: 64,
                timeout: std::time::Duration::from_secs(60),
                query_timeout: std::time::Duration::from_secs(5),
                retries: 3,
                index: Default::default(),
            },
        ));
    }
    let (questions, _) = qa::questions();
    let (mut store, identity) = recall_set(
        work,
        "QA set",
        &questions,
        qa::sessions(turns),
        &qa::KINDS,
        &models,
        true,
    )?;
    let (paraphrases, _) = mc_tests::paraphrase::questions();
    recall_set(
        work,
        "paraphrase set",
        &paraphrases,
        mc_tests::paraphrase::sessions(turns),
        &mc_tests::paraphrase::KINDS,
        &models,
        false,
    )?;
    commit_weights(&mut store, &identity)
}

#[allow(
    clippy::too_many_lines,
    reason = "a benchmark's scenario, read top to bottom; the 150-line rule is for mc's own code"
)]
fn recall_set(
    work: &Path,
    set: &str,
    questions: &[qa::Question],
    all: Vec<Vec<serde_json::Value>>,
    kinds: &[&'static str],
    models: &Models,
    tokenizers: bool,
) -> Result<(Store, String)> {
    let db = work.join(format!("{}.db", set.replace(' ', "-")));
    let _ = std::fs::remove_file(&db);
    let project = work.join("recall-project");
    std::fs::create_dir_all(&project).map_err(err("creating the project folder"))?;
    let identity = project_identity(&project);
    let mut store = Store::open(&db, &StoreOptions::default()).map_err(err("opening the DB"))?;
    let count: usize = all.iter().map(Vec::len).sum();
    store
        .write(|tx| {
            for (i, values) in all.into_iter().enumerate() {
                let decoded = decode_all(values)?;
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
    let parts: i64 = store
        .conn()
        .query_row("SELECT count(*) FROM raw_parts", [], |r| r.get(0))
        .map_err(err("counting"))?;
    println!(
        "\nrecall on the {set}: {} sessions, {count} messages ({parts} parts), {} questions",
        qa::SESSIONS,
        questions.len()
    );

    // The evidence messages' ids.
    let mut evidence: Vec<Vec<i64>> = Vec::new();
    for q in questions {
        let mut ids = Vec::new();
        for text in &q.evidence {
            let id: i64 = store
                .conn()
                .query_row("SELECT id FROM raw_parts WHERE content = ?1", [text], |r| {
                    r.get(0)
                })
                .map_err(err("finding an evidence message"))?;
            ids.push(id);
        }
        evidence.push(ids);
    }

    let request = |text: &'static str| query::Request {
        project: &identity,
        text,
        limit: 10,
        ..query::Request::default()
    };
    let message_ids = |hits: &[query::Hit]| -> Vec<i64> {
        hits.iter()
            .filter(|h| h.source == query::Source::Message)
            .map(|h| h.id)
            .collect()
    };

    let mut tallies: Vec<(String, Tally)> = Vec::new();
    let mut mc = Tally::default();
    let mut misses = Vec::new();
    let mut plain_times = Vec::new();
    for (q, ev) in questions.iter().zip(&evidence) {
        let started = Instant::now();
        let hits = query::search(store.conn(), &request(q.text)).map_err(err("mc's query"))?;
        plain_times.push(started.elapsed());
        let ids = message_ids(&hits);
        if ev.iter().any(|e| !ids.contains(e)) {
            misses.push(format!("{} — {:?}", q.kind, q.text));
        }
        mc.add(q.kind, ev, &ids);
    }
    plain_times.sort_unstable();
    tallies.push(("mc full text".into(), mc));

    for (label, provider) in models {
        let started = Instant::now();
        let report = embed::backfill(&mut store, provider, &mut |_, _| {}, &std::thread::sleep)
            .map_err(err("backfilling embeddings"))?;
        let elapsed = started.elapsed().as_secs_f64();
        println!(
            "{label}: {} texts embedded in {elapsed:.2} s ({:.0}/s, {} dimensions)",
            report.embedded,
            report.embedded as f64 / elapsed.max(1e-9),
            report.dimensions.unwrap_or(0)
        );
        for (weight, depth, keep, nearest, only_weight) in FUSIONS {
            let fusion = embed::Fusion {
                weight,
                depth,
                keep,
                nearest,
                only_weight,
            };
            let mut hybrid = Tally::default();
            let mut times = Vec::new();
            for (q, ev) in questions.iter().zip(&evidence) {
                let started = Instant::now();
                let answer =
                    query::search_fused(store.conn(), &request(q.text), Some(provider), &fusion)
                        .map_err(err("the hybrid query"))?;
                times.push(started.elapsed());
                if !answer.warnings.is_empty() {
                    return Err(format!("hybrid query warned: {:?}", answer.warnings));
                }
                hybrid.add(q.kind, ev, &message_ids(&answer.hits));
            }
            times.sort_unstable();
            let mark = if fusion == embed::FUSION { " (mc)" } else { "" };
            if fusion == embed::FUSION {
                println!(
                    "  hybrid query in process: median {:.2} ms against {:.2} ms full text \
                     (query vector included)",
                    super::ms(super::percentile(&times, 50)),
                    super::ms(super::percentile(&plain_times, 50))
                );
            }
            tallies.push((
                format!("{label} w{weight} d{depth} k{keep} n{nearest} o{only_weight}{mark}"),
                hybrid,
            ));
        }
    }

    println!("\nevidence recall@5 / @10 by question kind ({set}):");
    print!("{:<58}", "ranking");
    for kind in kinds {
        print!(" {:>12}", kind);
    }
    println!(" {:>12}", "all");
    for (name, t) in &tallies {
        print!("{name:<58}");
        for kind in kinds {
            print!(" {:>12}", t.cell(Some(kind)));
        }
        println!(" {:>12}", t.cell(None));
    }
    println!("\nquestions whose evidence mc's full-text top 10 misses (or misses in part):");
    for m in &misses {
        println!("  {m}");
    }
    if tokenizers {
        compare_tokenizers(&mut store, questions, &evidence, kinds)?;
    }
    Ok((store, identity))
}

/// Recall of bare `ORDER BY rank` over indexes built with each tokenizer.
fn compare_tokenizers(
    store: &mut Store,
    questions: &[qa::Question],
    evidence: &[Vec<i64>],
    kinds: &[&'static str],
) -> Result<()> {
    // The comparison indexes: each variant over the same texts.
    let texts: Vec<Part> = store
        .conn()
        .prepare("SELECT id, kind, tool_name, tool_input, content FROM raw_parts")
        .and_then(|mut s| {
            s.query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(err("reading the parts"))?;
    for (n, v) in VARIANTS.iter().enumerate() {
        store
            .write(|tx| {
                tx.execute_batch(&format!(
                    "CREATE VIRTUAL TABLE variant_{n} USING fts5 (body, content = '', tokenize = \"{}\")",
                    v.tokenize.replace('"', "\"\"")
                ))?;
                let mut insert =
                    tx.prepare(&format!("INSERT INTO variant_{n} (rowid, body) VALUES (?1, ?2)"))?;
                for (id, kind, name, input, text) in &texts {
                    let mut body = index::index_text(kind, name.as_deref(), input.as_deref(), text);
                    if !v.pieces {
                        // index_text puts the pieces on a last line of their own.
                        let pieces = index::identifier_pieces(&body);
                        if !pieces.is_empty()
                            && let Some(cut) = body.strip_suffix(&pieces)
                        {
                            body = cut.trim_end_matches('\n').to_string();
                        }
                    }
                    insert.execute(rusqlite::params![id, body])?;
                }
                Ok(())
            })
            .map_err(err("building a variant index"))?;
    }

    // `all_words`: a plain OR of every word (no question words left out).
    let bare = |n: usize, text: &str, trigram: bool, all_words: bool| -> Result<Vec<i64>> {
        let words: String = if trigram {
            text.split_whitespace()
                .filter(|w| w.chars().count() >= 3)
                .collect::<Vec<_>>()
                .join(" ")
        } else {
            text.to_string()
        };
        let expression = if all_words {
            let quoted: Vec<String> = words
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .map(|w| format!("\"{w}\""))
                .collect();
            quoted.join(" OR ")
        } else {
            match query::fts_expression(&words) {
                Some(e) => e,
                None => return Ok(Vec::new()),
            }
        };
        if expression.is_empty() {
            return Ok(Vec::new());
        }
        store
            .conn()
            .prepare_cached(&format!(
                "SELECT rowid FROM variant_{n} WHERE variant_{n} MATCH ?1 ORDER BY rank LIMIT 10"
            ))
            .and_then(|mut s| {
                s.query_map([expression], |r| r.get(0))?
                    .collect::<rusqlite::Result<Vec<i64>>>()
            })
            .map_err(err("a variant query"))
    };
    let mut variant_tallies: Vec<Tally> = VARIANTS.iter().map(|_| Tally::default()).collect();
    let mut plain = Tally::default();
    for (q, ev) in questions.iter().zip(evidence) {
        for (n, v) in VARIANTS.iter().enumerate() {
            let ranked = bare(n, q.text, v.tokenize == "trigram", false)?;
            if let Some(t) = variant_tallies.get_mut(n) {
                t.add(q.kind, ev, &ranked);
            }
            if n == 0 {
                plain.add(q.kind, ev, &bare(n, q.text, false, true)?);
            }
        }
    }
    println!("\ntokenizers (bare ORDER BY rank over an index built with each), recall@5 / @10:");
    print!("{:<34}", "BM25 (all words, bare rank)");
    for kind in kinds {
        print!(" {:>12}", plain.cell(Some(kind)));
    }
    println!(" {:>12}", plain.cell(None));
    for (v, t) in VARIANTS.iter().zip(&variant_tallies) {
        print!("{:<34}", v.name);
        for kind in kinds {
            print!(" {:>12}", t.cell(Some(kind)));
        }
        println!(" {:>12}", t.cell(None));
    }
    Ok(())
}

/// The commit index's field weights, tuned: the planted commits of
/// `qa::COMMITS` among 2,000 generated ones, the questions of
/// `qa::COMMIT_QUESTIONS`; recall@1 and @5 for each weighting.
fn commit_weights(store: &mut Store, identity: &str) -> Result<()> {
    let mut commits: Vec<gitlog::Commit> = mc_tests::generate::compartment_texts(21, 2_000)
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            commit(
                i,
                t.title,
                t.tiers[3].clone(),
                vec![format!("src/module_{}/mod.rs", i % 37)],
            )
        })
        .collect();
    let base = commits.len();
    for (i, (subject, body, paths)) in qa::COMMITS.iter().enumerate() {
        commits.push(commit(
            base + i,
            (*subject).to_string(),
            (*body).to_string(),
            paths.iter().map(|p| (*p).to_string()).collect(),
        ));
    }
    store
        .write(|tx| gitlog::store_commits(tx, identity, &commits, NOW_MS))
        .map_err(err("storing commits"))?;
    let ids: Vec<i64> = qa::COMMIT_QUESTIONS
        .iter()
        .map(|(_, n)| {
            let hash = &commits[base + n].hash;
            store
                .conn()
                .query_row("SELECT id FROM git_commits WHERE hash = ?1", [hash], |r| {
                    r.get(0)
                })
                .map_err(err("finding a commit"))
        })
        .collect::<Result<_>>()?;
    println!(
        "\ncommit field weights (subject, body, paths, hash): recall@1 / @5 over {} questions, {} commits",
        qa::COMMIT_QUESTIONS.len(),
        commits.len()
    );
    let grid: [[f64; 4]; 7] = [
        [1.0, 1.0, 1.0, 1.0],
        [2.0, 1.0, 1.0, 10.0],
        [3.0, 1.0, 1.5, 10.0],
        [3.0, 1.0, 3.0, 10.0],
        [5.0, 1.0, 1.5, 10.0],
        [1.0, 2.0, 1.0, 10.0],
        [3.0, 1.0, 0.5, 10.0],
    ];
    for weights in grid {
        let (mut at1, mut at5) = (0, 0);
        for ((text, _), id) in qa::COMMIT_QUESTIONS.iter().zip(&ids) {
            let expression = query::fts_expression(text).unwrap_or_default();
            let hits = query::commit_hits_weighted(
                store.conn(),
                &expression,
                identity,
                (i64::MIN, i64::MAX),
                5,
                weights,
            )
            .map_err(err("a commit query"))?;
            let position = hits.iter().position(|h| h.id == *id);
            at1 += usize::from(position == Some(0));
            at5 += usize::from(position.is_some());
        }
        let n = qa::COMMIT_QUESTIONS.len() as f64;
        let mark = if weights == query::COMMIT_WEIGHTS {
            "  (mc)"
        } else {
            ""
        };
        println!(
            "  {:?}: {:.2} / {:.2}{mark}",
            weights,
            at1 as f64 / n,
            at5 as f64 / n
        );
    }
    Ok(())
}

fn commit(i: usize, subject: String, body: String, paths: Vec<String>) -> gitlog::Commit {
    let hash = format!("{:040x}", 0x0bad_cafe_u128 * (i as u128 + 7));
    gitlog::Commit {
        short_hash: hash[..7].to_string(),
        hash,
        subject,
        body,
        paths,
        author: "QA <qa@example.com>".into(),
        committed_ms: NOW_MS - (i as i64 % 300) * 3_600_000,
    }
}

//! Latency of a warm `mc-search mcp` and memory write throughput.
//!
//! Fills a fresh database through mc-core — project memories written one
//! transaction each (timed: the write throughput), and a session of generated
//! OpenCode messages whose raw content is kept as a pass keeps it, with a tag
//! per part and a compartment per 100 messages — then spawns `mc-search mcp`
//! (beside this binary: build both with `cargo build --release --workspace --features mc-bench/bench`)
//! and times `tools/call` round trips over its stdio, per tool and action,
//! after a warm-up. Prints median and p99 per call; nothing is asserted.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use mc_base::codec::opencode::decode_all;
use mc_base::domain::tags::{self, NewTag};
use mc_base::domain::{content, messages, sessions};
use mc_base::identity::project_identity;
use mc_base::store::{Store, StoreOptions};
use mc_dream_core::gitlog;
use mc_history::store::{self as history_store, NewCompartment};
use mc_search_core::{index, memory, query};
use mc_tests::bin_path;
use mc_tests::generate::{self, SessionSpec};
use mc_tests::mcp_client::McpClient;
use serde_json::{Value, json};

#[path = "bench_search/hints.rs"]
mod hints;
#[path = "bench_search/recall.rs"]
mod recall;

/// Fills a database with memories and the raw content of messages through
/// the core, timing the memory writes, then times tools/call of each tool
/// over a warm `mc-search mcp` (which must sit beside this binary).
#[derive(clap::Parser)]
#[command(name = "bench-search")]
struct Cli {
    /// Project memories to write
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    memories: usize,
    /// Messages of raw content in one session (at least 200)
    #[arg(long, value_name = "N", default_value_t = 50_000)]
    messages: usize,
    /// Git commits in the commit index
    #[arg(long, value_name = "N", default_value_t = 2_000)]
    commits: usize,
    /// Timed calls per tool and action
    #[arg(long, value_name = "N", default_value_t = 200)]
    calls: usize,
    /// Untimed calls of each first
    #[arg(long, value_name = "N", default_value_t = 10)]
    warmup: usize,
    /// Work in DIR and keep the database afterwards
    #[arg(long, value_name = "DIR")]
    keep: Option<PathBuf>,
    /// Only the recall benchmark (the QA set of mc_tests::qa)
    #[arg(long)]
    recall: bool,
    /// Only the recall hints' figures (the QA and paraphrase sets, ordinary prompts)
    #[arg(long)]
    hints: bool,
    /// Filler turns per QA session
    #[arg(long, value_name = "N", default_value_t = 40)]
    qa_turns: usize,
    /// Also rank with embeddings from this OpenAI-compatible base URL
    /// ("spawn": start scripts/embed-server, which needs `pip install wordllama`)
    #[arg(long, value_name = "URL|spawn")]
    embed: Option<String>,
    /// The local embedding model's folder (tokenizer.json, model.safetensors)
    /// [default: target/test-model/wordllama-l2-supercat-256, from scripts/test-model]
    #[arg(long, value_name = "DIR")]
    local_model: Option<PathBuf>,
    /// Leave the local model out
    #[arg(long)]
    no_local: bool,
}

const SESSION: &str = "bench";
const NOW_MS: i64 = 1_796_100_000_000;

type Result<T> = std::result::Result<T, String>;

struct Args {
    memories: usize,
    commits: usize,
    recall_only: bool,
    hints_only: bool,
    qa_turns: usize,
    embed: Option<String>,
    local_model: Option<PathBuf>,
    messages: usize,
    calls: usize,
    warmup: usize,
    keep: Option<PathBuf>,
}

impl From<Cli> for Args {
    fn from(cli: Cli) -> Args {
        Args {
            memories: cli.memories.max(1),
            commits: cli.commits,
            recall_only: cli.recall,
            hints_only: cli.hints,
            qa_turns: cli.qa_turns.max(1),
            embed: cli.embed,
            local_model: if cli.no_local {
                None
            } else {
                Some(cli.local_model.unwrap_or_else(|| {
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("../target/test-model/wordllama-l2-supercat-256")
                }))
            },
            messages: cli.messages.max(200),
            calls: cli.calls.max(1),
            warmup: cli.warmup,
            keep: cli.keep,
        }
    }
}

fn main() -> ExitCode {
    let args = Args::from(<Cli as clap::Parser>::parse());
    let (work, _temp) = match &args.keep {
        Some(dir) => (dir.clone(), None),
        None => match tempfile::tempdir() {
            Ok(t) => (t.path().to_path_buf(), Some(t)),
            Err(e) => {
                eprintln!("bench-search: no temp folder: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    match run(&args, &work) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-search: {e}");
            ExitCode::FAILURE
        }
    }
}

fn err<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |e| format!("{what}: {e}")
}

#[allow(
    clippy::too_many_lines,
    reason = "a benchmark's scenario, read top to bottom; the 150-line rule is for mc's own code"
)]
fn run(args: &Args, work: &Path) -> Result<()> {
    if !args.hints_only {
        recall::run(
            work,
            args.qa_turns,
            args.embed.as_deref(),
            args.local_model.as_deref(),
        )?;
    }
    let (questions, _) = mc_tests::qa::questions();
    hints::run(
        work,
        "QA set",
        &questions,
        &mc_tests::qa::sessions(args.qa_turns),
    )?;
    let (paraphrases, _) = mc_tests::paraphrase::questions();
    hints::run(
        work,
        "paraphrase set",
        &paraphrases,
        &mc_tests::paraphrase::sessions(args.qa_turns),
    )?;
    if args.recall_only || args.hints_only {
        return Ok(());
    }
    let project = work.join("project");
    std::fs::create_dir_all(&project).map_err(err("creating the project folder"))?;
    let db = work.join("search.db");
    let _ = std::fs::remove_file(&db);
    let identity = project_identity(&project);
    let mut store = Store::open(&db, &StoreOptions::default()).map_err(err("opening the DB"))?;

    // Memory write throughput: one write (one immediate transaction, as a
    // tool call makes it) per memory.
    let texts = generate::memory_texts(7, args.memories);
    let started = Instant::now();
    for (i, m) in texts.iter().enumerate() {
        let content = format!("{} (#{i})", m.content);
        memory::write(&mut store, &identity, m.category, &content, "user", NOW_MS)
            .map_err(err("writing a memory"))?;
    }
    let elapsed = started.elapsed();
    println!(
        "memory writes: {} in {:.2} s = {:.0} writes/s ({:.3} ms each)",
        args.memories,
        elapsed.as_secs_f64(),
        args.memories as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1000.0 / args.memories as f64
    );

    let (kept, tags, compartments) = fill_session(&mut store, &identity, args.messages)?;
    let size = db_size(&store, &db)?;
    println!(
        "session: {} messages, {:.1} MB of raw content, {tags} tags, {compartments} compartments; \
         database {:.1} MB",
        args.messages,
        kept as f64 / 1e6,
        size as f64 / 1e6
    );

    // The commit index: generated commits (a compartment's title as the
    // subject, its shortest tier as the body, a few paths), a day apart
    // going back from the newest.
    let commits: Vec<gitlog::Commit> = generate::compartment_texts(11, args.commits)
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            let hash = format!("{:040x}", 0x00c0_ffee_u128 * (i as u128 + 1));
            gitlog::Commit {
                short_hash: hash[..7].to_string(),
                hash,
                subject: t.title,
                body: t.tiers[2].clone(),
                paths: vec![
                    format!("src/module_{}/mod.rs", i % 37),
                    format!("tests/case_{}.rs", i % 101),
                ],
                author: "Bench <bench@example.com>".into(),
                committed_ms: NOW_MS - (i as i64) * 4 * 3_600_000,
            }
        })
        .collect();
    store
        .write(|tx| gitlog::store_commits(tx, &identity, &commits, NOW_MS))
        .map_err(err("storing commits"))?;
    println!("commits: {} in the commit index", commits.len());

    // Index throughput: everything the passes queued, as `mc-search index` does it.
    let parts = index::pending(store.conn()).map_err(err("counting the queue"))?;
    let started = Instant::now();
    index::catch_up(&mut store, None, &mut |_, _| {}).map_err(err("indexing"))?;
    let elapsed = started.elapsed().as_secs_f64();
    let indexed_size = db_size(&store, &db)?;
    println!(
        "index: {parts} parts of {} messages in {elapsed:.2} s = {:.0} messages/s; database {:.1} MB \
         ({:+.1} MB, {:.2} MB per 10k messages)",
        args.messages,
        args.messages as f64 / elapsed,
        indexed_size as f64 / 1e6,
        (indexed_size as f64 - size as f64) / 1e6,
        (indexed_size as f64 - size as f64) / 1e6 / (args.messages as f64 / 10_000.0),
    );
    let words = [
        "cache",
        "lock timeout",
        "database",
        "test fixtures",
        "retry",
    ];
    if let Some(dir) = &args.local_model {
        hybrid_at_scale(args, &mut store, &identity, dir, &words)?;
    }
    floor_and_process(args, &store, &db, &project, &words)?;
    drop(store);

    let mut command = Command::new(bin_path("mc-search"));
    command
        .arg("--db")
        .arg(&db)
        .args(["mcp", "--harness", "opencode", "--session", SESSION])
        .current_dir(&project)
        .env("XDG_CONFIG_HOME", work.join("config"))
        // No local model there: the tool calls are timed on full text.
        .env("XDG_CACHE_HOME", work.join("cache"))
        .env_remove("MC_CONFIG")
        .env_remove("MC_DB");
    let mut mcp = McpClient::spawn(&mut command);
    mcp.initialize("2025-06-18");

    let messages = args.messages as i64;
    type Case<'a> = (&'a str, &'a str, Box<dyn Fn(usize) -> Value + 'a>);
    let cases: Vec<Case<'_>> = vec![
        (
            "ctx_search",
            "query",
            Box::new(|i| json!({"query": words[i % words.len()]})),
        ),
        (
            "ctx_memory",
            "write",
            Box::new(|i| {
                json!({"action": "write", "category": "NAMING",
                       "content": format!("Bench naming rule number {i} holds for every crate.")})
            }),
        ),
        (
            "ctx_memory",
            "show",
            Box::new(|i| json!({"action": "show", "id": (i * 37) % 10_000 + 1})),
        ),
        (
            "ctx_memory",
            "list (text filter, 50)",
            Box::new(|i| json!({"action": "list", "text": words[i % words.len()]})),
        ),
        (
            "ctx_note",
            "write",
            Box::new(
                |i| json!({"action": "write", "content": format!("Check item {i} before finishing.")}),
            ),
        ),
        ("ctx_note", "list", Box::new(|_| json!({"action": "list"}))),
        (
            "ctx_expand",
            "tag",
            Box::new(
                move |i| json!({"target": format!("§{}§", (i as i64 * 997) % (tags as i64) + 1)}),
            ),
        ),
        (
            "ctx_expand",
            "range of 10",
            Box::new(move |i| {
                let from = (i as i64 * 7919) % (messages - 10) + 1;
                json!({"target": format!("{from}-{}", from + 9)})
            }),
        ),
        (
            "ctx_expand",
            "compartment",
            Box::new(
                move |i| json!({"target": format!("c{}", (i as i64 * 13) % (compartments as i64) + 1)}),
            ),
        ),
        (
            "ctx_reduce",
            "drop one tag",
            Box::new(|i| json!({"drop": format!("{}", i + 1)})),
        ),
    ];
    println!(
        "\ntools/call over a warm mc-search mcp ({} calls each, after {} warm-up):",
        args.calls, args.warmup
    );
    println!(
        "{:<12} {:<24} {:>10} {:>10} {:>10}",
        "tool", "action", "median ms", "p99 ms", "max ms"
    );
    for (tool, label, arguments) in &cases {
        let offset = args.warmup + args.calls;
        for i in 0..args.warmup {
            check(&mut mcp, tool, arguments(offset * 2 + i))?;
        }
        let mut times = Vec::with_capacity(args.calls);
        for i in 0..args.calls {
            let started = Instant::now();
            check(&mut mcp, tool, arguments(i))?;
            times.push(started.elapsed());
        }
        times.sort_unstable();
        println!(
            "{:<12} {:<24} {:>10.3} {:>10.3} {:>10.3}",
            tool,
            label,
            ms(percentile(&times, 50)),
            ms(percentile(&times, 99)),
            ms(*times.last().unwrap_or(&Duration::ZERO)),
        );
    }
    let (status, stderr) = mcp.finish(Duration::from_secs(30));
    if !status.success() {
        return Err(format!("mc-search mcp failed ({status}): {stderr}"));
    }
    Ok(())
}

/// One call; a protocol error stops the benchmark (a tool error does not:
/// a reduce of a protected tag is an answer like any other).
fn check(mcp: &mut McpClient, tool: &str, arguments: Value) -> Result<()> {
    let answer = mcp.call(tool, arguments);
    if answer.get("error").is_some() {
        return Err(format!("{tool}: {answer}"));
    }
    Ok(())
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() * p).div_ceil(100)).clamp(1, sorted.len()) - 1;
    sorted.get(index).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One session of `count` generated messages: ordinals, raw content kept as
/// a pass keeps it, a tag per taggable part, a compartment per 100 messages.
/// Returns (bytes of raw content, tags, compartments).
fn fill_session(store: &mut Store, identity: &str, count: usize) -> Result<(u64, usize, usize)> {
    let mut values = Vec::with_capacity(count);
    let mut seed = 1;
    while values.len() < count {
        values.extend(generate::session(&SessionSpec::new(seed, 100, 200_000)));
        seed += 1;
    }
    values.truncate(count);
    let decoded = decode_all(values).map_err(err("decoding the generated messages"))?;
    let texts = generate::compartment_texts(3, count / 100);
    store
        .write(|tx| {
            let mut session = sessions::create_session(tx, "opencode", SESSION, false, Some(identity), NOW_MS)?;
            let (ordinals, _) = messages::register_messages(tx, &mut session, &decoded)?;
            content::record_messages(tx, session.id, &decoded, &ordinals)?;
            let mut number = 0;
            for (message, ordinal) in decoded.iter().zip(&ordinals) {
                let (Some(id), Some(ordinal)) = (message.id(), *ordinal) else {
                    continue;
                };
                for (index, part) in message.parts.iter().enumerate() {
                    let Some((kind, part_id)) = tags::part_identity(id, index, part) else {
                        continue;
                    };
                    let (bytes, tokens, input_bytes, input_tokens) = tags::measure_part(kind, part);
                    number += 1;
                    tags::insert_tag(
                        tx,
                        session.id,
                        &NewTag {
                            number,
                            kind,
                            identity: &part_id,
                            message_id: id,
                            ordinal,
                            tool_name: part.tool_name(),
                            byte_size: bytes,
                            tokens,
                            input_bytes,
                            input_tokens,
                            reasoning_bytes: 0,
                            created_ms: NOW_MS,
                        },
                    )?;
                }
            }
            session.tag_counter = number;
            sessions::save(tx, &session, NOW_MS)?;
            let ids: Vec<(i64, String)> = decoded
                .iter()
                .zip(&ordinals)
                .filter_map(|(m, o)| Some(((*o)?, m.id()?.to_string())))
                .collect();
            let new: Vec<NewCompartment> = ids
                .chunks(100)
                .zip(&texts)
                .filter_map(|(chunk, text)| {
                    let (first, last) = (chunk.first()?, chunk.last()?);
                    Some(NewCompartment {
                        start_ordinal: first.0,
                        end_ordinal: last.0,
                        start_message_id: first.1.clone(),
                        end_message_id: last.1.clone(),
                        start_ms: None,
                        end_ms: None,
                        title: text.title.clone(),
                        tiers: text.tiers.clone(),
                        importance: text.importance,
                        episode: Some(text.episode.to_string()),
                    })
                })
                .collect();
            history_store::publish_compartments(tx, session.id, &new, NOW_MS)?;
            let kept: i64 = tx.query_row(
                "SELECT coalesce(sum(length(content) + coalesce(length(tool_input), 0)), 0) FROM raw_parts",
                [],
                |r| r.get(0),
            )?;
            Ok((kept as u64, number as usize, new.len()))
        })
        .map_err(err("filling the session"))
}

/// The database's size on disk with its WAL folded in.
fn db_size(store: &Store, db: &Path) -> Result<u64> {
    store
        .conn()
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .map_err(err("checkpointing"))?;
    Ok(std::fs::metadata(db).map(|m| m.len()).unwrap_or(0))
}

/// The bare FTS5 floor (`MATCH … ORDER BY rank LIMIT 10` on the message
/// index, in process) against mc's whole query: in process, and as a whole
/// `mc-search query` process.
/// The local model over the whole bench database: backfill throughput,
/// then a query's time with and without the vectors (in process).
fn hybrid_at_scale(
    args: &Args,
    store: &mut Store,
    identity: &str,
    dir: &Path,
    words: &[&str],
) -> Result<()> {
    use mc_search_core::embed;
    let spec = &embed::local::WORDLLAMA_L2_256;
    // A load's parts, each timed on its own: the checksums (both files
    // hashed), the stamp that spares them, the tokenizer, the weights.
    let _ = std::fs::remove_file(dir.join(embed::local::STAMP));
    let timed = |f: &dyn Fn() -> std::result::Result<(), String>| -> Result<f64> {
        let started = Instant::now();
        f().map_err(|e| format!("the local model: {e}"))?;
        Ok(ms(started.elapsed()))
    };
    let hashed = timed(&|| match embed::local::check(dir, spec) {
        embed::local::State::Ready => Ok(()),
        other => Err(format!("{other:?}")),
    })?;
    let first = timed(&|| embed::local::StaticModel::load(dir, spec).map(|_| ()))?;
    let stamped = timed(&|| match embed::local::check_cached(dir, spec) {
        embed::local::State::Ready => Ok(()),
        other => Err(format!("{other:?}")),
    })?;
    let tokenizer =
        timed(&|| embed::local::read_tokenizer(&dir.join(embed::local::TOKENIZER)).map(|_| ()))?;
    let files = timed(&|| embed::local::read_files(dir))?;
    let local = std::sync::Arc::new(embed::LocalModel::new(spec, dir.to_path_buf()));
    let started = Instant::now();
    local.model().map_err(|e| format!("the local model: {e}"))?;
    let load = started.elapsed();
    println!(
        "local model load: {:.1} ms with its checksums checked ({hashed:.1} ms of hashing; \
         the first load of a process, {first:.1} ms before the stamp was written), {:.1} ms \
         with the stamp ({stamped:.2} ms to check it); tokenizer {tokenizer:.1} ms, weights {:.1} ms",
        hashed + files,
        ms(load),
        files - tokenizer
    );
    let provider = embed::Provider {
        name: format!("{}{}", embed::LOCAL_PREFIX, spec.name),
        backend: embed::Backend::Local(local),
        dimensions: Some(spec.dimensions),
        batch_size: 256,
        timeout: Duration::from_secs(60),
        query_timeout: Duration::from_secs(5),
        retries: 0,
        index: Default::default(),
    };
    let started = Instant::now();
    let report = embed::backfill(store, &provider, &mut |_, _| {}, &std::thread::sleep)
        .map_err(err("backfilling"))?;
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "backfill of {} texts in {elapsed:.1} s = {:.0} texts/s; vector index: {} rows written",
        report.embedded,
        report.embedded as f64 / elapsed,
        report.indexed
    );
    // The vector index: its load and a brute-force scan, each alone.
    let started = Instant::now();
    let index = embed::vectors::load(store.conn(), &provider.name, identity)
        .map_err(err("loading the vector index"))?
        .ok_or("no vector index was written")?
        .map_err(|e| format!("the vector index: {e}"))?;
    let loaded = started.elapsed();
    let query_vector = provider
        .embed(&["lock timeout"], None, Duration::from_secs(1))
        .map_err(|e| e.to_string())?
        .pop()
        .unwrap_or_default();
    let q = embed::vectors::Query::new(&query_vector);
    let mut scans = Vec::new();
    for _ in 0..args.calls.max(10) {
        let started = Instant::now();
        std::hint::black_box(index.nearest(&q, embed::FUSION.nearest));
        scans.push(started.elapsed());
    }
    scans.sort_unstable();
    println!(
        "vector index: {} rows, {:.1} MB in memory; loaded in {:.1} ms; a scan for the nearest {} \
         median {:.2} ms (p99 {:.2})",
        index.len(),
        index.bytes() as f64 / 1e6,
        ms(loaded),
        embed::FUSION.nearest,
        ms(percentile(&scans, 50)),
        ms(percentile(&scans, 99))
    );
    let request = |i: usize| query::Request {
        project: identity,
        text: words[i % words.len()],
        limit: 10,
        ..query::Request::default()
    };
    let mut plain = Vec::new();
    let mut hybrid = Vec::new();
    for i in 0..args.calls + args.warmup {
        let started = Instant::now();
        query::search_with(store.conn(), &request(i), None).map_err(err("full text"))?;
        let p = started.elapsed();
        let started = Instant::now();
        let answer = query::search_with(store.conn(), &request(i), Some(&provider))
            .map_err(err("hybrid"))?;
        let h = started.elapsed();
        if !answer.warnings.is_empty() {
            return Err(format!("hybrid warned: {:?}", answer.warnings));
        }
        if i >= args.warmup {
            plain.push(p);
            hybrid.push(h);
        }
    }
    plain.sort_unstable();
    hybrid.sort_unstable();
    let started = Instant::now();
    let runs = 1_000;
    for i in 0..runs {
        std::hint::black_box(
            provider
                .embed(&[words[i % words.len()]], None, Duration::from_secs(1))
                .map_err(|e| e.to_string())?,
        );
    }
    println!(
        "a query at {} messages, in process: full text median {:.2} ms, hybrid {:.2} ms \
         (p99 {:.2} against {:.2}); the query's vector alone {:.3} ms",
        args.messages,
        ms(percentile(&plain, 50)),
        ms(percentile(&hybrid, 50)),
        ms(percentile(&hybrid, 99)),
        ms(percentile(&plain, 99)),
        started.elapsed().as_secs_f64() * 1000.0 / runs as f64
    );
    Ok(())
}

fn floor_and_process(
    args: &Args,
    store: &Store,
    db: &Path,
    project: &Path,
    words: &[&str],
) -> Result<()> {
    let identity = project_identity(project);
    let time = |f: &mut dyn FnMut(usize) -> Result<()>, runs: usize| -> Result<Vec<Duration>> {
        let mut times = Vec::with_capacity(runs);
        for i in 0..runs + args.warmup {
            let started = Instant::now();
            f(i)?;
            if i >= args.warmup {
                times.push(started.elapsed());
            }
        }
        times.sort_unstable();
        Ok(times)
    };
    let floor = time(
        &mut |i| {
            let expression = query::fts_expression(words[i % words.len()]).unwrap_or_default();
            let mut stmt = store
                .conn()
                .prepare_cached("SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?1 ORDER BY rank LIMIT 10")
                .map_err(err("preparing the floor"))?;
            let rows: Vec<i64> = stmt
                .query_map([expression], |r| r.get(0))
                .map_err(err("the floor query"))?
                .collect::<std::result::Result<_, _>>()
                .map_err(err("the floor rows"))?;
            std::hint::black_box(rows);
            Ok(())
        },
        args.calls,
    )?;
    let in_process = time(
        &mut |i| {
            let hits = query::query(store.conn(), &identity, words[i % words.len()], &[], 10)
                .map_err(err("mc's query"))?;
            std::hint::black_box(hits);
            Ok(())
        },
        args.calls,
    )?;
    // Where the time goes: mc's query of one source at a time.
    let mut by_source = Vec::new();
    for source in query::SOURCES {
        let only = [source.to_string()];
        let times = time(
            &mut |i| {
                let hits = query::query(store.conn(), &identity, words[i % words.len()], &only, 10)
                    .map_err(err("mc's query"))?;
                std::hint::black_box(hits);
                Ok(())
            },
            args.calls,
        )?;
        by_source.push((source, times));
    }
    let runs = (args.calls / 5).max(10);
    // A cache folder without the model (full text), and one with it (hybrid).
    let no_model = db.with_extension("cache");
    let with_model = db.with_extension("cache-model");
    if let Some(dir) = &args.local_model {
        let into = with_model.join("mc/models/wordllama-l2-supercat-256");
        std::fs::create_dir_all(&into).map_err(err("the model cache folder"))?;
        for f in [
            mc_search_core::embed::local::TOKENIZER,
            mc_search_core::embed::local::WEIGHTS,
        ] {
            std::fs::copy(dir.join(f), into.join(f)).map_err(err("copying the model"))?;
        }
    }
    let one_shot = |cache: &Path, hybrid: bool| {
        time(
            &mut |i| {
                let out = Command::new(bin_path("mc-search"))
                    .arg("--db")
                    .arg(db)
                    .args(["query", words[i % words.len()]])
                    .current_dir(project)
                    .env("XDG_CONFIG_HOME", db.with_extension("config"))
                    .env("XDG_CACHE_HOME", cache)
                    .env_remove("MC_CONFIG")
                    .env_remove("MC_DB")
                    .output()
                    .map_err(err("running mc-search query"))?;
                if !out.status.success() {
                    return Err(format!(
                        "mc-search query: {}",
                        String::from_utf8_lossy(&out.stderr)
                    ));
                }
                let warned = serde_json::from_slice::<Value>(&out.stdout)
                    .ok()
                    .and_then(|v| {
                        v.get("warnings")
                            .and_then(Value::as_array)
                            .map(|w| !w.is_empty())
                    })
                    .unwrap_or(true);
                if hybrid && warned {
                    return Err(format!(
                        "mc-search query warned: {}",
                        String::from_utf8_lossy(&out.stdout)
                    ));
                }
                Ok(())
            },
            runs,
        )
    };
    let process = one_shot(&no_model, false)?;
    let process_hybrid = if args.local_model.is_some() {
        Some(one_shot(&with_model, true)?)
    } else {
        None
    };
    println!(
        "\nquery latency ({} runs; whole processes: {runs}):",
        args.calls
    );
    println!("{:<44} {:>10} {:>10}", "", "median ms", "p99 ms");
    let mut rows = vec![
        ("bare FTS5 MATCH … ORDER BY rank LIMIT 10", &floor),
        ("mc's query, in process (all sources)", &in_process),
        ("`mc-search query`, whole process", &process),
    ];
    if let Some(h) = &process_hybrid {
        rows.push(("`mc-search query`, whole process, hybrid", h));
    }
    for (label, times) in rows {
        println!(
            "{label:<44} {:>10.3} {:>10.3}",
            ms(percentile(times, 50)),
            ms(percentile(times, 99))
        );
    }
    for (source, times) in &by_source {
        println!(
            "{:<44} {:>10.3} {:>10.3}",
            format!("  of which {source} alone"),
            ms(percentile(times, 50)),
            ms(percentile(times, 99))
        );
    }
    println!(
        "whole process / floor: {:.1}× (median)",
        ms(percentile(&process, 50)) / ms(percentile(&floor, 50)).max(1e-6)
    );
    Ok(())
}

/// Start `scripts/embed-server` (a real small embedding model on
/// 127.0.0.1); it leaves when its stdin closes, i.e. with the child handle.
fn spawn_embed_server() -> Result<(EmbedServer, String)> {
    use std::io::BufRead;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/embed-server");
    let mut child = Command::new("python3")
        .arg(&script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(err("starting scripts/embed-server"))?;
    let stdout = child.stdout.take().ok_or("no stdout of the embed server")?;
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .map_err(err("reading the embed server's address"))?;
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .ok_or_else(|| format!("the embed server said {line:?} (is wordllama installed?)"))?
        .to_string();
    Ok((EmbedServer(child), url))
}

/// The embed server, stopped when dropped.
struct EmbedServer(std::process::Child);

impl Drop for EmbedServer {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

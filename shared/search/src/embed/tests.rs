//! The embeddings client against a small fake `/v1/embeddings` server of
//! our own on 127.0.0.1 (the OpenAI wire format), with its faults: down,
//! slow, garbage, another model, another vector length, busy then fine.

use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::{memory, query};

const PROJECT: &str = "git:p";
const T0: i64 = 1_800_000_000_000;

use crate::testkit::{DIMS, Fake, MODEL, Mode};

fn store_with(memories: &[&str]) -> Store {
    let mut store = Store::open_in_memory().unwrap();
    for m in memories {
        memory::write(&mut store, PROJECT, "NAMING", m, "user", T0).unwrap();
    }
    store
}

fn no_sleep(_: Duration) {}

fn vectors(store: &Store) -> i64 {
    store
        .conn()
        .query_row("SELECT count(*) FROM embeddings", [], |r| r.get(0))
        .unwrap()
}

fn hybrid(store: &Store, provider: &Provider, words: &str) -> query::Searched {
    query::search_with(
        store.conn(),
        &query::Request {
            project: PROJECT,
            text: words,
            limit: 10,
            ..query::Request::default()
        },
        Some(provider),
    )
    .unwrap()
}

/// [`hybrid`] with none of the full-text top held in place.
fn reranked(store: &Store, provider: &Provider, words: &str) -> query::Searched {
    query::search_fused(
        store.conn(),
        &query::Request {
            project: PROJECT,
            text: words,
            limit: 10,
            ..query::Request::default()
        },
        Some(provider),
        &Fusion { keep: 0, ..FUSION },
    )
    .unwrap()
}

fn contents(s: &query::Searched) -> Vec<String> {
    s.hits.iter().map(|h| h.snippet.clone()).collect()
}

#[test]
fn answers_are_checked_before_any_vector_is_taken() {
    let two = |a: Value, b: Value| {
        json!({"model": "m", "data": [
        {"index": 1, "embedding": b}, {"index": 0, "embedding": a}]})
    };
    // Out of order: the index decides; vectors come back unit length.
    let v = parse_answer(&two(json!([3.0, 4.0]), json!([0.0, 2.0])), "m", 2, None).unwrap();
    assert_eq!(v, vec![vec![0.6, 0.8], vec![0.0, 1.0]]);
    // The model answered as the last segment of the asked name is the same model.
    assert!(parse_answer(&two(json!([1.0]), json!([1.0])), "org/m", 2, Some(1)).is_ok());
    let cases = [
        (
            parse_answer(&json!({"model": "n", "data": []}), "m", 0, None),
            "model",
        ),
        (
            parse_answer(&two(json!([1.0, 0.0]), json!([1.0])), "m", 2, None),
            "numbers, not",
        ),
        (
            parse_answer(&two(json!([1.0, 0.0]), json!([1.0, 0.0])), "m", 2, Some(3)),
            "not 3",
        ),
        (
            parse_answer(
                &json!({"data": [{"index": 0, "embedding": [1.0]}]}),
                "m",
                2,
                None,
            ),
            "1 vectors for 2",
        ),
        (
            parse_answer(&json!({"data": "x"}), "m", 1, None),
            "no \"data\"",
        ),
        (
            parse_answer(
                &json!({"data": [{"index": 0, "embedding": ["1"]}]}),
                "m",
                1,
                None,
            ),
            "non-number",
        ),
        (
            parse_answer(
                &json!({"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [1.0]}]}),
                "m",
                2,
                None,
            ),
            "twice",
        ),
        (
            parse_answer(
                &json!({"data": [{"index": 5, "embedding": [1.0]}]}),
                "m",
                1,
                None,
            ),
            "bad index",
        ),
    ];
    for (result, needle) in cases {
        let fault = result.unwrap_err();
        assert!(
            fault.to_string().contains(needle),
            "{needle:?} not in {fault}"
        );
    }
}

#[test]
fn a_backfill_embeds_each_text_once_in_batches_and_again_when_it_changes() {
    let fake = Fake::start(Mode::Fine);
    let provider = fake.provider();
    let mut store = store_with(&[
        "car repair shop on Main Street",
        "insurance paperwork due in May",
        "the motor of the blue car",
    ]);
    let mut seen = Vec::new();
    let first = backfill(
        &mut store,
        &provider,
        &mut |d, t| seen.push((d, t)),
        &no_sleep,
    )
    .unwrap();
    assert_eq!((first.items, first.embedded, first.present), (3, 3, 0));
    assert_eq!(first.dimensions, Some(DIMS));
    // Batches of 2: two requests, progress after each.
    assert_eq!(fake.requests().len(), 2);
    assert_eq!(seen, [(0, 3), (2, 3), (3, 3)]);
    assert_eq!(fake.requests()[0]["model"], MODEL);
    assert_eq!(vectors(&store), 3);

    // Again: nothing to embed, no request.
    let again = backfill(&mut store, &provider, &mut |_, _| {}, &no_sleep).unwrap();
    assert_eq!((again.embedded, again.present, again.requests), (0, 3, 0));
    assert_eq!(fake.requests().len(), 2);

    // An edited memory is embedded again (its new text), the old vector goes.
    memory::update(&mut store, PROJECT, 2, "insurance form due in June", T0).unwrap();
    let edited = backfill(&mut store, &provider, &mut |_, _| {}, &no_sleep).unwrap();
    assert_eq!((edited.embedded, edited.pruned), (1, 1));
    assert_eq!(
        fake.requests().last().unwrap()["input"],
        json!(["insurance form due in June"])
    );
    assert_eq!(vectors(&store), 3);
}

#[test]
fn a_busy_endpoint_is_retried_and_a_wrong_one_stores_nothing() {
    let fake = Fake::start(Mode::Busy(2));
    let provider = fake.provider();
    let mut store = store_with(&["car repair shop", "insurance paperwork"]);
    let waits = Mutex::new(Vec::new());
    let ok = backfill(&mut store, &provider, &mut |_, _| {}, &|d| {
        waits.lock().unwrap().push(d)
    })
    .unwrap();
    assert_eq!((ok.embedded, ok.requests), (2, 3));
    assert_eq!(
        *waits.lock().unwrap(),
        [Duration::from_millis(500), Duration::from_millis(1000)]
    );

    for (mode, needle) in [
        (Mode::WrongLength, "numbers, not 3: refused"),
        (Mode::WrongModel, "model \"other-model\""),
        (Mode::Garbage, "not JSON"),
        (Mode::Busy(10), "HTTP 500"),
    ] {
        fake.set(mode.clone());
        let mut fresh = store_with(&["car repair shop", "insurance paperwork"]);
        // A model that answered 3 numbers before is held to 3.
        fresh
            .conn()
            .execute(
                "INSERT INTO embedding_models (model, dimensions) VALUES (?1, 3)",
                [&provider.name],
            )
            .unwrap();
        let err = backfill(&mut fresh, &provider, &mut |_, _| {}, &no_sleep).unwrap_err();
        assert!(err.to_string().contains(needle), "{mode:?}: {err}");
        assert!(err.to_string().contains("run it again"), "{err}");
        assert_eq!(vectors(&fresh), 0, "{mode:?}: nothing stored");
    }
    // Configured dimensions that disagree with the stored vectors: refused up front.
    let wrong = Provider {
        dimensions: Some(8),
        ..provider
    };
    let err = backfill(&mut store, &wrong, &mut |_, _| {}, &no_sleep).unwrap_err();
    assert!(err.to_string().contains("are 3 long"), "{err}");
}

#[test]
fn hybrid_search_fuses_full_text_and_cosine_and_falls_back_with_a_warning() {
    let fake = Fake::start(Mode::Fine);
    let provider = fake.provider();
    // Full text alone ranks the paperwork first (the shortest text); by
    // meaning it is the least about cars.
    let mut store = store_with(&[
        "car insurance paperwork form due",
        "automobile motor engine repair for the car",
        "car engine notes from a winding road trip",
    ]);
    let plain = query::search(
        store.conn(),
        &query::Request {
            project: PROJECT,
            text: "car",
            limit: 10,
            ..query::Request::default()
        },
    )
    .unwrap();
    let bm25: Vec<&str> = plain.iter().map(|h| h.snippet.as_str()).collect();
    assert_eq!(bm25[0], "car insurance paperwork form due", "{bm25:?}");

    // Nothing embedded yet: full text, and the warning says what to run.
    let before = hybrid(&store, &provider, "car");
    assert_eq!(contents(&before), bm25);
    assert!(
        before.warnings[0].contains("mc-search index --embeddings"),
        "{:?}",
        before.warnings
    );

    backfill(&mut store, &provider, &mut |_, _| {}, &no_sleep).unwrap();
    // mc's fusion holds the words' top 3 in place.
    let held = hybrid(&store, &provider, "car");
    assert!(held.warnings.is_empty(), "{:?}", held.warnings);
    assert_eq!(contents(&held), bm25);
    // Holding none, the vectors re-rank them.
    let fused = reranked(&store, &provider, "car");
    assert!(fused.warnings.is_empty(), "{:?}", fused.warnings);
    assert_eq!(
        fused.hits[0].snippet,
        "automobile motor engine repair for the car",
        "{:?}",
        contents(&fused)
    );
    assert!(fused.hits[0].score > fused.hits[1].score);

    // A memory written since the backfill has no vector yet: it is ranked
    // by full text alone, and the warning says how many.
    memory::write(
        &mut store,
        PROJECT,
        "NAMING",
        "car insurance form due",
        "user",
        T0,
    )
    .unwrap();
    let partial = reranked(&store, &provider, "car");
    assert!(
        partial.warnings[0].starts_with("1 of 4 candidates have no embedding"),
        "{:?}",
        partial.warnings
    );
    assert_eq!(
        partial.hits.last().unwrap().snippet,
        "car insurance form due"
    );
    backfill(&mut store, &provider, &mut |_, _| {}, &no_sleep).unwrap();

    // Every fault of the endpoint: the full-text ranking, and why.
    let bm25_now: Vec<String> = query::search(
        store.conn(),
        &query::Request {
            project: PROJECT,
            text: "car",
            limit: 10,
            ..query::Request::default()
        },
    )
    .unwrap()
    .into_iter()
    .map(|h| h.snippet)
    .collect();
    for (mode, needle) in [
        (
            Mode::Slow(Duration::from_millis(1500)),
            "did not answer in time",
        ),
        (Mode::WrongLength, "refused"),
        (Mode::WrongModel, "refused"),
        (Mode::Garbage, "not JSON"),
        (Mode::Busy(1), "HTTP 500"),
    ] {
        fake.set(mode.clone());
        let answer = hybrid(&store, &provider, "car");
        assert_eq!(contents(&answer), bm25_now, "{mode:?}");
        assert_eq!(answer.warnings.len(), 1, "{mode:?}");
        assert!(
            answer.warnings[0].contains(needle),
            "{mode:?}: {:?}",
            answer.warnings
        );
        assert!(answer.warnings[0].ends_with("ranked by full text only"));
    }
    // Down: nothing listens on the port any more.
    let down = provider.clone();
    drop(fake);
    let answer = hybrid(&store, &down, "car");
    assert_eq!(contents(&answer), bm25_now);
    assert!(
        answer.warnings[0].contains("cannot be reached"),
        "{:?}",
        answer.warnings
    );
}

fn local_provider(dir: std::path::PathBuf) -> Provider {
    let spec = &local::WORDLLAMA_L2_256;
    Provider {
        name: format!("{LOCAL_PREFIX}{}", spec.name),
        backend: Backend::Local(Arc::new(LocalModel::new(spec, dir))),
        dimensions: Some(spec.dimensions),
        batch_size: 64,
        timeout: Duration::from_secs(5),
        query_timeout: Duration::from_secs(5),
        retries: 0,
        index: Default::default(),
    }
}

#[test]
fn the_local_model_backfills_and_ranks_in_process_and_a_damaged_one_falls_back() {
    let mut store = store_with(&[
        "Settle the release checklist with the team on Fridays.",
        "The release script uploads the binaries after the checks pass.",
        "MSRV is pinned at 1.85 in the release workflow.",
    ]);
    let provider = local_provider(crate::testkit::test_model());
    let report = backfill(&mut store, &provider, &mut |_, _| {}, &no_sleep).unwrap();
    assert_eq!((report.embedded, report.requests), (3, 1));
    assert_eq!(report.dimensions, Some(256));
    let first = contents(&hybrid(
        &store,
        &provider,
        "release minimum compiler version",
    ));
    let answer = hybrid(&store, &provider, "release minimum compiler version");
    assert!(answer.warnings.is_empty(), "{:?}", answer.warnings);
    assert_eq!(answer.hits.len(), 3);
    // Same stored state, same query: the same order, byte for byte.
    assert_eq!(contents(&answer), first);

    // The same model's files, damaged: full text, with a warning that says why.
    let dir = tempfile::tempdir().unwrap();
    for f in [local::TOKENIZER, local::WEIGHTS] {
        std::fs::copy(crate::testkit::test_model().join(f), dir.path().join(f)).unwrap();
    }
    let weights = dir.path().join(local::WEIGHTS);
    let bytes = std::fs::read(&weights).unwrap();
    std::fs::write(&weights, &bytes[..bytes.len() - 10]).unwrap();
    let damaged = local_provider(dir.path().to_path_buf());
    let plain = query::search(
        store.conn(),
        &query::Request {
            project: PROJECT,
            text: "release minimum compiler version",
            limit: 10,
            ..query::Request::default()
        },
    )
    .unwrap();
    let answer = hybrid(&store, &damaged, "release minimum compiler version");
    assert_eq!(answer.hits, plain);
    assert!(
        answer.warnings[0].contains("damaged")
            && answer.warnings[0].ends_with("ranked by full text only"),
        "{:?}",
        answer.warnings
    );
    // A backfill with it stops with the cause and stores nothing new.
    memory::write(&mut store, PROJECT, "NAMING", "One more fact", "user", T0).unwrap();
    let err = backfill(&mut store, &damaged, &mut |_, _| {}, &no_sleep).unwrap_err();
    assert!(err.to_string().contains("cut short"), "{err}");
    assert_eq!(vectors(&store), 3);
}

#[test]
fn vectors_bring_candidates_the_words_did_not_find_within_the_request_s_filters() {
    let mut store = store_with(&[
        "MSRV is pinned at 1.85 in Cargo.toml; CI checks it on every push.",
        "Settle the release checklist with the team on Fridays.",
        "The night theme uses a slate background with amber accents.",
    ]);
    // Another project's memory of the same meaning, which must stay invisible.
    memory::write(
        &mut store,
        "git:other",
        "NAMING",
        "MSRV is pinned at 1.80 there.",
        "user",
        T0,
    )
    .unwrap();
    let provider = local_provider(crate::testkit::test_model());
    let words = "minimum Rust toolchain";
    let plain = query::search(
        store.conn(),
        &query::Request {
            project: PROJECT,
            text: words,
            limit: 10,
            ..query::Request::default()
        },
    )
    .unwrap();
    assert!(plain.is_empty(), "no word in common: {plain:?}");
    // Before any backfill there is no index: the words' answer, and why.
    let before = hybrid(&store, &provider, words);
    assert!(before.hits.is_empty());
    assert!(before.warnings[0].contains("mc-search index --embeddings"));

    let report = backfill(&mut store, &provider, &mut |_, _| {}, &no_sleep).unwrap();
    assert_eq!(
        report.indexed, 4,
        "three rows of this project, one of the other"
    );
    // Each question finds the memory it means first, though no word is shared.
    for (question, meant) in [
        ("dark mode colours", "The night theme"),
        (
            "weekly meeting about shipping",
            "Settle the release checklist",
        ),
        (words, "MSRV is pinned at 1.85"),
    ] {
        let found = hybrid(&store, &provider, question);
        assert!(found.warnings.is_empty(), "{:?}", found.warnings);
        assert!(
            found.hits[0].snippet.starts_with(meant),
            "{question}: {:?}",
            contents(&found)
        );
    }
    let found = hybrid(&store, &provider, words);
    assert!(
        found.hits.iter().all(|h| !h.snippet.contains("1.80")),
        "another project's memory: {:?}",
        contents(&found)
    );
    assert!(found.hits.windows(2).all(|w| w[0].score >= w[1].score));
    // The request's filters hold for them: other sources, archived memories.
    let messages_only = query::search_with(
        store.conn(),
        &query::Request {
            project: PROJECT,
            text: words,
            sources: &["message".to_string()],
            limit: 10,
            ..query::Request::default()
        },
        Some(&provider),
    )
    .unwrap();
    assert!(messages_only.hits.is_empty(), "{:?}", messages_only.hits);
    memory::archive(&mut store, PROJECT, found.hits[0].id, None, T0).unwrap();
    let after = hybrid(&store, &provider, words);
    assert!(
        after.hits.iter().all(|h| h.id != found.hits[0].id),
        "an archived memory: {:?}",
        contents(&after)
    );
    // A second backfill with nothing new rewrites no index row; the answer is the same.
    let again = backfill(&mut store, &provider, &mut |_, _| {}, &no_sleep).unwrap();
    assert_eq!(
        (again.embedded, again.indexed),
        (0, 2),
        "the archive changed this project"
    );
    let third = backfill(&mut store, &provider, &mut |_, _| {}, &no_sleep).unwrap();
    assert_eq!(third.indexed, 0);
    assert_eq!(
        contents(&hybrid(&store, &provider, words)),
        contents(&after)
    );
}

#[test]
fn a_damaged_vector_index_warns_and_the_words_still_rank() {
    let mut store = store_with(&[
        "The release script uploads the binaries after the checks pass.",
        "MSRV is pinned at 1.85 in Cargo.toml.",
    ]);
    let provider = local_provider(crate::testkit::test_model());
    backfill(&mut store, &provider, &mut |_, _| {}, &no_sleep).unwrap();
    let good = hybrid(&store, &provider, "release binaries");
    store
        .conn()
        .execute("UPDATE embedding_blocks SET codes = x'00'", [])
        .unwrap();
    // A fresh process (its own cache) reads the damage.
    let fresh = local_provider(crate::testkit::test_model());
    let answer = hybrid(&store, &fresh, "release binaries");
    assert!(
        answer.warnings[0].contains("vector index") && answer.warnings[0].contains("damaged"),
        "{:?}",
        answer.warnings
    );
    assert_eq!(answer.hits[0].snippet, good.hits[0].snippet);
    // The next backfill writes it again.
    backfill(&mut store, &fresh, &mut |_, _| {}, &no_sleep).unwrap();
    assert!(
        hybrid(&store, &fresh, "release binaries")
            .warnings
            .is_empty()
    );
}

#[test]
fn config_names_a_local_model_by_default_and_refuses_unknown_ones() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::default();
    let p = Provider::from_config(&config, &|_| None, Some(dir.path()))
        .unwrap()
        .unwrap();
    assert_eq!(p.name, mc_base::config::DEFAULT_EMBEDDINGS_MODEL);
    let local = p.local().unwrap();
    assert_eq!(local.dir, dir.path().join("wordllama-l2-supercat-256"));
    // Never fetched: search goes without it, and says nothing.
    assert!(Provider::for_search(&config, &|_| None, Some(dir.path())).is_none());
    // Fetched but cut: search keeps it, to warn.
    std::fs::create_dir_all(&local.dir).unwrap();
    std::fs::write(local.dir.join(local::WEIGHTS), b"cut").unwrap();
    assert!(matches!(
        Provider::for_search(&config, &|_| None, Some(dir.path())),
        Some(Ok(_))
    ));
    let mut other = Config::default();
    other.embeddings.model = Some("local:no-such-model".into());
    let err = Provider::from_config(&other, &|_| None, Some(dir.path())).unwrap_err();
    assert!(err.to_string().contains("no local model mc knows"), "{err}");
    let err = Provider::from_config(&config, &|_| None, None).unwrap_err();
    assert!(err.to_string().contains("no cache folder"), "{err}");
    other.embeddings.model = None;
    assert!(
        Provider::from_config(&other, &|_| None, None)
            .unwrap()
            .is_none()
    );
}

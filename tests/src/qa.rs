//! A long-conversation QA set for search recall: multi-session coding
//! conversations (generated sessions as filler) with facts planted in known
//! messages, and questions about them worded as an agent would ask later —
//! not with the evidence's own words. Four kinds: a single fact, a
//! multi-hop question whose evidence sits in two sessions, a temporal
//! question whose answer is the later of two contradicting messages (the
//! earlier one is a distractor), and identifiers, paths and error codes.
//!
//! Every session also gets distractors: messages that share a question's
//! words but do not answer it.

use serde_json::Value;

use crate::generate::{self, SessionSpec};

/// One question and the planted messages that answer it.
#[derive(Debug, Clone)]
pub struct Question {
    pub kind: &'static str,
    pub text: &'static str,
    /// The texts of the evidence messages (each planted once).
    pub evidence: Vec<&'static str>,
}

/// A planted message: the session (0-based) it goes in, and its text.
pub type Plant = (usize, &'static str);

pub const KINDS: [&str; 4] = ["single", "multi-hop", "temporal", "identifier"];

/// Sessions of the set.
pub const SESSIONS: usize = 12;

/// One question of a set: its kind, its words, the messages that answer
/// it and the messages that only look like they do.
pub struct Item {
    pub kind: &'static str,
    pub question: &'static str,
    pub evidence: &'static [Plant],
    pub distractors: &'static [Plant],
}

const ITEMS: &[Item] = &[
    // ---- single facts
    Item {
        kind: "single",
        question: "how many times does the uploader retry before giving up",
        evidence: &[(
            1,
            "Settled it: the uploader makes at most 5 attempts, with jittered backoff starting at 200 ms, then reports the failure to the user.",
        )],
        distractors: &[(
            4,
            "The uploader's progress bar flickers on slow terminals; not worth fixing now.",
        )],
    },
    Item {
        kind: "single",
        question: "which database engine did we pick for the audit log",
        evidence: &[(
            2,
            "For the audit log we go with SQLite in WAL mode, one file per tenant; Postgres was overkill for append-only rows.",
        )],
        distractors: &[(
            7,
            "The log level for the audit module is info in production, debug in tests.",
        )],
    },
    Item {
        kind: "single",
        question: "what port does the metrics endpoint listen on",
        evidence: &[(
            3,
            "Metrics are exposed by the Prometheus exporter on 9464, bound to localhost only.",
        )],
        distractors: &[(
            5,
            "The dev server listens on port 3000 and proxies /api to the backend.",
        )],
    },
    Item {
        kind: "single",
        question: "who owns the release checklist",
        evidence: &[(
            4,
            "Priya maintains the release checklist from now on; ping her before tagging a version.",
        )],
        distractors: &[(
            8,
            "Release notes are generated from commit subjects by the changelog script.",
        )],
    },
    Item {
        kind: "single",
        question: "why did we drop the Redis cache",
        evidence: &[(
            5,
            "We removed Redis: the hit rate was under 3% because every request carries a unique tenant key, so caching bought nothing but an extra moving part.",
        )],
        distractors: &[(2, "The in-process LRU keeps 512 parsed templates.")],
    },
    Item {
        kind: "single",
        question: "what is the maximum upload size",
        evidence: &[(
            6,
            "Uploads larger than 25 MiB are rejected with 413 before the body is read.",
        )],
        distractors: &[(9, "The upload form shows a spinner while hashing the file.")],
    },
    Item {
        kind: "single",
        question: "how are API tokens stored",
        evidence: &[(
            7,
            "Tokens are never stored in clear: we keep an argon2id hash and the last four characters for display.",
        )],
        distractors: &[(
            3,
            "The API docs are built with a static site generator on every merge.",
        )],
    },
    Item {
        kind: "single",
        question: "what time zone do the nightly jobs use",
        evidence: &[(
            8,
            "All nightly jobs are scheduled in UTC, never local time, so daylight saving cannot run them twice.",
        )],
        distractors: &[(
            1,
            "The nightly build takes about 14 minutes on the shared runner.",
        )],
    },
    Item {
        kind: "single",
        question: "which license did we choose",
        evidence: &[(
            9,
            "Decision: dual license, MIT or Apache-2.0 at the user's option, like most of the Rust ecosystem.",
        )],
        distractors: &[(6, "License headers are not required in test files.")],
    },
    Item {
        kind: "single",
        question: "how do we paginate the search API",
        evidence: &[(
            10,
            "The search endpoint pages with an opaque cursor (base64 of the last sort key), not offset and limit, so deep pages stay cheap.",
        )],
        distractors: &[(
            4,
            "Search results are highlighted with <mark> in the web view.",
        )],
    },
    Item {
        kind: "single",
        question: "what minimum Rust version do we support",
        evidence: &[(
            11,
            "MSRV is pinned at 1.85; CI runs a job on exactly that toolchain.",
        )],
        distractors: &[(2, "rustfmt runs with the default edition settings.")],
    },
    Item {
        kind: "single",
        question: "where do the integration tests get their fixtures",
        evidence: &[(
            0,
            "Integration tests build their fixtures in a temp dir from the JSON samples under tests/data; nothing touches the real home directory.",
        )],
        distractors: &[(10, "Unit tests use insta snapshots for rendered output.")],
    },
    // ---- multi-hop: two sessions
    Item {
        kind: "multi-hop",
        question: "which team do we have to ask before changing the service that the billing worker calls",
        evidence: &[
            (
                1,
                "The billing worker calls the ledger service for every invoice it closes.",
            ),
            (
                6,
                "The ledger service is owned by the payments team; any API change needs their sign-off.",
            ),
        ],
        distractors: &[(3, "The billing worker runs every 10 minutes.")],
    },
    Item {
        kind: "multi-hop",
        question: "what version of the library that parses our config files has the bug we hit",
        evidence: &[
            (
                2,
                "Config files are parsed with the jsonc-parser crate so comments are allowed.",
            ),
            (
                8,
                "jsonc-parser 0.21.0 mis-reads a trailing comma after a nested object; pin 0.20 until it is fixed.",
            ),
        ],
        distractors: &[(5, "Config reload happens on SIGHUP.")],
    },
    Item {
        kind: "multi-hop",
        question: "on which host does the job that compacts old partitions run",
        evidence: &[
            (
                3,
                "Old partitions are compacted by the vacuum-partitions cron job.",
            ),
            (
                9,
                "vacuum-partitions is deployed only to batch-02, the box with the big disk.",
            ),
        ],
        distractors: &[(0, "Partitions are monthly, named by year and month.")],
    },
    Item {
        kind: "multi-hop",
        question: "what is the timeout of the client used by the webhook sender",
        evidence: &[
            (
                4,
                "Webhook delivery goes through the shared HttpPool client, not a client of its own.",
            ),
            (
                10,
                "HttpPool has a 7 second whole-request timeout and keeps 32 idle connections.",
            ),
        ],
        distractors: &[(7, "Webhooks are signed with HMAC-SHA256 over the raw body.")],
    },
    Item {
        kind: "multi-hop",
        question: "which region stores the backups of the primary database",
        evidence: &[
            (
                0,
                "The primary database is backed up by the snapshot-agent every six hours.",
            ),
            (
                7,
                "snapshot-agent writes to the eu-north-1 bucket; nothing leaves the EU.",
            ),
        ],
        distractors: &[(11, "A backup restore drill is planned for next quarter.")],
    },
    Item {
        kind: "multi-hop",
        question: "what does the flag that disables the new renderer default to in staging",
        evidence: &[
            (
                5,
                "The new renderer can be switched off with the legacy_render flag.",
            ),
            (
                11,
                "In staging legacy_render defaults to true until the screenshot diffs are clean.",
            ),
        ],
        distractors: &[(2, "Rendering of markdown tables was slow on large inputs.")],
    },
    Item {
        kind: "multi-hop",
        question: "who reviews changes to the module that handles password resets",
        evidence: &[
            (2, "Password resets live in the account_recovery module."),
            (
                9,
                "account_recovery changes need a review from Tomasz, our security lead.",
            ),
        ],
        distractors: &[(6, "Reset emails expire after one hour.")],
    },
    Item {
        kind: "multi-hop",
        question: "what format does the exporter used by the reporting dashboard write",
        evidence: &[
            (
                6,
                "The reporting dashboard reads what the nightly-export tool produces.",
            ),
            (
                10,
                "nightly-export writes Parquet files partitioned by day.",
            ),
        ],
        distractors: &[(
            1,
            "The dashboard is built with a charting library we vendor.",
        )],
    },
    // ---- temporal: the later message holds, the earlier one is the distractor
    Item {
        kind: "temporal",
        question: "what is the current session timeout",
        evidence: &[(
            9,
            "Update: the session timeout is now 30 minutes of inactivity, the 8 hour value was too lax for the auditors.",
        )],
        distractors: &[(
            2,
            "Session timeout set to 8 hours so people are not logged out during the day.",
        )],
    },
    Item {
        kind: "temporal",
        question: "which queue library are we using now",
        evidence: &[(
            10,
            "We moved off the Kafka client to NATS JetStream last week; the Kafka consumer code is deleted.",
        )],
        distractors: &[(
            3,
            "The queue library is the Kafka client, configured with manual commits.",
        )],
    },
    Item {
        kind: "temporal",
        question: "what is the latest decision on the default page size",
        evidence: &[(
            11,
            "Changed again: the default page size is 50, 200 made the mobile client stall.",
        )],
        distractors: &[(4, "Default page size raised to 200 to cut round trips.")],
    },
    Item {
        kind: "temporal",
        question: "where is the staging environment hosted these days",
        evidence: &[(
            8,
            "Staging now runs on the Hetzner cluster; the old DigitalOcean droplets were shut down.",
        )],
        distractors: &[(
            1,
            "Staging environment is hosted on two DigitalOcean droplets.",
        )],
    },
    Item {
        kind: "temporal",
        question: "what is the current plan for the mobile release date",
        evidence: &[(
            11,
            "The mobile release slipped to March 14 because of the store review.",
        )],
        distractors: &[(5, "Mobile release date planned for February 20.")],
    },
    Item {
        kind: "temporal",
        question: "what log format do we use now",
        evidence: &[(
            7,
            "Logs are JSON lines now, one object per event; the logfmt output is gone.",
        )],
        distractors: &[(0, "Log format is logfmt, easier to read in a terminal.")],
    },
    Item {
        kind: "temporal",
        question: "how many worker threads does the indexer use after the last change",
        evidence: &[(
            10,
            "Indexer worker threads lowered to 2 after the memory spikes on small machines.",
        )],
        distractors: &[(
            6,
            "Indexer uses 8 worker threads, one per core on the build box.",
        )],
    },
    Item {
        kind: "temporal",
        question: "what is the current retention for raw events",
        evidence: &[(
            9,
            "Retention for raw events is 90 days as of this sprint; legal asked for more than 30.",
        )],
        distractors: &[(
            3,
            "Raw events are kept 30 days, then only the aggregates remain.",
        )],
    },
    // ---- identifiers, paths, error codes
    Item {
        kind: "identifier",
        question: "what failed with SQLITE_BUSY",
        evidence: &[(
            3,
            "The migration step failed with SQLITE_BUSY (database is locked) because the historian held a write transaction; the fix is a busy timeout of 5 s.",
        )],
        distractors: &[(8, "The database file lives in the XDG data home.")],
    },
    Item {
        kind: "identifier",
        question: "lease manager backoff",
        evidence: &[(
            5,
            "In src/store/lease_manager.rs the renewal loop now backs off exponentially instead of spinning.",
        )],
        distractors: &[(2, "A lease is held per project and domain.")],
    },
    Item {
        kind: "identifier",
        question: "retry policy parser panic",
        evidence: &[(
            7,
            "RetryPolicyParser panicked on an empty max_attempts field; it now returns a ConfigError instead.",
        )],
        distractors: &[(4, "The retry policy is documented in the README.")],
    },
    Item {
        kind: "identifier",
        question: "error E0502 in the cache",
        evidence: &[(
            8,
            "rustc gave E0502 in cache.rs: cannot borrow self.entries as mutable because it is also borrowed as immutable; solved by cloning the key first.",
        )],
        distractors: &[(10, "The cache is cleared on every deploy.")],
    },
    Item {
        kind: "identifier",
        question: "what does parseHttpHeaders do with duplicate names",
        evidence: &[(
            2,
            "parseHTTPHeaders joins duplicate header names with a comma, except Set-Cookie which keeps a list.",
        )],
        distractors: &[(6, "HTTP/2 support is behind a feature flag.")],
    },
    Item {
        kind: "identifier",
        question: "ECONNREFUSED when the tests start",
        evidence: &[(
            4,
            "The e2e tests hit connect ECONNREFUSED 127.0.0.1:4096 because the server was not up yet; they now wait for the health check.",
        )],
        distractors: &[(9, "Tests start with a clean temp directory.")],
    },
    Item {
        kind: "identifier",
        question: "tokenizer_config json missing",
        evidence: &[(
            10,
            "Loading failed: FileNotFoundError for tokenizer_config.json, the loader looked in tokenizer/ but the wheel ships tokenizers/.",
        )],
        distractors: &[(1, "The tokenizer counts tokens with the cl100k vocabulary.")],
    },
    Item {
        kind: "identifier",
        question: "migrations 0009 message index",
        evidence: &[(
            6,
            "Migration 0009_message_index.sql adds the queue table and the contentless FTS5 index of raw parts.",
        )],
        distractors: &[(0, "Migrations run in one transaction per file.")],
    },
    Item {
        kind: "identifier",
        question: "exit code 137 in CI",
        evidence: &[(
            11,
            "The CI job died with exit code 137, the OOM killer; the link step needs more than 4 GB with full debug info.",
        )],
        distractors: &[(5, "CI caches the cargo registry between runs.")],
    },
    Item {
        kind: "identifier",
        question: "UserProfileCard props",
        evidence: &[(
            9,
            "UserProfileCard takes avatarUrl, displayName and an optional onEdit callback; the email is no longer passed in.",
        )],
        distractors: &[(3, "The profile page loads the user's recent activity.")],
    },
];

/// The questions, and every planted message (evidence and distractors) by session.
pub fn questions() -> (Vec<Question>, Vec<Plant>) {
    questions_of(ITEMS)
}

/// The questions of `items`, and every message they plant.
pub fn questions_of(items: &[Item]) -> (Vec<Question>, Vec<Plant>) {
    let mut questions = Vec::new();
    let mut plants = Vec::new();
    for item in items {
        questions.push(Question {
            kind: item.kind,
            text: item.question,
            evidence: item.evidence.iter().map(|(_, t)| *t).collect(),
        });
        plants.extend_from_slice(item.evidence);
        plants.extend_from_slice(item.distractors);
    }
    (questions, plants)
}

/// The sessions, oldest first: generated filler of `turns` turns each, then
/// the session's planted messages as user messages, an hour apart. Session
/// `i` starts `i` days after the first.
pub fn sessions(turns: usize) -> Vec<Vec<Value>> {
    sessions_of(ITEMS, turns)
}

/// [`sessions`] with the messages `items` plant.
pub fn sessions_of(items: &[Item], turns: usize) -> Vec<Vec<Value>> {
    let (_, plants) = questions_of(items);
    (0..SESSIONS)
        .map(|i| {
            let mut spec = SessionSpec::new(0x9a_0000 + i as u64, turns, turns as u64 * 2_500);
            spec.start_ms += i as i64 * 86_400_000;
            let mut messages = generate::session(&spec);
            for (_, text) in plants.iter().filter(|(s, _)| *s == i) {
                let next = generate::follow_up(&messages, text, 3_600_000);
                messages.push(next);
            }
            messages
        })
        .collect()
}

/// A planted commit: (subject, body, changed paths).
pub type CommitText = (&'static str, &'static str, &'static [&'static str]);

/// Questions about the project's commits: the question, and the index of
/// its commit in [`COMMITS`] (the rest of the list are look-alikes).
pub const COMMIT_QUESTIONS: &[(&str, usize)] = &[
    ("lease renewal", 0),
    // Only the target's path names it; two subjects say "Lease".
    ("lease manager", 2),
    ("stemming tokenizer", 3),
    // "Migrations" is in two subjects; "busy" only in the target's body.
    ("migrations busy", 4),
    ("embed.rs backfill", 6),
    ("plugin session events", 7),
    ("benchmark readme", 9),
    ("cargo toml redis", 11),
    // The target says it in its path; a look-alike says "retry policy" in its subject.
    ("retry policy parser", 12),
    ("commits search tests", 14),
];

/// Commits planted among the generated ones: the answers and look-alikes.
pub const COMMITS: &[CommitText] = &[
    (
        "Lease: renew at half the TTL",
        "Renewing at the last second lost leases on slow disks.",
        &["src/store/lease.rs"],
    ),
    (
        "Lease: rename fields for clarity",
        "No behaviour change.",
        &["src/store/lease.rs", "src/store/mod.rs"],
    ),
    (
        "Store: fewer wakeups while waiting",
        "The renewal loop sleeps until the next deadline.",
        &["src/store/lease_manager.rs"],
    ),
    (
        "Search: stem the message index",
        "porter unicode61 instead of plain unicode61; uploads finds upload.",
        &[
            "shared/src/store/migrations/0012_search.sql",
            "shared/src/search/index.rs",
        ],
    ),
    (
        "Migrations: wait for the write lock",
        "An upgrade beside a running historian failed with SQLITE_BUSY; wait with the busy timeout.",
        &["shared/src/store/mod.rs"],
    ),
    (
        "Migrations: test the fence",
        "",
        &["shared/src/store/mod.rs"],
    ),
    (
        "mc-search index --embeddings",
        "Backfill vectors in batches, resumable, with retries.",
        &["mc-search/src/cli.rs", "shared/src/search/embed.rs"],
    ),
    (
        "Plugin: learn sessions from session.created",
        "The OpenCode plugin now reads session.updated too.",
        &["mc-transform/adapters/opencode/mc.js"],
    ),
    (
        "Plugin: format",
        "",
        &["mc-transform/adapters/opencode/mc.js"],
    ),
    (
        "Docs: benchmark figures",
        "Latency, throughput, recall.",
        &["README.md"],
    ),
    ("Docs: fix a typo", "", &["README.md"]),
    (
        "Remove the Redis layer",
        "The hit rate was under 3%: every request has a unique tenant key.",
        &["src/cache/redis.rs", "Cargo.toml"],
    ),
    (
        "RetryPolicyParser: no panic on an empty max_attempts",
        "Returns a ConfigError instead.",
        &["src/config/retry_policy_parser.rs"],
    ),
    ("Config: document retry policy", "", &["docs/config.md"]),
    (
        "Tests: commits as a search source",
        "",
        &["tests/tests/suite/search.rs"],
    ),
];

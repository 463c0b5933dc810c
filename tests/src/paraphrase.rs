//! A paraphrase set for search recall, beside [`crate::qa`]'s: facts
//! planted in the same kind of generated sessions, asked about in other
//! words. Three kinds:
//!
//! - `paraphrase`: the question shares no content word with its evidence
//!   ("minimum Rust version" for "MSRV is pinned at 1.85"), so only a model
//!   of meaning can find it;
//! - `misleading`: as above, and a distractor repeats the question's own
//!   words without answering it, so full text ranks the wrong message first;
//! - `direct`: the question shares its words with the evidence (the control:
//!   vectors must not push these out).
//!
//! Written for mc's benchmark; every sentence is made up.

use serde_json::Value;

use crate::qa::{self, Item, Question};

/// The kinds, in the order the benchmark prints them.
pub const KINDS: [&str; 3] = ["paraphrase", "misleading", "direct"];

const ITEMS: &[Item] = &[
    // ---- paraphrase: no content word in common
    Item {
        kind: "paraphrase",
        question: "minimum supported compiler release",
        evidence: &[(
            0,
            "MSRV is pinned at 1.85 in Cargo.toml; CI checks it on every push.",
        )],
        distractors: &[],
    },
    Item {
        kind: "paraphrase",
        question: "how do we stop two writers corrupting the database",
        evidence: &[(
            1,
            "SQLite runs in WAL mode with a busy timeout, and every mutation takes an immediate transaction.",
        )],
        distractors: &[],
    },
    Item {
        kind: "paraphrase",
        question: "which colour scheme did the designer choose for dark mode",
        evidence: &[(
            2,
            "Night theme: slate background, amber accents, text at 87% white. Approved by Maria.",
        )],
        distractors: &[],
    },
    Item {
        kind: "paraphrase",
        question: "why was the nightly job killed",
        evidence: &[(
            3,
            "The 2am build ran out of memory while linking; the OOM reaper ended it at 7.8 GB.",
        )],
        distractors: &[],
    },
    Item {
        kind: "paraphrase",
        question: "where are customer passwords kept",
        evidence: &[(
            4,
            "User credentials are hashed with argon2id and stored in the auth service's own Postgres schema.",
        )],
        distractors: &[],
    },
    Item {
        kind: "paraphrase",
        question: "what happens when the disk fills up",
        evidence: &[(
            5,
            "On ENOSPC the writer stops accepting uploads, flushes what it has and raises an alert to on-call.",
        )],
        distractors: &[],
    },
    Item {
        kind: "paraphrase",
        question: "how long are old logs retained",
        evidence: &[(
            6,
            "Log files rotate daily and are deleted after fourteen days; audit entries stay a year.",
        )],
        distractors: &[],
    },
    Item {
        kind: "paraphrase",
        question: "who reviews security fixes",
        evidence: &[(
            7,
            "Any patch touching authentication or crypto needs Tomasz's approval before it merges.",
        )],
        distractors: &[],
    },
    Item {
        kind: "paraphrase",
        question: "which library parses command line flags",
        evidence: &[(
            8,
            "Arguments go through clap with the derive feature; no hand-written argv handling.",
        )],
        distractors: &[],
    },
    Item {
        kind: "paraphrase",
        question: "speed of the search endpoint under load",
        evidence: &[(
            9,
            "Queries answer in 4 ms median, 11 ms p99, at 200 requests per second on two cores.",
        )],
        distractors: &[],
    },
    Item {
        kind: "paraphrase",
        question: "how do we ship a new version to users",
        evidence: &[(
            10,
            "Releases: tag vX.Y.Z, CI builds the binaries, then the publish job uploads them and bumps the tap.",
        )],
        distractors: &[],
    },
    Item {
        kind: "paraphrase",
        question: "what broke the login page yesterday",
        evidence: &[(
            11,
            "The sign-in form failed because the CSRF cookie lost its SameSite attribute after the proxy upgrade.",
        )],
        distractors: &[],
    },
    Item {
        kind: "paraphrase",
        question: "timezone used for scheduled tasks",
        evidence: &[(
            0,
            "Cron expressions are read in UTC on the servers, never in local time.",
        )],
        distractors: &[],
    },
    Item {
        kind: "paraphrase",
        question: "how is money rounded",
        evidence: &[(
            1,
            "Amounts are integers of cents; division uses banker's rounding, half to even.",
        )],
        distractors: &[],
    },
    // ---- misleading: a distractor has the question's words
    Item {
        kind: "misleading",
        question: "what makes the test suite slow",
        evidence: &[(
            2,
            "Most of the CI minutes go to linking the e2e binaries; compiling with full debug info doubles it.",
        )],
        distractors: &[(
            5,
            "The test suite has a slow mode for the property tests; it is off by default.",
        )],
    },
    Item {
        kind: "misleading",
        question: "which cache does the API use",
        evidence: &[(
            3,
            "Responses of the REST layer are memoized in Redis for thirty seconds.",
        )],
        distractors: &[(
            8,
            "The API docs are built into a cache folder by the docs job.",
        )],
    },
    Item {
        kind: "misleading",
        question: "how many workers handle the queue",
        evidence: &[(
            4,
            "Eight consumer threads drain the job backlog; each takes one item at a time.",
        )],
        distractors: &[(
            9,
            "Workers of the queue dashboard show how many handle requests right now.",
        )],
    },
    Item {
        kind: "misleading",
        question: "why did we drop the old payment provider",
        evidence: &[(
            6,
            "We left Stripe-like BillCo because their webhooks arrived hours late and refunds needed a phone call.",
        )],
        distractors: &[(
            10,
            "The payment provider settings page got an old-style drop-down.",
        )],
    },
    Item {
        kind: "misleading",
        question: "what limit applies to file uploads",
        evidence: &[(
            7,
            "Attachments above 25 MB are refused by the gateway with a 413 before they reach storage.",
        )],
        distractors: &[(
            11,
            "The limit on file names in uploads applies to the display only.",
        )],
    },
    Item {
        kind: "misleading",
        question: "how do we back up the production database",
        evidence: &[(
            8,
            "Every night pg_dump runs against the replica and the dump goes to object storage for 30 days.",
        )],
        distractors: &[(
            0,
            "Back up before you touch the production database config, said the wiki page.",
        )],
    },
    Item {
        kind: "misleading",
        question: "where does the mobile app get its feature flags",
        evidence: &[(
            9,
            "Toggles for iOS and Android are pulled from LaunchPad at start and refreshed every ten minutes.",
        )],
        distractors: &[(
            1,
            "Feature flags in the mobile app's settings screen are labelled in English only.",
        )],
    },
    Item {
        kind: "misleading",
        question: "what encoding do exported reports use",
        evidence: &[(
            10,
            "CSV exports are written as UTF-8 with a BOM so that spreadsheets open them correctly.",
        )],
        distractors: &[(
            2,
            "Reports exported last quarter use the new encoding of dates in their titles.",
        )],
    },
    Item {
        kind: "misleading",
        question: "how are secrets passed to the containers",
        evidence: &[(
            11,
            "Credentials reach the pods as files mounted from the vault agent, never as environment variables.",
        )],
        distractors: &[(
            3,
            "Secrets of good containers: small images, passed health checks.",
        )],
    },
    Item {
        kind: "misleading",
        question: "which branch do hotfixes start from",
        evidence: &[(
            4,
            "Urgent patches are cut from the last release tag, then merged forward into main.",
        )],
        distractors: &[(
            6,
            "The hotfixes branch of the docs repository starts from nothing.",
        )],
    },
    // ---- direct: the words are shared (the control)
    Item {
        kind: "direct",
        question: "retry budget of the webhook sender",
        evidence: &[(
            5,
            "The webhook sender has a retry budget of 6 attempts over 2 hours, then parks the event.",
        )],
        distractors: &[],
    },
    Item {
        kind: "direct",
        question: "default page size of the list endpoint",
        evidence: &[(
            7,
            "The list endpoint's default page size is 50, at most 500 with ?limit=.",
        )],
        distractors: &[],
    },
    Item {
        kind: "direct",
        question: "font of the invoice PDF",
        evidence: &[(
            8,
            "The invoice PDF uses Inter at 10 pt; headings are Inter semibold.",
        )],
        distractors: &[],
    },
    Item {
        kind: "direct",
        question: "session cookie lifetime",
        evidence: &[(
            9,
            "The session cookie lifetime is 12 hours, sliding, and it is HttpOnly and Secure.",
        )],
        distractors: &[],
    },
    Item {
        kind: "direct",
        question: "thumbnail generation service",
        evidence: &[(
            10,
            "Thumbnail generation moved to a separate service that uses libvips; 3x faster than ImageMagick.",
        )],
        distractors: &[],
    },
    Item {
        kind: "direct",
        question: "search index rebuild schedule",
        evidence: &[(
            11,
            "The search index rebuild runs on Sundays at 04:00 and takes about forty minutes.",
        )],
        distractors: &[],
    },
];

/// The questions, and every planted message by session.
pub fn questions() -> (Vec<Question>, Vec<qa::Plant>) {
    qa::questions_of(ITEMS)
}

/// The sessions (as [`qa::sessions`] builds them) with this set's plants.
pub fn sessions(turns: usize) -> Vec<Vec<Value>> {
    qa::sessions_of(ITEMS, turns)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Words a question of kind `paraphrase` or `misleading` may share with
    /// its evidence: the ones full text leaves out.
    const FILLER: &[&str] = &[
        "a", "an", "the", "of", "to", "do", "we", "is", "are", "how", "what", "which", "who",
        "where", "why", "when", "did", "does", "for", "in", "on", "its", "it", "get", "from",
        "used", "use", "uses", "long", "many", "old",
    ];

    fn words(text: &str) -> Vec<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    }

    #[test]
    fn paraphrase_questions_share_no_content_word_with_their_evidence() {
        let mut checked = 0;
        for item in ITEMS.iter().filter(|i| i.kind != "direct") {
            let question = words(item.question);
            for (_, evidence) in item.evidence {
                let shared: Vec<String> = words(evidence)
                    .into_iter()
                    .filter(|w| question.contains(w) && !FILLER.contains(&w.as_str()))
                    .collect();
                assert!(shared.is_empty(), "{:?} shares {shared:?}", item.question);
                checked += 1;
            }
        }
        assert!(checked >= 20, "{checked}");
    }

    #[test]
    fn misleading_distractors_repeat_the_questions_words() {
        for item in ITEMS.iter().filter(|i| i.kind == "misleading") {
            let question = words(item.question);
            let content: Vec<&String> = question
                .iter()
                .filter(|w| !FILLER.contains(&w.as_str()))
                .collect();
            for (_, distractor) in item.distractors {
                let d = words(distractor);
                let shared = content.iter().filter(|w| d.contains(w)).count();
                assert!(shared >= 2, "{:?}: {distractor:?}", item.question);
            }
        }
    }
}

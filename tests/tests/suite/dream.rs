//! mc-dream as cron runs it: real processes in a sealed environment with a
//! fixed clock (`MC_NOW_MS`, `TZ=UTC`), a fake LLM server on 127.0.0.1, real
//! git repositories, and a fake `crontab`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use mc_base::store::{Store, StoreOptions};
use mc_tests::fake_llm::{ANY_MODEL, FakeLlm, Reply, user_text};
use mc_tests::{TestEnv, pipe_all};

struct Env {
    env: TestEnv,
    fake: FakeLlm,
}

impl std::ops::Deref for Env {
    type Target = TestEnv;

    fn deref(&self) -> &TestEnv {
        &self.env
    }
}

/// Ids of the `<memory id="N">` elements of a prompt, in order.
fn ids(text: &str) -> Vec<i64> {
    text.match_indices("<memory id=\"")
        .filter_map(|(i, m)| text.get(i + m.len()..)?.split('"').next()?.parse().ok())
        .collect()
}

/// A model that does every task the obvious way: merges each group whole,
/// classifies everything as a project fact of importance 50, verifies and
/// keeps everything.
fn oracle(body: &Value) -> Reply {
    let text = user_text(body);
    let answer = if text.starts_with("Task: consolidate") {
        let merges: String = text
            .split("<group ")
            .skip(1)
            .map(|group| {
                let ids = ids(group);
                let first = group
                    .split("<memory id=\"")
                    .nth(1)
                    .and_then(|rest| rest.split_once("\">"))
                    .and_then(|(_, rest)| rest.split("</memory>").next())
                    .unwrap_or("merged");
                format!(
                    "<merge ids=\"{}\">{first} (merged)</merge>\n",
                    ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
                )
            })
            .collect();
        format!("<consolidate>\n{merges}</consolidate>")
    } else if text.starts_with("Task: classify") {
        let body: String = ids(&text)
            .iter()
            .map(|id| format!("<memory id=\"{id}\" importance=\"50\" scope=\"project\"/>\n"))
            .collect();
        format!("<classify>\n{body}</classify>")
    } else if text.starts_with("Task: verify") {
        let body: String = ids(&text)
            .iter()
            .map(|id| format!("<memory id=\"{id}\" verdict=\"verified\"/>\n"))
            .collect();
        format!("<verify>\n{body}</verify>")
    } else {
        let body: String = ids(&text)
            .iter()
            .map(|id| format!("<memory id=\"{id}\" verdict=\"keep\"/>\n"))
            .collect();
        format!("<archive_stale>\n{body}</archive_stale>")
    };
    Reply::text(answer)
}

fn task_of(text: &str) -> String {
    text.lines()
        .next()
        .and_then(|l| l.strip_prefix("Task: "))
        .and_then(|l| l.split('.').next())
        .unwrap_or_default()
        .to_string()
}

impl Env {
    fn new() -> Env {
        let env = Env {
            env: TestEnv::new().with_var("TZ", "UTC"),
            fake: FakeLlm::start(),
        };
        env.config(json!({}));
        env.git_repo(&env.repo());
        env
    }

    fn repo(&self) -> PathBuf {
        self.path("repo")
    }

    /// The user config: the fake as provider, `extra` merged into `dream`.
    fn config(&self, extra: Value) {
        let mut dream = json!({"model": "fake/dreamer", "retries": 0});
        if let (Some(d), Some(e)) = (dream.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                d.insert(k.clone(), v.clone());
            }
        }
        self.env.user_config(
            &json!({
                "providers": {"fake": {"kind": "anthropic", "base_url": self.fake.url()}},
                "dream": dream,
            })
            .to_string(),
        );
    }

    fn git(&self, dir: &Path, args: &[&str]) -> String {
        self.git_at(dir, "2026-11-30T12:00:00Z", args)
    }

    fn git_repo(&self, dir: &Path) {
        std::fs::create_dir_all(dir.join("src")).unwrap();
        std::fs::write(dir.join("src/lib.rs"), "pub fn open() {}\n").unwrap();
        self.git(dir, &["init", "-q"]);
        self.git(dir, &["add", "."]);
        self.git(
            dir,
            &["commit", "-q", "-m", "First commit", "-m", "With a body."],
        );
    }

    /// `mc-dream ARGS`: exit code, JSON, stderr.
    fn dream(&self, args: &[&str]) -> (i32, Value, String) {
        let out = self.run_db("mc-dream", args, "");
        parse(out)
    }

    fn remember(&self, category: &str, content: &str) -> i64 {
        let repo = self.repo();
        let out = self.run_db(
            "mc-search",
            &[
                "--project-dir",
                repo.to_str().unwrap(),
                "memory",
                "write",
                "--category",
                category,
                "--content",
                content,
            ],
            "",
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["id"]
            .as_i64()
            .unwrap()
    }

    fn store(&self) -> Store {
        Store::open(&self.db(), &StoreOptions::default()).unwrap()
    }

    fn live(&self) -> Vec<String> {
        self.store()
            .conn()
            .prepare(
                "SELECT content FROM memories WHERE status IN ('active', 'permanent') ORDER BY id",
            )
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// The tasks the fake model was asked to do, in order.
    fn asked(&self) -> Vec<String> {
        self.fake
            .requests()
            .iter()
            .map(|r| task_of(&r.user_text()))
            .collect()
    }
}

fn parse(out: std::process::Output) -> (i32, Value, String) {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON on stdout ({e}): {}\nstderr: {stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    (out.status.code().unwrap_or(-1), json, stderr)
}

fn outcomes(report: &Value) -> Vec<(String, String)> {
    report["projects"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["tasks"].as_array().unwrap().iter())
        .map(|t| {
            (
                t["task"].as_str().unwrap().to_string(),
                t["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn a_tick_does_what_is_due_once_and_status_shows_it() {
    let env = Env::new();
    env.remember("CONSTRAINTS", "Never log API keys.");
    env.remember("CONSTRAINTS", "API keys must never be logged.");
    env.remember("ARCHITECTURE", "src/lib.rs exports `open` for the store.");
    env.fake.always(ANY_MODEL, Reply::with(oracle));
    // mc learns a project's folder from its sessions, or from a command run in it.
    let repo = env.repo();
    let (code, report, stderr) =
        env.dream(&["run", "git-index", "--project", repo.to_str().unwrap()]);
    assert_eq!(code, 0, "{report}\n{stderr}");
    assert_eq!(report["tasks"][0]["outcome"], "ok");
    assert_eq!(report["tasks"][0]["detail"]["indexed"]["added"], 1);

    let (code, tick, stderr) = env.dream(&["tick"]);
    assert_eq!(code, 0, "{tick}\n{stderr}");
    assert_eq!(
        outcomes(&tick),
        pairs(&[
            ("consolidate", "ok"),
            ("verify", "nothing"),
            ("classify", "ok"),
            ("archive-stale", "nothing"),
            ("sync", "nothing"),
        ]),
        "{tick:#}"
    );
    assert_eq!(env.asked(), ["consolidate", "verify", "classify"]);
    assert_eq!(
        env.live(),
        [
            "src/lib.rs exports `open` for the store.",
            "Never log API keys. (merged)"
        ]
    );
    assert!(tick["tokens"]["input"].as_u64().unwrap() > 0);

    // A minute later nothing is due: nothing runs, nothing is asked.
    let later = TestEnv::NOW_MS + 60_000;
    let out = env
        .db_command("mc-dream", &["tick"])
        .env("MC_NOW_MS", later.to_string())
        .output()
        .unwrap();
    let (_, idle, _) = parse(out);
    assert_eq!(idle["projects"], json!([]), "{idle:#}");
    assert_eq!(env.asked().len(), 3);

    // At 03:00 the next night consolidate is due again; nothing happened in
    // the project since (no session, memory or commit): skipped, no model call.
    let night = TestEnv::NOW_MS - 100 * 60_000 + 24 * 3_600_000;
    let out = env
        .db_command("mc-dream", &["tick"])
        .env("MC_NOW_MS", night.to_string())
        .output()
        .unwrap();
    let (_, quiet, _) = parse(out);
    assert!(
        outcomes(&quiet).contains(&("consolidate".to_string(), "skipped".to_string())),
        "{quiet:#}"
    );
    assert_eq!(env.asked().len(), 3);

    // Status at that night (at the fixed clock, a day earlier, the times
    // recorded that night would be a clock set back).
    let out = env
        .db_command("mc-dream", &["status", "--project", repo.to_str().unwrap()])
        .env("MC_NOW_MS", night.to_string())
        .output()
        .unwrap();
    let (code, status, _) = parse(out);
    assert_eq!(code, 0);
    let project = &status["projects"][0];
    assert_eq!(project["dir"], json!(repo.canonicalize().unwrap()));
    assert_eq!(project["git"], "git");
    assert_eq!(project["commits_indexed"], 1);
    let task = |name: &str| {
        project["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["task"] == name)
            .unwrap()
            .clone()
    };
    let consolidate = task("consolidate");
    assert_eq!(consolidate["schedule"], "0 3 * * *");
    assert_eq!(consolidate["last_result"], "skipped");
    assert_eq!(consolidate["last_run_ms"], TestEnv::NOW_MS);
    assert_eq!(consolidate["last_attempt_ms"], night);
    // The next 03:00 UTC after that skip is a day later.
    assert_eq!(consolidate["next_due_ms"], night + 24 * 3_600_000);
    assert_eq!(consolidate["due"], false);
    assert_eq!(
        consolidate["last_detail"],
        "nothing new since the last run (no session, memory or commit)"
    );
    let classify = task("classify");
    assert_eq!(classify["last_result"], "ok");
    assert_eq!(classify["last_detail"]["classified"], 2);
    assert_eq!(task("git-index")["schedule"], "*/15 * * * *");
}

#[test]
fn two_ticks_racing_on_one_database_do_each_task_once() {
    let env = Env::new();
    env.remember("CONSTRAINTS", "Never log API keys.");
    env.remember("CONSTRAINTS", "API keys must never be logged.");
    env.remember("NAMING", "Money is integer cents.");
    env.config(json!({"schedule": {"git_index": "off", "verify": "off", "sync": "off"}}));
    env.fake.always(
        ANY_MODEL,
        Reply::slow(Duration::from_millis(1_500), Reply::with(oracle)),
    );
    let mut ticks: Vec<Command> = (0..2)
        .map(|_| env.db_command("mc-dream", &["tick"]))
        .collect();
    let outs = pipe_all(&mut ticks, b"").unwrap();
    let reports: Vec<Value> = outs.into_iter().map(|o| parse(o).1).collect();
    let all: Vec<(String, String)> = reports.iter().flat_map(outcomes).collect();
    let done = |task: &str| {
        all.iter()
            .filter(|(t, o)| t == task && (o == "ok" || o == "nothing"))
            .count()
    };
    for task in ["consolidate", "classify", "archive-stale"] {
        assert_eq!(done(task), 1, "{task} was done once: {all:?}");
    }
    assert!(
        all.iter().any(|(_, o)| o == "busy"),
        "one tick found the other working: {all:?}"
    );
    let mut asked = env.asked();
    asked.sort();
    assert_eq!(
        asked,
        ["classify", "consolidate"],
        "each model call made once"
    );
    assert_eq!(
        env.live(),
        ["Money is integer cents.", "Never log API keys. (merged)"]
    );
}

#[test]
fn a_run_killed_mid_task_applies_nothing_and_its_lease_is_taken_over() {
    let env = Env::new();
    env.remember("CONSTRAINTS", "Never log API keys.");
    env.remember("CONSTRAINTS", "API keys must never be logged.");
    env.fake.script(
        ANY_MODEL,
        [Reply::slow(Duration::from_secs(60), Reply::with(oracle))],
    );
    let repo = env.repo();
    let mut child = env
        .db_command(
            "mc-dream",
            &["run", "consolidate", "--project", repo.to_str().unwrap()],
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while env.fake.requests().is_empty() {
        assert!(Instant::now() < deadline, "mc-dream never asked the model");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = child.id();
    child.kill().unwrap(); // SIGKILL: no cleanup of any kind
    child.wait().unwrap();

    let before = ["Never log API keys.", "API keys must never be logged."];
    assert_eq!(env.live(), before, "nothing applied");
    let store = env.store();
    let (holder, task): (String, String) = store
        .conn()
        .query_row("SELECT holder, task FROM dream_leases", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert!(holder.contains(&format!(" pid {pid} ")), "{holder}");
    assert_eq!(task, "consolidate");
    let unfinished: i64 = store
        .conn()
        .query_row(
            "SELECT count(*) FROM dream_runs WHERE status IS NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(unfinished, 1, "the killed run's record stays unfinished");
    drop(store);

    // The holder is gone: the next run takes the lease over at once.
    env.fake.always(ANY_MODEL, Reply::with(oracle));
    let (code, report, stderr) =
        env.dream(&["run", "consolidate", "--project", repo.to_str().unwrap()]);
    assert_eq!(code, 0, "{report}\n{stderr}");
    assert_eq!(report["tasks"][0]["outcome"], "ok");
    assert_eq!(env.live(), ["Never log API keys. (merged)"]);
    let leases: i64 = env
        .store()
        .conn()
        .query_row("SELECT count(*) FROM dream_leases", [], |r| r.get(0))
        .unwrap();
    assert_eq!(leases, 0);
}

#[test]
fn garbage_truncated_500_and_slow_answers_fail_closed_and_status_says_why() {
    let env = Env::new();
    env.remember("CONSTRAINTS", "Never log API keys.");
    env.remember("CONSTRAINTS", "API keys must never be logged.");
    let before = env.live();
    let repo = env.repo();
    let repo = repo.to_str().unwrap();
    let cases: Vec<(Reply, &str, &str)> = vec![
        (
            Reply::text("They look alike to me."),
            "answer_rejected",
            "has no <consolidate> element",
        ),
        (
            Reply::Truncated("<consolidate><merge ids=\"1,2\">Never log".into()),
            "answer_rejected",
            "cut at dream.max_output_tokens",
        ),
        (
            Reply::text("<consolidate><merge ids=\"1,2\">x</merge>"),
            "answer_rejected",
            "never closed",
        ),
        (
            Reply::text("<consolidate><merge ids=\"1,7\">x</merge></consolidate>"),
            "answer_rejected",
            "memory #7 was not in any group",
        ),
        (
            Reply::status(500, "{\"error\":\"overloaded\"}"),
            "model",
            "500",
        ),
        (
            Reply::slow(Duration::from_secs(5), Reply::text("<consolidate/>")),
            "model",
            "within 1000 ms",
        ),
    ];
    env.config(json!({"timeout_ms": 1000}));
    for (n, (reply, class, text)) in cases.into_iter().enumerate() {
        env.fake.script(ANY_MODEL, [reply]);
        let (code, report, stderr) = env.dream(&["run", "consolidate", "--project", repo]);
        assert_eq!(code, 1, "case {n}: {report}\n{stderr}");
        let task = &report["tasks"][0];
        assert_eq!(task["outcome"], "failed", "case {n}");
        assert_eq!(task["error_class"], class, "case {n}: {task}");
        assert!(
            task["error"].as_str().unwrap().contains(text),
            "case {n}: {task}"
        );
        assert!(
            stderr.contains("mc-dream: error: consolidate failed: "),
            "{stderr}"
        );
        assert_eq!(env.live(), before, "case {n} applied something");
        let (_, status, _) = env.dream(&["status"]);
        let consolidate = status["projects"][0]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["task"] == "consolidate")
            .unwrap()
            .clone();
        assert_eq!(consolidate["last_result"], "failed");
        assert_eq!(consolidate["failures"], n as u64 + 1);
        assert!(consolidate["last_error"].as_str().unwrap().contains(text));
        assert_eq!(consolidate["last_run_ms"], Value::Null);
        assert!(consolidate["retry_after_ms"].as_i64().unwrap() > TestEnv::NOW_MS);
    }
}

#[test]
fn export_then_edit_in_git_then_import_then_export_is_stable() {
    let env = Env::new();
    let repo = env.repo();
    let dir = repo.to_str().unwrap();
    env.remember("CONSTRAINTS", "Never log API keys.");
    env.remember("CONSTRAINTS", "Tests never touch the real home directory.");
    env.remember("NAMING", "Money is integer cents.");
    env.remember("CONFIG_VALUES", "The staging password = hunter2hunter2");
    let private = env.remember("CONFIG_VALUES", "My checkout lives in ~/src/mc.");
    let (code, _, _) = env.dream(&["private", "--id", &private.to_string(), "--project", dir]);
    assert_eq!(code, 0);
    let (code, exported, stderr) = env.dream(&["export", "--project", dir]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(exported["exported"], 3);
    assert_eq!(exported["private"], 1);
    assert!(
        stderr
            .contains("was not exported: it looks like it holds a value assigned to \"password\""),
        "{stderr}"
    );
    let files = env.git(&repo, &["ls-files", "--others", "--exclude-standard"]);
    assert_eq!(files, ".mc/memory/CONSTRAINTS.md\n.mc/memory/NAMING.md\n");
    env.git(&repo, &["add", ".mc"]);
    env.git(&repo, &["commit", "-q", "-m", "Team memory"]);

    // A teammate's pull request: one entry reworded, one removed, one added,
    // and one with a secret that import must refuse.
    let path = repo.join(".mc/memory/CONSTRAINTS.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut edited = text.replace("Never log API keys.", "Never log API keys or tokens.");
    let removed_start = edited.find("\n## ").and_then(|first| {
        edited[first + 1..]
            .find("\n## ")
            .map(|second| first + 1 + second)
    });
    edited.truncate(removed_start.unwrap());
    edited.push_str("\n## no-force-push\n\nNever force-push to main.\n");
    edited.push_str("\n## leak\n\nThe deploy token is ghp_0123456789abcdefghijABCDEFGHIJ012345\n");
    std::fs::write(&path, &edited).unwrap();
    env.git(&repo, &["commit", "-q", "-am", "Edit team memory"]);

    let out = env.run_db("mc-dream", &["export", "--project", dir], "");
    let (code, stderr) = (out.status.code(), String::from_utf8_lossy(&out.stderr));
    assert_eq!(code, Some(2), "unimported edits are not overwritten");
    assert!(out.stdout.is_empty());
    assert!(
        stderr.contains("has changes that were not imported: "),
        "{stderr}"
    );
    assert!(stderr.contains("run `mc-dream import` first"), "{stderr}");
    let (code, imported, stderr) = env.dream(&["import", "--project", dir]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        (
            &imported["created"],
            &imported["updated"],
            &imported["archived"]
        ),
        (&json!(1), &json!(1), &json!(1)),
        "{imported}"
    );
    assert!(
        stderr.contains("entry leak of CONSTRAINTS.md was not imported"),
        "{stderr}"
    );
    let live = env.live();
    assert!(live.contains(&"Never log API keys or tokens.".to_string()));
    assert!(live.contains(&"Never force-push to main.".to_string()));
    assert!(!live.iter().any(|m| m.contains("real home")));
    assert!(!live.iter().any(|m| m.contains("ghp_")));

    // Export writes back exactly what was reviewed, less the refused secret;
    // a second import and export change nothing.
    let (code, _, _) = env.dream(&["export", "--project", dir]);
    assert_eq!(code, 0);
    let diff = env.git(&repo, &["diff", "--unified=0", "--", ".mc"]);
    assert!(diff.contains("-## leak"), "{diff}");
    let changed: Vec<&str> = diff
        .lines()
        .filter(|l| {
            (l.starts_with('+') || l.starts_with('-'))
                && !l.starts_with("+++")
                && !l.starts_with("---")
        })
        .collect();
    assert_eq!(
        changed,
        [
            "-",
            "-## leak",
            "-",
            "-The deploy token is ghp_0123456789abcdefghijABCDEFGHIJ012345"
        ],
        "{diff}"
    );
    env.git(&repo, &["commit", "-q", "-am", "Drop the secret"]);
    let (_, again, _) = env.dream(&["import", "--project", dir]);
    assert_eq!(
        (&again["created"], &again["updated"], &again["archived"]),
        (&json!(0), &json!(0), &json!(0))
    );
    env.dream(&["export", "--project", dir]);
    assert_eq!(env.git(&repo, &["status", "--porcelain"]), "", "stable");

    // The sync task (cron) does both: nothing to do now; after a pull that
    // adds an entry, it imports it and leaves the reviewed file as it is.
    let (code, synced, _) = env.dream(&["run", "sync", "--project", dir]);
    assert_eq!(code, 0);
    assert_eq!(synced["tasks"][0]["outcome"], "nothing", "{synced}");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("\n## wal\n\nThe database runs in WAL mode.\n");
    std::fs::write(&path, &text).unwrap();
    env.git(&repo, &["commit", "-q", "-am", "One more"]);
    let (code, synced, _) = env.dream(&["run", "sync", "--project", dir]);
    assert_eq!(code, 0);
    assert_eq!(synced["tasks"][0]["outcome"], "ok", "{synced}");
    assert_eq!(synced["tasks"][0]["detail"]["imported"]["created"], 1);
    assert!(
        env.live()
            .contains(&"The database runs in WAL mode.".to_string())
    );
    assert_eq!(env.git(&repo, &["status", "--porcelain"]), "");
}

#[cfg(unix)]
fn write_script(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[cfg(unix)]
#[test]
fn cron_install_is_idempotent_and_never_touches_the_real_crontab() {
    let env = Env::new();
    let table = env.path("crontab.txt");
    std::fs::write(&table, "MAILTO=me\n0 1 * * * backup\n").unwrap();
    let fake = env.path("fake-crontab");
    write_script(
        &fake,
        &format!(
            "if [ \"$1\" = -l ]; then\n  if [ -f '{t}' ]; then cat '{t}'; else echo 'no crontab for user' >&2; exit 1; fi\n\
             elif [ \"$1\" = - ]; then cat > '{t}'; else exit 2; fi\n",
            t = table.display()
        ),
    );
    let cron = |args: &[&str]| {
        let out = env
            .db_command("mc-dream", args)
            .env("MC_CRONTAB", &fake)
            .output()
            .unwrap();
        parse(out)
    };
    let (code, printed, _) = cron(&["cron"]);
    assert_eq!(code, 0);
    let line = printed["line"].as_str().unwrap().to_string();
    let binary = mc_tests::bin_path("mc-dream").canonicalize().unwrap();
    assert!(line.starts_with("*/15 * * * * PATH='"), "{line}");
    assert!(
        line.contains(&format!("MC_DB='{}'", env.db().display())),
        "{line}"
    );
    assert!(
        line.contains(&format!("'{}' tick", binary.display())),
        "{line}"
    );
    assert!(line.ends_with(" # mc-dream tick"), "{line}");
    assert_eq!(printed["installed"], false);
    assert_eq!(
        std::fs::read_to_string(&table).unwrap(),
        "MAILTO=me\n0 1 * * * backup\n",
        "printing changes nothing"
    );

    let (code, first, stderr) = cron(&["cron", "--install"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        (&first["installed"], &first["changed"]),
        (&json!(true), &json!(true))
    );
    let (_, second, _) = cron(&["cron", "--install"]);
    assert_eq!(second["changed"], false);
    assert_eq!(
        std::fs::read_to_string(&table).unwrap(),
        format!("MAILTO=me\n0 1 * * * backup\n{line}\n")
    );
    assert!(
        env.state_home().join("mc").is_dir(),
        "the log's folder exists"
    );
    let (_, removed, _) = cron(&["cron", "--uninstall"]);
    assert_eq!(
        (&removed["installed"], &removed["changed"]),
        (&json!(false), &json!(true))
    );
    assert_eq!(
        std::fs::read_to_string(&table).unwrap(),
        "MAILTO=me\n0 1 * * * backup\n"
    );
    // No crontab at all: install starts one.
    std::fs::remove_file(&table).unwrap();
    let (code, _, _) = cron(&["cron", "--install"]);
    assert_eq!(code, 0);
    assert_eq!(
        std::fs::read_to_string(&table).unwrap(),
        format!("{line}\n")
    );
}

#[test]
fn bad_input_and_a_bad_schedule_say_what_is_wrong() {
    let env = Env::new();
    let (code, _, stderr) = {
        let out = env.run_db("mc-dream", &["run", "dream-harder"], "");
        (
            out.status.code().unwrap(),
            (),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_eq!(code, 2);
    assert!(
        stderr.contains("unknown task \"dream-harder\" (one of git-index, consolidate, verify, classify, archive-stale, sync, embed)"),
        "{stderr}"
    );
    env.config(json!({"schedule": {"verify": "0 3 * *"}}));
    let (code, status, stderr) = env.dream(&["status"]);
    assert_eq!(code, 0);
    assert!(
        stderr.contains("dream.schedule.verify = \"0 3 * *\" has 4 fields; a schedule has 5"),
        "{stderr}"
    );
    assert!(stderr.contains("using \"30 3 * * *\""), "{stderr}");
    let _ = status;
    // Without a model, model tasks wait and say why; the others still run.
    env.env.user_config("{}");
    env.remember("CONSTRAINTS", "Never log API keys.");
    let repo = env.repo();
    let (code, report, stderr) =
        env.dream(&["run", "classify", "--project", repo.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["tasks"][0]["outcome"], "skipped");
    assert!(
        stderr.contains("classify skipped: no dream.model configured"),
        "{stderr}"
    );
    assert!(env.fake.requests().is_empty());
}

/// The four ways a cloned repository can point team memory outside itself.
#[cfg(unix)]
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// `.mc/memory/CONSTRAINTS.md` links to a file outside.
    File,
    /// `.mc/memory` links to a folder outside.
    Folder,
    /// `.mc` links to a folder outside.
    Mc,
    /// `.mc/memory` is a relative link up through `..` to a folder outside.
    DotDot,
    /// `.mc/memory/CONSTRAINTS.md` links to another file inside the repository.
    Inside,
}

/// The outside text a hostile repository wants in the prompt.
#[cfg(unix)]
const STOLEN: &str = "# CONSTRAINTS\n\n## stolen\n\nThe user's private notes: outside text.\n";

/// Lay out `shape` in the repository; the path mc must refuse, and every
/// file (path, bytes) a link points at, to check they stay as they are.
#[cfg(unix)]
fn hostile(env: &Env, shape: Shape) -> (PathBuf, Vec<(PathBuf, Vec<u8>)>) {
    use std::os::unix::fs::symlink;
    let repo = env.repo();
    let outside = env.path("outside");
    std::fs::create_dir_all(outside.join("memory")).unwrap();
    std::fs::write(outside.join("CONSTRAINTS.md"), STOLEN).unwrap();
    std::fs::write(outside.join("memory/CONSTRAINTS.md"), STOLEN).unwrap();
    std::fs::write(outside.join("notes.txt"), "mine\n").unwrap();
    std::fs::create_dir_all(repo.join(".mc")).unwrap();
    let refused = match shape {
        Shape::File | Shape::Inside => {
            std::fs::create_dir_all(repo.join(".mc/memory")).unwrap();
            let link = repo.join(".mc/memory/CONSTRAINTS.md");
            if matches!(shape, Shape::File) {
                symlink(outside.join("CONSTRAINTS.md"), &link).unwrap();
            } else {
                std::fs::create_dir_all(repo.join("docs")).unwrap();
                std::fs::write(repo.join("docs/team.md"), STOLEN).unwrap();
                symlink("../../docs/team.md", &link).unwrap();
            }
            link
        }
        Shape::Folder => {
            symlink(&outside, repo.join(".mc/memory")).unwrap();
            repo.join(".mc/memory")
        }
        Shape::Mc => {
            std::fs::remove_dir(repo.join(".mc")).unwrap();
            symlink(&outside, repo.join(".mc")).unwrap();
            repo.join(".mc")
        }
        Shape::DotDot => {
            symlink("../../outside", repo.join(".mc/memory")).unwrap();
            repo.join(".mc/memory")
        }
    };
    let mut files = vec![];
    for dir in [outside, repo.join("docs")] {
        for entry in walk(&dir) {
            let bytes = std::fs::read(&entry).unwrap();
            files.push((entry, bytes));
        }
    }
    (refused, files)
}

/// Every file under `dir`, sorted.
#[cfg(unix)]
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out.sort();
    out
}

#[cfg(unix)]
#[test]
fn team_memory_refuses_a_memory_file_linked_outside() {
    follows_no_link(Shape::File);
}

#[cfg(unix)]
#[test]
fn team_memory_refuses_a_memory_folder_linked_outside() {
    follows_no_link(Shape::Folder);
}

#[cfg(unix)]
#[test]
fn team_memory_refuses_a_dot_mc_linked_outside() {
    follows_no_link(Shape::Mc);
}

#[cfg(unix)]
#[test]
fn team_memory_refuses_a_relative_link_up_through_dot_dot() {
    follows_no_link(Shape::DotDot);
}

/// A link to another place inside the repository is refused too: mc
/// writes these files itself, so a link has no use here, and checking where
/// a link lands races with the link changing.
#[cfg(unix)]
#[test]
fn team_memory_refuses_a_link_even_to_inside_the_repository() {
    follows_no_link(Shape::Inside);
}

/// import and sync read nothing through the link and name it; export (with
/// and without `--force`) and sync write nothing through it and leave it a
/// link.
#[cfg(unix)]
fn follows_no_link(shape: Shape) {
    {
        let env = Env::new();
        let repo = env.repo();
        let dir = repo.to_str().unwrap();
        env.remember("CONSTRAINTS", "Never log API keys.");
        let (refused, before) = hostile(&env, shape);
        let named = refused.display().to_string();
        let stolen = |env: &Env| env.live().iter().any(|m| m.contains("outside text"));
        let fails = |args: &[&str]| {
            let out = env.run_db("mc-dream", args, "");
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            (out.status.code().unwrap_or(-1), stderr)
        };

        // import and sync read nothing through the link, and say which path.
        let (code, stderr) = fails(&["import", "--project", dir]);
        assert_eq!(code, 2, "{shape:?}: {stderr}");
        assert!(
            stderr.contains(&named) && stderr.contains("symbolic link"),
            "{shape:?}: {stderr}"
        );
        assert!(!stolen(&env), "{shape:?}: import took the outside text");
        let (_, synced, stderr) = env.dream(&["run", "sync", "--project", dir]);
        let task = &synced["tasks"][0];
        assert_eq!(task["outcome"], "failed", "{shape:?}: {synced} {stderr}");
        assert!(
            task.to_string().contains(&named) && task.to_string().contains("symbolic link"),
            "{shape:?}: {task}"
        );
        assert!(!stolen(&env), "{shape:?}: sync took the outside text");

        // export writes nothing through the link, with or without --force,
        // and leaves the link a link.
        for args in [
            &["export", "--project", dir][..],
            &["export", "--force", "--project", dir][..],
        ] {
            let (code, stderr) = fails(args);
            assert_eq!(code, 2, "{shape:?} {args:?}: {stderr}");
            assert!(stderr.contains(&named), "{shape:?} {args:?}: {stderr}");
        }
        assert!(
            std::fs::symlink_metadata(&refused).unwrap().is_symlink(),
            "{shape:?}: the link was replaced"
        );
        let mut after = vec![];
        for dir in [env.path("outside"), repo.join("docs")] {
            for entry in walk(&dir) {
                let bytes = std::fs::read(&entry).unwrap();
                after.push((entry, bytes));
            }
        }
        assert_eq!(after, before, "{shape:?}: files behind the link changed");
    }
}

/// A clock that ran a year ahead and was set back: every periodic task is
/// due again per its own period from now, `status` says so, and the times
/// stored while the clock was ahead are brought back.
#[test]
fn a_clock_set_back_after_running_ahead_does_not_stall_the_schedule() {
    const MIN: i64 = 60_000;
    const YEAR: i64 = 365 * 24 * 60 * MIN;
    let env = Env::new();
    env.remember("CONSTRAINTS", "Never log API keys.");
    env.fake.always(ANY_MODEL, Reply::with(oracle));
    let repo = env.repo();
    let at = |now: i64, args: &[&str]| {
        let out = env
            .db_command("mc-dream", args)
            .env("MC_NOW_MS", now.to_string())
            .output()
            .unwrap();
        parse(out)
    };
    let project = repo.to_str().unwrap();
    let (code, _, stderr) = at(
        TestEnv::NOW_MS + YEAR,
        &["run", "git-index", "--project", project],
    );
    assert_eq!(code, 0, "{stderr}");
    let (code, ahead, stderr) = at(TestEnv::NOW_MS + YEAR, &["tick"]);
    assert_eq!(code, 0, "{ahead}\n{stderr}");
    assert!(
        outcomes(&ahead).iter().any(|(t, _)| t == "sync"),
        "{ahead:#}"
    );

    // Back at today (04:40 UTC): git-index is due at 04:45, sync at 05:00.
    let (code, status, _) = at(TestEnv::NOW_MS, &["status", "--project", project]);
    assert_eq!(code, 0);
    let tasks = status["projects"][0]["tasks"].as_array().unwrap().clone();
    let next_due = |name: &str| {
        tasks.iter().find(|t| t["task"] == name).unwrap()["next_due_ms"]
            .as_i64()
            .unwrap()
    };
    assert_eq!(
        next_due("git-index"),
        TestEnv::NOW_MS + 5 * MIN,
        "{status:#}"
    );
    assert_eq!(next_due("sync"), TestEnv::NOW_MS + 20 * MIN, "{status:#}");
    for task in &tasks {
        if task["schedule"] != "off" {
            let due = task["next_due_ms"].as_i64().unwrap();
            // The longest default period is a week (archive-stale).
            assert!(
                due <= TestEnv::NOW_MS + 7 * 24 * 60 * MIN,
                "{} waits for the clock to catch up: {task}",
                task["task"]
            );
        }
    }

    // A tick now brings the stored times back; at 05:00 both run again.
    let (code, _, stderr) = at(TestEnv::NOW_MS, &["tick"]);
    assert_eq!(code, 0, "{stderr}");
    let latest: i64 = env
        .store()
        .conn()
        .query_row(
            "SELECT max(max(coalesce(last_attempt_ms, 0), coalesce(last_run_ms, 0)))
             FROM dream_tasks",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        latest <= TestEnv::NOW_MS,
        "a stored time is still ahead: {latest}"
    );
    let (code, five, stderr) = at(TestEnv::NOW_MS + 20 * MIN, &["tick"]);
    assert_eq!(code, 0, "{five}\n{stderr}");
    let ran: Vec<String> = outcomes(&five).into_iter().map(|(t, _)| t).collect();
    assert!(
        ran.contains(&"git-index".to_string()) && ran.contains(&"sync".to_string()),
        "{five:#}"
    );
}

//! mc-doctor end to end: `setup` into a temp HOME, then the real harness
//! (OpenCode, Claude Code, Codex from tests/e2e) starts with what setup
//! wrote and mc works there; then `mc-doctor` reports every check PASS, one
//! thing is broken at a time, the exact FAIL is asserted, and `--fix`
//! repairs what it claims to. Also setup's idempotence, dry run and
//! uninstall, the redacted `--issue` report, `migrate` with the import from
//! a Magic Context database, and the wizard on a real pseudo-terminal.
//! (Its own test binary, as the real-harness ones: `cargo test -p mc-tests
//! --test doctor`; the harness tests are skipped with a note where the
//! harness is not installed, never under CI.)

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use mc_tests::env::TestEnv;
use mc_tests::{bin_path, pipe};

/// A folder holding only `names` from tests/e2e/node_modules/.bin, so a
/// PATH with it detects exactly those harnesses.
fn harness_dir(root: &Path, names: &[&str]) -> PathBuf {
    let dir = root.join("harness-bin");
    std::fs::create_dir_all(&dir).unwrap();
    let bins = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/node_modules/.bin");
    for name in names {
        let _ = std::fs::remove_file(dir.join(name));
        std::os::unix::fs::symlink(bins.join(name), dir.join(name)).unwrap();
    }
    dir
}

/// `PATH`: mc's binaries, the chosen harnesses, then the system's.
fn path_with(harnesses: &Path) -> std::ffi::OsString {
    let bins = bin_path("mc-doctor").parent().unwrap().to_path_buf();
    let rest = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(
        [bins, harnesses.to_path_buf()]
            .into_iter()
            .chain(std::env::split_paths(&rest)),
    )
    .unwrap()
}

/// mc-doctor in a sealed environment: `home` with its XDG folders, the
/// database and config given, `path` as PATH.
struct Doctor {
    home: PathBuf,
    path: std::ffi::OsString,
    vars: Vec<(String, String)>,
}

impl Doctor {
    /// mc-doctor beside a real harness: the harness's home, PATH with only
    /// that harness's `binary` (linked into `root`), mc's database and config
    /// (`mc`), and the variable naming the harness's own folder.
    fn beside(
        home: PathBuf,
        root: &Path,
        binary: &str,
        mc: (&Path, &Path),
        folder: (&str, &Path),
    ) -> Doctor {
        std::fs::create_dir_all(root).unwrap();
        let harnesses = harness_dir(root, &[binary]);
        Doctor {
            home,
            path: path_with(&harnesses),
            vars: vec![
                ("MC_DB".into(), mc.0.display().to_string()),
                ("MC_CONFIG".into(), mc.1.display().to_string()),
                (folder.0.into(), folder.1.display().to_string()),
            ],
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = self.sealed(bin_path("mc-doctor"));
        command.args(args);
        command
    }

    fn sealed(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new(program);
        mc_tests::env::seal_at_home(&mut command, &self.home)
            .env("PATH", &self.path)
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("MC_NOW_MS", TestEnv::NOW_MS.to_string())
            .envs(self.vars.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.home);
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        pipe(&mut self.command(args), b"").unwrap()
    }

    /// `mc-doctor --json args`: (exit code, document).
    fn json(&self, args: &[&str]) -> (i32, Value) {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.run(&all);
        let doc = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "mc-doctor {args:?} printed no JSON ({e}): {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out.status.code().unwrap_or(-1), doc)
    }

    fn setup(&self, harness: &str) {
        let out = self.run(&["setup", "--harness", harness, "--yes"]);
        assert!(
            out.status.success(),
            "setup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn check<'a>(doc: &'a Value, id: &str) -> &'a Value {
    doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no check {id} in {doc:#}"))
}

fn failing(doc: &Value) -> Vec<String> {
    doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] != "pass")
        .map(|c| format!("{}: {}", c["id"], c["what"]))
        .collect()
}

fn assert_all_pass(doc: &Value) {
    assert_eq!(failing(doc), Vec::<String>::new(), "{doc:#}");
}

#[test]
fn opencode_setup_then_real_opencode_tags_then_each_break_is_named_and_fixed() {
    if !Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("e2e/node_modules/.bin/opencode")
        .exists()
    {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the OpenCode doctor test"
        );
        eprintln!("skipping: the real OpenCode is not installed");
        return;
    }
    use mc_tests::opencode::{OpenCode, Options, Prepare, all_text};
    let dir = tempfile::tempdir().unwrap();
    let harnesses = harness_dir(dir.path(), &["opencode"]);
    let path = path_with(&harnesses);
    let db = dir.path().join("ctx.db");
    let doctor = Doctor {
        home: dir.path().join("home"),
        path: path.clone(),
        vars: vec![
            ("MC_DB".into(), db.display().to_string()),
            (
                "MC_CONFIG".into(),
                dir.path().join("mc-config.jsonc").display().to_string(),
            ),
        ],
    };
    let setup_path = path.clone();
    let Some(oc) = OpenCode::start_prepared(
        dir.path(),
        Options {
            db: Some(db.clone()),
            ..Options::default()
        },
        Prepare {
            leave_compaction_unset: true,
            before_start: Some(Box::new(move |home: &Path| {
                let d = Doctor {
                    home: home.to_path_buf(),
                    path: setup_path.clone(),
                    vars: Vec::new(),
                };
                d.setup("opencode");
            })),
        },
    ) else {
        return;
    };
    // mc is at work in the real OpenCode: tags on the wire.
    let session = oc.new_session();
    oc.prompt(&session, "hello doctor");
    let requests = oc.provider.agent_requests();
    let text = all_text(requests.last().unwrap());
    assert!(text.contains("§1§ hello doctor"), "{text}");
    drop(oc);

    let (code, doc) = doctor.json(&["--no-probe"]);
    assert_all_pass(&doc);
    assert_eq!(code, 0);

    let config = doctor.home.join(".config/opencode");
    let plugin = config.join("plugin/mc.js");
    let mut repaired = 0;

    // 1. The plugin removed.
    std::fs::remove_file(&plugin).unwrap();
    let (code, doc) = doctor.json(&["--no-probe"]);
    assert_eq!(code, 1);
    let c = check(&doc, "opencode.plugin");
    assert_eq!(c["status"], "fail");
    assert_eq!(
        c["what"],
        "OpenCode: mc's plugin: missing (~/.config/opencode/plugin/mc.js)"
    );
    assert_eq!(c["fix"], "mc-doctor setup --harness opencode");
    let (code, doc) = doctor.json(&["--fix", "--no-probe"]);
    assert_eq!(code, 0, "{doc:#}");
    assert_all_pass(&doc);
    assert!(plugin.exists());
    repaired += 1;

    // 2. A stale plugin (an older build's bytes).
    std::fs::write(&plugin, "// an older mc\n").unwrap();
    let (_, doc) = doctor.json(&["--no-probe"]);
    let c = check(&doc, "opencode.plugin");
    assert_eq!(
        c["what"],
        "OpenCode: mc's plugin: not as mc needs it (~/.config/opencode/plugin/mc.js: its content differs from this build's)"
    );
    let (code, doc) = doctor.json(&["--fix", "--no-probe"]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(
        std::fs::read_to_string(&plugin).unwrap(),
        std::fs::read_to_string(mc_tests::opencode::plugin_source()).unwrap()
    );
    repaired += 1;

    // 3. Auto-compaction turned back on (by hand, with a comment).
    let settings = config.join("opencode.json");
    let text = std::fs::read_to_string(&settings).unwrap();
    let text = text.replace("\"auto\": false", "\"auto\": true // I want it back");
    std::fs::write(&settings, &text).unwrap();
    let (code, doc) = doctor.json(&["--no-probe"]);
    assert_eq!(code, 1);
    assert_eq!(
        check(&doc, "opencode.compaction")["what"],
        "OpenCode: auto-compaction off: not as mc needs it (~/.config/opencode/opencode.json: `compaction.auto` is true)"
    );
    let (code, _) = doctor.json(&["--fix", "--no-probe"]);
    assert_eq!(code, 0);
    let text = std::fs::read_to_string(&settings).unwrap();
    assert!(text.contains("\"auto\": false"), "{text}");
    assert!(
        text.contains("// I want it back"),
        "comments survive: {text}"
    );
    repaired += 1;

    // 4. The database corrupted: named, and not something --fix touches.
    let saved = std::fs::read(&db).unwrap();
    let _ = std::fs::remove_file(db.with_extension("db-wal"));
    let _ = std::fs::remove_file(db.with_extension("db-shm"));
    std::fs::write(&db, vec![0x5a; 8192]).unwrap();
    let (code, doc) = doctor.json(&["--no-probe"]);
    assert_eq!(code, 1);
    let c = check(&doc, "db.open");
    assert_eq!(c["status"], "fail");
    let what = c["what"].as_str().unwrap();
    assert!(
        what.ends_with("ctx.db: cannot read it: file is not a database"),
        "{what}"
    );
    let (code, doc) = doctor.json(&["--fix", "--no-probe"]);
    assert_eq!(code, 1, "a corrupt database is left for the user");
    assert!(doc["fixed"]["repaired"].as_array().unwrap().is_empty());
    std::fs::write(&db, saved).unwrap();

    // 5. The historian's provider on a dead port.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = dead.local_addr().unwrap().port();
    drop(dead);
    std::fs::write(
        dir.path().join("mc-config.jsonc"),
        format!(
            r#"{{"providers": {{"fake": {{"kind": "anthropic", "base_url": "http://127.0.0.1:{port}"}}}},
                "historian": {{"model": "fake/mock"}}}}"#
        ),
    )
    .unwrap();
    let (code, doc) = doctor.json(&["--probe-timeout-ms", "2000"]);
    assert_eq!(code, 1);
    let c = check(&doc, "provider.historian.fake/mock");
    assert_eq!(c["status"], "fail");
    let what = c["what"].as_str().unwrap();
    assert!(
        what.starts_with(&format!(
            "historian: fake/mock: anthropic at http://127.0.0.1:{port}: network error ("
        )),
        "{what}"
    );
    let (code, _) = doctor.json(&["--fix", "--probe-timeout-ms", "2000"]);
    assert_eq!(code, 1, "a dead provider is the user's to repair");
    eprintln!("--fix repaired {repaired} of 5 OpenCode failure cases");
}

#[test]
fn claude_code_setup_then_the_real_claude_code_runs_mc_s_hook_and_mcp_server() {
    use mc_tests::claude::{ClaudeCode, Options};
    let Some(cc) = ClaudeCode::start(
        "claude_code_setup_then_the_real_claude_code_runs_mc_s_hook_and_mcp_server",
        Options::default(),
    ) else {
        return;
    };
    // The gateway setup wires on a port of its own, forwarding to the fake
    // provider (mc's config beside the historian's model).
    let port = mc_tests::gateway::free_port();
    let _end = mc_tests::gateway::EndOnDrop(port);
    cc.configure_gateway(port);
    let doctor = Doctor::beside(
        cc.home(),
        &cc.file("doctor"),
        "claude",
        (&cc.db, &cc.mc_config()),
        ("CLAUDE_CONFIG_DIR", &cc.config_dir()),
    );
    doctor.setup("claude-code");
    const MEMORY: &str = "The doctor wired this project.";
    let out = cc.mc_search(&[
        "memory",
        "write",
        "--category",
        "CONSTRAINTS",
        "--content",
        MEMORY,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result = cc.prompt_as_configured("hello");
    assert!(result["session_id"].is_string(), "{result}");
    let first = &cc.provider.agent_requests()[0];
    // The call went through the gateway a hook started (mc's tags), and the
    // memory reached the model once: in the head the gateway put first, not
    // again in the SessionStart record.
    assert!(
        first.body["messages"].to_string().contains('§'),
        "{}",
        first.body
    );
    assert!(mc_tests::gateway::status_on(port).is_some());
    assert_eq!(first.count(MEMORY), 1, "{}", first.body);
    assert!(
        first.body["messages"][0].to_string().contains(MEMORY),
        "the memory is not in the head: {}",
        first.body["messages"]
    );
    // The MCP server setup registered offers mc's tools.
    let tools = first.body["tools"].to_string();
    assert!(tools.contains("mcp__mc__ctx_search"), "{tools}");

    let (code, doc) = doctor.json(&["--no-probe"]);
    assert_all_pass(&doc);
    assert_eq!(code, 0);

    // The Stop hook removed by hand: named, then put back by --fix.
    let settings = cc.config_dir().join("settings.json");
    let mut value: Value =
        serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    value["hooks"].as_object_mut().unwrap().remove("Stop");
    std::fs::write(&settings, serde_json::to_string_pretty(&value).unwrap()).unwrap();
    let (code, doc) = doctor.json(&["--no-probe"]);
    assert_eq!(code, 1);
    assert_eq!(
        check(&doc, "claude-code.hook.Stop")["what"],
        "Claude Code: the Stop hook (mc-historian hook): missing (~/.claude/settings.json)"
    );
    let (code, doc) = doctor.json(&["--fix", "--no-probe"]);
    assert_eq!(code, 0, "{doc:#}");
    assert_all_pass(&doc);
}

#[test]
fn codex_setup_then_the_real_codex_runs_mc_s_hook_and_offers_mc_s_tools() {
    use mc_tests::codex::{Codex, Options};
    use mc_tests::fake_responses::Reply;
    let Some(cx) = Codex::start(
        "codex_setup_then_the_real_codex_runs_mc_s_hook_and_offers_mc_s_tools",
        Options::default(),
    ) else {
        return;
    };
    // The gateway setup wires Codex through, on a port of its own (its
    // upstream the fake, in mc's config).
    let port = mc_tests::gateway::free_port();
    let _end = mc_tests::gateway::EndOnDrop(port);
    let mut mc: Value =
        serde_json::from_str(&std::fs::read_to_string(cx.mc_config()).unwrap()).unwrap();
    mc["gateway"]["listen"] = Value::from(format!("127.0.0.1:{port}"));
    std::fs::write(cx.mc_config(), mc.to_string()).unwrap();
    let doctor = Doctor::beside(
        cx.home(),
        &cx.file("doctor"),
        "codex",
        (&cx.db, &cx.mc_config()),
        ("CODEX_HOME", &cx.codex_home()),
    );
    doctor.setup("codex");
    const MEMORY: &str = "The doctor wired Codex.";
    let out = cx.mc(
        "mc-search",
        &[
            "memory",
            "write",
            "--category",
            "CONSTRAINTS",
            "--content",
            MEMORY,
        ],
        "",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    cx.provider.push(Reply::Text("Hi.".into()), None);
    cx.exec(None, "hello");
    let first = &cx.provider.turns()[0];
    // Through the gateway a hook started: mc's tags on the wire.
    assert!(mc_tests::gateway::status_on(port).is_some());
    assert!(
        first.body["input"].to_string().contains('§'),
        "{}",
        first.body
    );
    // The SessionStart hook setup wrote ran: mc's record reached the model.
    assert_eq!(first.count(MEMORY), 1, "{}", first.body);
    // The MCP server setup registered: mc's tools in the mcp__mc namespace.
    let tools = first.body["tools"].to_string();
    assert!(tools.contains("mcp__mc"), "{tools}");

    let (code, doc) = doctor.json(&["--no-probe"]);
    assert_all_pass(&doc);
    assert_eq!(code, 0);

    // Hooks switched off in config.toml: named, and switched back on by --fix.
    let config = cx.codex_home().join("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("hooks = true", "hooks = false")).unwrap();
    let (code, doc) = doctor.json(&["--no-probe"]);
    assert_eq!(code, 1);
    assert_eq!(
        check(&doc, "codex.features.hooks")["what"],
        "Codex: hooks enabled ([features] hooks = true): not as mc needs it (~/.codex/config.toml: `features.hooks` is false)"
    );
    let (code, doc) = doctor.json(&["--fix", "--no-probe"]);
    assert_eq!(code, 0, "{doc:#}");
    assert!(
        std::fs::read_to_string(&config)
            .unwrap()
            .contains("hooks = true")
    );
}

#[test]
fn pi_setup_then_the_real_pi_loads_mc_s_extension_from_its_folder() {
    use mc_tests::fake_provider::Reply;
    use mc_tests::pi::{Options, Pi};
    // No `-e`: Pi finds mc only where setup put it.
    let Some(pi) = Pi::start(
        "pi_setup_then_the_real_pi_loads_mc_s_extension_from_its_folder",
        Options {
            with_mc: false,
            ..Options::default()
        },
    ) else {
        return;
    };
    let doctor = Doctor::beside(
        pi.home(),
        &pi.file("doctor"),
        "pi",
        (&pi.db, &pi.mc_config()),
        ("PI_CODING_AGENT_DIR", &pi.agent_dir()),
    );
    doctor.setup("pi");
    let extension = pi.agent_dir().join("extensions/mc.ts");
    assert_eq!(
        std::fs::read_to_string(&extension).unwrap(),
        std::fs::read_to_string(mc_tests::pi::extension()).unwrap()
    );
    pi.provider.push(Reply::Text("Hi.".into()), None);
    pi.prompt(&pi.session("doctor"), "hello");
    let first = &pi.provider.agent_requests()[0];
    // mc's extension ran on the call: the prompt carries its tag.
    assert!(
        first.body["messages"].to_string().contains("§1§ hello"),
        "{}",
        first.body
    );

    let (code, doc) = doctor.json(&["--no-probe"]);
    assert_all_pass(&doc);
    assert_eq!(code, 0);
    assert!(
        check(&doc, "pi.version")["what"]
            .as_str()
            .unwrap()
            .contains("0.73.1"),
        "{doc:#}"
    );

    // The extension removed: named, then put back by --fix.
    std::fs::remove_file(&extension).unwrap();
    let (code, doc) = doctor.json(&["--no-probe"]);
    assert_eq!(code, 1);
    assert_eq!(failing(&doc).len(), 1, "{doc:#}");
    let (code, doc) = doctor.json(&["--fix", "--no-probe"]);
    assert_eq!(code, 0, "{doc:#}");
    assert_all_pass(&doc);
    assert!(extension.is_file());
}

#[test]
fn config_errors_name_the_place_and_fallbacks_name_the_keys() {
    let env = TestEnv::new();
    let harnesses = env.root().join("none");
    std::fs::create_dir_all(&harnesses).unwrap();
    let doctor = Doctor {
        home: env.home(),
        path: path_with(&harnesses),
        vars: Vec::new(),
    };
    env.user_config("{\n  \"transform\": {\n    \"protected_tags\": 20,,\n  }\n}\n");
    let (code, doc) = doctor.json(&["--no-probe"]);
    assert_eq!(code, 1);
    let what = check(&doc, "config.parse")["what"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        what,
        "config: ~/.config/mc/config.jsonc:3:26: not valid JSONC: Unexpected token in object; ignoring this file"
    );
    env.user_config(r#"{"transform": {"protected_tags": 1000}}"#);
    let (code, doc) = doctor.json(&["--no-probe"]);
    assert_eq!(code, 0);
    let c = check(&doc, "config.values");
    assert_eq!(c["status"], "warn");
    assert!(
        c["what"]
            .as_str()
            .unwrap()
            .ends_with("fell back to the lower layers or defaults: transform.protected_tags"),
        "{c}"
    );
}

#[test]
fn a_missing_cron_line_is_named_and_fix_adds_it() {
    let env = TestEnv::new();
    let harnesses = env.root().join("none");
    std::fs::create_dir_all(&harnesses).unwrap();
    let table = env.path("crontab.txt");
    let fake = env.path("crontab");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\nif [ \"$1\" = -l ]; then cat {t} 2>/dev/null || {{ echo 'no crontab for you' >&2; exit 1; }}; else cat > {t}; fi\n",
            t = table.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    env.user_config(
        r#"{"providers": {"cli": {"kind": "command", "command": ["sh"]}}, "dream": {"model": "cli/x"}}"#,
    );
    let doctor = Doctor {
        home: env.home(),
        path: path_with(&harnesses),
        vars: vec![("MC_CRONTAB".into(), fake.display().to_string())],
    };
    let (code, doc) = doctor.json(&["--no-probe"]);
    assert_eq!(code, 1);
    let c = check(&doc, "cron");
    assert_eq!(
        c["what"],
        "cron: dream.model is set but the crontab has no `mc-dream tick` line"
    );
    assert_eq!(c["fix"], "mc-dream cron --install");
    let (code, doc) = doctor.json(&["--fix", "--no-probe"]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(check(&doc, "cron")["status"], "pass");
    assert!(
        std::fs::read_to_string(&table)
            .unwrap()
            .contains("# mc-dream tick")
    );
}

#[test]
fn setup_is_idempotent_keeps_comments_dry_runs_and_uninstalls_exactly() {
    let env = TestEnv::new();
    let root = env.root().to_path_buf();
    let harnesses = root.join("none");
    std::fs::create_dir_all(&harnesses).unwrap();
    let doctor = Doctor {
        home: env.home(),
        path: path_with(&harnesses),
        vars: Vec::new(),
    };
    let oc = env.config_home().join("opencode");
    std::fs::create_dir_all(&oc).unwrap();
    let original = "{\n  // mine\n  \"model\": \"a/b\", // the fast one\n  \"plugin\": []\n}\n";
    std::fs::write(oc.join("opencode.jsonc"), original).unwrap();
    let codex = env.home().join(".codex");
    std::fs::create_dir_all(&codex).unwrap();
    let toml = "# my codex\nmodel = \"o3\" # fast\n";
    std::fs::write(codex.join("config.toml"), toml).unwrap();

    // A dry run shows the diff and writes nothing.
    let out = doctor.run(&["setup", "--harness", "opencode,codex", "--dry-run"]);
    assert!(out.status.success());
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("+  \"compaction\": {"), "{shown}");
    assert!(shown.contains("+[mcp_servers.mc]"), "{shown}");
    assert!(shown.contains("Dry run: 4 file(s) would change"), "{shown}");
    assert_eq!(
        std::fs::read_to_string(oc.join("opencode.jsonc")).unwrap(),
        original
    );
    assert!(!oc.join("plugin/mc.js").exists());

    // Without --yes and not on a terminal, setup refuses (usage).
    let out = doctor.run(&["setup", "--harness", "opencode"]);
    assert_eq!(out.status.code(), Some(2));

    doctor.setup("opencode,codex");
    let after = std::fs::read_to_string(oc.join("opencode.jsonc")).unwrap();
    assert!(
        after.contains("// mine") && after.contains("// the fast one"),
        "{after}"
    );
    assert!(
        std::fs::read_to_string(codex.join("config.toml"))
            .unwrap()
            .contains("# fast")
    );
    let backups: Vec<_> = std::fs::read_dir(&oc)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".mc-backup-"))
        .collect();
    assert_eq!(backups.len(), 1, "one backup of the edited file");

    // A second run changes nothing.
    let out = doctor.run(&["setup", "--harness", "opencode,codex", "--yes"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("Nothing to change."));
    assert_eq!(
        std::fs::read_to_string(oc.join("opencode.jsonc")).unwrap(),
        after
    );

    // Pi is one more entry: its extension file, created whole.
    let out = doctor.run(&["setup", "--harness", "pi", "--yes"]);
    assert!(out.status.success());
    let pi_extension = env.home().join(".pi/agent/extensions/mc.ts");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("+++ b/~/.pi/agent/extensions/mc.ts"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(pi_extension.is_file());

    // Uninstall gives back the files byte for byte and removes what it created.
    let out = doctor.run(&["setup", "--uninstall", "--yes"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(oc.join("opencode.jsonc")).unwrap(),
        original
    );
    assert_eq!(
        std::fs::read_to_string(codex.join("config.toml")).unwrap(),
        toml
    );
    assert!(!oc.join("plugin/mc.js").exists());
    assert!(!codex.join("hooks.json").exists());
    assert!(!pi_extension.exists());

    // The historian's model goes into mc's user config.
    let out = doctor.run(&[
        "setup",
        "--harness",
        "opencode",
        "--historian-model",
        "anthropic/claude-haiku-4-5",
        "--yes",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(env.user_config_path()).unwrap()).unwrap();
    assert_eq!(
        config,
        json!({"providers": {"anthropic": {"kind": "anthropic", "api_key_env": "ANTHROPIC_API_KEY"}},
               "historian": {"model": "anthropic/claude-haiku-4-5"}})
    );
    // A key variable that is not set fails the provider check, naming it (never a key).
    let (code, doc) = doctor.json(&["--no-probe"]);
    assert_eq!(code, 1);
    assert_eq!(
        check(&doc, "provider.historian.anthropic/claude-haiku-4-5")["what"],
        "historian: anthropic/claude-haiku-4-5: anthropic at https://api.anthropic.com: its key variable ANTHROPIC_API_KEY is not set"
    );
}

/// mc-doctor in `env`'s home with no harness on PATH.
fn bare_doctor(env: &TestEnv, vars: &[(&str, &Path)]) -> Doctor {
    let harnesses = env.root().join("none");
    std::fs::create_dir_all(&harnesses).unwrap();
    Doctor {
        home: env.home(),
        path: path_with(&harnesses),
        vars: vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.display().to_string()))
            .collect(),
    }
}

/// Make `path` unwritable even for root: its write bits off, and where that
/// does not stop this process (root), the immutable attribute. False when
/// neither can be done here (then the caller skips that shape).
fn make_unwritable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o444)).unwrap();
    if std::fs::OpenOptions::new().append(true).open(path).is_err() {
        return true;
    }
    let immutable = Command::new("chattr")
        .arg("+i")
        .arg(path)
        .output()
        .is_ok_and(|o| o.status.success());
    immutable && std::fs::OpenOptions::new().append(true).open(path).is_err()
}

fn make_writable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = Command::new("chattr").arg("-i").arg(path).output();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
}

/// A home where mc cannot write: the folders the database and setup's
/// config go in cannot be made (a file is where each should be), and an
/// existing database that cannot be written. Each is a FAIL with its fix,
/// exit 1; before, every check passed while each pass was a passthrough.
#[test]
fn a_home_mc_cannot_write_fails_with_the_fix() {
    let env = TestEnv::new();
    std::fs::create_dir_all(env.data_home()).unwrap();
    std::fs::create_dir_all(env.config_home()).unwrap();
    std::fs::write(env.data_home().join("mc"), "not a folder").unwrap();
    std::fs::write(env.config_home().join("mc"), "not a folder").unwrap();
    // A pass there keeps nothing: the shape is real.
    let pass = env.run(
        "mc-transform",
        &[],
        &json!({"messages": [{"info": {"id": "m1", "role": "user"}, "parts": []}]}).to_string(),
    );
    assert!(
        String::from_utf8_lossy(&pass.stdout).contains("passthrough"),
        "{}",
        String::from_utf8_lossy(&pass.stdout)
    );
    let doctor = bare_doctor(&env, &[]);
    let (code, doc) = doctor.json(&["--no-probe"]);
    assert_eq!(code, 1, "{doc:#}");
    let folder = check(&doc, "db.folder");
    assert_eq!(folder["status"], "fail", "{doc:#}");
    assert!(
        folder["what"]
            .as_str()
            .unwrap()
            .contains("is a file, not a folder"),
        "{folder}"
    );
    assert!(folder["fix"].as_str().unwrap().contains("--db"), "{folder}");
    let config = check(&doc, "config.folder");
    assert_eq!(config["status"], "fail", "{doc:#}");
    assert!(
        config["what"].as_str().unwrap().contains("setup"),
        "{config}"
    );
    // The human lines say the same, with the fix.
    let out = doctor.run(&["--no-probe"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.contains("FAIL") && l.contains("database folder")),
        "{text}"
    );

    // An existing database mc cannot write, in a folder it can.
    let env = TestEnv::new();
    let db = env.db();
    drop(mc_base::store::Store::open(&db, &Default::default()).unwrap());
    let doctor = bare_doctor(&env, &[("MC_DB", &db)]);
    let (code, doc) = doctor.json(&["--no-probe"]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(check(&doc, "writable")["status"], "pass", "{doc:#}");
    if !make_unwritable(&db) {
        eprintln!("skipped the read-only database: neither chmod nor chattr +i stops this user");
        return;
    }
    let (code, doc) = doctor.json(&["--no-probe"]);
    make_writable(&db);
    assert_eq!(code, 1, "{doc:#}");
    let write = check(&doc, "db.write");
    assert_eq!(write["status"], "fail", "{doc:#}");
    assert!(
        write["what"].as_str().unwrap().contains("cannot write it"),
        "{write}"
    );
    assert!(
        write["fix"].as_str().unwrap().contains("writable"),
        "{write}"
    );
    // The other database checks still pass: only a write shows it.
    assert_eq!(check(&doc, "db")["status"], "pass", "{doc:#}");
}

/// `--issue` alone, as `--help` and the README show it: the default name in
/// the working folder.
#[test]
fn issue_without_a_file_writes_the_default_named_report() {
    let env = TestEnv::new();
    let doctor = bare_doctor(&env, &[]);
    let out = doctor.run(&["--no-probe", "--issue"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // MC_NOW_MS is 2026-12-01 04:40:00 UTC.
    let report = env.home().join("mc-issue-20261201-044000.md");
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(text.contains("## Checks"), "{text}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("mc-issue-20261201-044000.md"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let help = doctor.run(&["--help"]);
    assert!(
        String::from_utf8_lossy(&help.stdout).contains("--issue [<FILE>]"),
        "{}",
        String::from_utf8_lossy(&help.stdout)
    );
}

#[test]
fn issue_report_redacts_home_paths_and_each_secret_shape() {
    let env = TestEnv::new();
    let harnesses = env.root().join("none");
    std::fs::create_dir_all(&harnesses).unwrap();
    let secrets = [
        "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcd",
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "AKIAABCDEFGHIJKLMNOP",
        "Bearer abcdefgh12345678",
        "DB_PASSWORD=correct-horse-battery",
    ];
    let log = env.state_home().join("mc/dream.log");
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    std::fs::write(
        &log,
        format!(
            "mc-dream: error in {}/repo\n{}\n",
            env.home().display(),
            secrets.join("\n")
        ),
    )
    .unwrap();
    env.user_config(&format!(
        r#"{{"providers": {{"x": {{"kind": "command", "command": ["run", "--token", "{}"]}}}}}}"#,
        secrets[0]
    ));
    let doctor = Doctor {
        home: env.home(),
        path: path_with(&harnesses),
        vars: vec![("USER".into(), "alice".into())],
    };
    let report = env.root().join("report.md");
    let out = doctor.run(&["--no-probe", "--issue", report.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&report).unwrap();
    for secret in secrets {
        let core = secret.split(['=', ' ']).next_back().unwrap();
        assert!(!text.contains(core), "{secret} leaked:\n{text}");
    }
    assert!(!text.contains(&env.home().display().to_string()), "{text}");
    for marker in [
        "<ANTHROPIC_API_KEY_REDACTED>",
        "<GITHUB_TOKEN_REDACTED>",
        "<JWT_REDACTED>",
        "<AWS_KEY_REDACTED>",
        "Bearer <REDACTED:bearer>",
        "DB_PASSWORD=<REDACTED:PASSWORD>",
        "~/repo",
        "## Checks",
        "Summary: PASS",
    ] {
        assert!(text.contains(marker), "{marker} missing:\n{text}");
    }
}

/// A Magic Context database with the tables and columns its spec lists
/// (memories, user_memories, compartments), as its plugin creates them.
fn magic_context_db(path: &Path, project: &str, session: &str, first: &str, last: &str) {
    let conn = rusqlite_open(path);
    conn.execute_batch(
        "CREATE TABLE memories (id INTEGER PRIMARY KEY AUTOINCREMENT, project_path TEXT NOT NULL,
            category TEXT NOT NULL, content TEXT NOT NULL, normalized_hash TEXT NOT NULL,
            source_session_id TEXT, source_type TEXT DEFAULT 'historian', seen_count INTEGER DEFAULT 1,
            retrieval_count INTEGER DEFAULT 0, first_seen_at INTEGER NOT NULL, created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL, last_seen_at INTEGER NOT NULL, last_retrieved_at INTEGER,
            status TEXT DEFAULT 'active', expires_at INTEGER, verification_status TEXT DEFAULT 'unverified',
            verified_at INTEGER, superseded_by_memory_id INTEGER, merged_from TEXT, metadata_json TEXT,
            UNIQUE(project_path, category, normalized_hash));
         CREATE TABLE user_memories (id INTEGER PRIMARY KEY, content TEXT, status TEXT NOT NULL DEFAULT 'active',
            promoted_at INTEGER NOT NULL, source_candidate_ids TEXT DEFAULT '[]', created_at INTEGER, updated_at INTEGER);
         CREATE TABLE compartments (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL,
            sequence INTEGER NOT NULL, start_message INTEGER NOT NULL, end_message INTEGER NOT NULL,
            start_message_id TEXT DEFAULT '', end_message_id TEXT DEFAULT '', title TEXT NOT NULL,
            content TEXT NOT NULL, created_at INTEGER NOT NULL, harness TEXT NOT NULL DEFAULT 'opencode',
            UNIQUE(session_id, sequence));",
    )
    .unwrap();
    let rows: [(&str, &str, &str, Option<i64>); 6] = [
        (
            "ARCHITECTURE_DECISIONS",
            "The store is one SQLite file.",
            "active",
            None,
        ),
        (
            "WORKFLOW_RULES",
            "Run scripts/test before a commit.",
            "active",
            None,
        ),
        ("USER_PREFERENCES", "Prefers short answers.", "active", None),
        ("KNOWN_ISSUES", "The old bug is gone.", "archived", None),
        ("NAMING", "Binaries are called mc-*.", "active", Some(1)),
        ("CONSTRAINTS", "Never log keys.", "active", None),
    ];
    for (i, (category, content, status, expires)) in rows.iter().enumerate() {
        let project = if i == 5 { "dir:0123456789ab" } else { project };
        conn.execute(
            "INSERT INTO memories (project_path, category, content, normalized_hash, first_seen_at,
                 created_at, updated_at, last_seen_at, status, expires_at)
             VALUES (?1, ?2, ?3, ?4, 1, 1, 1, 1, ?5, ?6)",
            rusqlite_params(project, category, content, status, *expires),
        )
        .unwrap();
    }
    conn.execute(
        "INSERT INTO user_memories (content, promoted_at) VALUES ('Works in UTC.', 1)",
        [],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO compartments (session_id, sequence, start_message, end_message, start_message_id,
             end_message_id, title, content, created_at, harness)
         VALUES (?1, 1, 1, 2, ?2, ?3, 'Greeting', 'The user said hello. The agent answered.', 1, 'opencode'),
                ('ses_unknown', 1, 1, 2, 'a', 'b', 'Other', 'Elsewhere.', 1, 'opencode')",
        [session, first, last],
    )
    .unwrap();
}

fn rusqlite_open(path: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(path).unwrap()
}

fn rusqlite_params<'a>(
    project: &'a str,
    category: &'a str,
    content: &'a str,
    status: &'a str,
    expires: Option<i64>,
) -> impl rusqlite::Params + 'a {
    (
        project.to_string(),
        category.to_string(),
        content.to_string(),
        content.to_lowercase(),
        status.to_string(),
        expires,
    )
}

#[test]
fn migrate_imports_what_maps_from_magic_context_once_and_reads_it_only() {
    let env = TestEnv::new();
    // A git project, so Magic Context's `git:<root commit>` identity is mc's too.
    let project = env.path("project");
    std::fs::create_dir_all(&project).unwrap();
    for args in [
        vec!["init", "-q"],
        vec![
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t.invalid",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "root",
        ],
    ] {
        let out = env
            .program("git")
            .arg("-C")
            .arg(&project)
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let identity = mc_base::identity::project_identity(&project);
    assert!(identity.starts_with("git:"), "{identity}");
    // mc has seen the session the compartment belongs to.
    let mut envelope: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/opencode-session.json"),
        )
        .unwrap(),
    )
    .unwrap();
    envelope["project_dir"] = json!(project.display().to_string());
    let out = env.run_db("mc-transform", &[], &envelope.to_string());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let source = env.path("mc-context.db");
    magic_context_db(
        &source,
        &identity,
        "ses_example0001",
        "msg_ex0001",
        "msg_ex0002",
    );
    let before = std::fs::read(&source).unwrap();

    let harnesses = env.root().join("none");
    std::fs::create_dir_all(&harnesses).unwrap();
    let doctor = Doctor {
        home: env.home(),
        path: path_with(&harnesses),
        vars: Vec::new(),
    };
    let db = env.db().display().to_string();
    let args = [
        "--db",
        db.as_str(),
        "migrate",
        "--from-magic-context",
        source.to_str().unwrap(),
    ];
    let (code, doc) = doctor.json(&args);
    assert_eq!(code, 0, "{doc:#}");
    let report = &doc["magic_context"];
    assert_eq!(report["memories_imported"], 2, "{report:#}");
    assert_eq!(report["profile_imported"], 2, "{report:#}");
    assert_eq!(report["compartments_imported"], 1, "{report:#}");
    let skipped: Vec<&str> = report["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert_eq!(skipped.len(), 4, "{skipped:#?}");
    assert!(
        skipped[0].starts_with("memory #4 (KNOWN_ISSUES): archived"),
        "{skipped:#?}"
    );
    assert!(
        skipped[1].starts_with("memory #5 (NAMING): expired"),
        "{skipped:#?}"
    );
    assert!(skipped[2].contains("folder identity"), "{skipped:#?}");
    assert!(
        skipped[3].contains("ses_unknown: mc has not seen this session"),
        "{skipped:#?}"
    );
    assert!(!report["unmapped_fields"].as_array().unwrap().is_empty());

    // What landed: memories under mc's categories, the profile, the compartment.
    let conn = rusqlite_open(&env.db());
    let memories: Vec<(String, String)> = conn
        .prepare("SELECT category, content FROM memories WHERE project = ?1 ORDER BY id")
        .unwrap()
        .query_map([&identity], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        memories,
        vec![
            (
                "ARCHITECTURE".to_string(),
                "The store is one SQLite file.".to_string()
            ),
            (
                "PROJECT_RULES".to_string(),
                "Run scripts/test before a commit.".to_string()
            ),
        ]
    );
    let profile: i64 = conn
        .query_row("SELECT count(*) FROM user_profile", [], |r| r.get(0))
        .unwrap();
    assert_eq!(profile, 2);
    let (title, p4): (String, String) = conn
        .query_row("SELECT title, p4 FROM compartments", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!((title.as_str(), p4.as_str()), ("Greeting", "Greeting"));

    // Twice imports nothing twice; the source is never written.
    let (_, doc) = doctor.json(&args);
    let report = &doc["magic_context"];
    assert_eq!(report["memories_imported"], 0);
    assert_eq!(report["profile_imported"], 0);
    assert_eq!(report["compartments_imported"], 0);
    assert_eq!(report["memories_existing"], 4);
    assert_eq!(std::fs::read(&source).unwrap(), before);
}

#[test]
fn the_wizard_on_a_real_terminal_asks_shows_the_diff_and_writes() {
    if Command::new("script").arg("--version").output().is_err() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI has script(1) (bsdutils)"
        );
        eprintln!("skipping: no script(1)");
        return;
    }
    let env = TestEnv::new();
    let harnesses = env.root().join("none");
    std::fs::create_dir_all(&harnesses).unwrap();
    let oc = env.config_home().join("opencode");
    std::fs::create_dir_all(&oc).unwrap();
    std::fs::write(oc.join("opencode.json"), "{}\n").unwrap();
    let doctor = Doctor {
        home: env.home(),
        path: path_with(&harnesses),
        vars: Vec::new(),
    };
    // script(1) gives mc-doctor a pseudo-terminal; the answers come in on it.
    let line = format!(
        "{} setup",
        mc_tests::claude::sh(&bin_path("mc-doctor").display().to_string())
    );
    let mut command = doctor.sealed("script");
    command.args(["-q", "-e", "-c", &line, "/dev/null"]);
    // Harnesses: opencode; historian: a command provider; no cron; no local
    // embedding model fetched; write.
    let answers = "opencode\ncli/sonnet\ncommand\nclaude -p --model {model}\nn\nn\ny\n";
    let out = mc_tests::pipe_within(
        &mut command,
        answers.as_bytes(),
        std::time::Duration::from_secs(60),
    )
    .unwrap()
    .expect("the wizard finished");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{shown}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(shown.contains("Wire which harnesses?"), "{shown}");
    assert!(
        shown.contains("Historian model as PROVIDER/MODEL"),
        "{shown}"
    );
    assert!(
        shown.contains("+  \"compaction\": {"),
        "the diff is shown: {shown}"
    );
    assert!(shown.contains("Write these changes"), "{shown}");
    assert!(
        shown.contains(
            "Fetch the local embedding model wordllama-l2-supercat-256 (18 MB, MIT license)"
        ),
        "{shown}"
    );
    assert!(shown.contains("Done."), "{shown}");
    assert!(oc.join("plugin/mc.js").exists());
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(env.user_config_path()).unwrap()).unwrap();
    assert_eq!(
        config,
        json!({"providers": {"cli": {"kind": "command", "command": ["claude", "-p", "--model", "{model}"]}},
               "historian": {"model": "cli/sonnet"}})
    );

    // Colour on a terminal only.
    let line = format!(
        "{} --no-probe",
        mc_tests::claude::sh(&bin_path("mc-doctor").display().to_string())
    );
    let mut command = doctor.sealed("script");
    command.args(["-q", "-e", "-c", &line, "/dev/null"]);
    let out = pipe(&mut command, b"").unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("\x1b[32mPASS\x1b[0m  OpenCode: mc's plugin"),
        "{shown}"
    );
    let out = doctor.run(&["--no-probe"]);
    let plain = String::from_utf8_lossy(&out.stdout);
    assert!(!plain.contains('\x1b'), "{plain}");
    assert!(
        plain.contains("PASS  OpenCode: mc's plugin (~/.config/opencode/plugin/mc.js)"),
        "{plain}"
    );
    // The wizard's command provider is checked too: no `claude` on this PATH.
    assert!(
        plain.contains("FAIL  historian: cli/sonnet: command \"claude\" is not found → install claude, or change providers.cli.command\n"),
        "{plain}"
    );
    assert!(
        plain.ends_with("Summary: PASS 19 / WARN 0 / FAIL 1\n"),
        "{plain}"
    );
    assert_eq!(out.status.code(), Some(1));
}

// ---------------------------------------------------------------------------
// The dashboard, in a real browser (headless Chromium) against a database
// filled by real passes.

mod dashboard {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpStream;
    use std::path::Path;
    use std::process::{Child, Command, Stdio};

    use serde_json::{Value, json};

    use mc_tests::env::TestEnv;
    use mc_tests::harness::{chromium_for_test, current_test};

    const EXAMPLE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/opencode-session.json"
    );

    /// A running `mc-doctor dashboard`, stopped when dropped.
    struct Served {
        child: Child,
        base: String,
        token: String,
        port: u16,
    }

    impl Drop for Served {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// Six calls of the example session through the real pass, a read
    /// that fell with nothing changed among them, and two memories.
    fn filled() -> TestEnv {
        let env = TestEnv::new();
        let mut envelope: Value =
            serde_json::from_str(&std::fs::read_to_string(EXAMPLE).unwrap()).unwrap();
        let now = envelope["now_ms"].as_i64().unwrap();
        let samples = [
            (12_600, 90),
            (12_600, 800),
            (0, 13_500),
            (13_400, 10),
            (13_400, 60),
        ];
        for (k, (read, write)) in samples.iter().enumerate() {
            envelope["now_ms"] = json!(now + 5_000 * k as i64);
            envelope["usage"] =
                json!({"input": 80, "cache_read": read, "cache_write": write, "output": 25});
            let out = env.run_db("mc-transform", &[], &envelope.to_string());
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let dir = envelope["project_dir"].as_str().unwrap().to_string();
        for text in ["Tests run with cargo nextest", "Modules are snake_case"] {
            let out = env.run_db(
                "mc-search",
                &[
                    "memory",
                    "write",
                    "--project-dir",
                    &dir,
                    "--category",
                    "PROJECT_RULES",
                    "--content",
                    text,
                ],
                "",
            );
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        env
    }

    fn serve(env: &TestEnv) -> Served {
        let mut child = env
            .db_command("mc-doctor", &["dashboard", "--no-open", "--port", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("first line: {line:?}"))
            .to_string();
        let (base, token) = url.split_once("/?token=").unwrap();
        assert!(base.starts_with("http://127.0.0.1:"), "{base}");
        let port = base.rsplit(':').next().unwrap().parse().unwrap();
        Served {
            child,
            base: base.to_string(),
            token: token.to_string(),
            port,
        }
    }

    /// Headless Chromium on `url`: the DOM it built, and every request the
    /// page itself made, as (initiator, URL) from the net log (the browser's
    /// own update and account services are initiated by no origin).
    fn browse(
        chromium: &Path,
        env: &TestEnv,
        url: &str,
        extra: &[&str],
    ) -> (String, Vec<(String, String)>) {
        let profile = env.path(format!("chromium-{}", profile_name(url)));
        let netlog = profile.with_extension("netlog.json");
        let out = Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--disable-default-apps",
                "--dump-dom",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(format!("--log-net-log={}", netlog.display()))
            .args(extra)
            .arg(url)
            .env("HOME", env.home())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let log: Value = serde_json::from_str(&std::fs::read_to_string(&netlog).unwrap())
            .expect("a whole net log");
        let urls = log["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| {
                let initiator = e["params"]["initiator"].as_str()?;
                let url = e["params"]["url"].as_str()?;
                (initiator != "not an origin").then(|| (initiator.to_string(), url.to_string()))
            })
            .collect();
        (String::from_utf8_lossy(&out.stdout).into_owned(), urls)
    }

    /// Every value in `text` between `start` and the next `end`.
    fn values_after(text: &str, start: &str, end: char) -> Vec<String> {
        text.split(start)
            .skip(1)
            .filter_map(|rest| rest.split(end).next())
            .map(str::to_string)
            .collect()
    }

    fn profile_name(url: &str) -> String {
        format!(
            "{:x}",
            url.bytes()
                .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
        )
    }

    /// One raw HTTP/1.1 request: the status line and the body.
    fn raw(port: u16, request: &str) -> (String, String) {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        let status = answer.lines().next().unwrap_or_default().to_string();
        let body = answer
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (status, body)
    }

    #[test]
    fn the_dashboard_renders_every_view_in_a_real_browser_and_fetches_nothing_from_outside() {
        let Some(chromium) = chromium_for_test(&current_test()) else {
            return;
        };
        let env = filled();
        let served = serve(&env);
        let own = format!("http://127.0.0.1:{}", served.port);
        let pages: [(&str, &[&str]); 5] = [
            (
                "/",
                &["ses_example0001", "opencode", "todo-app", "/session?id=1"],
            ),
            (
                "/session?id=1",
                &[
                    "<svg class=\"timeline\"",
                    "<b>unknown</b>",
                    "Cache busts",
                    "tool output",
                    "m[0]",
                ],
            ),
            (
                "/memory",
                &[
                    "Tests run with cargo nextest",
                    "written by user",
                    "Mutation log",
                ],
            ),
            ("/spend", &["Per day (UTC)", "Cache saved", "$"]),
            ("/dream", &["consolidate", "Schedules"]),
        ];
        for (page, wanted) in pages {
            let sep = if page.contains('?') { '&' } else { '?' };
            let url = format!("{}{page}{sep}token={}", served.base, served.token);
            let (dom, urls) = browse(&chromium, &env, &url, &[]);
            for w in wanted {
                assert!(dom.contains(w), "{page} lacks {w:?}:\n{dom}");
            }
            assert!(
                !dom.contains("needs its token"),
                "{page}: the cookie did not take"
            );
            assert!(
                urls.iter().any(|(i, _)| *i == own),
                "{page}: no request of the page logged"
            );
            for (initiator, u) in &urls {
                assert_eq!(*initiator, own, "{page}: {u}");
                assert!(
                    u.starts_with(&format!("{own}/")),
                    "{page} made the browser fetch {u}"
                );
            }
        }
        // The stylesheet came from the binary, through the same checks.
        let (_, urls) = browse(
            &chromium,
            &env,
            &format!("{}/?token={}", served.base, served.token),
            &[],
        );
        assert!(
            urls.iter().any(|(_, u)| u.ends_with("/assets/style.css")),
            "{urls:?}"
        );
    }

    #[test]
    fn the_dashboard_refuses_a_request_without_its_token_or_with_a_foreign_host() {
        let Some(chromium) = chromium_for_test(&current_test()) else {
            return;
        };
        let env = filled();
        let served = serve(&env);
        // Without the token, in the browser and raw.
        let (dom, _) = browse(&chromium, &env, &format!("{}/memory", served.base), &[]);
        assert!(dom.contains("needs its token"), "{dom}");
        assert!(!dom.contains("cargo nextest"));
        let (status, _) = raw(
            served.port,
            &format!(
                "GET /memory HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
                served.port
            ),
        );
        assert!(status.contains(" 401 "), "{status}");
        // DNS rebinding: another name that resolves to 127.0.0.1, token and all.
        let rule = "--host-resolver-rules=MAP rebind.example 127.0.0.1";
        let url = format!(
            "http://rebind.example:{}/memory?token={}",
            served.port, served.token
        );
        let (dom, _) = browse(&chromium, &env, &url, &[rule]);
        assert!(
            dom.contains("answers only to its own loopback address"),
            "{dom}"
        );
        assert!(!dom.contains("cargo nextest"));
    }

    #[test]
    fn a_memory_edit_in_the_dashboard_round_trips_through_mc_search() {
        let Some(chromium) = chromium_for_test(&current_test()) else {
            return;
        };
        let env = filled();
        let served = serve(&env);
        let url = format!("{}/memory?token={}", served.base, served.token);
        let (dom, _) = browse(&chromium, &env, &url, &[]);
        let csrf = values_after(&dom, "name=\"csrf\" value=\"", '"')
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("no form with a CSRF token:\n{dom}"));
        let project = values_after(&dom, "name=\"project\" value=\"", '"')
            .into_iter()
            .next()
            .unwrap();
        let post = |form: String, csrf_ok: bool| {
            let form = if csrf_ok {
                form
            } else {
                form.replace(&csrf, "00")
            };
            raw(
                served.port,
                &format!(
                    "POST /memory/update HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: mc_dashboard_{port}={token}\r\n\
                     Origin: http://127.0.0.1:{port}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
                     Content-Length: {len}\r\nConnection: close\r\n\r\n{form}",
                    port = served.port,
                    token = served.token,
                    len = form.len()
                ),
            )
        };
        let form = format!(
            "csrf={csrf}&project={}&id=1&content=Tests+run+with+cargo+nextest+--workspace",
            project.replace(':', "%3A")
        );
        let (status, _) = post(form.clone(), false);
        assert!(status.contains(" 403 "), "a wrong CSRF token: {status}");
        let (status, body) = post(form, true);
        assert!(status.contains(" 303 "), "{status}: {body}");
        let (dom, _) = browse(&chromium, &env, &url, &[]);
        assert!(dom.contains("cargo nextest --workspace"), "{dom}");
        assert!(
            dom.contains("<td>update</td>"),
            "the mutation log shows it:\n{dom}"
        );
        // mc-search reads the same row.
        let dir = "/home/user/todo-app";
        let out = env.run_db(
            "mc-search",
            &["memory", "show", "--id", "1", "--project-dir", dir],
            "",
        );
        let shown: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(shown["content"], "Tests run with cargo nextest --workspace");
    }
}

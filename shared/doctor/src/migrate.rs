//! `migrate`: the database schema (after a consistent backup), deprecated
//! config keys (renamed in place, comments kept, after a backup), and the
//! import from Magic Context ([`super::magic_context`]).

use std::path::Path;

use rusqlite::Connection;
use serde_json::Value;

use super::{Env, edit};
use mc_base::config::{Layer, Tier, read_layer_of};
use mc_base::error::{Error, Result};
use mc_base::repo_fs::Dir;
use mc_base::store::{SCHEMA_VERSION, Store, StoreOptions};

/// Config keys mc renamed: (old dotted path, new dotted path). Empty in this
/// release: no key has been renamed yet; a rename adds its row here and
/// `migrate` (and the checks) pick it up.
pub const DEPRECATED: &[(&str, &str)] = &[];

/// The deprecated keys `text` sets, from `table`.
pub fn deprecated_in_table(
    text: &str,
    table: &[(&'static str, &'static str)],
) -> Vec<(&'static str, &'static str)> {
    let Ok(root) = edit::json_value(text, "") else {
        return Vec::new();
    };
    table
        .iter()
        .filter(|(old, _)| edit::get(&root, &split(old)).is_some())
        .copied()
        .collect()
}

/// The deprecated keys of [`DEPRECATED`] that `text` sets.
pub fn deprecated_in(text: &str) -> Vec<(&'static str, &'static str)> {
    deprecated_in_table(text, DEPRECATED)
}

fn split(path: &str) -> Vec<String> {
    path.split('.').map(str::to_string).collect()
}

/// `text` with each deprecated key of `table` moved to its new name (the
/// new one wins when both are set); `None` when nothing changes.
pub fn rename_keys(text: &str, table: &[(&str, &str)], what: &str) -> Result<Option<String>> {
    let root = edit::json_value(text, what)?;
    let mut out = text.to_string();
    for (old, new) in table {
        let old_keys = split(old);
        let Some(value) = edit::get(&root, &old_keys).cloned() else {
            continue;
        };
        let new_keys = split(new);
        if edit::get(&edit::json_value(&out, what)?, &new_keys).is_none() {
            out = edit::json_set(&out, &new_keys, &value, what)?;
        }
        out = edit::json_remove(&out, &old_keys, 0, what)?;
    }
    Ok((out != text).then_some(out))
}

fn stamp(now_ms: i64) -> String {
    jiff::Timestamp::from_millisecond(now_ms)
        .map(|t| t.strftime("%Y%m%d-%H%M%S").to_string())
        .unwrap_or_else(|_| now_ms.to_string())
}

/// Migrate the database's schema, after a backup (`VACUUM INTO` beside it).
pub fn schema(env: &Env) -> Result<String> {
    let path = &env.db;
    if !path.exists() {
        return Ok(format!(
            "database {}: not created yet, nothing to migrate",
            env.tilde(path)
        ));
    }
    let found: i64 = {
        let conn = Connection::open(path).map_err(|cause| Error::Open {
            path: path.clone(),
            cause,
        })?;
        conn.query_row("PRAGMA user_version", [], |r| r.get(0))?
    };
    if found == SCHEMA_VERSION {
        return Ok(format!(
            "database {}: schema {found} is current",
            env.tilde(path)
        ));
    }
    if found > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            path: path.clone(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".mc-backup-{}", stamp(env.now_ms)));
    let backup = path.with_file_name(name);
    {
        let conn = Connection::open(path).map_err(|cause| Error::Open {
            path: path.clone(),
            cause,
        })?;
        conn.execute("VACUUM INTO ?1", [backup.display().to_string()])?;
    }
    Store::open(path, &StoreOptions::default())?;
    Ok(format!(
        "database {}: migrated schema {found} → {SCHEMA_VERSION} (backup {})",
        env.tilde(path),
        env.tilde(&backup)
    ))
}

/// Rename deprecated keys in each config layer that has them (backup first).
pub fn config_keys(env: &Env, dry_run: bool) -> Result<Vec<String>> {
    let mut done = Vec::new();
    for layer in &env.layers {
        let Ok(Some(text)) = read_layer_of(layer) else {
            continue;
        };
        let what = layer.path.display().to_string();
        let Some(new) = rename_keys(&text, DEPRECATED, &what)? else {
            continue;
        };
        let diff = edit::diff(&env.tilde(&layer.path), &text, &new);
        if !dry_run {
            backup_and_write(layer, &text, &new, env.now_ms)?;
        }
        done.push(diff);
    }
    Ok(done)
}

fn backup_and_write(layer: &Layer, old: &str, text: &str, now_ms: i64) -> Result<()> {
    let path = &layer.path;
    let file = path
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    let backup = format!("{file}.mc-backup-{}", stamp(now_ms));
    if layer.tier == Tier::Project {
        // A repository's `.mc`: written only inside it, never through a link.
        let folder = path.parent().unwrap_or(Path::new("."));
        let root = folder.parent().unwrap_or(Path::new("."));
        let rel = Path::new(folder.file_name().unwrap_or_default());
        let refused = |r: mc_base::repo_fs::Refusal| {
            Error::input(r.to_string())
                .with_hint("a project config is written only inside its repository")
        };
        let dir = Dir::open(root, rel, false)
            .map_err(refused)?
            .ok_or_else(|| Error::input(format!("{} no longer exists", folder.display())))?;
        dir.write(&backup, old.as_bytes()).map_err(refused)?;
        return dir.write(&file, text.as_bytes()).map_err(refused);
    }
    std::fs::copy(path, path.with_file_name(backup)).map_err(Error::Io)?;
    std::fs::write(path, text).map_err(Error::Io)
}

/// The value of a dotted key in a JSONC text (tests, reports).
pub fn value_at(text: &str, path: &str) -> Option<Value> {
    edit::get(&edit::json_value(text, "").ok()?, &split(path)).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TABLE: &[(&str, &str)] = &[("historian.model_name", "historian.model")];

    #[test]
    fn renames_keep_comments_and_are_idempotent() {
        let text = "{\n  // mine\n  \"historian\": {\n    \"model_name\": \"a/b\" // the fast one\n  }\n}\n";
        assert_eq!(
            deprecated_in_table(text, &[("historian.model_name", "historian.model")]),
            vec![("historian.model_name", "historian.model")]
        );
        let out = rename_keys(text, TABLE, "c").unwrap().unwrap();
        assert!(out.contains("// mine"), "{out}");
        assert_eq!(value_at(&out, "historian.model"), Some(json!("a/b")));
        assert_eq!(value_at(&out, "historian.model_name"), None);
        assert_eq!(rename_keys(&out, TABLE, "c").unwrap(), None);
    }

    /// A database as the previous release left it: the first nine migrations.
    fn old_database(path: &std::path::Path) {
        let conn = Connection::open(path).unwrap();
        for sql in &mc_base::store::MIGRATIONS[..9] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 9).unwrap();
    }

    #[test]
    fn an_old_schema_is_a_warning_fix_backs_it_up_and_migrates() {
        let dir = tempfile::tempdir().unwrap();
        let env = Env {
            home: dir.path().to_path_buf(),
            db: dir.path().join("ctx.db"),
            now_ms: 1_796_100_000_000,
            ..Env::default()
        };
        old_database(&env.db);
        let checks = super::super::checks::run(
            &env,
            &super::super::checks::Options {
                probes: false,
                ..Default::default()
            },
        );
        let check = checks.iter().find(|c| c.id == "db.schema").unwrap();
        assert_eq!(check.status, super::super::Status::Warn);
        assert_eq!(
            check.what,
            format!(
                "database ~/ctx.db: schema 9, this mc has {SCHEMA_VERSION} (its next command migrates it)"
            )
        );
        let fixed = super::super::setup::fix(&env, &checks);
        assert_eq!(
            fixed.repaired,
            vec![format!(
                "database ~/ctx.db: migrated schema 9 → {SCHEMA_VERSION} (backup ~/ctx.db.mc-backup-20261201-044000)"
            )]
        );
        let version = |p: &std::path::Path| -> i64 {
            Connection::open(p)
                .unwrap()
                .query_row("PRAGMA user_version", [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(version(&env.db), SCHEMA_VERSION);
        assert_eq!(
            version(&dir.path().join("ctx.db.mc-backup-20261201-044000")),
            9
        );
        // Current now: nothing more to do.
        assert_eq!(
            schema(&env).unwrap(),
            format!("database ~/ctx.db: schema {SCHEMA_VERSION} is current")
        );
    }

    #[test]
    fn the_new_key_wins_when_both_are_set() {
        let text = r#"{"historian": {"model_name": "old/x", "model": "new/y"}}"#;
        let out = rename_keys(text, TABLE, "c").unwrap().unwrap();
        assert_eq!(value_at(&out, "historian.model"), Some(json!("new/y")));
        assert_eq!(value_at(&out, "historian.model_name"), None);
    }
}

//! `migrate`: the database schema upgraded (after a backup), deprecated
//! config keys renamed, and an import from Magic Context.

use std::process::ExitCode;

use serde_json::{Value, json};

use mc_cli::Failure;
use mc_doctor_core::{Env, magic_context, migrate};

use crate::args::{Args, MigrateArgs, NAME};
use crate::common::print;

pub(crate) fn run_migrate(args: &Args, m: &MigrateArgs, env: &Env) -> Result<ExitCode, Failure> {
    let mut lines = Vec::new();
    if m.dry_run {
        lines.push(format!(
            "database: would back up and migrate {} if its schema is older",
            env.tilde(&env.db)
        ));
    } else {
        lines.push(migrate::schema(env).map_err(Failure::from)?);
    }
    let diffs = migrate::config_keys(env, m.dry_run).map_err(Failure::from)?;
    if diffs.is_empty() {
        lines.push("config: no deprecated keys".into());
    }
    let mut doc = json!({"database": lines.first(), "config": diffs});
    if let Some(source) = &m.from_magic_context {
        let source = if source.as_os_str().is_empty() {
            magic_context::default_path(&env.data_home())
        } else {
            source.clone()
        };
        if m.dry_run {
            lines.push(format!(
                "magic context: would import from {}",
                env.tilde(&source)
            ));
        } else {
            let (config, _) = mc_cli::load_config(NAME, args.config.as_deref(), None);
            let mut store = mc_cli::open_store(args.db.as_deref(), &config)?;
            let report =
                magic_context::import(&source, &mut store, env.now_ms).map_err(Failure::from)?;
            lines.push(format!(
                "magic context ({}): imported {} memories, {} profile items, {} compartments; {} already here; {} skipped",
                env.tilde(&source),
                report.memories_imported,
                report.profile_imported,
                report.compartments_imported,
                report.memories_existing,
                report.skipped.len()
            ));
            for skip in &report.skipped {
                lines.push(format!("  skipped {skip}"));
            }
            lines.push("  not mapped:".into());
            for field in &report.unmapped_fields {
                lines.push(format!("    {field}"));
            }
            doc["magic_context"] = serde_json::to_value(&report).unwrap_or(Value::Null);
        }
    }
    if args.json {
        mc_cli::write_json(&doc, true)?;
    } else {
        let mut text = diffs.join("");
        for line in lines {
            text.push_str(&line);
            text.push('\n');
        }
        print(&text)?;
    }
    Ok(ExitCode::SUCCESS)
}

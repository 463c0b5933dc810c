//! `index`: the search indexes checked or rebuilt, the commits and the
//! embeddings indexed.

use std::io::IsTerminal;

use anyhow::anyhow;
use serde_json::json;

use mc_base::identity::project_identity;
use mc_cli::{Failure, now_ms, write_json};
use mc_search_core as search;

use crate::args::{Args, NAME};

pub(crate) fn index(args: &Args, check: bool, rebuild: bool) -> Result<(), Failure> {
    let config = args.global.load_config(NAME, None);
    let mut store = mc_cli::open_store(args.global.db.as_deref(), &config)?;
    if check {
        let state = search::index::check(store.conn())?;
        write_json(&json!(state), args.global.pretty)?;
        return match &state.problem {
            None => Ok(()),
            Some(problem) => Err(
                Failure::runtime(anyhow!("a search index is damaged: {problem}")).with_hints([
                    format!(
                        "run `{}` (it builds every index again from the rows it indexes)",
                        search::fts::REBUILD_COMMAND
                    ),
                ]),
            ),
        };
    }
    let session = match &args.at.session {
        None => None,
        Some(id) => {
            let harness = args.at.harness.as_deref().unwrap_or("opencode");
            let row = mc_base::domain::sessions::find_session(store.conn(), harness, id)?
                .ok_or_else(|| {
                    Failure::input(anyhow!("mc has not seen {harness} session {id:?}"))
                })?;
            Some(row.id)
        }
    };
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:30} {pos}/{len} parts indexed ({per_sec})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    let mut progress = |done, total| {
        if let Some(bar) = &bar {
            bar.set_length(total);
            bar.set_position(done);
        }
    };
    let out = if rebuild {
        // Every index, whatever --session says: a rebuild is of the whole database.
        let report = search::fts::rebuild(&mut store, &mut progress)?;
        let requeued = report
            .rebuilt
            .iter()
            .find(|r| r.name == "messages_fts")
            .map_or(0, |r| r.rows);
        let mut out = json!(report.messages);
        if let Some(map) = out.as_object_mut() {
            map.insert("requeued".into(), json!(requeued));
            map.insert("rebuilt".into(), json!(report.rebuilt));
        }
        out
    } else {
        json!(search::index::catch_up_session(
            &mut store,
            session,
            None,
            &mut progress
        )?)
    };
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(write_json(&out, args.global.pretty)?)
}

pub(crate) fn index_commits(args: &Args) -> Result<(), Failure> {
    let dir = crate::common::project_dir_flag(args)?;
    let root = mc_search_core::gitlog::toplevel(&dir).ok_or_else(|| {
        Failure::input(anyhow!(
            "{} is not in a git repository: there are no commits to index",
            dir.display()
        ))
    })?;
    let config = args.global.load_config(NAME, Some(&dir));
    let mut store = mc_cli::open_store(args.global.db.as_deref(), &config)?;
    let project = project_identity(&root);
    let indexed = mc_search_core::gitlog::index_commits(&mut store, &project, &root, now_ms())?;
    let out = match indexed {
        Some(i) => json!({"project": project, "commits": i}),
        None => {
            json!({"project": project, "commits": null, "note": "the repository has no commit yet"})
        }
    };
    Ok(write_json(&out, args.global.pretty)?)
}

pub(crate) fn index_embeddings(args: &Args) -> Result<(), Failure> {
    let config = args.global.load_config(NAME, None);
    let models = mc_base::paths::models_dir(&mc_cli::env_paths());
    let provider = search::embed::Provider::from_config(
        &config,
        &|var| std::env::var(var).ok(),
        models.as_deref(),
    )?
    .ok_or_else(|| {
        Failure::input(anyhow!(
            "no embeddings model configured: set embeddings.model to \"{}\" (a model mc runs \
             itself) or \"provider/model\" (a provider of kind openai) in the user config",
            mc_base::config::DEFAULT_EMBEDDINGS_MODEL
        ))
    })?;
    // A local model is fetched the first time (and again when damaged).
    let fetched = match provider.local() {
        Some(local) if local.state() != search::embed::local::State::Ready => {
            Some(fetch_model(local)?)
        }
        _ => None,
    };
    let mut store = mc_cli::open_store(args.global.db.as_deref(), &config)?;
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:30} {pos}/{len} texts embedded ({per_sec}, {eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    let report = search::embed::backfill(
        &mut store,
        &provider,
        &mut |done, total| {
            if let Some(bar) = &bar {
                bar.set_length(total);
                bar.set_position(done);
            }
        },
        &std::thread::sleep,
    );
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let mut out = json!(report?);
    if let (Some(f), Some(map)) = (fetched, out.as_object_mut()) {
        map.insert("fetched".into(), json!(f));
    }
    Ok(write_json(&out, args.global.pretty)?)
}

/// Fetch a local model's files, saying so on stderr. `MC_MODELS_URL`
/// replaces the model's download address (tests serve the files from
/// 127.0.0.1; the checksums are the same).
pub(crate) fn fetch_model(
    local: &search::embed::LocalModel,
) -> Result<search::embed::fetch::Fetched, Failure> {
    let mut options = search::embed::fetch::FetchOptions::for_spec(local.spec);
    if let Some(url) = std::env::var("MC_MODELS_URL")
        .ok()
        .filter(|u| !u.is_empty())
    {
        options.base_url = url;
    }
    eprintln!(
        "{NAME}: fetching the local embedding model {} ({:.1} MB, {}) into {}",
        local.spec.name,
        local.spec.files.iter().map(|f| f.size).sum::<u64>() as f64 / 1e6,
        local.spec.license,
        local.dir.display()
    );
    search::embed::fetch::fetch(
        &local.dir,
        local.spec,
        &options,
        &mut |_, _, _| {},
        &std::thread::sleep,
    )
    .map_err(|e| {
        Failure::runtime(anyhow!(
            "fetching the local embedding model {}: {e}",
            local.spec.name
        ))
    })
}

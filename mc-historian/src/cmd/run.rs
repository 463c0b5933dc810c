//! `run`, `wrapup` and `recomp`: fold the eligible history above the last
//! compartment, all but the newest N messages of it, or the folded range
//! again (call the model, validate, repair once, publish in one transaction).

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mc_cli::{Failure, write_json};
use mc_history::historian::choice::{self, ModelSource};
use mc_history::historian::{self, Job, RunParams, RunStatus, Settings};

use crate::args::{Args, NAME, Source};
use crate::input::{load_input, session_setup};
use crate::model::{choose, client, client_failure};
use crate::progress::Progress;

pub(crate) fn run(args: &Args, source: &Source, job: Job) -> Result<ExitCode, Failure> {
    // Whether there is a model at all is known before a whole session is
    // fetched over HTTP (the OpenCode plugin may ask often).
    if source.opencode_url.is_some() {
        let config = args.global.load_config(NAME, source.project_dir.as_deref());
        let env = mc_cli::harness_env(source.opencode_url.as_deref(), false);
        let early = choice::choose(
            &config.historian,
            &config.providers,
            "opencode",
            &Default::default(),
            &env,
        );
        if early.source == ModelSource::None {
            return Err(client_failure(early.missing()));
        }
    }
    let mut loaded = load_input(args, source)?;
    let (config, mut store) = session_setup(args, &mut loaded)?;
    let choice = choose(&config, source, &loaded, &store);
    let client = client(&config, &choice, source, &loaded.input).map_err(client_failure)?;
    let fixed = loaded.now_ms;
    let now = move || fixed.unwrap_or_else(mc_cli::now_ms);
    // The lease outlives the longest model call (with its retries and
    // fallbacks) by a minute; it is renewed before every call.
    let lease = client.options().worst_case(client.chain().len()) + Duration::from_secs(60);
    let params = RunParams {
        settings: Settings {
            historian: &config.historian,
            transform: &config.transform,
        },
        job,
        lease_ms: i64::try_from(lease.as_millis()).unwrap_or(i64::MAX),
        holder: historian::publish::process_holder(
            std::process::id(),
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        ),
        now: &now,
    };
    let mut progress = Progress::new(std::io::stderr().is_terminal());
    let report = historian::run(&mut store, &loaded.input, &client, &params, &mut |event| {
        progress.show(&event)
    });
    progress.finish();
    let mut report = report?;
    report.model_source = Some(choice.source);
    mc_cli::warn(NAME, &report.warnings);
    write_json(
        &serde_json::to_value(&report).map_err(anyhow::Error::from)?,
        args.global.pretty,
    )?;
    match (report.status, &report.failure) {
        // A failed run exits 1 whatever the failure's kind: the run was made.
        (RunStatus::Failed, Some(failure)) => {
            eprintln!("mc-historian: error: {failure}");
            mc_cli::hint(NAME, &failure.hints());
            Ok(ExitCode::from(1))
        }
        (_, Some(failure)) => {
            eprintln!("mc-historian: warning: published part of the range: {failure}");
            mc_cli::hint(NAME, &failure.hints());
            Ok(ExitCode::SUCCESS)
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}

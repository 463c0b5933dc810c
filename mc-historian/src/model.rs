//! Which model a run uses (configured, the harness's own, none) and its
//! client: the chain, its keys, the harness session, the retry options.

use mc_base::config::Config;
use mc_base::store::Store;
use mc_cli::Failure;
use mc_history::historian::Input;
use mc_history::historian::choice::{self, ModelChoice, ModelSource};
use mc_llm::{self as llm, Client};

use crate::args::Source;
use crate::input::{Loaded, directory};

/// A model-client failure: a misconfigured chain is the user's to fix (exit
/// 2), anything else exits 1; its hints follow the error line.
pub(crate) fn client_failure(error: llm::LlmError) -> Failure {
    let hints = error.hints.clone();
    Failure::of_kind(error.error_kind(), error.into()).with_hints(hints)
}

/// Timeouts, retries and proxies for model calls, from the config.
pub(crate) fn llm_options(config: &Config) -> llm::Options {
    llm::Options::from_config(
        &config.historian,
        mc_cli::proxy_env(),
        llm::Sleeper::new(std::thread::sleep),
    )
}

/// The model a run of the loaded session uses, and why: the configured
/// chain, else the harness's own model (an OpenCode default first asks the
/// server whether its small_model costs no more than the session's).
pub(crate) fn choose(
    config: &Config,
    source: &Source,
    loaded: &Loaded,
    store: &Store,
) -> ModelChoice {
    let env = mc_cli::harness_env(source.opencode_url.as_deref(), false);
    let input = &loaded.input;
    // An unreadable session row only costs the recorded model.
    let model = choice::session_model(store.conn(), input).unwrap_or_default();
    let mut choice = choice::choose(
        &config.historian,
        &config.providers,
        &input.harness,
        &model,
        &env,
    );
    choice.ask_opencode(directory(input), &llm_options(config));
    choice
}

/// The model chain, with each provider's key read from the variable the user
/// config names (an unset variable leaves that provider without a key), and
/// the session an `opencode` provider makes its child session under.
pub(crate) fn client(
    config: &Config,
    choice: &ModelChoice,
    source: &Source,
    input: &Input,
) -> Result<Client, llm::LlmError> {
    if choice.source == ModelSource::None {
        return Err(choice.missing());
    }
    let keys = mc_cli::keys::chain_keys(&choice.chain, &choice.providers);
    let harness = llm::HarnessSession {
        opencode_url: mc_cli::harness_env(source.opencode_url.as_deref(), false).opencode_url,
        directory: directory(input).map(str::to_string),
        session_id: Some(input.session_id.clone()),
    };
    Ok(
        Client::new(&choice.providers, &choice.chain, &keys, llm_options(config))?
            .with_harness(harness),
    )
}

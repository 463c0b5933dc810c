//! The keys of a model chain: each provider's API key, read from the
//! variable its user config names (`providers.<name>.api_key_env`).

use std::collections::BTreeMap;

use mc_base::config::ProviderConfig;
use mc_llm::ModelRef;

/// The key of every provider `chain` (`provider/model` names) uses, from this
/// process's environment. A provider whose variable is unset or blank, or
/// whose config names none, has no key (the client fails or falls back when
/// it needs one).
pub fn chain_keys(
    chain: &[String],
    providers: &BTreeMap<String, ProviderConfig>,
) -> BTreeMap<String, String> {
    chain_keys_from(chain, providers, |var| std::env::var(var).ok())
}

/// [`chain_keys`] with the environment as `lookup`; each key is trimmed.
pub fn chain_keys_from(
    chain: &[String],
    providers: &BTreeMap<String, ProviderConfig>,
    lookup: impl Fn(&str) -> Option<String>,
) -> BTreeMap<String, String> {
    let mut keys = BTreeMap::new();
    for name in chain {
        let Some(model) = ModelRef::parse(name) else {
            continue;
        };
        let var = providers
            .get(&model.provider)
            .and_then(|p| p.api_key_env.as_deref());
        if let Some(key) = var.and_then(&lookup).filter(|k| !k.trim().is_empty()) {
            keys.insert(model.provider, key.trim().to_string());
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    fn providers(text: &str) -> BTreeMap<String, ProviderConfig> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.jsonc");
        std::fs::write(&path, text).unwrap();
        let layers = [mc_base::config::Layer::new(
            mc_base::config::Tier::User,
            path,
        )];
        mc_base::config::load(&layers).config.providers
    }

    #[test]
    fn each_provider_of_the_chain_gets_the_trimmed_key_its_variable_holds() {
        let providers = providers(
            r#"{"providers": {
                "a": {"kind": "anthropic", "base_url": "http://127.0.0.1:1", "api_key_env": "KEY_A"},
                "b": {"kind": "openai", "base_url": "http://127.0.0.1:2/v1", "api_key_env": "KEY_B"},
                "c": {"kind": "openai", "base_url": "http://127.0.0.1:3/v1"}
            }}"#,
        );
        let chain = [
            "a/m1".to_string(),
            "b/m2".to_string(),
            "c/m3".to_string(),
            "not a model".to_string(),
        ];
        let lookup = |var: &str| match var {
            "KEY_A" => Some("  sk-a \n".to_string()),
            "KEY_B" => Some("   ".to_string()),
            _ => None,
        };
        let keys = chain_keys_from(&chain, &providers, lookup);
        assert_eq!(
            keys.into_iter().collect::<Vec<_>>(),
            vec![("a".to_string(), "sk-a".to_string())]
        );
    }
}

//! Whether Codex's calls go through mc's gateway, read from Codex's own
//! `config.toml` (what `mc-doctor setup --harness codex` writes): the
//! provider it selects — `model_provider`, or the selected `profile`'s —
//! has mc's gateway's `/openai` as its `base_url`; and where Codex compacts
//! its own history. Pure: the caller reads the file (and knows where the
//! gateway listens).

/// The provider id Codex selects in `config_toml` (`None`: Codex's built-in
/// default, or a config that is not TOML), with that provider's `base_url`.
pub fn selected_provider(config_toml: &str) -> Option<(String, Option<String>)> {
    let doc = config_toml.parse::<toml_edit::DocumentMut>().ok()?;
    let text = |item: Option<&toml_edit::Item>| item?.as_str().map(str::to_string);
    let profile = text(doc.get("profile"))
        .and_then(|p| text(doc.get("profiles")?.get(p.as_str())?.get("model_provider")));
    let id = profile.or_else(|| text(doc.get("model_provider")))?;
    let base_url = text(
        doc.get("model_providers")
            .and_then(|p| p.get(id.as_str()))
            .and_then(|p| p.get("base_url")),
    );
    Some((id, base_url))
}

/// Whether `config_toml` selects a provider whose `base_url` is
/// `gateway_url` (`http://` + `gateway.listen` + `/openai`; a trailing `/`
/// on either side ignored).
pub fn selects_gateway(config_toml: &str, gateway_url: &str) -> bool {
    selected_provider(config_toml)
        .and_then(|(_, url)| url)
        .is_some_and(|url| url.trim_end_matches('/') == gateway_url.trim_end_matches('/'))
}

/// Where Codex compacts its own history, as `config_toml` sets it: Codex's
/// rule is `min(model_auto_compact_token_limit, 90 % of
/// model_context_window)` (the selected `profile`'s keys over the top
/// level's); `None` when neither key is set (Codex then takes the model's
/// own window, which mc does not know) or the config is not TOML. Through
/// the gateway this is mc's window for Codex's calls, so mc relieves the
/// context before Codex compacts it.
pub fn compaction_limit(config_toml: &str) -> Option<u64> {
    let doc = config_toml.parse::<toml_edit::DocumentMut>().ok()?;
    let profile = doc
        .get("profile")
        .and_then(toml_edit::Item::as_str)
        .and_then(|p| doc.get("profiles")?.get(p));
    let number = |key: &str| {
        profile
            .and_then(|p| p.get(key))
            .or_else(|| doc.get(key))
            .and_then(toml_edit::Item::as_integer)
            .and_then(|n| u64::try_from(n).ok())
            .filter(|&n| n > 0)
    };
    let auto = number("model_auto_compact_token_limit");
    match number("model_context_window") {
        Some(window) => {
            let nine_tenths = window.saturating_mul(9) / 10;
            Some(auto.map_or(nine_tenths, |a| a.min(nine_tenths)))
        }
        None => auto,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GATEWAY: &str = "http://127.0.0.1:4150/openai";

    #[test]
    fn the_selected_provider_s_base_url_says_whether_codex_goes_through_the_gateway() {
        let mc = "model = \"gpt-5\"\nmodel_provider = \"mc-gateway\"\n\n\
                  [model_providers.mc-gateway]\nname = \"mc gateway\"\n\
                  base_url = \"http://127.0.0.1:4150/openai/\"\nwire_api = \"responses\"\n\n\
                  [model_providers.own]\nbase_url = \"https://api.example.com/v1\"\n";
        assert!(selects_gateway(mc, GATEWAY));
        // Another port, the user's own provider, Codex's default, no TOML.
        assert!(!selects_gateway(mc, "http://127.0.0.1:4151/openai"));
        let own = mc.replace(
            "model_provider = \"mc-gateway\"",
            "model_provider = \"own\"",
        );
        assert!(!selects_gateway(&own, GATEWAY));
        assert_eq!(
            selected_provider(&own),
            Some(("own".into(), Some("https://api.example.com/v1".into())))
        );
        assert!(!selects_gateway("model = \"gpt-5\"\n", GATEWAY));
        assert_eq!(selected_provider("model = \"gpt-5\"\n"), None);
        assert!(!selects_gateway("model_provider = [", GATEWAY));
        // A selected profile's provider wins over the top level's.
        let profiled = format!(
            "profile = \"via-mc\"\n{own}\n[profiles.via-mc]\nmodel_provider = \"mc-gateway\"\n"
        );
        assert!(selects_gateway(&profiled, GATEWAY), "{profiled}");
    }

    #[test]
    fn codex_compacts_at_its_limit_or_at_nine_tenths_of_its_window() {
        let window = "model = \"gpt-5\"\nmodel_context_window = 200000\n";
        assert_eq!(compaction_limit(window), Some(180_000));
        let both = format!("model_auto_compact_token_limit = 50000\n{window}");
        assert_eq!(compaction_limit(&both), Some(50_000));
        // A limit above nine tenths of the window: Codex compacts at the latter.
        let high = format!("model_auto_compact_token_limit = 10000000\n{window}");
        assert_eq!(compaction_limit(&high), Some(180_000));
        let alone = "model_auto_compact_token_limit = 120000\n";
        assert_eq!(compaction_limit(alone), Some(120_000));
        // Nothing set, nonsense, not TOML: Codex's model decides, mc keeps its default.
        assert_eq!(compaction_limit("model = \"gpt-5\"\n"), None);
        assert_eq!(compaction_limit("model_context_window = -5\n"), None);
        assert_eq!(compaction_limit("model_context_window = \"big\"\n"), None);
        assert_eq!(compaction_limit("model_context_window = ["), None);
        // The selected profile's keys win over the top level's.
        let profiled = format!(
            "profile = \"small\"\n{window}\n[profiles.small]\nmodel_context_window = 100000\n"
        );
        assert_eq!(compaction_limit(&profiled), Some(90_000));
    }
}

//! Whether Codex's calls go through mc's gateway, read from Codex's own
//! `config.toml` (what `mc-doctor setup --harness codex` writes): the
//! provider it selects — `model_provider`, or the selected `profile`'s —
//! has mc's gateway's `/openai` as its `base_url`. Pure: the caller reads the
//! file (and knows where the gateway listens).

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
}

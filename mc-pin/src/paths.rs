//! The OpenCode server, as the environment names it. (The database and the
//! config layers are resolved by `mc_cli` over `mc_base::paths`.)

/// `OPENCODE_URL`: the OpenCode server, when no flag names one.
pub fn opencode_url_from_env() -> Option<String> {
    std::env::var("OPENCODE_URL")
        .ok()
        .filter(|v| !v.trim().is_empty())
}

//! Anthropic's Messages API: `POST <base_url>/v1/messages`.

use serde_json::{Value, json};

use super::http::{self, Http, Request};
use super::{CallFailure, Completion, LlmError, Prompt, Target};
use mc_base::tokens;

pub(super) const API_VERSION: &str = "2023-06-01";

/// The request; `key` is the API key, or a placeholder when describing it.
pub(super) fn request(target: &Target, prompt: &Prompt, key: Option<&str>) -> Request {
    let base = target.provider.effective_base_url().unwrap_or_default();
    let mut headers = vec![
        ("content-type", "application/json".to_string()),
        ("anthropic-version", API_VERSION.to_string()),
    ];
    if let Some(key) = key {
        headers.push(("x-api-key", key.to_string()));
    }
    Request {
        url: format!("{}/v1/messages", base.trim_end_matches('/')),
        headers,
        body: json!({
            "model": target.model.model,
            "max_tokens": prompt.max_tokens,
            "system": prompt.system,
            "messages": [{"role": "user", "content": prompt.user}],
        }),
    }
}

pub(super) fn call(http: &Http, target: &Target, prompt: &Prompt) -> Result<Completion, LlmError> {
    let model = &target.model;
    let request = request(target, prompt, target.key.as_deref());
    let answer = http.post(model, &request, target.key.as_deref())?;
    if !(200..300).contains(&answer.status) {
        return Err(http::status_error(model, &answer));
    }
    let value = http::parse_json(model, &answer)?;
    parse(target, prompt, &value)
}

fn parse(target: &Target, prompt: &Prompt, value: &Value) -> Result<Completion, LlmError> {
    let model = &target.model;
    let Some(content) = value.get("content").and_then(Value::as_array) else {
        return Err(LlmError::new(
            Some(model),
            CallFailure::Protocol,
            format!(
                "the answer has no \"content\" array: {}",
                super::excerpt(&value.to_string(), 500)
            ),
        ));
    };
    let text: String = content
        .iter()
        .filter(|block| block.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|block| block.get("text").and_then(Value::as_str))
        .collect();
    let usage = value.get("usage");
    let count = |field: &str| usage.and_then(|u| u.get(field)).and_then(Value::as_u64);
    let tokens_in = match count("input_tokens") {
        // The provider's numbers: any u64, so they saturate.
        Some(n) => n
            .saturating_add(count("cache_creation_input_tokens").unwrap_or(0))
            .saturating_add(count("cache_read_input_tokens").unwrap_or(0)),
        None => {
            u64::from(tokens::estimate(&prompt.system)) + u64::from(tokens::estimate(&prompt.user))
        }
    };
    let tokens_out = count("output_tokens").unwrap_or_else(|| u64::from(tokens::estimate(&text)));
    Ok(Completion {
        truncated: value.get("stop_reason").and_then(Value::as_str) == Some("max_tokens"),
        text,
        model: model.clone(),
        tokens_in,
        tokens_out,
    })
}

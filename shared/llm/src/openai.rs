//! OpenAI-compatible chat completions: `POST <base_url>/chat/completions`
//! (OpenAI, OpenRouter, Ollama, llama.cpp, LM Studio, vLLM).

use serde_json::{Value, json};

use super::http::{self, Http, Request};
use super::{CallFailure, Completion, LlmError, Prompt, Target};
use mc_base::tokens;

/// The request. `max_tokens` is the field every compatible server knows;
/// OpenAI's reasoning models want `max_completion_tokens` instead, so a 400
/// naming it is retried once with that field (`completion_tokens_field`).
pub(super) fn request(
    target: &Target,
    prompt: &Prompt,
    key: Option<&str>,
    completion_tokens_field: bool,
) -> Request {
    let base = target.provider.effective_base_url().unwrap_or_default();
    let mut headers = vec![("content-type", "application/json".to_string())];
    if let Some(key) = key {
        headers.push(("authorization", format!("Bearer {key}")));
    }
    let mut body = json!({
        "model": target.model.model,
        "messages": [
            {"role": "system", "content": prompt.system},
            {"role": "user", "content": prompt.user},
        ],
    });
    let field = if completion_tokens_field {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    if let Some(body) = body.as_object_mut() {
        body.insert(field.into(), json!(prompt.max_tokens));
    }
    Request {
        url: format!("{}/chat/completions", base.trim_end_matches('/')),
        headers,
        body,
    }
}

pub(super) fn call(http: &Http, target: &Target, prompt: &Prompt) -> Result<Completion, LlmError> {
    let model = &target.model;
    let key = target.key.as_deref();
    let mut answer = http.post(model, &request(target, prompt, key, false), key)?;
    if answer.status == 400 && answer.body.contains("max_completion_tokens") {
        answer = http.post(model, &request(target, prompt, key, true), key)?;
    }
    if !(200..300).contains(&answer.status) {
        return Err(http::status_error(model, &answer));
    }
    let value = http::parse_json(model, &answer)?;
    parse(target, prompt, &value)
}

fn parse(target: &Target, prompt: &Prompt, value: &Value) -> Result<Completion, LlmError> {
    let model = &target.model;
    // Some routers answer 200 with an error object when the upstream failed.
    if let Some(error) = value.get("error").filter(|e| !e.is_null()) {
        let code = error
            .get("code")
            .and_then(Value::as_u64)
            .filter(|c| (400..600).contains(c))
            .unwrap_or(502) as u16;
        return Err(LlmError::new(
            Some(model),
            CallFailure::Status(code),
            format!(
                "error in a 200 answer: {}",
                super::excerpt(&error.to_string(), 1_000)
            ),
        ));
    }
    let Some(choice) = value
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
    else {
        return Err(LlmError::new(
            Some(model),
            CallFailure::Protocol,
            format!(
                "the answer has no \"choices\": {}",
                super::excerpt(&value.to_string(), 500)
            ),
        ));
    };
    let text = choice
        .get("message")
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let usage = value.get("usage");
    let count = |field: &str| usage.and_then(|u| u.get(field)).and_then(Value::as_u64);
    Ok(Completion {
        truncated: choice.get("finish_reason").and_then(Value::as_str) == Some("length"),
        tokens_in: count("prompt_tokens").unwrap_or_else(|| {
            u64::from(tokens::estimate(&prompt.system)) + u64::from(tokens::estimate(&prompt.user))
        }),
        tokens_out: count("completion_tokens")
            .unwrap_or_else(|| u64::from(tokens::estimate(&text))),
        text,
        model: model.clone(),
    })
}

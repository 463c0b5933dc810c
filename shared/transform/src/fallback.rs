//! What a call gets when its pass cannot run (the store locked past the
//! hook's wait, corrupt or gone, a panic): never more than the harness can
//! send, and where mc's own shape of the session is known, that shape.
//!
//! - [`last_shape`]: a resident process knows the messages it answered last
//!   for the session (by fingerprint, [`Kept`]). The call gets those again,
//!   byte for byte (replayed drops, the head), and after them the input
//!   messages that are new or changed since: the provider's cached prefix
//!   holds, and nothing mc took out comes back.
//! - [`fit_raw`]: nothing is held (a one-shot process, a first call). The
//!   raw messages go out when they fit the usable window; otherwise the
//!   oldest turns are left out, whole, behind one marker message, and the
//!   report says how many.
//!
//! Both are pure: they read the input and what the caller holds.

use serde::Serialize;
use serde_json::Value;

use crate::incremental::Kept;
use mc_base::codec::{Message, Wire};
use mc_base::tokens;

/// How a call that mc could not prepare went out, as the report's
/// `fallback` says it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fallback {
    /// `last_shape`, `raw` (the input fits) or `cut` (the oldest turns left out).
    pub shape: &'static str,
    /// Raw messages left out (`cut`).
    #[serde(skip_serializing_if = "is_zero")]
    pub left_out: usize,
    /// The estimate of what went out, tokens (`raw`, `cut`).
    #[serde(skip_serializing_if = "is_zero")]
    pub tokens: u64,
    /// The usable window it was measured against (`raw`, `cut`).
    #[serde(skip_serializing_if = "is_zero")]
    pub window: u64,
    /// `cut`: even the newest turn alone is larger than the window.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub over_window: bool,
}

fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}

/// How many leading items of an incremental delta stand for the base
/// input's message at their own index: named by that index, or sent again
/// with the same `info.id` and the same parts (the harness changed only the
/// message's metadata, as OpenCode does when a turn ends). The input's
/// unchanged prefix, for what the model reads.
pub fn unchanged_prefix(items: &[Value], base: &[Value]) -> usize {
    items
        .iter()
        .enumerate()
        .take_while(|(i, item)| {
            if item.as_u64() == u64::try_from(*i).ok() {
                return true;
            }
            let Some(was) = base.get(*i) else {
                return false;
            };
            let id = |m: &Value| m.get("info").and_then(|i| i.get("id")).cloned();
            item.is_object()
                && id(item).is_some()
                && id(item) == id(was)
                && item.get("parts").is_some()
                && item.get("parts") == was.get("parts")
        })
        .count()
}

/// The previous answer again, then the input from its first new or changed
/// message on: an output in [`crate::incremental::delta_of`]'s terms (an
/// index names a message of `previous`). `base_len`: how many messages the
/// previous input had; `unchanged`: how many of them lead `input` as they
/// were ([`unchanged_prefix`]). `None` when the shape cannot be joined to
/// the input: nothing unchanged, or the first changed message is not one the
/// previous answer showed by its id.
pub fn last_shape(
    previous: &[Kept],
    base_len: usize,
    unchanged: usize,
    input: &[Value],
) -> Option<Vec<Value>> {
    if unchanged == 0 || previous.is_empty() || unchanged > input.len() {
        return None;
    }
    let keep = if unchanged >= base_len {
        previous.len()
    } else {
        // A message the harness rewrote in place (an answer that grew): the
        // previous answer up to its old rendering, then its new version.
        let id = input.get(unchanged)?.get("info")?.get("id")?.as_str()?;
        previous.iter().position(|kept| kept.id() == Some(id))?
    };
    if keep == 0 {
        return None;
    }
    let mut out: Vec<Value> = (0..keep).map(Value::from).collect();
    out.extend(input.get(unchanged..)?.iter().cloned());
    Some(out)
}

/// The text of the marker in front of a cut history.
pub fn cut_marker(left_out: usize) -> String {
    format!(
        "[mc: the {left_out} oldest messages of this session are left out of this call. mc could \
         not prepare it, and the whole history is larger than the model's window. Nothing is \
         lost: the next call mc prepares shows its view of them again.]"
    )
}

/// A message's size as the fallback counts it: the estimate of its JSON
/// text in OpenCode's shape (more than the provider counts, never less by much).
fn message_tokens(message: &Message) -> u64 {
    let text = serde_json::to_string(&message.clone().encode()).unwrap_or_default();
    u64::from(tokens::estimate(&text))
}

/// The raw messages of a call mc could not prepare, made to fit `window`
/// tokens: unchanged when they fit (or nothing can be cut), else the oldest
/// turns left out whole (a turn starts at a message a person typed) behind
/// one marker message. Returns the messages to send and what was done.
pub fn fit_raw(
    harness: &str,
    session_id: Option<&str>,
    values: Vec<Value>,
    window: u64,
) -> (Vec<Value>, Fallback) {
    let raw = |values, tokens| {
        (
            values,
            Fallback {
                shape: "raw",
                left_out: 0,
                tokens,
                window,
                over_window: tokens > window,
            },
        )
    };
    let total: u64 = values
        .iter()
        .map(|v| {
            u64::from(tokens::estimate(
                &serde_json::to_string(v).unwrap_or_default(),
            ))
        })
        .sum();
    if total <= window {
        return raw(values, total);
    }
    let Ok(decoded) = Wire::decode(harness, session_id, values.clone()) else {
        return raw(values, total);
    };
    let sizes: Vec<u64> = decoded.messages.iter().map(message_tokens).collect();
    let Some(plan) = plan_cut(&decoded.messages, &sizes, window) else {
        return raw(values, total);
    };
    let session = session_id.map(str::to_string).or_else(|| {
        decoded
            .messages
            .iter()
            .find_map(|m| m.session_id().map(str::to_string))
    });
    let mut messages = decoded.messages;
    let kept = messages.split_off(plan.start);
    let mut out = Vec::with_capacity(kept.len() + 1);
    out.push(marker_message(session.as_deref(), &cut_marker(plan.start)));
    out.extend(kept);
    (
        decoded.wire.encode(out),
        Fallback {
            shape: "cut",
            left_out: plan.start,
            tokens: plan.tokens,
            window,
            over_window: plan.tokens > window,
        },
    )
}

/// Where the kept messages start, and what they and the marker come to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CutPlan {
    start: usize,
    tokens: u64,
}

/// The oldest turn start from which the rest and the marker fit; else the
/// newest turn start (keeping less would split a turn). `None` when no
/// message after the first starts a turn.
fn plan_cut(messages: &[Message], sizes: &[u64], window: u64) -> Option<CutPlan> {
    let marker = u64::from(tokens::estimate(&cut_marker(messages.len()))) + 4;
    let mut suffix = vec![0u64; sizes.len() + 1];
    for (i, size) in sizes.iter().enumerate().rev() {
        let after = suffix.get(i + 1).copied().unwrap_or(0);
        if let Some(slot) = suffix.get_mut(i) {
            *slot = after + size;
        }
    }
    let starts: Vec<usize> = messages
        .iter()
        .enumerate()
        .skip(1)
        .filter(|(_, m)| m.is_real_user())
        .map(|(i, _)| i)
        .collect();
    let fits = starts
        .iter()
        .copied()
        .find(|&i| suffix.get(i).copied().unwrap_or(0) + marker <= window);
    let start = fits.or_else(|| starts.last().copied())?;
    Some(CutPlan {
        start,
        tokens: suffix.get(start).copied().unwrap_or(0) + marker,
    })
}

fn marker_message(session_id: Option<&str>, text: &str) -> Message {
    let mut info = serde_json::Map::new();
    info.insert("role".into(), Value::from("user"));
    if let Some(session) = session_id {
        info.insert("sessionID".into(), Value::from(session));
    }
    crate::render::synthetic_message(Value::Object(info), text)
}

#[cfg(test)]
mod tests;

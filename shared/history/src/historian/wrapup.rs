//! `mc-historian wrapup --keep N`: fold everything but the newest `N` raw
//! messages now, whatever the pressure, in chunks of `historian.chunk_tokens`
//! under the session's lease (the run loop in [`super`] does the folding;
//! this module decides where the kept tail starts).
//!
//! The count is of raw messages (tool calls included, since a call and its
//! result are one message here), not of user turns. The kept tail then
//! grows back to the start of the turn it cuts into, so the fold ends on a
//! turn boundary, and a call still waiting for its result is never folded.

use super::transcript::TailMessage;

/// The default of `--keep`.
pub const DEFAULT_KEEP: usize = 20;

/// `tail[..end]` may be folded: all but the newest `keep` messages (at
/// least one is always kept), moved back to the newest real user message at
/// or before that point (when one is there, after the first message), and
/// before the first message with an open tool call.
pub fn eligible_end(tail: &[TailMessage<'_>], keep: usize) -> usize {
    let mut end = tail.len().saturating_sub(keep.max(1));
    if let Some(user) = tail
        .iter()
        .take(end + 1)
        .rposition(|t| t.message.is_real_user())
        .filter(|&u| u > 0)
    {
        end = end.min(user);
    }
    if let Some(open) = tail
        .iter()
        .take(end)
        .position(|t| super::transcript::has_open_call(t.message))
    {
        end = open;
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;
    use mc_base::codec::Message;
    use mc_base::codec::opencode::decode_all;
    use serde_json::json;

    /// Messages from roles: `u` user, `a` assistant, `o` an assistant with an open call.
    fn messages(roles: &str) -> Vec<Message> {
        let values = roles
            .chars()
            .enumerate()
            .map(|(i, r)| {
                let role = if r == 'u' { "user" } else { "assistant" };
                let part = if r == 'o' {
                    json!({"id": format!("p{i}"), "type": "tool", "callID": format!("c{i}"), "tool": "bash",
                           "state": {"status": "running", "input": {"command": "sleep 9"}}})
                } else {
                    json!({"id": format!("p{i}"), "type": "text", "text": format!("message {i}")})
                };
                json!({"info": {"id": format!("m{i}"), "sessionID": "s", "role": role,
                                "time": {"created": i}},
                       "parts": [part]})
            })
            .collect();
        decode_all(values).unwrap()
    }

    fn end(roles: &str, keep: usize) -> usize {
        let messages = messages(roles);
        let tail: Vec<TailMessage<'_>> = messages
            .iter()
            .enumerate()
            .map(|(i, message)| TailMessage {
                ordinal: i as i64 + 1,
                message,
                tokens: 100,
            })
            .collect();
        eligible_end(&tail, keep)
    }

    #[test]
    fn keeps_the_newest_n_messages_and_snaps_back_to_a_turn_start() {
        // Ten messages in turns of two: keeping 4 folds the first six.
        assert_eq!(end("uauauauaua", 4), 6);
        // Keeping 3 cuts into a turn: the whole turn stays.
        assert_eq!(end("uauauauaua", 3), 6);
        // A long turn of tool calls: the count stands when no user message
        // is after the first.
        assert_eq!(end("uaaaaaaaaa", 3), 7);
        // Everything kept, and at least one message always.
        assert_eq!(end("uaua", 4), 0);
        assert_eq!(end("uaua", 10), 0);
        assert_eq!(end("uaua", 0), 2, "keep 0 keeps the newest turn");
        assert_eq!(end("", 2), 0);
    }

    #[test]
    fn an_open_call_is_never_folded() {
        assert_eq!(end("uauouauaua", 2), 3);
        assert_eq!(end("uauauauaua", 2), 8);
    }
}

//! Replace estimated token counts with exact ones (the reference tokenizer).
//!
//! Kept off the per-call path: loading the tokenizer alone costs more than a
//! whole pass. Callers run it in the background after a pass, or the
//! historian does it while it reads the same messages anyway.

use rusqlite::{OptionalExtension, params};
use serde::Serialize;

use mc_base::codec::PartKind;
use mc_base::codec::Wire;
use mc_base::error::Result;
use mc_base::store::Store;
use mc_base::tokens;

use mc_base::domain::envelope::Envelope;
use mc_base::domain::messages::session_from_messages;
use mc_base::domain::notation::strip_leading_tags;
use mc_base::domain::sessions;
use mc_base::domain::tags::{TagKind, part_identity};

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct RecountResult {
    /// Tags whose estimate was replaced by the exact count.
    pub recounted: u64,
    /// Tags already exact.
    pub exact: u64,
    /// Parts with no tag in the store (not seen by a pass yet).
    pub untagged: u64,
    /// Sum over recounted tags of (exact − estimate): how far the estimate was off.
    pub estimate_error_tokens: i64,
}

pub fn recount(store: &mut Store, envelope: Envelope) -> Result<RecountResult> {
    let messages = Wire::decode(
        &envelope.harness,
        envelope.session_id.as_deref(),
        envelope.messages,
    )?
    .messages;
    let mut result = RecountResult::default();
    let Some(session_id) = envelope
        .session_id
        .clone()
        .or_else(|| session_from_messages(&messages))
    else {
        return Ok(result);
    };
    let Some(session) = sessions::find_session(store.conn(), &envelope.harness, &session_id)?
    else {
        return Ok(result);
    };
    // Tokenize outside the write lock; write the counts in one transaction.
    let mut updates = Vec::new();
    {
        let conn = store.conn();
        let mut find = conn.prepare(
            "SELECT number, tokens, input_tokens, tokens_exact FROM tags WHERE session = ?1 AND identity = ?2",
        )?;
        for message in &messages {
            let Some(message_id) = message.id() else {
                continue;
            };
            for (index, part) in message.parts.iter().enumerate() {
                let Some((kind, identity)) = part_identity(message_id, index, part) else {
                    continue;
                };
                let row: Option<(i64, i64, i64, bool)> = find
                    .query_row(params![session.id, identity], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                    })
                    .optional()?;
                let Some((number, old_tokens, old_input, exact)) = row else {
                    result.untagged +=
                        u64::from(part.kind != PartKind::Tool || part.tool_output().is_some());
                    continue;
                };
                if exact {
                    result.exact += 1;
                    continue;
                }
                let (count, input) = match kind {
                    TagKind::Message => (
                        tokens::exact(strip_leading_tags(part.text().unwrap_or_default())),
                        0,
                    ),
                    TagKind::File => {
                        let url = part.file_url().unwrap_or_default();
                        if url.starts_with("data:image/") {
                            (old_tokens as u32, 0)
                        } else {
                            (tokens::exact(url), 0)
                        }
                    }
                    TagKind::Tool => {
                        let input = part
                            .tool_input()
                            .map(|v| serde_json::to_string(v).unwrap_or_default())
                            .unwrap_or_default();
                        (
                            tokens::exact(strip_leading_tags(
                                part.tool_output().unwrap_or_default(),
                            )),
                            tokens::exact(&input),
                        )
                    }
                };
                result.estimate_error_tokens +=
                    i64::from(count) + i64::from(input) - old_tokens - old_input;
                updates.push((number, i64::from(count), i64::from(input)));
            }
        }
    }
    store.write(|tx| {
        let mut update = tx.prepare_cached(
            "UPDATE tags SET tokens = ?3, input_tokens = ?4, tokens_exact = 1
             WHERE session = ?1 AND number = ?2 AND tokens_exact = 0",
        )?;
        for (number, count, input) in &updates {
            result.recounted += update.execute(params![session.id, number, count, input])? as u64;
        }
        Ok(())
    })?;
    Ok(result)
}

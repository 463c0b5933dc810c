//! `mc-historian recomp`: rebuild a session's compartments from its raw
//! history. The run loop in [`super`] folds the range the old compartments
//! covered again, chunk by chunk under the session's lease, keeping the new
//! compartments here instead of publishing them; facts of these answers are
//! dropped (a recompute adds no memory, and curated memory is left as it
//! is). Only when the new compartments reach where the old ones ended do
//! they replace them, in one transaction that checks the lease and that
//! nothing was published meanwhile; a cached head rebuilds at its next
//! busting pass (a `recompute` edit), never busting by itself.

use rusqlite::Connection;

use mc_base::error::Result;

use super::failure::Refusal;
use super::publish;
use crate::decay::Compartment;
use crate::store::{self, NewCompartment, StoredCompartment};

/// The compartments a recompute has built so far, and the range it rebuilds.
#[derive(Debug, Clone, Default)]
pub struct Staged {
    /// Where the old compartments ended: the range to rebuild is `1..=through`.
    pub through: i64,
    pub compartments: Vec<NewCompartment>,
}

impl Staged {
    pub fn new(through: i64) -> Staged {
        Staged {
            through,
            compartments: Vec::new(),
        }
    }

    /// Where the new compartments end (0: none yet).
    pub fn covered(&self) -> i64 {
        self.compartments.last().map_or(0, |c| c.end_ordinal)
    }

    /// The new compartments as the next chunk's prompt shows earlier work.
    pub fn earlier(&self) -> Vec<StoredCompartment> {
        self.compartments
            .iter()
            .zip(1..)
            .map(|(c, sequence)| StoredCompartment {
                compartment: Compartment {
                    sequence,
                    start_ordinal: c.start_ordinal,
                    end_ordinal: c.end_ordinal,
                    start_ms: c.start_ms,
                    end_ms: c.end_ms,
                    title: c.title.clone(),
                    tiers: c.tiers.clone(),
                    importance: c.importance,
                },
                end_message_id: c.end_message_id.clone(),
            })
            .collect()
    }
}

/// Replace the session's compartments with the staged ones (`conn` is
/// inside the transaction). Returns the new sequences, or why not.
pub fn replace(
    conn: &Connection,
    session: i64,
    holder: &str,
    staged: &Staged,
    now_ms: i64,
) -> Result<std::result::Result<Vec<i64>, Refusal>> {
    if !publish::holds_lease(conn, session, holder)? {
        return Ok(Err(Refusal::LeaseLost));
    }
    let found = publish::covered_through(conn, session)?;
    if found != staged.through {
        return Ok(Err(Refusal::Moved {
            expected: staged.through,
            found,
        }));
    }
    if staged.covered() < staged.through {
        return Ok(Err(Refusal::Incomplete {
            through: staged.through,
            reached: staged.covered(),
        }));
    }
    Ok(Ok(store::replace_compartments(
        conn,
        session,
        &staged.compartments,
        now_ms,
    )?))
}

//! Restorations claim their compaction before anything is sent.
//!
//! Two restorers can see one compaction at once (two configured hooks, a
//! replayed event racing the original, OpenChamber and mc on one server). A
//! cursor read before the send and written after it cannot stop both from
//! sending; a claim can. A restorer inserts one row for (harness, session,
//! compaction) with `INSERT … ON CONFLICT DO NOTHING` inside a write
//! transaction, and only the one whose insert went in sends. The row says
//! `sending` until the send is out, then `done`.
//!
//! A compaction is restored at most once, and never lost to a failure:
//! - a send that fails deletes its claim ([`release`]), so the next event for
//!   the compaction can try again;
//! - a holder that died (killed between claim and send) leaves a `sending`
//!   row; after [`CLAIM_TIMEOUT_MS`] the next restorer takes it over. Until
//!   then restorers answer `in_progress` and send nothing.
//!
//! Dry runs look ([`find`]) but never claim.

use rusqlite::{Connection, params};

use mc_base::error::Result;

/// How long a `sending` claim holds off other restorers: 5 minutes. A live
/// holder needs far less (OpenCode: a few requests of at most 15 s each; a
/// hook: printing its output), so an older one is taken to have died.
pub const CLAIM_TIMEOUT_MS: i64 = 5 * 60 * 1000;

/// A claim's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Claimed; the restoration is being sent.
    Sending,
    /// Sent (OpenCode) or printed (a hook).
    Done,
}

/// A stored claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub id: i64,
    /// The compaction's key as its claimer saw it.
    pub compaction: String,
    pub state: State,
    pub claimed_ms: i64,
}

/// A claim this process won: send, then [`finish`] it, or [`release`] it
/// when the send failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub id: i64,
    pub compaction: String,
}

/// What is known about a compaction's claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Restored already; the key of the claim that says so.
    Done(String),
    /// Another restorer is sending it now.
    InProgress,
    /// Nobody holds it. `stale`: `sending` claims whose holders died.
    Free { stale: Vec<i64> },
}

/// What [`take`] got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Won(Claim),
    Done(String),
    InProgress,
}

/// Every claim of a session, oldest first.
pub fn rows(conn: &Connection, harness: &str, session_id: &str) -> Result<Vec<Row>> {
    let mut stmt = conn.prepare(
        "SELECT id, compaction, state, claimed_ms FROM restore_claims
         WHERE harness = ?1 AND session_id = ?2 ORDER BY id",
    )?;
    let rows = stmt
        .query_map(params![harness, session_id], |r| {
            let state: String = r.get(2)?;
            Ok(Row {
                id: r.get(0)?,
                compaction: r.get(1)?,
                state: if state == "done" {
                    State::Done
                } else {
                    State::Sending
                },
                claimed_ms: r.get(3)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// The claims about `compaction`: rows with its key, and rows `same` says
/// are about it too (a harness whose compactions have several names). Read
/// only; a dry run's look.
pub fn find(
    conn: &Connection,
    harness: &str,
    session_id: &str,
    compaction: &str,
    now_ms: i64,
    same: impl Fn(&Row) -> bool,
) -> Result<Found> {
    let matching: Vec<Row> = rows(conn, harness, session_id)?
        .into_iter()
        .filter(|r| r.compaction == compaction || same(r))
        .collect();
    if let Some(done) = matching.iter().find(|r| r.state == State::Done) {
        return Ok(Found::Done(done.compaction.clone()));
    }
    let (live, stale): (Vec<&Row>, Vec<&Row>) = matching
        .iter()
        .partition(|r| now_ms.saturating_sub(r.claimed_ms) < CLAIM_TIMEOUT_MS);
    if !live.is_empty() {
        return Ok(Found::InProgress);
    }
    Ok(Found::Free {
        stale: stale.iter().map(|r| r.id).collect(),
    })
}

/// Claim `compaction` for this process. Call it inside [`Store::write`]
/// (one `BEGIN IMMEDIATE` transaction): the look and the insert must not be
/// separated by another restorer's claim. Stale claims of the compaction are
/// taken over (deleted, then a fresh row inserted).
///
/// [`Store::write`]: mc_base::store::Store::write
pub fn take(
    conn: &Connection,
    harness: &str,
    session_id: &str,
    compaction: &str,
    now_ms: i64,
    same: impl Fn(&Row) -> bool,
) -> Result<Outcome> {
    match find(conn, harness, session_id, compaction, now_ms, same)? {
        Found::Done(key) => Ok(Outcome::Done(key)),
        Found::InProgress => Ok(Outcome::InProgress),
        Found::Free { stale } => {
            for id in stale {
                conn.execute(
                    "DELETE FROM restore_claims WHERE id = ?1 AND state = 'sending'",
                    params![id],
                )?;
            }
            let inserted = conn.execute(
                "INSERT INTO restore_claims (harness, session_id, compaction, state, claimed_ms)
                 VALUES (?1, ?2, ?3, 'sending', ?4)
                 ON CONFLICT (harness, session_id, compaction) DO NOTHING",
                params![harness, session_id, compaction, now_ms],
            )?;
            if inserted == 0 {
                // Another restorer's row: only possible outside a write transaction.
                return Ok(Outcome::InProgress);
            }
            Ok(Outcome::Won(Claim {
                id: conn.last_insert_rowid(),
                compaction: compaction.to_string(),
            }))
        }
    }
}

/// The restoration is out: the claim becomes `done`. False when the claim
/// was no longer there (taken over after [`CLAIM_TIMEOUT_MS`]).
pub fn finish(conn: &Connection, claim: &Claim, now_ms: i64) -> Result<bool> {
    let updated = conn.execute(
        "UPDATE restore_claims SET state = 'done', done_ms = ?2 WHERE id = ?1 AND state = 'sending'",
        params![claim.id, now_ms],
    )?;
    Ok(updated == 1)
}

/// The send failed: give the compaction back, so the next event can try it.
pub fn release(conn: &Connection, claim: &Claim) -> Result<()> {
    conn.execute(
        "DELETE FROM restore_claims WHERE id = ?1 AND state = 'sending'",
        params![claim.id],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mc_base::store::Store;

    const H: &str = "opencode";
    const S: &str = "ses_1";

    fn take_key(store: &mut Store, key: &str, now: i64) -> Outcome {
        store
            .write(|tx| take(tx, H, S, key, now, |_| false))
            .unwrap()
    }

    #[test]
    fn only_the_first_claim_wins_until_it_is_finished_or_released() {
        let mut store = Store::open_in_memory().unwrap();
        let Outcome::Won(claim) = take_key(&mut store, "msg_s1", 1_000) else {
            panic!("the first claim wins");
        };
        assert_eq!(take_key(&mut store, "msg_s1", 1_001), Outcome::InProgress);
        // Another compaction of the session is not held up.
        assert!(matches!(
            take_key(&mut store, "msg_s2", 1_001),
            Outcome::Won(_)
        ));
        // A failed send gives the compaction back.
        store.write(|tx| release(tx, &claim)).unwrap();
        let Outcome::Won(again) = take_key(&mut store, "msg_s1", 1_002) else {
            panic!("a released compaction can be claimed again");
        };
        assert!(store.write(|tx| finish(tx, &again, 1_003)).unwrap());
        assert_eq!(
            take_key(&mut store, "msg_s1", 1_004),
            Outcome::Done("msg_s1".into())
        );
        // Releasing a finished claim changes nothing.
        store.write(|tx| release(tx, &again)).unwrap();
        assert_eq!(
            take_key(&mut store, "msg_s1", 1_005),
            Outcome::Done("msg_s1".into())
        );
    }

    #[test]
    fn a_dead_holders_claim_is_taken_over_after_the_timeout() {
        let mut store = Store::open_in_memory().unwrap();
        let Outcome::Won(dead) = take_key(&mut store, "msg_s1", 0) else {
            panic!()
        };
        assert_eq!(
            take_key(&mut store, "msg_s1", CLAIM_TIMEOUT_MS - 1),
            Outcome::InProgress
        );
        let Outcome::Won(new) = take_key(&mut store, "msg_s1", CLAIM_TIMEOUT_MS) else {
            panic!("a stale claim is taken over");
        };
        assert_ne!(new.id, dead.id);
        // The dead holder coming back cannot finish or release the new claim.
        assert!(!store.write(|tx| finish(tx, &dead, 1)).unwrap());
        store.write(|tx| release(tx, &dead)).unwrap();
        assert_eq!(
            take_key(&mut store, "msg_s1", CLAIM_TIMEOUT_MS + 1),
            Outcome::InProgress
        );
    }

    #[test]
    fn other_names_of_a_compaction_count_and_sessions_are_apart() {
        let mut store = Store::open_in_memory().unwrap();
        assert!(matches!(take_key(&mut store, "b1", 10), Outcome::Won(_)));
        let outcome = store
            .write(|tx| take(tx, H, S, "s1", 11, |r| r.compaction == "b1"))
            .unwrap();
        assert_eq!(outcome, Outcome::InProgress);
        let other = store
            .write(|tx| take(tx, H, "ses_2", "b1", 11, |_| false))
            .unwrap();
        assert!(matches!(other, Outcome::Won(_)));
        let harness = store
            .write(|tx| take(tx, "claude-code", S, "b1", 11, |_| false))
            .unwrap();
        assert!(matches!(harness, Outcome::Won(_)));
    }
}

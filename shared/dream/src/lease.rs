//! Leases: one holder per (project, domain). Every task that changes a
//! project's memories takes the domain `memory`, so two of them never
//! interleave; other tasks take their own name. A lease has a time to live,
//! renewed (its heartbeat) before every model call and before applying; a
//! lease that ran out, or whose holder process on this host is gone, is
//! taken over.

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use mc_base::error::Result;

/// Who holds a lease, for what, and until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lease {
    pub holder: String,
    pub task: String,
    pub acquired_ms: i64,
    pub heartbeat_ms: i64,
    pub expires_ms: i64,
}

/// The lease name of an mc-dream process: the host, its pid, and a nonce
/// that tells two runs of one pid apart. Ticks on two machines share a
/// database only through a network file system; each tells its own
/// processes' liveness, the other's only by expiry.
pub fn holder_name(host: &str, pid: u32, nonce: u128) -> String {
    format!("mc-dream on {host} pid {pid} at {nonce}")
}

/// Whether `holder` may still be running, seen from `host`: a holder on
/// this host whose process is gone (Linux: no `/proc/<pid>`) is dead;
/// anything else is taken to be alive until its lease expires.
fn alive(holder: &str, host: &str) -> bool {
    let Some(rest) = holder.strip_prefix("mc-dream on ") else {
        return true;
    };
    let Some((their_host, rest)) = rest.split_once(" pid ") else {
        return true;
    };
    let pid = rest.split(' ').next().and_then(|p| p.parse::<u32>().ok());
    match pid {
        Some(pid) if their_host == host && std::path::Path::new("/proc/self").exists() => {
            std::path::Path::new(&format!("/proc/{pid}")).exists()
        }
        _ => true,
    }
}

pub fn current(conn: &Connection, project: &str, domain: &str) -> Result<Option<Lease>> {
    Ok(conn
        .prepare_cached(
            "SELECT holder, task, acquired_ms, heartbeat_ms, expires_ms FROM dream_leases
             WHERE project = ?1 AND domain = ?2",
        )?
        .query_row(params![project, domain], |r| {
            Ok(Lease {
                holder: r.get(0)?,
                task: r.get(1)?,
                acquired_ms: r.get(2)?,
                heartbeat_ms: r.get(3)?,
                expires_ms: r.get(4)?,
            })
        })
        .optional()?)
}

/// Whether `lease` still keeps others out at `now_ms`, seen from `host`.
pub fn blocks(lease: &Lease, holder: &str, host: &str, now_ms: i64) -> bool {
    lease.holder != holder && lease.expires_ms > now_ms && alive(&lease.holder, host)
}

/// Take the lease for `ttl_ms`, unless another live holder has it (returned
/// as `Err`). Run inside a write transaction.
#[allow(clippy::too_many_arguments)]
pub fn acquire(
    conn: &Connection,
    project: &str,
    domain: &str,
    task: &str,
    holder: &str,
    host: &str,
    now_ms: i64,
    ttl_ms: i64,
) -> Result<std::result::Result<(), Lease>> {
    if let Some(lease) = current(conn, project, domain)?
        && blocks(&lease, holder, host, now_ms)
    {
        return Ok(Err(lease));
    }
    conn.execute(
        "INSERT INTO dream_leases (project, domain, holder, task, acquired_ms, heartbeat_ms, expires_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6)
         ON CONFLICT (project, domain) DO UPDATE SET holder = ?3, task = ?4, acquired_ms = ?5,
             heartbeat_ms = ?5, expires_ms = ?6",
        params![project, domain, holder, task, now_ms, now_ms.saturating_add(ttl_ms)],
    )?;
    Ok(Ok(()))
}

/// The heartbeat: extend a lease we hold; false when it is no longer ours.
pub fn renew(
    conn: &Connection,
    project: &str,
    domain: &str,
    holder: &str,
    now_ms: i64,
    ttl_ms: i64,
) -> Result<bool> {
    let n = conn.execute(
        "UPDATE dream_leases SET heartbeat_ms = ?4, expires_ms = ?5
         WHERE project = ?1 AND domain = ?2 AND holder = ?3",
        params![
            project,
            domain,
            holder,
            now_ms,
            now_ms.saturating_add(ttl_ms)
        ],
    )?;
    Ok(n > 0)
}

/// Whether we still hold the lease (checked in the transaction that applies).
pub fn holds(conn: &Connection, project: &str, domain: &str, holder: &str) -> Result<bool> {
    Ok(current(conn, project, domain)?.is_some_and(|l| l.holder == holder))
}

pub fn release(conn: &Connection, project: &str, domain: &str, holder: &str) -> Result<()> {
    conn.execute(
        "DELETE FROM dream_leases WHERE project = ?1 AND domain = ?2 AND holder = ?3",
        params![project, domain, holder],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mc_base::store::Store;

    #[test]
    fn one_holder_until_expiry_or_death() {
        let store = Store::open_in_memory().unwrap();
        let c = store.conn();
        let me = holder_name("h", std::process::id(), 1);
        let other = holder_name("h", std::process::id(), 2);
        assert_eq!(
            acquire(c, "p", "memory", "verify", &me, "h", 1_000, 500).unwrap(),
            Ok(())
        );
        let held = acquire(c, "p", "memory", "classify", &other, "h", 1_100, 500)
            .unwrap()
            .unwrap_err();
        assert_eq!(
            (held.holder.as_str(), held.task.as_str()),
            (me.as_str(), "verify")
        );
        // Another domain of the same project is free.
        assert_eq!(
            acquire(c, "p", "git-index", "git-index", &other, "h", 1_100, 500).unwrap(),
            Ok(())
        );
        assert!(renew(c, "p", "memory", &me, 1_400, 500).unwrap());
        assert!(!renew(c, "p", "memory", &other, 1_400, 500).unwrap());
        assert!(
            acquire(c, "p", "memory", "classify", &other, "h", 1_800, 500)
                .unwrap()
                .is_err(),
            "renewed until 1900"
        );
        assert_eq!(
            acquire(c, "p", "memory", "classify", &other, "h", 1_900, 500).unwrap(),
            Ok(()),
            "expired: taken over"
        );
        assert!(!holds(c, "p", "memory", &me).unwrap());
        release(c, "p", "memory", &me).unwrap();
        assert!(
            holds(c, "p", "memory", &other).unwrap(),
            "only the holder releases"
        );
    }

    #[test]
    fn a_dead_holder_on_this_host_is_taken_over_at_once() {
        let store = Store::open_in_memory().unwrap();
        let c = store.conn();
        // A pid above the kernel's pid_max names no live process in /proc.
        let dead = holder_name("h", u32::MAX - 1, 1);
        let me = holder_name("h", std::process::id(), 2);
        acquire(c, "p", "memory", "verify", &dead, "h", 1_000, 60_000)
            .unwrap()
            .unwrap();
        assert_eq!(
            acquire(c, "p", "memory", "verify", &me, "h", 1_001, 60_000).unwrap(),
            Ok(())
        );
        // The same pid on another host is left alone until it expires.
        let remote = holder_name("elsewhere", u32::MAX - 1, 3);
        acquire(
            c,
            "q",
            "memory",
            "verify",
            &remote,
            "elsewhere",
            1_000,
            60_000,
        )
        .unwrap()
        .unwrap();
        assert!(
            acquire(c, "q", "memory", "verify", &me, "h", 1_001, 60_000)
                .unwrap()
                .is_err()
        );
    }
}

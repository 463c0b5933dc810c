//! The git commit index (`git_commits`), for search: the commits of HEAD,
//! without merges, from the last year, the newest [`MAX_COMMITS`] per
//! project. Incremental: a run reads only commits newer than the newest
//! indexed one (less a minute, for clock skew), upserts them (a commit whose
//! text changed — an amend keeps no hash, but a rewrite may — is updated),
//! and prunes what fell out of the window or over the cap. HEAD unchanged
//! since the last run: nothing is read.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, params};
use serde::Serialize;

use mc_base::error::{Error, Result};
use mc_base::identity::{git, is_object_id};

pub const MAX_COMMITS: usize = 2000;
pub const WINDOW_MS: i64 = 365 * 24 * 60 * 60 * 1000;
/// Re-read this much before the newest indexed commit (clocks disagree).
const OVERLAP_MS: i64 = 60 * 1000;

/// One commit as indexed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Commit {
    pub hash: String,
    pub short_hash: String,
    pub subject: String,
    pub body: String,
    pub paths: Vec<String>,
    pub author: String,
    pub committed_ms: i64,
}

/// HEAD's commit in `dir`; `None` when `dir` is not in a git repository or
/// it has no commit yet.
pub fn head(dir: &Path) -> Option<String> {
    let out = git(dir)
        .args(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let head = text.trim();
    (out.status.success() && is_object_id(head)).then(|| head.to_string())
}

/// The top folder of the work tree `dir` is in (`None`: not in one).
pub fn toplevel(dir: &Path) -> Option<PathBuf> {
    let out = git(dir)
        .args(["rev-parse", "--show-toplevel"])
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let top = text.trim();
    (out.status.success() && !top.is_empty()).then(|| PathBuf::from(top))
}

/// The commits of HEAD newer than `since_ms`, newest first, at most `max`.
pub fn read_commits(dir: &Path, since_ms: i64, max: usize) -> Result<Vec<Commit>> {
    let out = git(dir)
        .args([
            "-c",
            "core.quotePath=false",
            "log",
            "HEAD",
            "--no-merges",
            "--name-only",
            &format!("--max-count={max}"),
            &format!("--since=@{}", since_ms.div_euclid(1000)),
            "--format=%x1e%H%x1f%an <%ae>%x1f%ct%x1f%s%x1f%b%x1d",
        ])
        .output()
        .map_err(|e| {
            Error::Io(std::io::Error::new(
                e.kind(),
                format!("cannot run git in {}: {e}", dir.display()),
            ))
        })?;
    if !out.status.success() {
        return Err(Error::Io(std::io::Error::other(format!(
            "git log failed in {} ({})",
            dir.display(),
            out.status
        ))));
    }
    Ok(parse_log(&String::from_utf8_lossy(&out.stdout)))
}

/// Parse `git log` in the format [`read_commits`] asks for. Records that
/// are not whole (no full hash, no time) are skipped.
pub fn parse_log(text: &str) -> Vec<Commit> {
    let mut commits = Vec::new();
    for record in text.split('\u{1e}') {
        let Some((head, paths)) = record.split_once('\u{1d}') else {
            continue;
        };
        let mut fields = head.splitn(5, '\u{1f}');
        let (Some(hash), Some(author), Some(time), Some(subject)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let body = fields.next().unwrap_or_default();
        let hash = hash.trim();
        let Ok(seconds) = time.trim().parse::<i64>() else {
            continue;
        };
        if !is_object_id(hash) || seconds <= 0 {
            continue;
        }
        commits.push(Commit {
            hash: hash.to_string(),
            short_hash: hash.chars().take(7).collect(),
            subject: subject.trim().to_string(),
            body: body.trim().to_string(),
            paths: paths
                .lines()
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect(),
            author: author.trim().to_string(),
            committed_ms: seconds.saturating_mul(1000),
        });
    }
    commits
}

/// Where the next read starts: the newest indexed commit less a minute, but
/// never before the window.
pub fn since(conn: &Connection, project: &str, now_ms: i64) -> Result<i64> {
    let newest: Option<i64> = conn.query_row(
        "SELECT max(committed_ms) FROM git_commits WHERE project = ?1",
        params![project],
        |r| r.get(0),
    )?;
    let floor = now_ms.saturating_sub(WINDOW_MS);
    Ok(newest.map_or(floor, |n| n.saturating_sub(OVERLAP_MS).max(floor)))
}

/// HEAD's commits not indexed yet for `project` (from [`since`] on), read
/// from the work tree at `root`: what both mc-dream's git-index task and
/// `mc-search index --commits` store with [`store_commits`].
pub fn new_commits(
    conn: &Connection,
    project: &str,
    root: &Path,
    now_ms: i64,
) -> Result<Vec<Commit>> {
    let since = since(conn, project, now_ms)?;
    read_commits(root, since, MAX_COMMITS)
}

/// Bring `project`'s commit index up to HEAD of the work tree at `root` in
/// one write transaction. `None` when `root` is no git repository or has no
/// commit yet.
pub fn index_commits(
    store: &mut mc_base::store::Store,
    project: &str,
    root: &Path,
    now_ms: i64,
) -> Result<Option<Indexed>> {
    if head(root).is_none() {
        return Ok(None);
    }
    let commits = new_commits(store.conn(), project, root, now_ms)?;
    store
        .write(|tx| store_commits(tx, project, &commits, now_ms))
        .map(Some)
}

/// What one indexing run changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Indexed {
    pub read: usize,
    pub added: usize,
    pub updated: usize,
    pub pruned: usize,
}

/// Upsert `commits` and prune the project's index to the window and the cap.
/// Run in a write transaction.
pub fn store_commits(
    conn: &Connection,
    project: &str,
    commits: &[Commit],
    now_ms: i64,
) -> Result<Indexed> {
    let mut stats = Indexed {
        read: commits.len(),
        ..Indexed::default()
    };
    let mut find = conn.prepare_cached(
        "SELECT subject, body, paths, author, committed_ms FROM git_commits
         WHERE project = ?1 AND hash = ?2",
    )?;
    let mut insert = conn.prepare_cached(
        "INSERT INTO git_commits (project, hash, short_hash, subject, body, paths, author, committed_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?;
    let mut update = conn.prepare_cached(
        "UPDATE git_commits SET subject = ?3, body = ?4, paths = ?5, author = ?6, committed_ms = ?7
         WHERE project = ?1 AND hash = ?2",
    )?;
    for c in commits {
        let paths = c.paths.join("\n");
        let existing: Option<(String, String, String, String, i64)> = find
            .query_map(params![project, c.hash], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })?
            .next()
            .transpose()?;
        match existing {
            None => {
                insert.execute(params![
                    project,
                    c.hash,
                    c.short_hash,
                    c.subject,
                    c.body,
                    paths,
                    c.author,
                    c.committed_ms
                ])?;
                stats.added += 1;
            }
            Some(old)
                if old
                    != (
                        c.subject.clone(),
                        c.body.clone(),
                        paths.clone(),
                        c.author.clone(),
                        c.committed_ms,
                    ) =>
            {
                update.execute(params![
                    project,
                    c.hash,
                    c.subject,
                    c.body,
                    paths,
                    c.author,
                    c.committed_ms
                ])?;
                stats.updated += 1;
            }
            Some(_) => {}
        }
    }
    let floor = now_ms.saturating_sub(WINDOW_MS);
    stats.pruned += conn.execute(
        "DELETE FROM git_commits WHERE project = ?1 AND committed_ms < ?2",
        params![project, floor],
    )?;
    stats.pruned += conn.execute(
        "DELETE FROM git_commits WHERE project = ?1 AND id NOT IN (
             SELECT id FROM git_commits WHERE project = ?1
             ORDER BY committed_ms DESC, id DESC LIMIT ?2)",
        params![project, MAX_COMMITS as i64],
    )?;
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_format_parses_whole_records_only() {
        let text = "\u{1e}502ce4f09d13391600ab556b15fc3474c3577dc8\u{1f}A <a@x>\u{1f}1700259200\u{1f}c3\u{1f}body 3\n\u{1d}\n\nf3\nsrc/x y.rs\n\
                    \u{1e}nothex\u{1f}A <a@x>\u{1f}1\u{1f}bad\u{1f}\u{1d}\n\
                    \u{1e}b79e068ce5b77194f95b0b6e2f87369af25ef8dc\u{1f}B <b@x>\u{1f}1700172800\u{1f}c2\u{1f}\u{1d}\n";
        let commits = parse_log(text);
        assert_eq!(commits.len(), 2);
        assert_eq!(commits[0].short_hash, "502ce4f");
        assert_eq!(commits[0].paths, ["f3", "src/x y.rs"]);
        assert_eq!(commits[0].body, "body 3");
        assert_eq!(commits[0].committed_ms, 1_700_259_200_000);
        assert_eq!(commits[1].body, "");
        assert!(commits[1].paths.is_empty());
    }
}

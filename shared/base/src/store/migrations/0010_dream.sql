-- 0010: mc-dream — what the maintenance tasks remember between cron ticks
-- (schedule state, leases, runs), the memory columns they keep, team memory
-- through git, and the git commit index search reads.

-- The projects the dreamer knows, and the folder it last saw each in. A
-- folder that is not a git repository is parked (git_state 'none') and
-- probed again a day later.
CREATE TABLE dream_projects (
    project        TEXT PRIMARY KEY,
    dir            TEXT,
    git_state      TEXT    NOT NULL DEFAULT 'unknown' CHECK (git_state IN ('unknown', 'git', 'none')),
    git_probed_ms  INTEGER,
    updated_ms     INTEGER NOT NULL
) WITHOUT ROWID;

-- Per (project, task): when it last succeeded (last_run_ms advances only on
-- success), the last attempt and its result, and the back-off after failures.
CREATE TABLE dream_tasks (
    project         TEXT    NOT NULL,
    task            TEXT    NOT NULL,
    last_run_ms     INTEGER,
    last_attempt_ms INTEGER,
    -- 'ok' (did its work), 'nothing' (nothing to do), 'skipped' (the activity
    -- gate: nothing new since last_run_ms), 'failed'.
    last_result     TEXT CHECK (last_result IN ('ok', 'nothing', 'skipped', 'failed')),
    -- What the last attempt did (JSON), or why it failed (text).
    last_detail     TEXT,
    last_error      TEXT,
    -- Consecutive failures, and the earliest time the task is tried again.
    failures        INTEGER NOT NULL DEFAULT 0,
    retry_after_ms  INTEGER,
    -- HEAD of the project's repository at the last success (the commit gate).
    head            TEXT,
    PRIMARY KEY (project, task)
) WITHOUT ROWID;

-- One holder per (project, domain): every memory-mutating task of a project
-- shares the domain 'memory'; other tasks use their own name. A lease whose
-- time ran out, or whose holder process is gone, is taken over.
CREATE TABLE dream_leases (
    project      TEXT    NOT NULL,
    domain       TEXT    NOT NULL,
    holder       TEXT    NOT NULL,
    task         TEXT    NOT NULL,
    acquired_ms  INTEGER NOT NULL,
    heartbeat_ms INTEGER NOT NULL,
    expires_ms   INTEGER NOT NULL,
    PRIMARY KEY (project, domain)
) WITHOUT ROWID;

-- Every task run: what it changed, what it cost, or why it failed.
CREATE TABLE dream_runs (
    id          INTEGER PRIMARY KEY,
    project     TEXT    NOT NULL,
    task        TEXT    NOT NULL,
    started_ms  INTEGER NOT NULL,
    finished_ms INTEGER,
    status      TEXT CHECK (status IN ('ok', 'nothing', 'skipped', 'failed')),
    model       TEXT,
    tokens_in   INTEGER NOT NULL DEFAULT 0,
    tokens_out  INTEGER NOT NULL DEFAULT 0,
    detail      TEXT
);
-- Serves: the latest runs of a project's task (status).
CREATE INDEX dream_runs_by_task ON dream_runs (project, task, id);

-- Pairs of memories the model judged distinct, by their dedup keys, so
-- consolidate does not ask about them again until one of them changes.
CREATE TABLE dream_distinct (
    project TEXT NOT NULL,
    key_a   TEXT NOT NULL,
    key_b   TEXT NOT NULL,
    PRIMARY KEY (project, key_a, key_b)
) WITHOUT ROWID;

-- A private memory never leaves the database (no export to the repository).
ALTER TABLE memories ADD COLUMN private INTEGER NOT NULL DEFAULT 0;
-- classify: 'project' (true of this project only) or 'general' (true of the
-- user's work anywhere); classified_key is the content_key it was judged on.
ALTER TABLE memories ADD COLUMN scope TEXT CHECK (scope IN ('project', 'general'));
ALTER TABLE memories ADD COLUMN classified_key TEXT;
-- verify: when the memory was last checked against the code, and a hash of
-- the files it was checked against (unchanged files: no new check).
ALTER TABLE memories ADD COLUMN verified_ms INTEGER;
ALTER TABLE memories ADD COLUMN verified_hash TEXT;
-- The last time the memory was rendered in a head or matched by a query.
ALTER TABLE memories ADD COLUMN last_used_ms INTEGER;
-- Team memory: the entry id in <repo>/.mc/memory/<CATEGORY>.md, and the
-- content_key both sides agreed on at the last export or import.
ALTER TABLE memories ADD COLUMN team_id TEXT;
ALTER TABLE memories ADD COLUMN team_key TEXT;
-- Serves: finding a team entry's memory on import.
CREATE INDEX memories_by_team_id ON memories (project, team_id);

-- The git commit index (HEAD, no merges, the last year, the newest 2000 per
-- project), kept by mc-dream's git-index task for search. One row per commit:
-- hash is the full object name, paths the changed paths one per line (renames
-- as the new path), author "Name <email>", committed_ms the committer time.
CREATE TABLE git_commits (
    id           INTEGER PRIMARY KEY,
    project      TEXT    NOT NULL,
    hash         TEXT    NOT NULL,
    short_hash   TEXT    NOT NULL,
    subject      TEXT    NOT NULL,
    body         TEXT    NOT NULL DEFAULT '',
    paths        TEXT    NOT NULL DEFAULT '',
    author       TEXT    NOT NULL DEFAULT '',
    committed_ms INTEGER NOT NULL,
    UNIQUE (project, hash)
);
-- Serves: the newest commits of a project, the incremental window, the cap.
CREATE INDEX git_commits_by_time ON git_commits (project, committed_ms);

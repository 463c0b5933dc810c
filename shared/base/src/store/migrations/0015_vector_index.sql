-- 0015: the vector index of hybrid search. Every searchable item's vector
-- under a model, per project, packed in blocks so that a process reads a
-- project's index in a few rows and scans it whole: `items` holds 17 bytes
-- a row (kind, then two little-endian i64 keys), `codes` a little-endian f32
-- scale and `dimensions` signed bytes a row (the vector ≈ scale × codes).
-- Rows are in item order. A cache the backfill rebuilds from `embeddings`
-- (never the only copy); `digest` is the SHA-256 of the packed rows, which a
-- resident process compares to know its loaded copy is current.
CREATE TABLE embedding_index (
    model      TEXT    NOT NULL,
    project    TEXT    NOT NULL,
    dimensions INTEGER NOT NULL,
    rows       INTEGER NOT NULL,
    digest     BLOB    NOT NULL,
    PRIMARY KEY (model, project)
) WITHOUT ROWID;
CREATE TABLE embedding_blocks (
    id      INTEGER PRIMARY KEY,
    model   TEXT    NOT NULL,
    project TEXT    NOT NULL,
    block   INTEGER NOT NULL,
    items   BLOB    NOT NULL,
    codes   BLOB    NOT NULL,
    UNIQUE (model, project, block)
);

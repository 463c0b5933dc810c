-- 0005: one config resolution per session, and a declared bust when the render rules change.

-- The project folder a session's config is read from, as its first pass
-- recorded it: every later subcommand (system, reduce, status) reads the same
-- layers as the pass, whatever its working directory.
ALTER TABLE sessions ADD COLUMN project_dir TEXT;

-- The render rules (placeholders, skeletons, caveman, markers, reminders, the
-- head's format) the session's bytes were produced with. Sessions from before
-- this column were rendered with version 1.
ALTER TABLE sessions ADD COLUMN render_version INTEGER NOT NULL DEFAULT 1;

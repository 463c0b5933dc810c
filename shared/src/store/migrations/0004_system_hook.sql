-- 0004: harnesses that hand mc the system prompt in a hook of its own, after
-- the messages pass (OpenCode). The newest `Today's date:` line that hook saw:
-- a busting pass moves the frozen date on to it.
ALTER TABLE sessions ADD COLUMN seen_today_line TEXT;

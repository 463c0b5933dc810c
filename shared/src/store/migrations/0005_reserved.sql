-- 0005: reserved for a change developed in parallel with 0006. It holds
-- nothing on this branch so the migrations stay numbered without a gap; the
-- real 0005 replaces this file when the branches meet.
SELECT 1;

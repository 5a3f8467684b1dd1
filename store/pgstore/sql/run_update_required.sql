-- Writes version $5 over version $5 - 1 only: the optimistic lock. A
-- concurrent update waits for the row and then finds the version moved: a
-- conflict ($8 names it).
WITH updated AS (
    UPDATE nqd_runs SET status = $3, started_at = $4, version = $5, expires_at = $6, meta = $7
    WHERE flow = $1 AND run = $2 AND version = $5 - 1
    RETURNING 1
)
SELECT nqd_require(EXISTS (SELECT 1 FROM updated), $8)

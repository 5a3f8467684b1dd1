-- Leases up to $3 jobs of queue $1 whose score (ready time, or lease end) is
-- at or before $2, unless the queue is paused. Rows another claim holds are
-- skipped, so concurrent claims hand out different jobs. A job whose lease
-- ran out is a new try.
WITH picked AS (
    SELECT queue, id, score, lease <> '' AS expired
    FROM nqd_jobs
    WHERE queue = $1 AND score <= $2
      AND NOT EXISTS (SELECT 1 FROM nqd_paused_queues p WHERE p.queue = $1)
    ORDER BY score, id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
UPDATE nqd_jobs j SET
    attempt = j.attempt + CASE WHEN picked.expired THEN 1 ELSE 0 END,
    lease = $4, lease_until = $5, score = $5
FROM picked
WHERE j.queue = picked.queue AND j.id = picked.id
RETURNING j.id, j.flow, j.run, j.step, j.input, j.attempt, j.lease, j.lease_until, picked.expired, picked.score

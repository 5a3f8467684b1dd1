-- Removes the job a step held under lease $3; a job not held by it is a
-- conflict ($4 names it).
WITH acked AS (
    DELETE FROM nqd_jobs WHERE queue = $1 AND id = $2 AND lease = $3
    RETURNING 1
)
SELECT nqd_require(EXISTS (SELECT 1 FROM acked), $4)

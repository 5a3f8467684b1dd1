-- Raises ($4) unless the job is held under lease $3, and keeps that so
-- until the update commits: a claim taking the job over after its lease ran
-- out waits for the row, or passes it by.
WITH held AS (
    SELECT 1 FROM nqd_jobs WHERE queue = $1 AND id = $2 AND lease = $3 FOR SHARE
)
SELECT nqd_require(EXISTS (SELECT 1 FROM held), $4)

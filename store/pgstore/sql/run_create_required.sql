-- Creates a run; an existing one is a conflict ($8 names it).
WITH created AS (
    INSERT INTO nqd_runs (flow, run, status, started_at, version, expires_at, meta)
    VALUES ($1, $2, $3, $4, $5, $6, $7)
    ON CONFLICT (flow, run) DO NOTHING
    RETURNING 1
)
SELECT nqd_require(EXISTS (SELECT 1 FROM created), $8)

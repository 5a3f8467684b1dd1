-- Creates a run; an existing one makes it insert nothing (a conflict).
INSERT INTO nqd_runs (flow, run, status, started_at, version, expires_at, meta)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (flow, run) DO NOTHING

SELECT run, started_at, meta FROM nqd_runs
WHERE flow = $1 AND status = $2
ORDER BY started_at DESC, run
OFFSET $3 LIMIT $4

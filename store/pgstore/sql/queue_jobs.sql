SELECT queue, id, flow, run, step, input, attempt, score, lease, lease_until
FROM nqd_jobs WHERE queue = $1 AND score BETWEEN $2 AND $3
ORDER BY score, id
OFFSET $4 LIMIT $5

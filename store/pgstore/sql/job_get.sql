SELECT queue, id, flow, run, step, input, attempt, score, lease, lease_until
FROM nqd_jobs WHERE queue = $1 AND id = $2

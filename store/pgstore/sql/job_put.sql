-- Adds a job, or replaces the job of the same id, waiting and unleased.
INSERT INTO nqd_jobs (queue, id, flow, run, step, input, attempt, score, lease, lease_until)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, '', 0)
ON CONFLICT (queue, id) DO UPDATE SET
    flow = EXCLUDED.flow, run = EXCLUDED.run, step = EXCLUDED.step, input = EXCLUDED.input,
    attempt = EXCLUDED.attempt, score = EXCLUDED.score, lease = '', lease_until = 0

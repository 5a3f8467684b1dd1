-- Keeps the newest $2 checkpoints of a context.
DELETE FROM nqd_checkpoints c WHERE c.ctx = $1 AND (c.ms, c.seq) NOT IN (
    SELECT ms, seq FROM nqd_checkpoints WHERE ctx = $1 ORDER BY ms DESC, seq DESC LIMIT $2
)

SELECT ms, seq, state FROM nqd_checkpoints
WHERE ctx = $1 AND (ms, seq) <= ($2, $3)
ORDER BY ms DESC, seq DESC LIMIT 1

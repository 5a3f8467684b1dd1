INSERT INTO nqd_checkpoints (ctx, ms, seq, state) VALUES ($1, $2, $3, $4)
ON CONFLICT (ctx, ms, seq) DO UPDATE SET state = EXCLUDED.state

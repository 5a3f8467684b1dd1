INSERT INTO nqd_timers (kind, flow, run, step, due) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (kind, flow, run, step) DO UPDATE SET due = EXCLUDED.due

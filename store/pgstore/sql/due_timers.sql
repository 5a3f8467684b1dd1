-- Holds up to $3 timers due at $1 until $2, returning their old due time.
WITH picked AS (
    SELECT kind, flow, run, step, due FROM nqd_timers
    WHERE due <= $1
    ORDER BY due, kind, flow, run, step
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
UPDATE nqd_timers t SET due = $2
FROM picked
WHERE t.kind = picked.kind AND t.flow = picked.flow AND t.run = picked.run AND t.step = picked.step
RETURNING t.kind, t.flow, t.run, t.step, picked.due

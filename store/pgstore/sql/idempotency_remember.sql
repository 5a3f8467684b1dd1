-- Remembers idempotency key $2 of context $1 for the $3 events a run update
-- just appended there (the newest of the stream, which the update holds
-- locked), for $4 ms, with fingerprint $5, as nqd_append records a key: an
-- append that repeats the key replays them. Expired records are swept by
-- the appends that carry keys.
WITH batch AS (
    SELECT ms, seq FROM nqd_events WHERE ctx = $1 ORDER BY ms DESC, seq DESC LIMIT $3
), span AS (
    SELECT (SELECT b.ms FROM batch b ORDER BY b.ms, b.seq LIMIT 1) AS first_ms,
           (SELECT b.seq FROM batch b ORDER BY b.ms, b.seq LIMIT 1) AS first_seq,
           (SELECT b.ms FROM batch b ORDER BY b.ms DESC, b.seq DESC LIMIT 1) AS last_ms,
           (SELECT b.seq FROM batch b ORDER BY b.ms DESC, b.seq DESC LIMIT 1) AS last_seq,
           (SELECT count(*) FROM batch) AS n
)
INSERT INTO nqd_idempotency AS d (ctx, key, expires, first_ms, first_seq, last_ms, last_seq, count, fingerprint)
SELECT $1, $2, greatest((extract(epoch FROM clock_timestamp()) * 1000)::bigint, 0) + $4,
       first_ms, first_seq, last_ms, last_seq, n, $5
FROM span
ON CONFLICT (ctx, key) DO UPDATE SET
    expires = EXCLUDED.expires, first_ms = EXCLUDED.first_ms, first_seq = EXCLUDED.first_seq,
    last_ms = EXCLUDED.last_ms, last_seq = EXCLUDED.last_seq, count = EXCLUDED.count,
    fingerprint = EXCLUDED.fingerprint

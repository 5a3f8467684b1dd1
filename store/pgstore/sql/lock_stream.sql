-- Creates the context's stream row if needed and locks it for the rest of the
-- transaction; the clock is read once the lock is held.
INSERT INTO nqd_streams AS s (ctx) VALUES ($1)
ON CONFLICT (ctx) DO UPDATE SET length = s.length
RETURNING s.last_ms, s.last_seq, s.length,
          (extract(epoch FROM clock_timestamp()) * 1000)::bigint

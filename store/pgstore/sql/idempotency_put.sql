INSERT INTO nqd_idempotency (ctx, key, expires, first_ms, first_seq, last_ms, last_seq, count, fingerprint)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (ctx, key) DO UPDATE SET
    expires = EXCLUDED.expires, first_ms = EXCLUDED.first_ms, first_seq = EXCLUDED.first_seq,
    last_ms = EXCLUDED.last_ms, last_seq = EXCLUDED.last_seq, count = EXCLUDED.count,
    fingerprint = EXCLUDED.fingerprint

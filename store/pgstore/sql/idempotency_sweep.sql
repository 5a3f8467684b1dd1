-- Removes a bounded number of expired records, so cleaning never makes one
-- append slow.
DELETE FROM nqd_idempotency WHERE (ctx, key) IN (
    SELECT ctx, key FROM nqd_idempotency WHERE expires <= $1 LIMIT 64
)

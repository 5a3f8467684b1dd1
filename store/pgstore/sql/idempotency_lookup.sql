SELECT first_ms, first_seq, last_ms, last_seq, count, fingerprint
FROM nqd_idempotency WHERE ctx = $1 AND key = $2 AND expires > $3

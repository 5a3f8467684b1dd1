-- One append, one round trip: see nqd_append in migrations/.
SELECT r_replayed, r_ms, r_seq, r_body
FROM nqd_append($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)

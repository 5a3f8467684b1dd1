INSERT INTO nqd_index (ix, member, score) VALUES ($1, $2, $3)
ON CONFLICT (ix, member) DO NOTHING

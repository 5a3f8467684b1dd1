SELECT member, score FROM nqd_index WHERE ix = $1
ORDER BY score DESC, member
OFFSET $2 LIMIT $3

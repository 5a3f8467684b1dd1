-- The flow's run index, newest first, with each run's record if it has one.
SELECT i.member, i.score, r.meta
FROM nqd_index i
LEFT JOIN nqd_runs r ON r.flow = $1 AND r.run = i.member
WHERE i.ix = $2
ORDER BY i.score DESC, i.member
OFFSET $3 LIMIT $4

SELECT s.length,
       coalesce(f.ms, 0), coalesce(f.seq, 0),
       coalesce(l.ms, 0), coalesce(l.seq, 0)
FROM nqd_streams s
LEFT JOIN LATERAL (SELECT ms, seq FROM nqd_events e WHERE e.ctx = s.ctx ORDER BY ms, seq LIMIT 1) f ON true
LEFT JOIN LATERAL (SELECT ms, seq FROM nqd_events e WHERE e.ctx = s.ctx ORDER BY ms DESC, seq DESC LIMIT 1) l ON true
WHERE s.ctx = $1

-- Events of a context with lo <= id < hi, newest first.
SELECT ms, seq, body FROM nqd_events
WHERE ctx = $1 AND (ms, seq) >= ($2, $3) AND (ms, seq) < ($4, $5)
ORDER BY ms DESC, seq DESC
LIMIT $6

UPDATE nqd_streams SET last_ms = $2, last_seq = $3, length = length + $4 WHERE ctx = $1

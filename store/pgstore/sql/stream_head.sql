SELECT last_ms, last_seq FROM nqd_streams WHERE ctx = $1

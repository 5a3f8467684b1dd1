SELECT count(*) FROM nqd_index WHERE ix = $1

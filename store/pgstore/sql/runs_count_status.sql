SELECT count(*) FROM nqd_runs WHERE flow = $1 AND status = $2

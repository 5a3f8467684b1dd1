package pgstore

import _ "embed" // the queries below

// Every query the store runs lives in sql/, one file each, so it can be read
// and tried in psql as it is.
var (
	//go:embed sql/lock_stream.sql
	sqlLockStream string
	//go:embed sql/insert_events.sql
	sqlInsertEvents string
	//go:embed sql/advance_stream.sql
	sqlAdvanceStream string
	//go:embed sql/index_add.sql
	sqlIndexAdd string
	//go:embed sql/index_list.sql
	sqlIndexList string
	//go:embed sql/index_count.sql
	sqlIndexCount string
	//go:embed sql/idempotency_lookup.sql
	sqlIdemLookup string
	//go:embed sql/idempotency_put.sql
	sqlIdemPut string
	//go:embed sql/idempotency_sweep.sql
	sqlIdemSweep string
	//go:embed sql/range_between.sql
	sqlRange string
	//go:embed sql/range_between_reverse.sql
	sqlRangeReverse string
	//go:embed sql/info.sql
	sqlInfo string
	//go:embed sql/stream_head.sql
	sqlStreamHead string
	//go:embed sql/checkpoint_put.sql
	sqlCheckpointPut string
	//go:embed sql/checkpoint_trim.sql
	sqlCheckpointTrim string
	//go:embed sql/checkpoint_get.sql
	sqlCheckpointGet string
)

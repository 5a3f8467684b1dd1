package pgstore

import _ "embed" // the queries below

// Every query the store runs lives in sql/, one file each, so it can be read
// and tried in psql as it is.
var (
	//go:embed sql/append.sql
	sqlAppend string
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
	//go:embed sql/idempotency_remember.sql
	sqlIdempotencyRemember string
)

var (
	//go:embed sql/definition_put.sql
	sqlDefinitionPut string
	//go:embed sql/run_create.sql
	sqlRunCreate string
	//go:embed sql/run_create_required.sql
	sqlRunCreateRequired string
	//go:embed sql/run_update_required.sql
	sqlRunUpdateRequired string
	//go:embed sql/definition_is.sql
	sqlDefinitionIs string
	//go:embed sql/ack.sql
	sqlAck string
	//go:embed sql/held.sql
	sqlHeld string
	//go:embed sql/consume.sql
	sqlConsume string
	//go:embed sql/job_put.sql
	sqlJobPut string
	//go:embed sql/job_get.sql
	sqlJobGet string
	//go:embed sql/claim.sql
	sqlClaim string
	//go:embed sql/timer_set.sql
	sqlTimerSet string
	//go:embed sql/due_timers.sql
	sqlDueTimers string
	//go:embed sql/runs_count.sql
	sqlRunsCount string
	//go:embed sql/runs_list.sql
	sqlRunsList string
	//go:embed sql/runs_count_status.sql
	sqlRunsCountStatus string
	//go:embed sql/runs_list_status.sql
	sqlRunsListStatus string
)

//go:embed sql/queue_jobs.sql
var sqlQueueJobs string

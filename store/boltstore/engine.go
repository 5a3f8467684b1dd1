package boltstore

import (
	"github.com/nqd-dev/nqd/store"
)

// The flow engine's state lives in buckets of its own (created on first use):
//
//	flowdefs/<name>                          definition JSON
//	runs/<flow>:<run>                        store.RunMeta JSON
//	indexes/flow:<flow>:status:<status>/...  per-status run index, as the other indexes
//	queues/<queue>/jobs/<jobID>              job JSON (with its ready score)
//	queues/<queue>/ready/<score><jobID>      claimable order: ready time, or lease end once claimed
//	timers/due/<due><kind>:<flow>:<run>:<step>
//	timers/byname/<kind>:<flow>:<run>:<step> due
//
// Every engine update that appends events runs in the append's own
// transaction (appendReq.hook), so the index never disagrees with the stream.

var (
	_ store.DefinitionStore = (*Store)(nil)
	_ store.RunStore        = (*Store)(nil)
)

var (
	bFlowDefs = []byte("flowdefs")
	bRuns     = []byte("runs")
	bQueues   = []byte("queues")
	bTimers   = []byte("timers")
	kJobs     = []byte("jobs")
	kReady    = []byte("ready")
	kDue      = []byte("due")
	kByName   = []byte("byname")
)

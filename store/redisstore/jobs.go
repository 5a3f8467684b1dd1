package redisstore

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// jobValue is how a job a run update enqueues is kept, and its score: a
// header that the scripts rewrite on claim and heartbeat, and the job's fixed
// part as JSON, which they never parse (Lua's JSON would round large numbers
// in the input). A job is ready at its ReadyAt or, with a Lease
// (EnqueuesLeased), held as claim.lua holds a claimed one: scored by the
// lease's end, when it is due again.
func jobValue(j store.Job) (string, int64, error) {
	attempt, lease := max(j.Attempt, 1), j.Lease
	score, until := j.ReadyAt, int64(0)
	if lease != "" {
		if !validLease(lease) {
			return "", 0, fmt.Errorf("lease %q", lease)
		}
		score, until = j.LeaseUntil, j.LeaseUntil
	}
	j.Attempt, j.Lease, j.LeaseUntil, j.ReadyAt = 0, "", 0, 0
	body, err := json.Marshal(j)
	if err != nil {
		return "", 0, err
	}
	return fmt.Sprintf("%d %d %d %s\n%s", attempt, score, until, lease, body), score, nil
}

// validLease reports whether lease can be a field of a job's header, which
// the scripts split on spaces and the line end.
func validLease(lease string) bool { return lease != "" && !strings.ContainsAny(lease, " \n") }

func decodeJob(v string) (store.Job, error) {
	head, body, ok := strings.Cut(v, "\n")
	f := strings.SplitN(head, " ", 4)
	if !ok || len(f) != 4 {
		return store.Job{}, fmt.Errorf("redisstore: job value %.60q", v)
	}
	var j store.Job
	if err := json.Unmarshal([]byte(body), &j); err != nil {
		return store.Job{}, fmt.Errorf("redisstore: job: %w", err)
	}
	var err1, err2, err3 error
	j.Attempt, err1 = strconv.Atoi(f[0])
	j.ReadyAt, err2 = strconv.ParseInt(f[1], 10, 64)
	j.LeaseUntil, err3 = strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return store.Job{}, fmt.Errorf("redisstore: job header %q", head)
	}
	j.Lease = f[3]
	return j, nil
}

// Claim hands out jobs ready or lease-expired at now (scripts/claim.lua).
// With several shards it visits them in turn (eachShard), each shard one
// script, until max jobs are claimed: a claim takes the first shard's jobs
// before the next's, so a queue's order holds within a shard. A shard that
// fails does not stop the claim: the jobs of the shards that answered are
// handed out, with the failures' error when there are any (a caller must
// take the jobs even then: they are leased to it).
// A claim whose reply was lost is sent again (see write); the script's
// record of the jobs the lease took answers it with those jobs, which would
// otherwise stay leased to nobody until the lease ends. Errors:
// store.ErrInvalid, store.ErrUnavailable, store.ErrOutcomeUnknown,
// store.ErrClosed.
func (s *Store) Claim(ctx context.Context, queues []string, now, leaseUntil int64, lease string, max int) ([]store.Job, error) {
	if err := s.checkOpen("claim"); err != nil {
		return nil, err
	}
	for _, q := range queues {
		if !event.ValidName(q) {
			return nil, invalid("claim", "queue %q", q)
		}
	}
	if max <= 0 || !validLease(lease) {
		return nil, invalid("claim", "%d jobs under lease %q", max, lease)
	}
	out := []store.Job{}
	err := s.eachShard(func() bool { return len(out) > 0 }, func(sh *shard) (bool, error) {
		keys := make([]string, 2, 2+2*len(queues))
		keys[0], keys[1] = sh.pausedKey(), sh.claimKey(lease)
		for _, q := range queues {
			keys = append(keys, sh.readyKey(q), sh.jobsKey(q))
		}
		args := make([]any, 0, 4+len(queues))
		args = append(args, now, leaseUntil, lease, max-len(out))
		for _, q := range queues {
			args = append(args, q)
		}
		vals, err := s.write(ctx, sh, "claim", s.scripts.claim, keys, args)
		if err != nil {
			return false, err
		}
		jobs, err := decodeClaimed(vals)
		out = append(out, jobs...)
		return len(out) >= max, err
	})
	if err != nil && len(out) == 0 {
		return nil, err
	}
	return out, err
}

// jobShard is the shard of a job: its run's, whose updates enqueue it. A
// job's id is <run>:<step>, and a run id holds no colon.
func (s *Store) jobShard(id string) *shard {
	run, _, _ := strings.Cut(id, ":")
	return s.on(run)
}

// claimKey is where a claim records the jobs lease took: a digest, as the
// lease is a worker's credential.
func (sh *shard) claimKey(lease string) string {
	sum := sha256.Sum256([]byte(lease))
	return sh.prefix + ":engine:claims:" + hex.EncodeToString(sum[:16])
}

// decodeClaimed reads what claim_jobs (scripts/lib.lua) answers: a pair per
// job, its value and whether it was taken over from an expired lease.
func decodeClaimed(vals []any) ([]store.Job, error) {
	out := make([]store.Job, 0, len(vals)/2)
	for i := 0; i+1 < len(vals); i += 2 {
		v, _ := vals[i].(string)
		j, err := decodeJob(v)
		if err != nil {
			return nil, err
		}
		j.Expired = vals[i+1] == int64(1)
		out = append(out, j)
	}
	return out, nil
}

// Heartbeat extends a held lease (scripts/heartbeat.lua); one whose reply
// was lost is sent again (see write), writing the same lease end. Errors:
// store.ErrNotFound, store.ErrConflict, store.ErrInvalid,
// store.ErrUnavailable, store.ErrOutcomeUnknown, store.ErrClosed.
func (s *Store) Heartbeat(ctx context.Context, ref store.JobAck, leaseUntil int64) (store.Job, error) {
	if err := s.checkOpen("heartbeat"); err != nil {
		return store.Job{}, err
	}
	if !event.ValidName(ref.Queue) {
		return store.Job{}, invalid("heartbeat", "queue %q", ref.Queue)
	}
	sh := s.jobShard(ref.ID)
	reply, err := s.write(ctx, sh, "heartbeat", heartbeatScript, []string{sh.readyKey(ref.Queue), sh.jobsKey(ref.Queue)}, []any{ref.ID, ref.Lease, leaseUntil})
	if err != nil {
		return store.Job{}, err
	}
	switch code, _ := reply[0].(int64); code {
	case 1:
		return store.Job{}, fmt.Errorf("redisstore: job %s: %w", ref.ID, store.ErrNotFound)
	case 2:
		return store.Job{}, fmt.Errorf("redisstore: job %s: %w: held by another lease", ref.ID, store.ErrConflict)
	}
	v, _ := reply[1].(string)
	return decodeJob(v)
}

// Job returns a stored job. Errors: store.ErrNotFound, store.ErrInvalid,
// store.ErrUnavailable, store.ErrClosed.
func (s *Store) Job(ctx context.Context, ref store.JobRef) (store.Job, error) {
	if err := s.checkOpen("job"); err != nil {
		return store.Job{}, err
	}
	if !event.ValidName(ref.Queue) {
		return store.Job{}, invalid("job", "queue %q", ref.Queue)
	}
	v, err := s.client.HGet(ctx, s.jobShard(ref.ID).jobsKey(ref.Queue), ref.ID).Result()
	if err != nil {
		return store.Job{}, mapErr(ctx, "job "+ref.ID, err)
	}
	return decodeJob(v)
}

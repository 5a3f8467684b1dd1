package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/nqd-dev/nqd/store"
)

// This file checks the lease a worker names when it reports about a job,
// and answers a report repeated after the job is gone.

// held returns the job if ack's lease still holds it.
func (e *Engine) held(ctx context.Context, ack store.JobAck) (store.Job, error) {
	j, err := e.st.Job(ctx, store.JobRef{Queue: ack.Queue, ID: ack.ID})
	if errors.Is(err, store.ErrNotFound) {
		return store.Job{}, ErrLeaseLost
	}
	if err != nil {
		return store.Job{}, err
	}
	if j.Lease != ack.Lease {
		return store.Job{}, ErrLeaseLost
	}
	return j, nil
}

// heldForAck is held for a call that ends in an update acknowledging the
// job (Complete, Fail): the job a claim on this instance handed out under
// ack's lease is taken without a store read, as the update's ack is checked
// by the store (see recent). cached says which; a caller whose decision
// failed on a cached job asks the store again, as a lost lease is only known
// there.
func (e *Engine) heldForAck(ctx context.Context, ack store.JobAck) (j store.Job, cached bool, err error) {
	if j, ok := e.recent.takeJob(ack); ok {
		return j, true, nil
	}
	j, err = e.held(ctx, ack)
	return j, false, err
}

// leaseCommit commits an update that names a held job (Ack or Held); when
// refused it tells a lost lease from a lost race.
func (e *Engine) leaseCommit(ctx context.Context, r *run, u store.RunUpdate) (store.AppendResult, error) {
	res, err := e.commit(ctx, r, u)
	ref := u.Ack
	if ref == nil {
		ref = u.Held
	}
	if !errors.Is(err, errRace) || ref == nil {
		return res, err
	}
	if _, err := e.held(ctx, *ref); err != nil {
		return res, err
	}
	return res, errRace
}

// ackedBy is what stepState.Acked holds once the job held by lease ended
// with outcome (stepCompleted or stepFailed).
func ackedBy(lease, outcome string) string { return outcome + ":" + leaseDigest(lease) }

// leaseDigest stands for a lease where it is kept: run records and
// idempotency keys are stored, archived and exported, and a lease is a
// credential.
func leaseDigest(lease string) string {
	sum := sha256.Sum256([]byte(lease))
	return hex.EncodeToString(sum[:12])
}

// repeated tells a worker's repeat of a report that succeeded (nil) from a
// report with a lost lease (ErrLeaseLost): the job is gone once acked, so
// the run's record is what remembers which lease finished the step, and how.
func (e *Engine) repeated(ctx context.Context, ack store.JobAck, outcome string) error {
	runID, step, _ := strings.Cut(ack.ID, ":")
	// The job is gone, so the flow is read from the run's first event.
	first, err := e.st.Range(ctx, store.Context{Type: "flow", ID: runID}, store.RangeQuery{Limit: 1})
	if err != nil || len(first) == 0 || first[0].FlowName == "" {
		return ErrLeaseLost
	}
	r, err := e.readRun(ctx, first[0].FlowName, runID)
	if errors.Is(err, store.ErrNotFound) {
		return ErrLeaseLost
	}
	if err != nil {
		return err
	}
	if s := r.state.Steps[step]; s != nil && s.Acked == ackedBy(ack.Lease, outcome) {
		return nil
	}
	return ErrLeaseLost
}

// repeatedOr answers a call about a job that turned out gone as repeated
// does when the store says the lease is lost, and with err otherwise.
func (e *Engine) repeatedOr(ctx context.Context, ack store.JobAck, outcome string, err error) error {
	if _, herr := e.held(ctx, ack); errors.Is(herr, ErrLeaseLost) {
		return e.repeated(ctx, ack, outcome)
	}
	return err
}

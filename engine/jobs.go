package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/internal/outage"
	"github.com/nqd-dev/nqd/store"
)

// Claim hands out up to max jobs of queues, each leased to the caller for
// the engine's lease. With wait > 0 it waits that long for work to appear.
// A job redelivered after its lease expired counts as a new attempt; one
// past its step's attempts fails the step instead of being handed out.
func (e *Engine) Claim(ctx context.Context, queues []string, max int, wait time.Duration) ([]store.Job, error) {
	return e.claim(ctx, queues, max, wait, true)
}

// ClaimHanded claims as Claim does, except that while it waits it looks at
// the store no more: it answers the job a start or an emit on this instance
// hands it (handOff), or nothing once wait has passed or a hand-over's write
// failed. Many such claims can wait at once, as completions claiming their
// worker's next job do, without all looking again whenever a job is
// enqueued that none of them was handed. Only a start or an emit that
// looked for a waiting claim in the instant between this claim's look and
// its wait, and so enqueued its job unclaimed, makes it look again. On a
// store that cannot take a job claimed nothing is handed over, and it does
// not wait.
func (e *Engine) ClaimHanded(ctx context.Context, queues []string, max int, wait time.Duration) ([]store.Job, error) {
	return e.claim(ctx, queues, max, wait, false)
}

// claim is Claim, and with looksAgain false ClaimHanded.
func (e *Engine) claim(ctx context.Context, queues []string, max int, wait time.Duration, looksAgain bool) ([]store.Job, error) {
	deadline := e.opts.Now().Add(wait)
	for {
		woken := e.waiter()
		at := e.opts.Now()
		next, skip := e.empty.nextLook(queues, woken, at, e.opts.PollInterval)
		var jobs []store.Job
		if !skip {
			now := at.UnixMilli()
			var err error
			jobs, err = e.st.Claim(ctx, queues, now, now+e.opts.Lease.Milliseconds(), e.newLease(), max)
			if err != nil {
				return nil, err
			}
			if len(jobs) == 0 {
				e.empty.found(queues, woken, at)
			}
			next = at.Add(e.opts.PollInterval)
		}
		out, err := e.handOut(ctx, jobs)
		if err != nil {
			return nil, err
		}
		if len(out) > 0 || !e.opts.Now().Before(deadline) || (!looksAgain && !e.handsOver()) {
			return out, nil
		}
		// A start or an emit on this instance may hand its job over while
		// this claim waits (handOff).
		w, missing := e.waiting.add(queues)
		d := time.Until(deadline)
		if looksAgain {
			d = min(next.Sub(e.opts.Now()), d)
		} else if missing == 0 && !closed(woken) {
			// Every start or emit that looked for a waiting claim before
			// this one is done, and nothing was enqueued unclaimed since
			// this claim looked: only a hand-over can bring it a job now.
			woken = nil
		}
		t := time.NewTimer(d)
		var handed []store.Job
		answered, woke := false, false
		select {
		case <-ctx.Done():
		case <-woken:
			woke = true
		case <-t.C:
		case handed = <-w.got:
			answered = true
		}
		t.Stop()
		if !answered && !e.waiting.remove(w) {
			// Reserved by a start or an emit: wait for its commit's outcome.
			handed = <-w.got
		}
		if len(handed) > 0 {
			return handed, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !looksAgain && !woke {
			return out, nil
		}
	}
}

// handOut takes the jobs a store claim answered: a job past its step's
// attempts fails the step instead of being handed out.
func (e *Engine) handOut(ctx context.Context, jobs []store.Job) ([]store.Job, error) {
	out := jobs[:0]
	for _, j := range jobs {
		if j.Expired {
			e.opts.Observer.LeaseExpired(j)
		}
		ok, err := e.checkAttempts(ctx, j)
		if err != nil {
			return nil, err
		}
		if ok {
			e.opts.Observer.Claimed(j)
			e.recent.claimed(j)
			out = append(out, j)
		}
	}
	return out, nil
}

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// checkAttempts fails the step of a redelivered job that has used up its
// attempts; it reports whether the job may run.
func (e *Engine) checkAttempts(ctx context.Context, j store.Job) (bool, error) {
	if j.Attempt <= 1 {
		return true, nil // every retry policy allows a first attempt
	}
	d, err := e.Definition(ctx, j.Flow)
	if err != nil {
		return false, err
	}
	if j.Attempt <= d.Steps[j.Step].RetryPolicy.MaxAttempts() {
		return true, nil
	}
	err = e.fail(ctx, store.JobAck{Queue: j.Queue, ID: j.ID, Lease: j.Lease}, "lease expired: the worker stopped reporting", false, nil)
	if errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrRunEnded) {
		err = nil
	}
	return false, err
}

// Beat is what a heartbeat learns.
type Beat struct {
	LeaseUntil time.Time `json:"leaseUntil"`
	// Canceled is true when the run was canceled or ended: the worker
	// should stop.
	Canceled bool `json:"canceled"`
}

// Heartbeat extends the caller's lease on a job, or says the job is gone
// (Canceled). Errors: ErrLeaseLost when another worker holds it.
func (e *Engine) Heartbeat(ctx context.Context, ack store.JobAck) (Beat, error) {
	until := e.nowMS() + e.opts.Lease.Milliseconds()
	j, err := e.st.Heartbeat(ctx, ack, until)
	switch {
	case errors.Is(err, store.ErrNotFound):
		// The job was withdrawn (its run was canceled or failed) or is
		// done: either way its worker should stop.
		return Beat{Canceled: true}, nil
	case errors.Is(err, store.ErrConflict):
		return Beat{}, ErrLeaseLost
	case err != nil:
		return Beat{}, err
	}
	return Beat{LeaseUntil: time.UnixMilli(j.LeaseUntil).UTC()}, nil
}

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

// Kinds a worker may append while it runs a step; the lifecycle kinds go
// through Complete and Fail so the engine can act on them.
func progressKind(kind string) bool {
	switch {
	case kind == "step.started", kind == "log", kind == "emit", kind == "step.progress":
		return true
	case strings.HasPrefix(kind, "log."), strings.HasPrefix(kind, "state."):
		return true
	}
	return false
}

// ReportError is a worker's report the engine refuses: Field names the
// offending part of the request (e.g. `events[2].kind`), Reason says why.
type ReportError struct{ Field, Reason string }

func (e *ReportError) Error() string { return "engine: " + e.Field + ": " + e.Reason }

// Unwrap makes a ReportError a store.ErrInvalid whose message and field say
// why to the worker.
func (e *ReportError) Unwrap() error {
	return &nqd.Error{Code: nqd.CodeValidation, Message: "The report was refused and nothing was stored. " + e.Field + ": " + e.Reason + ".",
		Fields: map[string]string{e.Field: e.Reason}, Err: store.ErrInvalid}
}

// Report appends a worker's progress events for the job it holds: each gets
// the run, flow, step and attempt of the job. An emit records its event for
// fan-in and queues every step that now has all its subscriptions, once per
// run: a repeated emit of the same event is stored once. With a key, a
// repeat of the report for the same job and lease stores nothing new and
// returns the first one's events (less its emits, which count once anyway).
// Errors: ErrLeaseLost, ErrRunEnded, ErrStateInvalid (a *StateError), a
// *ReportError.
func (e *Engine) Report(ctx context.Context, ack store.JobAck, evs []event.Event, key string) ([]event.Event, error) {
	// A report about a job a claim on this instance handed out is taken
	// without reading the job: each write names the lease for the store to
	// check (store.AppendOptions.Held, store.RunUpdate.Held).
	var held *store.JobAck
	j, ok := e.recent.job(ack)
	if ok {
		held = &ack
	} else {
		var err error
		if j, err = e.held(ctx, ack); err != nil {
			return nil, err
		}
	}
	if err := e.stamp(ctx, j, evs, true); err != nil {
		return nil, err
	}
	var out []event.Event
	var plain []event.Event
	segment := 0
	// Emits split a report into several writes; each gets a key of its
	// own, scoped to the job and lease so that keys of different workers
	// never meet.
	segmentKey := func() string {
		if key == "" {
			return ""
		}
		segment++
		return fmt.Sprintf("report:%s:%s:%d:%s", j.ID, leaseDigest(ack.Lease), segment-1, key)
	}
	flush := func() error {
		if len(plain) == 0 {
			return nil
		}
		res, err := e.st.Append(ctx, store.Context{Type: "flow", ID: j.Run}, plain, store.AppendOptions{IdempotencyKey: segmentKey(), Held: held})
		if held != nil && errors.Is(err, store.ErrConflict) {
			err = ErrLeaseLost
		}
		out = append(out, res.Events...)
		plain = nil
		return err
	}
	for _, ev := range evs {
		if ev.Kind != "emit" {
			plain = append(plain, ev)
			continue
		}
		// The events before an emit (a step.started the worker had not sent
		// yet, logs) are written in the emit's own run update.
		before := report{events: plain}
		if len(plain) > 0 {
			before.key = segmentKey()
		}
		plain = nil
		stored, err := e.emit(ctx, j, ev, held, before)
		if held != nil && errors.Is(err, ErrRunEnded) {
			// The job may have been gone before this call: answer as for
			// a job read from the store.
			if _, herr := e.held(ctx, ack); herr != nil {
				err = herr
			}
		}
		if err != nil {
			return out, err
		}
		out = append(out, stored...)
	}
	return out, flush()
}

// report is what a worker's report carries ahead of an emit, and the
// idempotency key it is written under.
type report struct {
	events []event.Event
	key    string
}

// stamp checks a worker's events about job j and gives each the run, flow,
// step and attempt of the job. Emits are allowed only where they can be
// acted on (withEmits).
func (e *Engine) stamp(ctx context.Context, j store.Job, evs []event.Event, withEmits bool) error {
	for i := range evs {
		if !progressKind(evs[i].Kind) || (!withEmits && evs[i].Kind == "emit") {
			reason := fmt.Sprintf("%q is not a progress event: complete or fail the job instead", evs[i].Kind)
			if evs[i].Kind == "emit" {
				reason = "emit through the events call or with the completion"
			}
			return &ReportError{Field: fmt.Sprintf("events[%d].kind", i), Reason: reason}
		}
		if evs[i].Kind == "emit" {
			if name, _ := emitName(evs[i].Data); name == "" {
				return &ReportError{Field: fmt.Sprintf("events[%d].data.event", i), Reason: "required: the name of the emitted event"}
			}
		}
		ev := &evs[i]
		ev.Subject, ev.RunID, ev.FlowName, ev.Step = j.Run, j.Run, j.Flow, j.Step
		if ev.Attempt == 0 {
			ev.Attempt = j.Attempt
			if len(ev.Meta) == 0 {
				ev.Meta = jobMeta(j.Attempt, j.ID)
			}
		}
	}
	if !isStateWrite(evs) {
		return nil
	}
	d, err := e.Definition(ctx, j.Flow)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return checkState(d, evs)
}

// jobMeta is the meta of an event about attempt of job id,
// {"attempt":…,"jobId":…}, as json.Marshal writes the map of the two,
// without the map: every report and completion makes one or more.
func jobMeta(attempt int, id string) json.RawMessage {
	b := strconv.AppendInt(append(make([]byte, 0, 32+len(id)), `{"attempt":`...), int64(attempt), 10)
	b = append(b, `,"jobId":`...)
	q, err := json.Marshal(id)
	if err != nil {
		panic(err) // a string always encodes
	}
	return append(append(b, q...), '}')
}

// emitName reads an emit's event name and payload in either shape the
// reducers accept: {event, payload} or {name, ...payload}.
func emitName(data json.RawMessage) (string, json.RawMessage) {
	var d struct {
		Event   string          `json:"event"`
		Name    string          `json:"name"`
		Payload json.RawMessage `json:"payload"`
	}
	_ = json.Unmarshal(data, &d)
	if d.Event != "" {
		if len(d.Payload) == 0 {
			return d.Event, json.RawMessage(`null`)
		}
		return d.Event, d.Payload
	}
	if d.Name == "" {
		return "", nil
	}
	var rest map[string]json.RawMessage
	_ = json.Unmarshal(data, &rest)
	delete(rest, "name")
	return d.Name, mustJSON(rest)
}

// emit stores ev, an emit of job j, and queues the steps it makes ready.
// held, when set, is the lease j is taken to be held by, not yet checked:
// the update names it, and a refused update tells a lost lease from a lost
// race.
func (e *Engine) emit(ctx context.Context, j store.Job, ev event.Event, held *store.JobAck, before report) ([]event.Event, error) {
	name, payload := emitName(ev.Data)
	// As for a start, a store that checks the definition in the update
	// lets the emit be decided on the cached one (see checkedDefinition);
	// once the store refused an update, the next try reads the stored one.
	body, d := e.checkedDefinition(j.Flow)
	var out []event.Event
	// One clock reading for every retry, so that a trigger a ready step
	// registers keeps its id.
	now := e.nowMS()
	// The step the emit makes ready may go to a claim waiting here, as a
	// start's first step does; once the store refused that (its queue was
	// paused, or the run moved on), the next try enqueues it as usual.
	handsOff := true
	err := e.retry(ctx, func() error {
		if d == nil {
			var err error
			if d, err = e.Definition(ctx, j.Flow); err != nil {
				return err
			}
		}
		r, release, err := e.readRunForUpdate(ctx, j.Flow, j.Run)
		if err != nil {
			return err
		}
		defer release()
		if r.ended() {
			return ErrRunEnded
		}
		if r.emitted(name) {
			// A redelivered emit: fan-in already counted it. The events
			// before it are appended under their key, which replays them
			// if this is a repeat of the report that wrote them with the
			// emit; the append checks the lease, or, with nothing to
			// append, it is checked here.
			if len(before.events) > 0 {
				res, err := e.st.Append(ctx, store.Context{Type: "flow", ID: j.Run}, before.events,
					store.AppendOptions{IdempotencyKey: before.key, Held: held})
				if held != nil && errors.Is(err, store.ErrConflict) {
					err = ErrLeaseLost
				}
				out = res.Events
				return err
			}
			if held != nil {
				_, err := e.held(ctx, *held)
				return err
			}
			return nil
		}
		fx := effects{events: slices.Clip(before.events)}
		e.decideEmit(r, d, ev, name, payload, now, &fx)
		r.settle()
		u, err := r.update()
		if err != nil {
			return err
		}
		fx.into(&u)
		if err := e.register(ctx, &fx); err != nil {
			return err
		}
		u.Definition, u.Held, u.IdempotencyKey = body, held, before.key
		var deliver func(error) bool
		if handsOff {
			deliver = e.handOff(&u, now)
		}
		res, err := e.leaseCommit(ctx, r, u)
		if deliver != nil && !deliver(err) && err != nil {
			handsOff = false
		}
		if errors.Is(err, errRace) && body != nil {
			body, d = nil, nil
		}
		out = res.Events
		return err
	})
	return out, err
}

// Complete finishes the job held by ack with result: step.completed, and
// flow.completed when no step of the run is left to run. evs, progress
// events (a step.started not sent yet, last logs, emits), are stored before
// step.completed in the same atomic step, and the steps their emits make
// ready are queued in it, so the run goes on. Once it succeeded,
// a repeat with the same lease succeeds again and writes nothing. Errors:
// ErrLeaseLost, ErrRunEnded, ErrStateInvalid, a *ReportError.
func (e *Engine) Complete(ctx context.Context, ack store.JobAck, result json.RawMessage, evs ...event.Event) error {
	_, _, err := e.completeNext(ctx, ack, result, nil, evs)
	return err
}

// Next is what a completion claims for its worker (CompleteClaiming): up
// to Max (at least 1) ready jobs of Queues.
type Next struct {
	Queues []string
	Max    int
}

// CompleteClaiming completes as Complete does and, on a store that claims
// in its run updates (store.RunUpdate.Claim), claims up to next.Max ready
// jobs of next.Queues in the completion's own write, as Claim would without
// waiting: a worker that takes its next job with each completion then costs
// the store one write per job. claimed is false when the store cannot, or
// the call repeated a completion: then nothing was claimed, and the caller
// claims on its own (ClaimHanded). Errors: as Complete's.
func (e *Engine) CompleteClaiming(ctx context.Context, ack store.JobAck, result json.RawMessage, next Next, evs ...event.Event) (jobs []store.Job, claimed bool, err error) {
	if !e.claimsInUpdate && !e.handsOver() {
		return nil, false, e.Complete(ctx, ack, result, evs...)
	}
	next.Max = max(next.Max, 1)
	return e.completeNext(ctx, ack, result, &next, evs)
}

// updateClaimer is a store whose UpdateRun claims a RunUpdate's Claim in the
// update's own write.
type updateClaimer interface {
	ClaimsInUpdate() bool
}

// completeNext is Complete, claiming next in the completion's write when set;
// claimed says whether it did (not when the call repeated a completion).
func (e *Engine) completeNext(ctx context.Context, ack store.JobAck, result json.RawMessage, next *Next, evs []event.Event) (jobs []store.Job, claimed bool, err error) {
	j, cached, err := e.heldForAck(ctx, ack)
	if errors.Is(err, ErrLeaseLost) {
		return nil, false, e.repeated(ctx, ack, stepCompleted)
	}
	if err != nil {
		return nil, false, err
	}
	jobs, err = e.complete(ctx, j, ack, result, evs, next)
	if cached && (errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrRunEnded)) {
		// The job may have been gone before this call: answer as for a
		// job read from the store.
		return nil, false, e.repeatedOr(ctx, ack, stepCompleted, err)
	}
	if err != nil || next == nil {
		return nil, false, err
	}
	jobs, err = e.handOut(ctx, jobs)
	return jobs, err == nil, err
}

// repeatedOr answers a call about a job that turned out gone as repeated
// does when the store says the lease is lost, and with err otherwise.
func (e *Engine) repeatedOr(ctx context.Context, ack store.JobAck, outcome string, err error) error {
	if _, herr := e.held(ctx, ack); errors.Is(herr, ErrLeaseLost) {
		return e.repeated(ctx, ack, outcome)
	}
	return err
}

// complete writes j's completion; with next it claims in the same write, and
// answers the jobs the store claimed. Emits among evs are decided in that
// write too, as the events call decides them: the steps they make ready are
// queued (and may be handed to a waiting claim, or taken by next), and an
// event name counted before stores nothing.
func (e *Engine) complete(ctx context.Context, j store.Job, ack store.JobAck, result json.RawMessage, evs []event.Event, next *Next) ([]store.Job, error) {
	if err := e.stamp(ctx, j, evs, true); err != nil {
		return nil, err
	}
	emits := slices.ContainsFunc(evs, func(ev event.Event) bool { return ev.Kind == "emit" })
	// As for an emit of the events call, a store that checks the
	// definition in the update lets it be decided on the cached one.
	var body []byte
	var d *flows.Definition
	if emits {
		body, d = e.checkedDefinition(j.Flow)
	}
	// The steps the emits make ready go to this completion's claim first,
	// written claimed in its own write, then to a claim waiting here.
	handsOff, takes := emits, emits && next != nil && e.handsOver()
	// One clock reading for every retry, as for an emit.
	now := e.nowMS()
	var claimed []store.Job
	err := e.retry(ctx, func() error {
		if emits && d == nil {
			var err error
			if d, err = e.Definition(ctx, j.Flow); err != nil {
				return err
			}
		}
		r, release, err := e.readRunForUpdate(ctx, j.Flow, j.Run)
		if err != nil {
			return err
		}
		defer release()
		if r.ended() {
			return ErrRunEnded
		}
		var fx effects
		for _, ev := range evs {
			if ev.Kind != "emit" {
				fx.events = append(fx.events, ev)
				continue
			}
			if name, payload := emitName(ev.Data); !r.emitted(name) {
				e.decideEmit(r, d, ev, name, payload, now, &fx)
			}
		}
		s := r.state.Steps[j.Step]
		if s == nil {
			s = &stepState{Queue: j.Queue}
			r.state.Steps[j.Step] = s
		}
		s.Status, s.Attempt, s.Acked = stepCompleted, j.Attempt, ackedBy(ack.Lease, stepCompleted)
		r.meta.CompletedSteps++
		data := map[string]any{}
		if len(result) > 0 {
			data["result"] = result
		}
		done := flowEvent(r, "step.completed", j.Step, data)
		done.Attempt, done.Meta = j.Attempt, jobMeta(j.Attempt, j.ID)
		fx.events = append(fx.events, done)
		var u store.RunUpdate
		if !r.anyActive() {
			u, err = e.end(r, store.RunCompleted, now)
			fx.events = append(fx.events, flowEvent(r, "flow.completed", "", map[string]any{"duration": now - r.meta.StartedAt}))
		} else {
			r.settle()
			u, err = r.update()
		}
		if err != nil {
			return err
		}
		fx.into(&u)
		if err := e.register(ctx, &fx); err != nil {
			return err
		}
		u.Ack, u.Definition = &ack, body
		var own []store.Job
		if takes {
			own = e.takeEnqueued(&u, *next, now)
		}
		if next != nil && e.claimsInUpdate && len(own) < next.Max {
			u.Claim = &store.ClaimRequest{
				Queues: next.Queues, Max: next.Max - len(own), Lease: e.newLease(),
				Now: now, LeaseUntil: now + e.opts.Lease.Milliseconds(),
			}
		}
		var deliver func(error) bool
		if handsOff && len(own) == 0 {
			deliver = e.handOff(&u, now)
		}
		res, err := e.leaseCommit(ctx, r, u)
		if deliver != nil && !deliver(err) && err != nil {
			handsOff = false
		}
		if err != nil {
			// The store may have refused the jobs written claimed (their
			// queue was paused): the next try enqueues them as usual.
			takes = false
		}
		if errors.Is(err, errRace) && body != nil {
			body, d = nil, nil
		}
		if err == nil {
			claimed = append(own, res.Claimed...)
		}
		return err
	})
	return claimed, err
}

// takeEnqueued marks up to next.Max of the jobs u enqueues, ready at now on
// next's queues, claimed under leases of their own, and returns them: a
// completion that claims takes the steps its emits made ready in its own
// write, on a store that can enqueue a job claimed.
func (e *Engine) takeEnqueued(u *store.RunUpdate, next Next, now int64) []store.Job {
	var own []store.Job
	for i := range u.Enqueue {
		j := &u.Enqueue[i]
		if len(own) == next.Max || j.ReadyAt > now || !slices.Contains(next.Queues, j.Queue) {
			continue
		}
		j.Lease, j.LeaseUntil = e.newLease(), now+e.opts.Lease.Milliseconds()
		own = append(own, *j)
	}
	return own
}

// emitted reports whether the run counted an emit of name already: fan-in
// counts a name once, so a later emit of it stores nothing.
func (r *run) emitted(name string) bool {
	_, seen := r.state.Emits[name]
	return seen
}

// decideEmit counts ev, an emit of name with payload not counted yet, in r,
// and plans the steps it makes ready into fx, after the emit itself.
func (e *Engine) decideEmit(r *run, d *flows.Definition, ev event.Event, name string, payload json.RawMessage, now int64, fx *effects) {
	r.state.Emits[name] = payload
	if r.meta.EmittedEvents == nil {
		r.meta.EmittedEvents = map[string]int64{}
	}
	r.meta.EmittedEvents[name] = now
	fx.events = append(fx.events, ev)
	for _, step := range ready(d, r, name) {
		e.plan(r, d, step, stepInput(d, r, step), now, fx)
	}
}

func (r *run) anyActive() bool {
	for _, s := range r.state.Steps {
		if s.active() {
			return true
		}
	}
	return false
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

// Fail reports that the job held by ack failed with msg. When the step's
// retry policy allows another attempt and retriable is not false, the step
// is retried after its backoff (step.failed with willRetry, then step.retry
// when due); otherwise the step fails and so does the run. evs are stored
// before step.failed as with Complete. Once it succeeded, a repeat with the
// same lease succeeds again and writes nothing. Errors: ErrLeaseLost,
// ErrRunEnded, ErrStateInvalid, a *ReportError.
func (e *Engine) Fail(ctx context.Context, ack store.JobAck, msg string, retriable *bool, evs ...event.Event) error {
	return e.fail(ctx, ack, msg, retriable == nil || *retriable, evs)
}

func (e *Engine) fail(ctx context.Context, ack store.JobAck, msg string, retriable bool, first []event.Event) error {
	j, cached, err := e.heldForAck(ctx, ack)
	if errors.Is(err, ErrLeaseLost) {
		return e.repeated(ctx, ack, stepFailed)
	}
	if err != nil {
		return err
	}
	err = e.failHeld(ctx, j, ack, msg, retriable, first)
	if cached && (errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrRunEnded)) {
		return e.repeatedOr(ctx, ack, stepFailed, err)
	}
	return err
}

func (e *Engine) failHeld(ctx context.Context, j store.Job, ack store.JobAck, msg string, retriable bool, first []event.Event) error {
	if err := e.stamp(ctx, j, first, false); err != nil {
		return err
	}
	d, err := e.Definition(ctx, j.Flow)
	if err != nil {
		return err
	}
	policy := d.Steps[j.Step].RetryPolicy
	willRetry := retriable && j.Attempt < policy.MaxAttempts() && policy.Retriable(msg)
	return e.retry(ctx, func() error {
		r, release, err := e.readRunForUpdate(ctx, j.Flow, j.Run)
		if err != nil {
			return err
		}
		defer release()
		if r.ended() {
			return ErrRunEnded
		}
		now := e.nowMS()
		s := r.state.Steps[j.Step]
		if s == nil {
			s = &stepState{Queue: j.Queue}
			r.state.Steps[j.Step] = s
		}
		s.Attempt, s.Acked = j.Attempt, ackedBy(ack.Lease, stepFailed)
		meta := map[string]any{"jobId": j.ID, "maxAttempts": policy.MaxAttempts()}
		if policy != nil {
			meta["backoff"] = policy.Backoff
		}
		data := map[string]any{"error": msg, "willRetry": willRetry}
		var u store.RunUpdate
		evs := slices.Clip(first)
		if willRetry {
			at := now + policy.Delay(j.Attempt).Milliseconds()
			data["nextRetryAt"] = isoMS(at)
			s.Status = stepRetrying
			evs = append(evs, withAttempt(flowEvent(r, "step.failed", j.Step, data), j.Attempt, meta))
			u, err = r.update()
			t := retryTimer(r, j.Step)
			t.Due = at
			u.SetTimers = []store.Timer{t}
		} else {
			s.Status = stepFailed
			evs = append(evs, withAttempt(flowEvent(r, "step.failed", j.Step, data), j.Attempt, meta))
			u, err = e.end(r, store.RunFailed, now)
			evs = append(evs, flowEvent(r, "flow.failed", "", map[string]any{
				"error": fmt.Sprintf("step %s failed: %s", j.Step, msg), "duration": now - r.meta.StartedAt,
			}))
		}
		if err != nil {
			return err
		}
		u.Events, u.Ack = evs, &ack
		// end lists the failing job among those to withdraw; the ack
		// deletes it already.
		u.Remove = removeRef(u.Remove, j.ID)
		if _, err := e.leaseCommit(ctx, r, u); err != nil {
			return err
		}
		e.closeTriggers(ctx, r, "run failed")
		return nil
	})
}

func removeRef(refs []store.JobRef, id string) []store.JobRef {
	out := refs[:0]
	for _, r := range refs {
		if r.ID != id {
			out = append(out, r)
		}
	}
	return out
}

// Tick fires the retries that are due: for each, step.retry and a new job
// for the next attempt, once, whichever instance gets the timer.
func (e *Engine) Tick(ctx context.Context) error {
	now := e.nowMS()
	// A timer taken by an instance that dies is held this long before
	// another instance takes it.
	hold := now + e.opts.Lease.Milliseconds()
	for {
		timers, err := e.st.DueTimers(ctx, now, hold, 100)
		if err != nil {
			return err
		}
		// Timers of kinds handed to others (schedules) are many at one
		// instant and independent of each other, so they fire side by
		// side; the engine's own keep their order.
		var handed sync.WaitGroup
		slots := make(chan struct{}, handedTimerSlots)
		for _, t := range timers {
			e.opts.Observer.TimerDue(t, time.Duration(max(now-t.Due, 0))*time.Millisecond)
			fire := func() {
				if err := e.fire(ctx, t); err != nil {
					e.log.Error().Err(err).Str("timer", t.Name()).Msg("timer not fired")
				}
			}
			if _, ok := e.timerKinds.Load(t.Kind); ok {
				slots <- struct{}{}
				handed.Go(func() { defer func() { <-slots }(); fire() })
				continue
			}
			fire()
		}
		handed.Wait()
		if len(timers) < 100 {
			return nil
		}
	}
}

// handedTimerSlots bounds the timers of handed kinds one Tick fires at
// once.
const handedTimerSlots = 16

// TimerHandler fires a due timer of a kind the engine does not own. The
// timer comes claimed as DueTimers claims it; the handler clears or moves
// it with the update that records what it did, so that the timer fires
// again, on any instance, once its hold ends if the handler did not get
// that far.
type TimerHandler func(ctx context.Context, t store.Timer) error

// HandleTimers hands the due timers of kind to h: the engine's durable
// timers, with their claims, for work beside flow runs (schedules).
func (e *Engine) HandleTimers(kind string, h TimerHandler) { e.timerKinds.Store(kind, h) }

func (e *Engine) fire(ctx context.Context, t store.Timer) error {
	if h, ok := e.timerKinds.Load(t.Kind); ok {
		return h.(TimerHandler)(ctx, t)
	}
	if t.Kind == timerAwait || t.Kind == timerTimeout {
		return e.fireAwaitTimer(ctx, t)
	}
	if t.Kind == timerEvent {
		return e.fireEventTimer(ctx, t)
	}
	d, err := e.Definition(ctx, t.Flow)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return e.retry(ctx, func() error {
		r, err := e.readRun(ctx, t.Flow, t.Run)
		if errors.Is(err, store.ErrNotFound) {
			return nil // deleted with its flow's history
		}
		if err != nil {
			return err
		}
		s := r.state.Steps[t.Step]
		u, err := r.update()
		if err != nil {
			return err
		}
		u.ClearTimers = []store.Timer{t}
		if s != nil && s.Status == stepRetrying && !r.ended() && d != nil {
			if u, err = e.redispatch(r, d, t); err != nil {
				return err
			}
		}
		_, err = e.commit(ctx, r, u)
		return err
	})
}

func (e *Engine) redispatch(r *run, d *flows.Definition, t store.Timer) (store.RunUpdate, error) {
	s := r.state.Steps[t.Step]
	now := e.nowMS()
	failed := s.Attempt
	s.Status, s.Attempt = stepQueued, failed+1
	u, err := r.update()
	if err != nil {
		return u, err
	}
	delay := d.Steps[t.Step].RetryPolicy.Delay(failed).Milliseconds()
	u.ClearTimers = []store.Timer{t}
	u.Events = []event.Event{withAttempt(flowEvent(r, "step.retry", t.Step, map[string]any{
		"reason": "retry after failure", "delayMs": delay, "nextAttempt": s.Attempt,
	}), s.Attempt, map[string]any{"scheduledAt": isoMS(t.Due)})}
	u.Enqueue = []store.Job{{
		ID: store.JobID(r.meta.Run, t.Step), Queue: s.Queue, Flow: r.meta.Flow, Run: r.meta.Run, Step: t.Step,
		Input: stepInput(d, r, t.Step), Attempt: s.Attempt, ReadyAt: now,
	}}
	return u, nil
}

// Run fires due retries every Interval until ctx ends. It first watches
// the event kinds of the stored definitions, for those stored before their
// kinds were watched.
func (e *Engine) Run(ctx context.Context) error {
	if err := e.watchStoredKinds(ctx); err != nil && ctx.Err() == nil {
		// Definitions stored through PutDefinition are watched already;
		// this only catches older ones up, so it must not stop the engine.
		e.log.Error().Err(err).Msg("watching the event kinds of stored flows failed")
	}
	tk := time.NewTicker(e.opts.Interval)
	defer tk.Stop()
	failing := outage.New(e.log, "engine tick")
	for {
		if err := e.Tick(ctx); err != nil && ctx.Err() == nil {
			failing.Failed(err)
		} else if err == nil {
			failing.Succeeded()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tk.C:
		}
	}
}

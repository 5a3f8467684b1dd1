package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nqd-dev/nqd/store"
)

// runState is the engine's bookkeeping inside store.RunMeta.State.
type runState struct {
	Input json.RawMessage `json:"input,omitempty"`
	// Steps holds every step that fired, by name.
	Steps map[string]*stepState `json:"steps"`
	// Emits holds each emitted event's first payload, by event name.
	Emits map[string]json.RawMessage `json:"emits,omitempty"`
	// Awaits holds every await the run registered, by await id (a
	// trigger's is its trigger id).
	Awaits map[string]*awaitState `json:"awaits,omitempty"`
}

// Engine step statuses: a queued step has a job (waiting or claimed), a
// retrying one a timer.
const (
	stepQueued    = "queued"
	stepRetrying  = "retrying"
	stepCompleted = "completed"
	stepFailed    = "failed"
)

type stepState struct {
	Status  string `json:"status"`
	Attempt int    `json:"attempt"`
	Queue   string `json:"queue"`
	// Await is the id of the await an awaiting step waits on.
	Await string `json:"await,omitempty"`
	// Acked says which lease last finished an attempt of the step and how
	// (ackedBy), so that a worker repeating that report gets its answer
	// again instead of a conflict.
	Acked string `json:"acked,omitempty"`
}

func (s *stepState) active() bool {
	return s.Status == stepQueued || s.Status == stepRetrying || s.Status == stepAwaiting
}

// run is a run's record as read, with its decoded state.
type run struct {
	meta  store.RunMeta
	state runState
	// readStatus is the status the record had when it was read ("" for a
	// new run): the store moves the run out of that status's index.
	readStatus string
	// cancelled lists the triggers end withdrew, whose streams get
	// trigger.cancelled once the end is committed.
	cancelled []string
	// encoded is the state the last update encoded, and encodedState a
	// copy of the state it encoded (see committed).
	encoded      json.RawMessage
	encodedState *runState
}

func (e *Engine) readRun(ctx context.Context, flow, id string) (*run, error) {
	m, err := e.st.RunMeta(ctx, flow, id)
	if err != nil {
		return nil, err
	}
	return decodeRun(m, id)
}

// readRunForUpdate is readRun for a decision that ends in a run update: it
// takes the record this instance wrote last when it has one, which the
// update's version check proves current or refuses (see recent), waiting
// its turn while another decision about the run holds it. The decision
// calls release when it is done, whether or not it wrote.
func (e *Engine) readRunForUpdate(ctx context.Context, flow, id string) (*run, func(), error) {
	var wait *time.Timer // made only once a decision has to wait
	for {
		m, st, ok, held, release := e.recent.takeRun(flow, id)
		if ok && st != nil {
			return &run{meta: m, state: *st, readStatus: m.Status}, release, nil
		}
		if ok {
			r, err := decodeRun(m, id)
			if err != nil {
				release()
				return nil, nil, err
			}
			return r, release, nil
		}
		if held == nil {
			break
		}
		if wait == nil {
			wait = time.NewTimer(heldWait)
			defer wait.Stop()
		}
		select {
		case <-held:
			continue
		case <-wait.C:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		break // the holder is slow: read the store
	}
	r, err := e.readRun(ctx, flow, id)
	return r, func() {}, err
}

func decodeRun(m store.RunMeta, id string) (*run, error) {
	r := &run{meta: m, readStatus: m.Status}
	if len(m.State) > 0 {
		if err := json.Unmarshal(m.State, &r.state); err != nil {
			return nil, fmt.Errorf("engine: run %s state: %w", id, err)
		}
	}
	if r.state.Steps == nil {
		r.state.Steps = map[string]*stepState{}
	}
	if r.state.Emits == nil {
		r.state.Emits = map[string]json.RawMessage{}
	}
	return r, nil
}

func (r *run) ended() bool {
	switch r.meta.Status {
	case store.RunCompleted, store.RunFailed, store.RunCancelled:
		return true
	}
	return false
}

func (r *run) anyActive() bool {
	for _, s := range r.state.Steps {
		if s.active() {
			return true
		}
	}
	return false
}

// update returns the RunUpdate that writes r's new record.
func (r *run) update() (store.RunUpdate, error) {
	st, err := json.Marshal(r.state)
	if err != nil {
		return store.RunUpdate{}, err
	}
	r.encoded, r.encodedState = st, r.state.clone().compacted()
	m := r.meta
	m.State = st
	return store.RunUpdate{Meta: m, PrevStatus: r.readStatus}, nil
}

// compacted makes s's JSON values what encoding and decoding s would make
// them (json.Marshal compacts a json.RawMessage and escapes <, >, & and
// U+2028/U+2029 in it), replacing any value that is not by such a copy.
func (s *runState) compacted() *runState {
	s.Input = compactJSON(s.Input)
	for k, v := range s.Emits {
		s.Emits[k] = compactJSON(v)
	}
	for _, aw := range s.Awaits {
		aw.Input, aw.Outcome = compactJSON(aw.Input), compactJSON(aw.Outcome)
	}
	if len(s.Awaits) == 0 {
		s.Awaits = nil // an empty map is left out of the record
	}
	return s
}

// compactJSON returns b as json.Marshal writes a json.RawMessage: compact,
// with <, >, & and U+2028/U+2029 escaped; b itself when it has nothing that
// would change.
func compactJSON(b json.RawMessage) json.RawMessage {
	if !bytes.ContainsAny(b, " \t\r\n<>&\u2028\u2029") {
		return b
	}
	var c bytes.Buffer
	if err := json.Compact(&c, b); err != nil {
		return b
	}
	var out bytes.Buffer
	json.HTMLEscape(&out, c.Bytes())
	return out.Bytes()
}

// committed is the state u writes, decoded, when r's last update encoded
// it (nil otherwise): a decision that takes the record next starts from a
// copy of it instead of decoding the record again.
func (r *run) committed(u store.RunUpdate) *runState {
	if r == nil || len(u.Meta.State) == 0 || len(r.encoded) == 0 || &u.Meta.State[0] != &r.encoded[0] {
		return nil
	}
	return r.encodedState
}

// clone copies s deep enough that a decision changing its copy changes
// nothing of s: the maps and the step and await records; the JSON values
// are never written in place and are shared.
func (s *runState) clone() *runState {
	c := &runState{Input: s.Input, Steps: make(map[string]*stepState, len(s.Steps)), Emits: maps.Clone(s.Emits)}
	for k, v := range s.Steps {
		st := *v
		c.Steps[k] = &st
	}
	if c.Emits == nil {
		c.Emits = map[string]json.RawMessage{}
	}
	if s.Awaits != nil {
		c.Awaits = make(map[string]*awaitState, len(s.Awaits))
		for k, v := range s.Awaits {
			aw := *v
			c.Awaits[k] = &aw
		}
	}
	return c
}

// retry runs decide until its update is not refused by a concurrent one.
func (e *Engine) retry(ctx context.Context, decide func() error) error {
	for range maxRetries {
		err := decide()
		if !errors.Is(err, errRace) {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return fmt.Errorf("engine: gave up after %d conflicting updates", maxRetries)
}

// maxRetries bounds how often one decision is retried after losing a race;
// each loss means another writer made progress, so this is never reached in
// practice.
const maxRetries = 100

// errRace marks a refused update that is worth deciding again.
var errRace = errors.New("engine: concurrent update")

// commit writes u, decided about r (nil when none was read).
func (e *Engine) commit(ctx context.Context, r *run, u store.RunUpdate) (store.AppendResult, error) {
	res, err := e.st.UpdateRun(ctx, u)
	if err != nil {
		e.recent.refused(u.Meta.FlowName, u.Meta.RunID, u.Meta.Version)
	}
	if errors.Is(err, store.ErrConflict) {
		return res, errRace
	}
	if err == nil {
		e.recent.wrote(u, r.committed(u))
		e.opts.Observer.Committed(u)
	}
	if err == nil && slices.ContainsFunc(u.Enqueue, claimable) {
		e.notify()
	}
	return res, err
}

package triggers

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"reflect"
	"sync"
	"time"

	"github.com/rs/xid"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/cond"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/outage"
	"github.com/nqd-dev/nqd/reducers"
	"github.com/nqd-dev/nqd/store"
)

// CheckSecret reports whether value is the trigger's webhook secret. It
// compares hashes in constant time.
func (t *Trigger) CheckSecret(value string) bool {
	if t.secretHash == "" || value == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(hashSecret(value)), []byte(t.secretHash)) == 1
}

// Fired is what a fire did.
type Fired struct {
	TriggerName string `json:"triggerName"`
	FireID      string `json:"fireId"`
	// Started are the runs the fire started, by flow.
	Started map[string]string `json:"started"`
	// Failed are the flows it could not start, with why.
	Failed map[string]string `json:"failed,omitempty"`
	// SubscribedFlows are the flows it was to start.
	SubscribedFlows []string  `json:"subscribedFlows"`
	At              time.Time `json:"-"`
}

// Fire fires the trigger named name with payload: trigger.fired, then a
// run of each flow subscribed in auto mode (for a flow-scoped trigger)
// with the payload as its input, then one trigger.flow.started or
// trigger.flow.failed per flow. fireID names the fire; the same fireID
// fires once, however often and on however many instances Fire is called
// with it (the event trigger watcher names a fire by the event it
// matched), and an empty one names a new fire. src says where the fire
// came from, recorded in trigger.fired. Errors: ErrNotFound, ErrNotActive,
// the store's.
func (g *Registry) Fire(ctx context.Context, name string, payload json.RawMessage, fireID string, src map[string]any) (Fired, error) {
	t, err := g.Get(ctx, name)
	if err != nil {
		return Fired{}, err
	}
	if t.Status != StatusActive {
		return Fired{}, ErrNotActive
	}
	return g.fire(ctx, t, payload, fireID, src)
}

func (g *Registry) fire(ctx context.Context, t Trigger, payload json.RawMessage, fireID string, src map[string]any) (Fired, error) {
	if fireID == "" {
		fireID = xid.New().String()
	}
	if len(bytes.TrimSpace(payload)) == 0 {
		payload = json.RawMessage(`{}`)
	}
	flows := t.AutoFlows()
	out := Fired{TriggerName: t.Name, FireID: fireID, Started: map[string]string{}, SubscribedFlows: flows, At: g.opts.Now()}
	if out.SubscribedFlows == nil {
		out.SubscribedFlows = []string{}
	}
	c := Context(t.Name)
	fired := event.Event{Kind: reducers.KindTriggerFired, Subject: t.Name, Trigger: t.Name, Data: mustJSON(map[string]any{
		"fireId": fireID, "type": t.Type, "payload": payload, "source": src, "subscribedFlows": out.SubscribedFlows,
	})}
	if _, err := g.st.Append(ctx, c, []event.Event{fired}, store.AppendOptions{IdempotencyKey: "fired:" + fireID}); err != nil {
		return Fired{}, err
	}
	// Every step below is idempotent by the fire's id: the run id is
	// derived from it, so a fire handled twice (a retry, or two instances
	// matching the same event) starts each flow once.
	input := startInput(t, payload)
	var results []event.Event
	for _, flow := range flows {
		st, err := g.starter.Start(ctx, flow, input, "trigger:"+t.Name+":"+fireID)
		if err != nil {
			msg := nqd.ErrorMessage(err)
			out.Failed = mapSet(out.Failed, flow, msg)
			results = append(results, event.Event{Kind: reducers.KindTriggerFlowFailed, Subject: t.Name, Trigger: t.Name, FlowName: flow,
				Data: mustJSON(map[string]string{"fireId": fireID, "flowName": flow, "error": msg})})
			g.log.Warn().Err(err).Str("trigger", t.Name).Str("flow", flow).Msg("trigger fire did not start a flow")
			continue
		}
		out.Started[flow] = st.FlowID
		results = append(results, event.Event{Kind: reducers.KindTriggerFlowStarted, Subject: t.Name, Trigger: t.Name, FlowName: flow, RunID: st.FlowID,
			Data: mustJSON(map[string]string{"fireId": fireID, "flowName": flow, "runId": st.FlowID})})
	}
	if len(results) > 0 {
		if _, err := g.st.Append(ctx, c, results, store.AppendOptions{IdempotencyKey: "started:" + fireID}); err != nil {
			return out, err
		}
	}
	return out, nil
}

func mapSet(m map[string]string, k, v string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	m[k] = v
	return m
}

// startInput is a started run's input: the payload when it is an object,
// else the payload under `payload`.
func startInput(t Trigger, payload json.RawMessage) json.RawMessage {
	if p := bytes.TrimSpace(payload); len(p) > 0 && p[0] == '{' {
		return payload
	}
	return mustJSON(map[string]json.RawMessage{"payload": payload})
}

// kindPage is how many kind index entries one look takes.
const kindPage = 200

// Watcher is Run's memory: per event trigger, the last kind index entry
// it looked at.
type Watcher struct {
	mu      sync.Mutex
	cursors map[string]event.ID // by trigger name and registration
	conds   map[string]*cond.Program
}

// Run fires event triggers until ctx ends: every Poll it reads, for each
// active event trigger, the events of its kind appended since it last
// looked (from the store's kind index, where event awaits find theirs) and
// fires the trigger for each that matches its filter. Every instance may
// run it: a fire is named by the event it matched, so each is handled once.
func (g *Registry) Run(ctx context.Context) error {
	w := NewWatcher()
	tick := time.NewTicker(g.opts.Poll)
	defer tick.Stop()
	// A store outage fails every look until it ends; it is logged in a
	// handful of lines, not one per poll.
	failing := outage.New(g.log, "event triggers' look")
	for {
		if err := g.Look(ctx, w); err != nil && ctx.Err() == nil {
			failing.Failed(err)
		} else if err == nil {
			failing.Succeeded()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Look is one pass of Run with w's memory; a new Watcher starts from the
// oldest events the kind index keeps.
func (g *Registry) Look(ctx context.Context, w *Watcher) error {
	ts, err := g.List(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range ts {
		if t.Type != TypeEvent || t.Status != StatusActive {
			continue
		}
		if err := g.lookFor(ctx, w, t); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// NewWatcher returns the memory Look keeps between passes.
func NewWatcher() *Watcher {
	return &Watcher{cursors: map[string]event.ID{}, conds: map[string]*cond.Program{}}
}

func (g *Registry) lookFor(ctx context.Context, w *Watcher, t Trigger) error {
	var c config
	if err := json.Unmarshal(t.Config, &c); err != nil || c.Event == "" {
		return nil
	}
	prg, err := w.condition(c.Filter)
	if err != nil {
		return nil // checked when stored
	}
	key := t.Name + "\x00" + t.RegisteredAt + "\x00" + c.Event
	w.mu.Lock()
	after := w.cursors[key]
	w.mu.Unlock()
	since := t.activeSince.UnixMilli()
	for {
		page, err := g.st.KindEvents(ctx, c.Event, after, kindPage)
		if err != nil {
			return err
		}
		for _, en := range page {
			after = en.Seq
			if int64(en.Event.ID.MS) < since || en.Context.Type == ContextType {
				continue
			}
			if !matches(prg, c.Filter, en.Event) {
				continue
			}
			wire, err := json.Marshal(en.Event)
			if err != nil {
				return err
			}
			src := map[string]any{"event": json.RawMessage(wire), "context": en.Context.String()}
			if _, err := g.fire(ctx, t, en.Event.Data, "event-"+en.Context.Type+"-"+en.Context.ID+"-"+en.Event.ID.String(), src); err != nil {
				return err
			}
		}
		w.mu.Lock()
		w.cursors[key] = after
		w.mu.Unlock()
		if len(page) < kindPage {
			return nil
		}
	}
}

func (w *Watcher) condition(f json.RawMessage) (*cond.Program, error) {
	key := string(f)
	w.mu.Lock()
	defer w.mu.Unlock()
	if p, ok := w.conds[key]; ok {
		return p, nil
	}
	p, err := compileFilter(f)
	if err != nil {
		return nil, err
	}
	w.conds[key] = p
	return p, nil
}

// matches reports whether e passes an event trigger's filter: the
// condition, or every field of the filter object equal to the event
// data's.
func matches(prg *cond.Program, filter json.RawMessage, e event.Event) bool {
	if prg != nil {
		wire, err := json.Marshal(e)
		if err != nil {
			return false
		}
		ok, _ := prg.Match(wire, json.RawMessage(`null`))
		return ok
	}
	if isEmptyFilter(filter) || bytes.TrimSpace(filter)[0] != '{' {
		return true
	}
	var want, have map[string]any
	if json.Unmarshal(filter, &want) != nil || json.Unmarshal(e.Data, &have) != nil {
		return false
	}
	for k, v := range want {
		if !reflect.DeepEqual(have[k], v) {
			return false
		}
	}
	return true
}

package engine

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"

	"github.com/nqd-dev/nqd/cond"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/store"
)

// This file resolves event awaits. An event await registers in the run's
// record with an "event" timer due at once; each time the timer fires the
// engine reads the store's kind index from the await's look-back start (its
// registration minus EventLookback) and takes the first entry that matches
// the condition and is not consumed yet, consuming it in the same UpdateRun
// that resumes the step. Until one matches the timer is set again EventPoll
// later.
//
// No event is lost to the race with registration: the index keeps every
// appended event of a watched kind for the store's kind window whether or
// not a waiter exists, and the await, once committed, reads it back from
// before its own registration, so an event that came first is found on the
// first look and one that comes later on a later one. A kind is watched
// when a definition awaiting it is stored (PutDefinition, which the
// definitions of NQ_FLOWS_DIR go through too), before any run of it can
// register the await; so look-back finds every event appended after the
// definition was stored, and only events older than the definition are
// missing, which no look-back promised. Run watches the kinds of
// definitions stored before the store knew of watching. Consumption is the store's: of many
// waiters one takes an entry, and an await, resolved once by its versioned
// record, takes one entry.

// watchKinds watches the kinds d's event awaits wait for.
func (e *Engine) watchKinds(ctx context.Context, d *flows.Definition) error {
	var kinds []string
	for _, name := range slices.Sorted(maps.Keys(d.Steps)) {
		if a := d.Steps[name].Await; a != nil && a.Type == "event" && !slices.Contains(kinds, a.EventKind) {
			kinds = append(kinds, a.EventKind)
		}
	}
	if len(kinds) == 0 {
		return nil
	}
	return e.st.WatchKinds(ctx, kinds...)
}

// watchStoredKinds watches the event kinds of every stored definition.
func (e *Engine) watchStoredKinds(ctx context.Context) error {
	defs, err := e.Definitions(ctx)
	if err != nil {
		return err
	}
	for _, d := range defs {
		if err := e.watchKinds(ctx, d); err != nil {
			return err
		}
	}
	return nil
}

// eventPage is how many kind index entries one read takes.
const eventPage = 100

// fireEventTimer looks for the event an event await waits for.
func (e *Engine) fireEventTimer(ctx context.Context, t store.Timer) error {
	var resumed string
	err := e.retry(ctx, func() error {
		resumed = ""
		r, err := e.readRun(ctx, t.FlowName, t.RunID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		id, aw := r.pendingAwait(t.Step)
		if aw == nil || aw.Type != "event" || r.ended() {
			u, err := r.update()
			if err != nil {
				return err
			}
			u.ClearTimers = []store.Timer{t}
			_, err = e.commit(ctx, r, u)
			e.cursors.Delete(id)
			return err
		}
		now := e.nowMS()
		en, found, err := e.findEvent(ctx, r, id, aw)
		if err != nil {
			return err
		}
		var u store.RunUpdate
		if found {
			wire, err := json.Marshal(en.Event)
			if err != nil {
				return err
			}
			u = e.resume(r, id, "Event received", map[string]any{"event": json.RawMessage(wire)}, now)
			u.Events[0] = withEventID(u.Events[0], en)
			u.Consume = []store.KindRef{{Kind: aw.EventKind, Seq: en.Seq}}
			resumed = id
		} else {
			if u, err = r.update(); err != nil {
				return err
			}
			t.Due = now + e.opts.EventPoll.Milliseconds()
			u.SetTimers = []store.Timer{t}
		}
		_, err = e.commit(ctx, r, u)
		return err
	})
	if resumed != "" {
		e.cursors.Delete(resumed)
	}
	return err
}

// findEvent returns the first unconsumed entry of the await's kind, from
// its look-back start on, that matches its condition. Entries that do not
// match never will (a condition sees only the event and the run's input),
// so the cursor moves past them; consumed ones are passed over for good.
func (e *Engine) findEvent(ctx context.Context, r *run, id string, aw *awaitState) (store.KindEntry, bool, error) {
	prg, err := e.condition(aw.Where)
	if err != nil {
		return store.KindEntry{}, false, err
	}
	from := max(aw.RegisteredAt-e.opts.EventLookback.Milliseconds(), 0)
	after := event.ID{}
	if from > 0 {
		after = event.ID{MS: uint64(from - 1), Seq: ^uint64(0)}
	}
	if c, ok := e.cursors.Load(id); ok {
		after = c.(event.ID)
	}
	for {
		page, err := e.st.KindEvents(ctx, aw.EventKind, after, eventPage)
		if err != nil {
			return store.KindEntry{}, false, err
		}
		for _, en := range page {
			if en.Consumed || int64(en.Event.ID.MS) < from {
				after = en.Seq
				continue
			}
			ok, err := e.matches(prg, en, r.state.Input)
			if err != nil {
				e.log.Debug().Err(err).Str("await", id).Str("event", en.Event.ID.String()).Msg("condition not met")
			}
			if ok {
				e.cursors.Store(id, after)
				return en, true, nil
			}
			after = en.Seq
		}
		e.cursors.Store(id, after)
		if len(page) < eventPage {
			return store.KindEntry{}, false, nil
		}
	}
}

func (e *Engine) matches(prg *cond.Program, en store.KindEntry, input json.RawMessage) (bool, error) {
	if prg == nil {
		return true, nil
	}
	wire, err := json.Marshal(en.Event)
	if err != nil {
		return false, err
	}
	return prg.Match(wire, input)
}

// condition returns the compiled where, nil for none. Definitions are
// checked when stored, so an error here means one stored before conditions
// were checked.
func (e *Engine) condition(where string) (*cond.Program, error) {
	if where == "" {
		return nil, nil
	}
	if p, ok := e.conds.Load(where); ok {
		return p.(*cond.Program), nil
	}
	p, err := cond.Compile(where)
	if err != nil {
		return nil, err
	}
	e.conds.Store(where, p)
	return p, nil
}

// withEventID records in step.resumed which event resumed the step.
func withEventID(ev event.Event, en store.KindEntry) event.Event {
	var d map[string]any
	if err := json.Unmarshal(ev.Data, &d); err != nil || d == nil {
		d = map[string]any{}
	}
	d["eventId"] = en.Event.ID.String()
	d["eventKind"] = en.Event.Kind
	d["eventContext"] = en.Context.String()
	ev.Data = mustJSON(d)
	return ev
}

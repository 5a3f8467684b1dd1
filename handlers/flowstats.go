package handlers

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// flowMeta is one flow's entry in the stats messages of /api/_flows/ws.
// It is comparable, so that a change is told by ==.
type flowMeta struct {
	Name            string
	Stats           store.FlowStats
	LastRunAt       int64 // epoch ms, 0 for none
	LastCompletedAt int64
}

// MarshalJSON writes the metadata the v0.5 UI reads: the stats nested, and
// the two times as ISO strings (null when none).
func (m flowMeta) MarshalJSON() ([]byte, error) {
	iso := func(ms int64) any {
		if ms == 0 {
			return nil
		}
		return time.UnixMilli(ms).UTC().Format(event.TimeFormat)
	}
	return json.Marshal(map[string]any{
		"name":            m.Name,
		"displayName":     m.Name,
		"lastRunAt":       iso(m.LastRunAt),
		"lastCompletedAt": iso(m.LastCompletedAt),
		"stats":           m.Stats,
	})
}

// statsMessage is flow.stats.initial and flow.stats.update.
type statsMessage struct {
	Type      string    `json:"type"`
	Data      statsData `json:"data"`
	Timestamp int64     `json:"timestamp"`
}

type statsData struct {
	ID       string   `json:"id"`
	Metadata flowMeta `json:"metadata"`
}

// readFlowStats reads the stats of every defined flow.
func (a *API) readFlowStats(ctx context.Context) (map[string]flowMeta, error) {
	defs, err := a.engine.Definitions(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]flowMeta, len(defs))
	for _, d := range defs {
		st, err := store.ReadFlowStats(ctx, engineRuns{a}, d.Name)
		if err != nil {
			return nil, err
		}
		out[d.Name] = flowMeta{Name: d.Name, Stats: st, LastRunAt: st.LastRunAt, LastCompletedAt: st.LastCompletedAt}
	}
	return out, nil
}

// engineRuns lists runs through the engine, which the API holds.
type engineRuns struct{ a *API }

func (r engineRuns) ListRuns(ctx context.Context, flow, status string, offset, limit int) (store.RunPage, error) {
	return r.a.engine.Runs(ctx, flow, status, offset, limit)
}

// follow sends the stats of every flow (flow.stats.initial each, then
// stats.subscribed), then each flow's new stats when they change
// (flow.stats.update), until the subscription is stopped.
func followStats(w *watch[flowMeta], sc *socketClient) *subscription {
	ctx, cancel := context.WithCancel(sc.conn.Context())
	s := &subscription{cancel: cancel, done: make(chan struct{})}
	l := w.join()
	go func() {
		defer close(s.done)
		defer w.leave(l)
		var sent map[string]flowMeta
		for {
			select {
			case <-ctx.Done():
				return
			case <-l.wake:
			}
			snap := w.snapshot()
			if snap == nil {
				continue
			}
			typ := "flow.stats.update"
			if sent == nil {
				typ = "flow.stats.initial"
			}
			for _, name := range slices.Sorted(maps.Keys(snap)) {
				m := snap[name]
				if old, ok := sent[name]; ok && old == m {
					continue
				}
				if sc.conn.Send(statsMessage{Type: typ, Data: statsData{ID: name, Metadata: m}, Timestamp: sc.stamp()}) != nil {
					return
				}
			}
			if sent == nil {
				sc.send("stats.subscribed")
			}
			sent = snap
		}
	}()
	return s
}

package handlers

import (
	"context"
	"encoding/json"
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

// statsMessage is flow.stats.initial and flow.stats.update, and the
// trigger ones.
type statsMessage[M any] struct {
	Type      string       `json:"type"`
	Data      statsData[M] `json:"data"`
	Timestamp int64        `json:"timestamp"`
}

type statsData[M any] struct {
	ID       string `json:"id"`
	Metadata M      `json:"metadata"`
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

// followStats sends the stats of every flow (flow.stats.initial each, then
// stats.subscribed), then each flow's new stats when they change
// (flow.stats.update), until the subscription is stopped.
func followStats(w *watch[flowMeta], sc *socketClient) *subscription {
	return w.follow(sc, func(name string, m flowMeta, initial bool) error {
		typ := "flow.stats.update"
		if initial {
			typ = "flow.stats.initial"
		}
		return sc.conn.Send(statsMessage[flowMeta]{Type: typ, Data: statsData[flowMeta]{ID: name, Metadata: m}, Timestamp: sc.stamp()})
	})
}

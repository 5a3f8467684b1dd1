package handlers

import (
	"context"
	"encoding/json"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/socket"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/triggers"
)

// triggerSession is one socket of GET /api/_triggers/ws: a trigger's own
// stream (context trigger:<name>), whole then live, its records bare (not
// in the run events' envelope) with `ts` in epoch milliseconds, which the
// UI sorts by (docs/websockets.md). Its methods run on the socket's read
// loop, one at a time.
type triggerSession struct {
	feeds // subs by trigger name
}

func (a *API) newTriggerSession(sc *socketClient) socket.Session {
	return &triggerSession{newFeeds(sc)}
}

type triggerMessage struct {
	TriggerName string `json:"triggerName"`
}

type triggerReply struct {
	Type        string `json:"type"`
	TriggerName string `json:"triggerName"`
}

func (s *triggerSession) Message(typ string, raw []byte) bool {
	switch typ {
	case "subscribe":
		s.subscribe(raw)
	case "unsubscribe":
		var m triggerMessage
		if !s.decode(raw, &m) {
			return true
		}
		if s.unfollow(m.TriggerName) {
			_ = s.conn.Send(triggerReply{Type: "unsubscribed", TriggerName: m.TriggerName})
		}
	default:
		return s.shared(typ, func() *subscription { return followTriggerStats(s.api.triggerStats, s.socketClient) })
	}
	return true
}

func (s *triggerSession) subscribe(raw []byte) {
	var m triggerMessage
	if !s.decode(raw, &m) {
		return
	}
	if m.TriggerName == "" {
		s.conn.Error("Missing triggerName")
		return
	}
	c := store.Context{Type: "trigger", ID: m.TriggerName}
	if !c.Valid() {
		s.conn.Error("Invalid triggerName: " + event.NameRule)
		return
	}
	if !s.covers(c) {
		s.conn.Error("Forbidden: the token does not cover trigger " + m.TriggerName)
		return
	}
	if old := s.subs[m.TriggerName]; old != nil {
		old.stop()
		delete(s.subs, m.TriggerName)
	}
	if len(s.subs) >= MaxSocketSubscriptions {
		s.conn.Error("Too many subscriptions on this socket; unsubscribe from one first")
		return
	}
	name := appendString(nil, m.TriggerName)
	record := func(b []byte, ev event.Event) ([]byte, error) {
		if ev.Trigger == "" {
			ev.Trigger = m.TriggerName
		}
		return ev.AppendV05(b)
	}
	out := render{
		event: func(b []byte, ev event.Event) ([]byte, error) {
			b = append(b, `{"type":"event","triggerName":`...)
			b = append(append(b, name...), `,"event":`...)
			b, err := record(b, ev)
			return append(b, '}'), err
		},
		history: func(b []byte, evs []event.Event) ([]byte, error) {
			b = append(b, `{"type":"history","triggerName":`...)
			b = append(append(b, name...), `,"events":[`...)
			for i, ev := range evs {
				if i > 0 {
					b = append(b, ',')
				}
				var err error
				if b, err = record(b, ev); err != nil {
					return nil, err
				}
			}
			return append(b, "]}"...), nil
		},
	}
	s.subs[m.TriggerName] = s.follow(s.conn.Context(), c, out, func() {
		_ = s.conn.Send(triggerReply{Type: "subscribed", TriggerName: m.TriggerName})
	})
}

// TriggerLister lists the trigger registry; see triggers.Registry.List.
type TriggerLister interface {
	List(ctx context.Context) ([]triggers.Trigger, error)
}

// readTriggerStats reads each registered trigger's metadata as the stats
// messages carry it, encoded, so that a change is told by comparing
// strings. Without a registry there are none.
func (a *API) readTriggerStats(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	if a.triggerList == nil {
		return out, nil
	}
	ts, err := a.triggerList.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range ts {
		b, err := json.Marshal(triggerMetadata(t))
		if err != nil {
			return nil, err
		}
		out[t.Name] = string(b)
	}
	return out, nil
}

// triggerMetadata is a trigger as trigger.stats.initial and
// trigger.stats.update carry it: the list item of GET /api/_triggers, with
// its stats both nested and flat ('stats.totalFires', ...), the two
// spellings the UI reads.
func triggerMetadata(t triggers.Trigger) map[string]any {
	return map[string]any{
		"name": t.Name, "type": t.Type, "scope": t.Scope, "displayName": t.DisplayName,
		"description": t.Description, "source": t.Source, "status": t.Status,
		"registeredAt": t.RegisteredAt, "lastActivityAt": t.LastActivityAt,
		"webhook": t.Webhook, "schedule": t.Schedule, "config": t.Config,
		"subscribedFlows": t.SubscribedFlows, "subscriptionCount": t.SubscriptionCount,
		"stats":                   t.Stats,
		"stats.totalFires":        t.Stats.TotalFires,
		"stats.totalFlowsStarted": t.Stats.TotalFlowsStarted,
		"stats.activeSubscribers": t.Stats.ActiveSubscribers,
		"stats.lastFiredAt":       t.Stats.LastFiredAt,
	}
}

// followTriggerStats sends trigger.stats.initial per trigger, then
// stats.subscribed, then trigger.stats.update for each trigger that
// changes, as followStats does for flows.
func followTriggerStats(w *watch[string], sc *socketClient) *subscription {
	return w.follow(sc, func(name, meta string, initial bool) error {
		typ := "trigger.stats.update"
		if initial {
			typ = "trigger.stats.initial"
		}
		return sc.conn.Send(statsMessage[json.RawMessage]{Type: typ, Data: statsData[json.RawMessage]{ID: name, Metadata: json.RawMessage(meta)}, Timestamp: sc.stamp()})
	})
}

package handlers

import (
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/socket"
	"github.com/nqd-dev/nqd/store"
)

// triggerSession is one socket of GET /api/_triggers/ws: a trigger's own
// stream (context trigger:<name>), whole then live, its records bare (not
// in the run events' envelope) with `ts` in epoch milliseconds, which the
// UI sorts by (docs/websockets.md). Its methods run on the socket's read
// loop, one at a time.
type triggerSession struct {
	*socketClient
	subs  map[string]*subscription // by trigger name
	stats bool
}

func (a *API) newTriggerSession(sc *socketClient) socket.Session {
	sc.send("connected")
	return &triggerSession{socketClient: sc, subs: map[string]*subscription{}}
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
		if sub := s.subs[m.TriggerName]; sub != nil {
			sub.stop()
			delete(s.subs, m.TriggerName)
			_ = s.conn.Send(triggerReply{Type: "unsubscribed", TriggerName: m.TriggerName})
		}
	case "subscribe.stats":
		// The trigger registry's stats come with the registry; until then
		// a subscriber is told it is subscribed and gets no updates.
		if s.stats {
			s.conn.Error("Already subscribed to stats")
			return true
		}
		s.stats = true
		s.send("stats.subscribed")
	case "unsubscribe.stats":
		s.stats = false
		s.send("stats.unsubscribed")
	case "ping":
		s.send("pong")
	default:
		return false
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

func (s *triggerSession) Close() {
	for _, sub := range s.subs {
		sub.stop()
	}
}

package handlers

import (
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/socket"
	"github.com/nqd-dev/nqd/store"
)

// flowSession is one socket of GET /api/_flows/ws: a run's timeline, whole
// then live, and the flows' stats live (docs/websockets.md). Its methods
// run on the socket's read loop, one at a time.
type flowSession struct {
	*socketClient
	subs  map[string]*subscription // by flow:<name>:<run>
	stats *subscription
}

func (a *API) newFlowSession(sc *socketClient) socket.Session {
	sc.send("connected")
	return &flowSession{socketClient: sc, subs: map[string]*subscription{}}
}

// runMessage is what subscribe and unsubscribe name.
type runMessage struct {
	FlowName string `json:"flowName"`
	RunID    string `json:"runId"`
}

// runReply is what subscribed and unsubscribed answer.
type runReply struct {
	Type     string `json:"type"`
	FlowName string `json:"flowName"`
	RunID    string `json:"runId"`
}

func (s *flowSession) Message(typ string, raw []byte) bool {
	switch typ {
	case "subscribe":
		s.subscribe(raw)
	case "unsubscribe":
		var m runMessage
		if !s.decode(raw, &m) {
			return true
		}
		key := "flow:" + m.FlowName + ":" + m.RunID
		sub := s.subs[key]
		delete(s.subs, key)
		if sub != nil {
			sub.stop()
			_ = s.conn.Send(runReply{Type: "unsubscribed", FlowName: m.FlowName, RunID: m.RunID})
		}
	case "subscribe.stats":
		if s.stats != nil {
			s.conn.Error("Already subscribed to stats")
			return true
		}
		s.stats = followStats(s.api.flowStats, s.socketClient)
	case "unsubscribe.stats":
		if s.stats != nil {
			s.stats.stop()
			s.stats = nil
		}
		s.send("stats.unsubscribed")
	case "ping":
		s.send("pong")
	default:
		return false
	}
	return true
}

// subscribe follows a run: its whole history, then every event appended
// after it, each exactly once. A repeat subscribe replaces the earlier one.
func (s *flowSession) subscribe(raw []byte) {
	var m runMessage
	if !s.decode(raw, &m) {
		return
	}
	if m.FlowName == "" || m.RunID == "" {
		s.conn.Error("Missing flowName or runId")
		return
	}
	if !event.ValidName(m.FlowName) || !event.ValidContextID(m.RunID) {
		s.conn.Error("Invalid flowName or runId: " + event.NameRule)
		return
	}
	c := store.Context{Type: "flow", ID: m.RunID}
	if !s.covers(c) {
		s.conn.Error("Forbidden: the token does not cover run " + m.RunID)
		return
	}
	key := "flow:" + m.FlowName + ":" + m.RunID
	old := s.subs[key]
	delete(s.subs, key)
	full := len(s.subs) >= MaxSocketSubscriptions
	if old != nil {
		old.stop()
	}
	if full {
		s.conn.Error("Too many subscriptions on this socket; unsubscribe from one first")
		return
	}
	prefix := make([]byte, 0, 64+len(m.FlowName)+len(m.RunID))
	prefix = appendString(append(prefix, `,"flowName":`...), m.FlowName)
	prefix = appendString(append(prefix, `,"runId":`...), m.RunID)
	out := render{
		event: func(b []byte, ev event.Event) ([]byte, error) {
			b = append(append(b, `{"type":"event"`...), prefix...)
			b = append(b, `,"event":`...)
			b, err := appendEnvelope(b, ev)
			return append(b, '}'), err
		},
		history: func(b []byte, evs []event.Event) ([]byte, error) {
			b = append(append(b, `{"type":"history"`...), prefix...)
			b = append(b, `,"events":[`...)
			for i, ev := range evs {
				if i > 0 {
					b = append(b, ',')
				}
				var err error
				if b, err = appendEnvelope(b, ev); err != nil {
					return nil, err
				}
			}
			return append(b, "]}"...), nil
		},
	}
	sub := s.follow(s.conn.Context(), c, out, func() {
		_ = s.conn.Send(runReply{Type: "subscribed", FlowName: m.FlowName, RunID: m.RunID})
	})
	s.subs[key] = sub
}

func (s *flowSession) Close() {
	for _, sub := range s.subs {
		sub.stop()
	}
	if s.stats != nil {
		s.stats.stop()
	}
}

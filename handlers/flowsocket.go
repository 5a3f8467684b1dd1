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
	feeds // subs by flow:<name>:<run>
}

func (a *API) newFlowSession(sc *socketClient) socket.Session {
	return &flowSession{newFeeds(sc)}
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
		if s.unfollow("flow:" + m.FlowName + ":" + m.RunID) {
			_ = s.conn.Send(runReply{Type: "unsubscribed", FlowName: m.FlowName, RunID: m.RunID})
		}
	default:
		return s.shared(typ, func() *subscription { return followStats(s.api.flowStats, s.socketClient) })
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

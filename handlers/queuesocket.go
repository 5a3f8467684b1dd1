package handlers

import (
	"context"
	"errors"

	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/socket"
	"github.com/nqd-dev/nqd/store"
)

// queueSession is one socket of GET /api/_queues/ws: a queue's counts, and
// an event each time jobs enter one of the states the UI refetches on,
// followed by the fresh counts (docs/websockets.md). Its methods run on the
// socket's read loop, one at a time.
type queueSession struct {
	*socketClient
	subs map[string]*subscription // by queue name
}

func (a *API) newQueueSession(sc *socketClient) socket.Session {
	sc.send("connected")
	return &queueSession{socketClient: sc, subs: map[string]*subscription{}}
}

type queueMessage struct {
	QueueName string `json:"queueName"`
}

type queueReply struct {
	Type      string `json:"type"`
	QueueName string `json:"queueName"`
}

// countsMessage is the v0.5 shape plus, beside counts (which the UI shows
// key by key), nqd's workers and unserved, as in the HTTP queue list.
type countsMessage struct {
	Type      string     `json:"type"`
	QueueName string     `json:"queueName"`
	Counts    countsBody `json:"counts"`
	served
}

// queueView is what the socket shows of a queue: its counts and its
// workers. A change of either sends fresh counts.
type queueView struct {
	counts engine.QueueCounts
	served served
}

// queueEvent is a live queue event. nqd tells a queue's changes from its
// counts, so an event names the state jobs entered, not the job.
type queueEvent struct {
	Type      string         `json:"type"`
	QueueName string         `json:"queueName"`
	Event     queueEventBody `json:"event"`
}

type queueEventBody struct {
	EventType string `json:"eventType"`
}

func (s *queueSession) Message(typ string, raw []byte) bool {
	switch typ {
	case "subscribe":
		var m queueMessage
		if !s.decode(raw, &m) {
			return true
		}
		if m.QueueName == "" {
			s.conn.Error("Missing queueName")
			return true
		}
		if !event.ValidName(m.QueueName) {
			s.conn.Error("Invalid queueName: " + event.NameRule)
			return true
		}
		if old := s.subs[m.QueueName]; old != nil {
			old.stop()
			delete(s.subs, m.QueueName)
		}
		if len(s.subs) >= MaxSocketSubscriptions {
			s.conn.Error("Too many subscriptions on this socket; unsubscribe from one first")
			return true
		}
		s.subs[m.QueueName] = s.followQueue(m.QueueName)
	case "unsubscribe":
		var m queueMessage
		if !s.decode(raw, &m) {
			return true
		}
		if sub := s.subs[m.QueueName]; sub != nil {
			sub.stop()
			delete(s.subs, m.QueueName)
		}
		_ = s.conn.Send(queueReply{Type: "unsubscribed", QueueName: m.QueueName})
	case "ping":
		s.send("pong")
	default:
		return false
	}
	return true
}

// followQueue sends the queue's counts and subscribed, then, at each change
// of its counts, an event per state that gained jobs (waiting, active,
// completed, failed) and the new counts.
func (s *queueSession) followQueue(name string) *subscription {
	var sent *queueView
	return s.api.queueCounts.each(s.socketClient, func(snap map[string]queueView) bool {
		v := snap[name] // an unknown queue is empty
		if sent == nil {
			if s.sendCounts(name, v) != nil {
				return false
			}
			_ = s.conn.Send(queueReply{Type: "subscribed", QueueName: name})
			sent = &v
			return true
		}
		if v == *sent {
			return true
		}
		c, then := v.counts, sent.counts
		for _, e := range []struct {
			typ       string
			now, then int64
		}{
			{"waiting", c.Waiting, then.Waiting},
			{"active", c.Active, then.Active},
			{"completed", c.Completed, then.Completed},
			{"failed", c.Failed, then.Failed},
		} {
			if e.now > e.then {
				if s.conn.Send(queueEvent{Type: "event", QueueName: name, Event: queueEventBody{EventType: e.typ}}) != nil {
					return false
				}
			}
		}
		if s.sendCounts(name, v) != nil {
			return false
		}
		*sent = v
		return true
	})
}

func (s *queueSession) sendCounts(name string, v queueView) error {
	return s.conn.Send(countsMessage{Type: "counts", QueueName: name, Counts: toCounts(v.counts), served: v.served})
}

func (s *queueSession) Close() {
	for _, sub := range s.subs {
		sub.stop()
	}
}

// readQueueCounts reads the counts and workers of every queue the flows use,
// and the workers of queues that have workers but no jobs yet.
func (a *API) readQueueCounts(ctx context.Context) (map[string]queueView, error) {
	names, err := a.engine.QueueNames(ctx)
	if err != nil {
		return nil, err
	}
	workers, err := a.queueWorkers(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]queueView, len(names))
	for q := range workers {
		out[q] = queueView{served: servedBy(workers, q, engine.QueueCounts{})}
	}
	for _, n := range names {
		q, err := a.engine.Queue(ctx, n)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[n] = queueView{counts: q.Counts, served: servedBy(workers, n, q.Counts)}
	}
	return out, nil
}

package metrics

import (
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/stream"
)

// Stream is the observer to set as stream.Options.Observer.
func (m *Metrics) Stream() stream.Observer { return streamObserver{m} }

type streamObserver struct{ m *Metrics }

var _ stream.Observer = streamObserver{}

func (o streamObserver) Opened(c store.Context) {
	o.m.sseConns.WithLabelValues(c.Type).Inc()
	o.m.sseOpened.WithLabelValues(c.Type).Inc()
}

func (o streamObserver) Closed(c store.Context, reason stream.CloseReason) {
	o.m.sseConns.WithLabelValues(c.Type).Dec()
	o.m.sseClosed.WithLabelValues(string(reason)).Inc()
}

func (o streamObserver) Started(kind stream.StartKind, events int, took time.Duration) {
	o.m.resumes.WithLabelValues(string(kind)).Inc()
	o.m.replayed.Observe(float64(events))
	o.m.backfill.Observe(took.Seconds())
}

func (o streamObserver) Received(id event.ID) {
	o.m.pubsubLag.Observe(since(id.Time(), time.Now()))
}

func (o streamObserver) Broadcast(_ int, took time.Duration) {
	o.m.broadcast.Observe(took.Seconds())
}

func (o streamObserver) Flushed(events, bytes int, oldest event.ID) {
	o.m.eventsSent.Add(float64(events))
	o.m.bytesSent.Add(float64(bytes))
	o.m.deliveryLag.Observe(since(oldest.Time(), time.Now()))
}

func (o streamObserver) Repaired(events int) { o.m.repaired.Add(float64(events)) }

func (o streamObserver) Resubscribed() { o.m.resubscribes.Inc() }

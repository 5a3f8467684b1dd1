package stream

import (
	"encoding/json"
	"net"
	"strconv"

	"github.com/nqd-dev/nqd/event"
)

// frame is one event encoded for the wire. A hub builds it once and every
// connection of the context writes the same bytes.
type frame struct {
	id   event.ID
	ev   event.Event // the event itself, for a Feed, which renders it its own way
	data []byte      // the SSE message: `id:` and `data: {"v":1,"event":...}`
	tail []byte      // the raw-tail message; nil while no raw-tail client listens
}

// bytesFor picks the form a connection writes.
func (f *frame) bytesFor(tail bool) []byte {
	if tail {
		return f.tail
	}
	return f.data
}

// batch is the live events one write sends: the queued frames newer than
// the last event the connection wrote, in the connection's form. The hub may
// queue an event the connection has read from the stream already (during
// its backfill, or a repair after a hole); that one is not sent again.
type batch struct {
	bufs   net.Buffers // the frames' bytes, after whatever the writer put first
	n      int
	size   int
	oldest event.ID
}

// add appends the frames newer than *last in the form tail picks, and
// moves *last to the newest of them.
func (b *batch) add(frames []*frame, tail bool, last *event.ID) {
	for _, f := range frames {
		if f.id.Compare(*last) <= 0 {
			continue
		}
		fb := f.bytesFor(tail)
		b.bufs = append(b.bufs, fb)
		if b.n == 0 {
			b.oldest = f.id
		}
		*last = f.id
		b.n, b.size = b.n+1, b.size+len(fb)
	}
}

// flushed tells o that the batch reached the client.
func (b *batch) flushed(o Observer) {
	if b.n > 0 {
		o.Flushed(b.n, b.size, b.oldest)
	}
}

// appendEvent appends the SSE message of ev to b: an `id:` line and one
// `data:` line holding {"v":1,"event":<kind>,"record":<record>}, as
// openapi.yaml describes the stream route.
func appendEvent(b []byte, ev event.Event) ([]byte, error) {
	rec, err := ev.MarshalJSON()
	if err != nil {
		return b, err
	}
	return appendEventRecord(b, ev, rec), nil
}

// appendEventRecord is appendEvent of ev whose record is rec.
func appendEventRecord(b []byte, ev event.Event, rec []byte) []byte {
	b = appendID(b, ev.ID)
	b = append(b, `data: {"v":1,"event":`...)
	b = event.AppendString(b, ev.Kind)
	b = append(b, `,"record":`...)
	b = append(b, rec...)
	return append(b, "}\n\n"...)
}

// appendTail appends the raw-tail message the v0.3 UI reads,
// {"v":1,"stream":<key>,"record":<record>}, of ev, read from the stream
// named key, to b.
func appendTail(b []byte, key []byte, ev event.Event, rec []byte) []byte {
	b = appendID(b, ev.ID)
	b = append(b, `data: {"v":1,"stream":`...)
	b = append(b, key...)
	b = append(b, `,"record":`...)
	b = append(b, rec...)
	return append(b, "}\n\n"...)
}

func appendID(b []byte, id event.ID) []byte {
	b = append(b, "id: "...)
	b = strconv.AppendUint(b, id.MS, 10)
	b = append(b, '-')
	b = strconv.AppendUint(b, id.Seq, 10)
	return append(b, '\n')
}

// appendReset appends the `event: reset` message: the client's position is
// unknown here, so it gets the state at pos (or only pos) instead of a replay.
func appendReset(b []byte, pos event.ID, state json.RawMessage) []byte {
	b = append(b, "event: reset\n"...)
	if pos.IsZero() {
		// An empty id clears the browser's Last-Event-ID: the next connect
		// starts from the beginning of the stream.
		b = append(b, "id\n"...)
	} else {
		b = appendID(b, pos)
	}
	b = append(b, `data: {"v":1,"position":`...)
	if pos.IsZero() {
		b = append(b, `""`...)
	} else {
		b = append(b, '"')
		b = append(b, pos.String()...)
		b = append(b, '"')
	}
	if len(state) > 0 {
		b = append(b, `,"state":`...)
		b = append(b, state...)
	}
	return append(b, "}\n\n"...)
}

// appendTruncated appends the notice that the backfill holds only the newest
// limit events of a longer stream.
func appendTruncated(b []byte, limit int) []byte {
	b = append(b, `event: truncated`+"\n"+`data: {"v":1,"limit":`...)
	b = strconv.AppendInt(b, int64(limit), 10)
	return append(b, "}\n\n"...)
}

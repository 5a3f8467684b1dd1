package stream

import (
	"net/http"
	"time"

	"github.com/nqd-dev/nqd/event"
)

// sink writes one connection's messages, each write under a deadline so that
// a client that stops reading costs at most WriteTimeout.
type sink struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	tail    bool   // the raw-tail form
	key     []byte // the raw-tail "stream" value, JSON-encoded
	buf     []byte // messages not yet written
	sent    int    // events written by backfill and replay
	reset   bool   // an `event: reset` was written
	// begin starts the response, before the first write; nil once it has.
	begin func()
}

// start starts the response if it has not started.
func (s *sink) start() {
	if s.begin != nil {
		s.begin()
		s.begin = nil
	}
}

// started reports whether anything was sent, the status line included.
func (s *sink) started() bool { return s.begin == nil }

// flushSize is how much backfill is gathered before a write.
const flushSize = 32 << 10

func (s *sink) deadline() {
	// Not every ResponseWriter supports deadlines; those write without one.
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
}

func (s *sink) write(b []byte) error {
	s.start()
	s.deadline()
	_, err := s.w.Write(b)
	return err
}

func (s *sink) flush() error {
	s.start()
	s.deadline()
	return s.rc.Flush()
}

// flushBuf writes and flushes what buf holds.
func (s *sink) flushBuf() error {
	if len(s.buf) > 0 {
		if err := s.write(s.buf); err != nil {
			return err
		}
		s.buf = s.buf[:0]
	}
	return s.flush()
}

// events sends evs after last, flushing when done, and returns the new last.
func (s *sink) events(evs []event.Event, last event.ID) (event.ID, error) {
	for _, ev := range evs {
		if ev.ID.Compare(last) <= 0 {
			continue
		}
		var err error
		if s.tail {
			rec, e := ev.MarshalJSON()
			if e != nil {
				return last, e
			}
			s.buf = appendTail(s.buf, s.key, ev, rec)
		} else if s.buf, err = appendEvent(s.buf, ev); err != nil {
			return last, err
		}
		last = ev.ID
		s.sent++
		if len(s.buf) >= flushSize {
			if err := s.write(s.buf); err != nil {
				return last, err
			}
			s.buf = s.buf[:0]
		}
	}
	return last, s.flushBuf()
}

// release lets the connection's final bytes go out with a fresh deadline
// and drops the buffer, which idle connections should not hold.
func (s *sink) release() {
	s.deadline()
	s.buf = nil
}

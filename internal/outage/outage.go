// Package outage logs the failures of work that retries against a
// dependency (Redis) which may stay down for a while: one line when the
// work starts failing, with the error; a counted reminder at most every
// Reminder while it keeps failing; one line when it works again. An outage
// of any length thus costs a handful of log lines, not one per attempt.
package outage

import (
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Reminder is the least time between two lines about the same outage.
const Reminder = 30 * time.Second

// Log tracks one kind of work, such as the engine's tick. It is safe for
// concurrent use; work done by several goroutines against the same
// dependency can share one Log.
type Log struct {
	log  zerolog.Logger
	what string

	mu       sync.Mutex
	down     bool
	since    time.Time // the first failure of the outage
	lastLine time.Time
	failures int // failures in the outage
	unlogged int // failures since the last line
}

// New returns a Log whose lines name the work as what, e.g. "engine tick".
func New(log zerolog.Logger, what string) *Log {
	return &Log{log: log, what: what}
}

// Failed records a failure of the work. The first one after a success is
// logged with its error; the others are counted into a reminder once
// Reminder has passed since the last line.
func (l *Log) Failed(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	l.failures++
	l.unlogged++
	switch {
	case !l.down:
		l.down, l.since = true, now
		l.log.Error().Err(err).Msg(l.what + " failed; retrying, and logging again at most every " + Reminder.String() + " until it works")
	case now.Sub(l.lastLine) >= Reminder:
		l.log.Error().Err(err).Int("failures", l.unlogged).Stringer("down_for", now.Sub(l.since).Round(time.Millisecond)).Msg(l.what + " still failing")
	default:
		return
	}
	l.lastLine, l.unlogged = now, 0
}

// Succeeded records that the work succeeded; after failures it logs that
// the work is back, with the outage's length and failure count.
func (l *Log) Succeeded() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.down {
		return
	}
	l.log.Info().Int("failures", l.failures).Stringer("down_for", time.Since(l.since).Round(time.Millisecond)).Msg(l.what + " works again")
	l.down, l.failures, l.unlogged = false, 0, 0
}

package reducers

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nqd-dev/nqd/event"
)

// This file is the worker registry's fold: the registry stream (context type
// "registry") holds worker.registered, worker.heartbeat and worker.left
// events, each carrying the worker's whole record, so that any suffix of the
// stream folds into every worker it names. That is what lets the registry
// trim its stream by age.

// The worker registry's event kinds.
const (
	KindWorkerRegistered = "worker.registered"
	KindWorkerHeartbeat  = "worker.heartbeat"
	KindWorkerLeft       = "worker.left"
)

// Worker statuses.
const (
	WorkerActive = "active"
	WorkerLeft   = "left" // said goodbye or closed its channel
	WorkerLost   = "lost" // not seen for too long
)

// MaxWorkers is how many workers a registry state keeps; beyond it the
// worker that left longest ago is dropped, and while every worker is active
// the one seen longest ago.
const MaxWorkers = 1000

// Worker is one worker as the registry knows it. It is immutable once in a
// state.
type Worker struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	SDK         string   `json:"sdk"`
	Version     string   `json:"version"`
	Host        string   `json:"host"`
	Queues      []string `json:"queues"`
	Concurrency int      `json:"concurrency"`
	InFlight    int      `json:"inFlight"`
	Transport   string   `json:"transport"`
	FirstSeen   Time     `json:"firstSeen"`
	LastSeen    Time     `json:"lastSeen"`
	Status      string   `json:"status"`
	// LeftAt and Reason are set once the worker left.
	LeftAt Time   `json:"leftAt,omitzero"`
	Reason string `json:"reason,omitempty"`
}

// workerData is the data of every registry event.
type workerData struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	SDK         string   `json:"sdk"`
	Version     string   `json:"version"`
	Host        string   `json:"host"`
	Queues      []string `json:"queues"`
	Concurrency int      `json:"concurrency"`
	Transport   string   `json:"transport"`
	FirstSeen   int64    `json:"firstSeen"`
	// LastSeen, on worker.left, is when the worker was last heard from,
	// which for a lost worker is well before the event.
	LastSeen int64  `json:"lastSeen"`
	InFlight int    `json:"inFlight"`
	Reason   string `json:"reason"`
}

// Workers reduces the worker registry stream.
type Workers struct{}

// WorkersState is the worker registry's state. It is immutable.
type WorkersState struct {
	position
	Ignored int
	workers map[string]*Worker // shared between states; a fold copies it before writing
}

// Workers returns the workers, ordered by id.
func (s *WorkersState) Workers() []Worker {
	out := make([]Worker, 0, len(s.workers))
	for _, id := range slices.Sorted(maps.Keys(s.workers)) {
		out = append(out, *s.workers[id])
	}
	return out
}

// WorkersSeen returns the workers ordered by id, with each active worker
// last seen before since reported lost. A fold knows no clock, and a stream
// trimmed past a departure, or an nqd down when a worker went, would
// otherwise show a worker active that is long gone.
func (s *WorkersState) WorkersSeen(since time.Time) []Worker {
	out := s.Workers()
	for i := range out {
		if w := &out[i]; w.Status == WorkerActive && w.LastSeen.Before(since) {
			w.Status, w.Reason = WorkerLost, WorkerLost
		}
	}
	return out
}

// QueueWorkers counts the active workers serving each queue, those last
// seen before since not counted (see WorkersSeen).
func (s *WorkersState) QueueWorkers(since time.Time) map[string]int {
	out := map[string]int{}
	for _, w := range s.workers {
		if w.Status == WorkerActive && !w.LastSeen.Before(since) {
			for _, q := range w.Queues {
				out[q]++
			}
		}
	}
	return out
}

type workersStateWire struct {
	Workers     []Worker `json:"workers"`
	LastEventID string   `json:"lastEventId,omitempty"`
	EventCount  int      `json:"eventCount"`
	Ignored     int      `json:"ignored,omitempty"`
}

// MarshalJSON writes the state the API returns for the registry context.
func (s *WorkersState) MarshalJSON() ([]byte, error) {
	w := workersStateWire{Workers: s.Workers(), EventCount: s.count, Ignored: s.Ignored}
	if s.count > 0 {
		w.LastEventID = formatID(s.last)
	}
	return json.Marshal(w)
}

// Validate checks the invariants every fold must keep.
func (s *WorkersState) Validate() error {
	if err := s.position.validate(s.Ignored); err != nil {
		return err
	}
	if len(s.workers) > MaxWorkers {
		return fmt.Errorf("%d workers, at most %d", len(s.workers), MaxWorkers)
	}
	for id, w := range s.workers {
		switch {
		case w == nil || w.ID != id:
			return fmt.Errorf("worker %q filed under another id", id)
		case w.Status != WorkerActive && w.Status != WorkerLeft && w.Status != WorkerLost:
			return fmt.Errorf("worker %q status %q", id, w.Status)
		case w.LastSeen.Before(w.FirstSeen.Time):
			return fmt.Errorf("worker %q last seen before first seen", id)
		}
	}
	return nil
}

// Init returns the state of an empty registry.
func (Workers) Init() State { return &WorkersState{} }

// Apply folds one event into s. See Reducer.
func (r Workers) Apply(s State, ev event.Event) (State, error) {
	return r.Fold(s, []event.Event{ev})
}

// Fold folds evs into s. See Reducer.
func (Workers) Fold(s State, evs []event.Event) (State, error) {
	return foldCopy(s, evs, func() *WorkersState { return &WorkersState{} }, func(next *WorkersState) func(event.Event) {
		own := false
		return func(ev event.Event) {
			next.advance(ev)
			w, ok := workerOf(ev)
			if !ok {
				next.Ignored++
				return
			}
			if !own {
				next.workers, own = maps.Clone(next.workers), true
				if next.workers == nil {
					next.workers = make(map[string]*Worker)
				}
			}
			if old := next.workers[w.ID]; old != nil && old.Status != WorkerActive && ev.Kind == KindWorkerHeartbeat && old.FirstSeen.Equal(w.FirstSeen.Time) {
				// A heartbeat of a stay that has ended, written as the
				// worker left: it does not bring the worker back.
				return
			}
			next.workers[w.ID] = w
			if len(next.workers) > MaxWorkers {
				delete(next.workers, oldestWorker(next.workers))
			}
		}
	})
}

// workerOf reads the worker a registry event describes.
func workerOf(ev event.Event) (*Worker, bool) {
	var status string
	switch ev.Kind {
	case KindWorkerRegistered, KindWorkerHeartbeat:
		status = WorkerActive
	case KindWorkerLeft:
		status = WorkerLeft
	default:
		return nil, false
	}
	var d workerData
	if json.Unmarshal(ev.Data, &d) != nil || !event.ValidName(d.ID) {
		return nil, false
	}
	if status == WorkerLeft && d.Reason == WorkerLost {
		status = WorkerLost
	}
	at := Time{ev.Time()}
	seen, first := at, at
	if d.LastSeen > 0 && d.LastSeen <= int64(ev.ID.MS) {
		seen = msTime(d.LastSeen)
	}
	if d.FirstSeen > 0 && d.FirstSeen <= seen.UnixMilli() {
		first = msTime(d.FirstSeen)
	}
	queues := d.Queues
	if queues == nil {
		queues = []string{}
	}
	w := &Worker{
		ID: d.ID, Name: d.Name, SDK: d.SDK, Version: d.Version, Host: d.Host,
		Queues: queues, Concurrency: d.Concurrency, InFlight: d.InFlight, Transport: d.Transport,
		FirstSeen: first, LastSeen: seen, Status: status,
	}
	if status != WorkerActive {
		w.LeftAt, w.Reason = at, d.Reason
	}
	return w, true
}

func msTime(ms int64) Time { return Time{event.ID{MS: uint64(ms)}.Time()} }

// oldestWorker is the worker to drop from a full state: the one that left
// longest ago, or if none left, the one seen longest ago.
func oldestWorker(ws map[string]*Worker) string {
	var pick *Worker
	for _, w := range ws {
		switch {
		case pick == nil:
			pick = w
		case (w.Status != WorkerActive) != (pick.Status != WorkerActive):
			if w.Status != WorkerActive {
				pick = w
			}
		case w.LastSeen.Before(pick.LastSeen.Time) || w.LastSeen.Equal(pick.LastSeen.Time) && w.ID < pick.ID:
			pick = w
		}
	}
	return pick.ID
}

// workersCheckpoint is every field of a WorkersState.
type workersCheckpoint struct {
	Pos     positionCheckpoint `json:"pos"`
	Ignored int                `json:"ignored,omitempty"`
	Workers []Worker           `json:"workers"`
}

func workersCheckpointOf(s *WorkersState) workersCheckpoint {
	return workersCheckpoint{Pos: positionCheckpointOf(s.position), Ignored: s.Ignored, Workers: s.Workers()}
}

func (c *workersCheckpoint) state() (*WorkersState, error) {
	pos, err := c.Pos.position()
	if err != nil {
		return nil, err
	}
	s := &WorkersState{position: pos, Ignored: c.Ignored}
	if len(c.Workers) > 0 {
		s.workers = make(map[string]*Worker, len(c.Workers))
		for i := range c.Workers {
			w := c.Workers[i]
			s.workers[w.ID] = &w
		}
	}
	return s, nil
}

func (s *WorkersState) approxSize() int {
	n := sizeState
	for _, w := range s.workers {
		n += sizeEntry + 160 + len(w.ID)*2 + len(w.Name) + len(w.SDK) + len(w.Version) + len(w.Host) + len(w.Transport) + len(w.Reason)
		for _, q := range w.Queues {
			n += 16 + len(q)
		}
	}
	return n
}

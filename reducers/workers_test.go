package reducers_test

import (
	"fmt"
	"testing"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/reducers"
)

func workerEvent(ms uint64, kind, id string) event.Event {
	return event.Event{ID: event.ID{MS: ms}, Kind: kind, Subject: "workers",
		Data: []byte(fmt.Sprintf(`{"id":%q,"queues":["q"],"transport":"http","firstSeen":%d}`, id, ms))}
}

// A full registry drops the worker that left longest ago, not a live one.
func TestRegistryKeepsAtMostMaxWorkers(t *testing.T) {
	var evs []event.Event
	ms := uint64(1000)
	evs = append(evs, workerEvent(ms, reducers.KindWorkerRegistered, "gone"))
	ms++
	evs = append(evs, workerEvent(ms, reducers.KindWorkerLeft, "gone"))
	for i := range reducers.MaxWorkers {
		ms++
		evs = append(evs, workerEvent(ms, reducers.KindWorkerRegistered, fmt.Sprintf("w%d", i)))
	}
	s, err := reducers.Fold(reducers.Workers{}, evs)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	ws := s.(*reducers.WorkersState).Workers()
	if len(ws) != reducers.MaxWorkers {
		t.Fatalf("%d workers, want %d", len(ws), reducers.MaxWorkers)
	}
	for _, w := range ws {
		if w.ID == "gone" || w.Status != reducers.WorkerActive {
			t.Fatalf("kept %+v over a live worker", w)
		}
	}
}

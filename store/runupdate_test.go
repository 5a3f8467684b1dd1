package store

import (
	"errors"
	"testing"
)

func TestCheckRunUpdate(t *testing.T) {
	good := func() RunUpdate {
		return RunUpdate{
			Meta:      RunMeta{FlowName: "orders", RunID: "run-1", Status: RunRunning},
			Enqueue:   []Job{{Queue: "q", ID: "j1"}},
			SetTimers: []Timer{{Kind: "retry", FlowName: "orders", RunID: "run-1", Step: "a:b"}},
		}
	}
	if err := CheckRunUpdate(good()); err != nil {
		t.Fatalf("a valid update: %v", err)
	}
	for name, spoil := range map[string]func(*RunUpdate){
		"flow with a colon": func(u *RunUpdate) { u.Meta.FlowName = "a:b" },
		"empty run":         func(u *RunUpdate) { u.Meta.RunID = "" },
		"bad status":        func(u *RunUpdate) { u.Meta.Status = "Running!" },
		"bad prev status":   func(u *RunUpdate) { u.PrevStatus = "x y" },
		"job without id":    func(u *RunUpdate) { u.Enqueue[0].ID = "" },
		"bad queue":         func(u *RunUpdate) { u.Enqueue[0].Queue = "no spaces" },
		"bad removed queue": func(u *RunUpdate) { u.Remove = []JobRef{{Queue: "a:b", ID: "j"}} },
		"bad ack queue":     func(u *RunUpdate) { u.Ack = &JobAck{Queue: "", ID: "j"} },
		"timer run colon":   func(u *RunUpdate) { u.SetTimers[0].RunID = "r:1" },
		"cleared timer":     func(u *RunUpdate) { u.ClearTimers = []Timer{{Kind: "retry", FlowName: "orders", RunID: "run-1"}} },
	} {
		u := good()
		spoil(&u)
		if err := CheckRunUpdate(u); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
}

func TestTimerName(t *testing.T) {
	tm := Timer{Kind: "await", FlowName: "orders", RunID: "run-1", Step: "ship:eu"}
	if got, want := tm.Name(), "await:orders:run-1:ship:eu"; got != want {
		t.Errorf("Name() = %q, want %q", got, want)
	}
}

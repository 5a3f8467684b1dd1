package engine

import (
	"testing"

	"github.com/nqd-dev/nqd/store"
)

// TestRecentRunTakesTurns: one decision at a time holds a run's record; the
// next waits until the holder's commit wrote the next record, or the holder
// gave it back unchanged, or a refused update dropped it.
func TestRecentRunTakesTurns(t *testing.T) {
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	c := newRecent()
	u := store.RunUpdate{Meta: store.RunMeta{FlowName: "f", RunID: "r", Version: 1, Status: store.RunRunning}}
	c.wrote(u, nil) // remembers version 2

	m, _, ok, _, release := c.takeRun("f", "r")
	if !ok || m.Version != 2 {
		t.Fatalf("takeRun = %+v, %v; want version 2", m, ok)
	}
	_, _, ok, held, _ := c.takeRun("f", "r")
	if ok || held == nil || closed(held) {
		t.Fatalf("a second takeRun while held: ok %v, held %v; want a channel to wait on", ok, held)
	}
	u.Meta = m
	c.wrote(u, nil) // the holder committed version 3
	if !closed(held) {
		t.Fatal("the waiter was not woken by the holder's commit")
	}
	release() // after the commit: changes nothing
	m, _, ok, _, release = c.takeRun("f", "r")
	if !ok || m.Version != 3 {
		t.Fatalf("takeRun after the commit = %+v, %v; want version 3", m, ok)
	}

	_, _, _, held, _ = c.takeRun("f", "r")
	release() // given back unchanged
	if !closed(held) {
		t.Fatal("the waiter was not woken by the record given back")
	}
	m, _, ok, _, _ = c.takeRun("f", "r")
	if !ok || m.Version != 3 {
		t.Fatalf("takeRun after it was given back = %+v, %v; want version 3", m, ok)
	}

	_, _, _, held, _ = c.takeRun("f", "r")
	c.refused("f", "r", 3) // the holder's update was refused: stale
	if !closed(held) {
		t.Fatal("the waiter was not woken by the refusal")
	}
	if _, _, ok, held, _ := c.takeRun("f", "r"); ok || held != nil {
		t.Fatal("a refused record is still handed out")
	}
}

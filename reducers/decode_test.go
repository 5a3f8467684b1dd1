package reducers_test

import (
	"errors"
	"testing"

	"github.com/nqd-dev/nqd/reducers"
)

// FuzzCheckpoint checks that a checkpoint is a complete state: decoding it and
// encoding again gives the same bytes, and folding on from the decoded state
// gives the state folding on from the original gives, hidden bookkeeping
// included.
func FuzzCheckpoint(f *testing.F) {
	for _, c := range scenarioCorpora(f) {
		f.Add(fuzzOps(c.evs), `"x"`, uint8(len(c.evs)/2), uint8(0))
	}
	f.Add([]byte{6, 1, 2, 1, 8, 1, 2, 1, 9, 1, 3, 0, 7, 1, 4, 1}, "boom", uint8(2), uint8(3))
	f.Add([]byte{22, 0, 4, 1, 23, 0, 4, 1, 25, 0, 1, 1}, `{"a":1}`, uint8(1), uint8(0))
	f.Add([]byte{26, 0, 1, 1, 27, 0, 6, 1, 28, 0, 10, 1}, `{"type":"webhook"}`, uint8(1), uint8(1))
	f.Fuzz(func(t *testing.T, ops []byte, text string, split, which uint8) {
		r := fuzzReducers[int(which)%len(fuzzReducers)]
		evs := fuzzEvents(ops, text)
		at := 0
		if len(evs) > 0 {
			at = int(split) % (len(evs) + 1)
		}
		head, err := reducers.Fold(r, evs[:at])
		if err != nil {
			t.Fatalf("Fold head: %v", err)
		}
		b, err := reducers.MarshalCheckpoint(head)
		if err != nil {
			t.Fatalf("MarshalCheckpoint: %v", err)
		}
		decoded, err := reducers.UnmarshalCheckpoint(r, b)
		if err != nil {
			t.Fatalf("UnmarshalCheckpoint: %v\n%s", err, b)
		}
		if again := checkpointOf(t, decoded); again != string(b) {
			t.Fatalf("checkpoint changed on a round trip:\n%s\n%s", b, again)
		}
		if got, want := marshal(t, decoded), marshal(t, head); got != want {
			t.Fatalf("decoded state reads differently:\n%s\n%s", want, got)
		}

		whole, err := reducers.Fold(r, evs)
		if err != nil {
			t.Fatalf("Fold: %v", err)
		}
		joined, err := r.Fold(decoded, evs[at:])
		if err != nil {
			t.Fatalf("Fold from checkpoint: %v", err)
		}
		if got, want := checkpointOf(t, joined), checkpointOf(t, whole); got != want {
			t.Fatalf("checkpoint + tail != fold at %d:\n%s\n%s", at, want, got)
		}
		if err := joined.Validate(); err != nil {
			t.Fatalf("Validate: %v", err)
		}
	})
}

func checkpointOf(t *testing.T, s reducers.State) string {
	t.Helper()
	b, err := reducers.MarshalCheckpoint(s)
	if err != nil {
		t.Fatalf("MarshalCheckpoint: %v", err)
	}
	return string(b)
}

func TestCheckpointRefused(t *testing.T) {
	flow, err := reducers.MarshalCheckpoint(reducers.Flow{}.Init())
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		r reducers.Reducer
		b string
	}{
		"another reducer": {reducers.Trigger{}, string(flow)},
		"another version": {reducers.Flow{}, `{"v":999,"kind":"flow","state":{}}`},
		"not JSON":        {reducers.Flow{}, `{"v":1`},
		"bad position":    {reducers.Generic{}, `{"v":1,"kind":"generic","state":{"pos":{"last":"x"},"first":"0-0"}}`},
		"broken state":    {reducers.Trigger{}, `{"v":1,"kind":"trigger","state":{"pos":{"last":"0-0"},"status":"nope"}}`},
		"null step":       {reducers.Flow{}, `{"v":1,"kind":"flow","state":{"pos":{"last":"1-0","count":1},"status":"running","steps":{"a":null}}}`},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := reducers.UnmarshalCheckpoint(tc.r, []byte(tc.b)); !errors.Is(err, reducers.ErrCheckpoint) {
				t.Errorf("got %v, want ErrCheckpoint", err)
			}
		})
	}
}

func TestApproxSizeGrows(t *testing.T) {
	for _, r := range fuzzReducers {
		small := reducers.ApproxSize(r.Init())
		evs := fuzzEvents([]byte{22, 1, 4, 1, 20, 1, 8, 1, 6, 2, 1, 1, 26, 0, 0, 1, 30, 0, 1, 1}, `"a value of some length"`)
		s, err := reducers.Fold(r, evs)
		if err != nil {
			t.Fatal(err)
		}
		if big := reducers.ApproxSize(s); big <= small {
			t.Errorf("%T: size %d after %d events, %d before", r, big, len(evs), small)
		}
	}
}

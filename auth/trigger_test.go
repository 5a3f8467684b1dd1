package auth_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/auth"
	"github.com/nqd-dev/nqd/event"
)

func TestTriggerIDs(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	oldKey := "k1:" + strings.Repeat("1", 32)
	newKey := "k2:" + strings.Repeat("2", 32)
	before, _ := auth.NewTriggerSigner(mustKeys(t, oldKey)...)
	rotated, _ := auth.NewTriggerSigner(mustKeys(t, newKey+","+oldKey)...)
	dropped, _ := auth.NewTriggerSigner(mustKeys(t, newKey)...)

	id := before.Issue("run-1\x00wait\x000", now.Add(time.Hour))
	if !event.ValidContextID(id) || !auth.LooksLikeTriggerID(id) {
		t.Fatalf("id %q is not a valid context id of trigger shape", id)
	}
	if again := before.Issue("run-1\x00wait\x000", now.Add(time.Hour)); again != id {
		t.Errorf("same seed and expiry gave %q then %q", id, again)
	}
	if other := before.Issue("run-1\x00wait\x001", now.Add(time.Hour)); other == id {
		t.Error("another seed gave the same id")
	}
	if exp, err := rotated.Verify(id, now); err != nil || !exp.Equal(now.Add(time.Hour)) {
		t.Errorf("after rotation: %v, %v; want the old key to verify", exp, err)
	}
	if _, err := dropped.Verify(id, now); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("with the old key dropped: %v, want ErrInvalidToken", err)
	}
	if _, err := before.Verify(id, now.Add(time.Hour)); !errors.Is(err, auth.ErrExpired) {
		t.Errorf("at expiry: %v, want ErrExpired", err)
	}
	parts := strings.Split(id, ".")
	parts[2] = "zzzzzzzz" // a later expiry
	if _, err := before.Verify(strings.Join(parts, "."), now); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("with a forged expiry: %v, want ErrInvalidToken", err)
	}
	for i := range id {
		b := []byte(id)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		if _, err := before.Verify(string(b), now); err == nil {
			t.Errorf("changing byte %d of %q still verifies", i, id)
		}
	}
}

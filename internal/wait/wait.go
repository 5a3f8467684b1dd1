// Package wait lets tests wait for a condition with a deadline instead of
// sleeping for a guessed time.
package wait

import (
	"testing"
	"time"
)

// For polls cond every poll until it holds, failing t with what once within
// has passed.
func For(t testing.TB, within, poll time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(poll)
	}
}

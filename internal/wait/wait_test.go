package wait

import (
	"testing"
	"time"
)

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	n := 0
	For(t, time.Second, time.Millisecond, "three polls", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("polled %d times, want 3", n)
	}
}

// failT records a failure instead of stopping the test.
type failT struct {
	testing.TB
	failed bool
}

func (f *failT) Helper()               {}
func (f *failT) Fatalf(string, ...any) { f.failed = true; panic(f) }

func TestForFailsAtTheDeadline(t *testing.T) {
	ft := &failT{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil && r != any(ft) {
				panic(r)
			}
		}()
		For(ft, 20*time.Millisecond, time.Millisecond, "never", func() bool { return false })
	}()
	if !ft.failed {
		t.Fatal("For returned without failing although the condition never held")
	}
}

package pgstore_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/nqd-dev/nqd/internal/pgtest"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/pgstore"
)

// TestSecretIsWrittenOnce: instances asking at once all get the one secret
// the first wrote, and so does an instance opened later.
func TestSecretIsWrittenOnce(t *testing.T) {
	url := pgtest.URL(t)
	const n = 4
	stores := make([]*pgstore.Store, n)
	for i := range stores {
		stores[i] = openTestStore(t, url, pgstore.Options{})
	}
	got := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() { got[i], errs[i] = s.Secret(t.Context(), "trigger", fmt.Sprintf("fresh-%d", i)) })
	}
	wg.Wait()
	for i := range got {
		if errs[i] != nil || got[i] != got[0] || got[i] == "" {
			t.Fatalf("instance %d: %q, %v; want %q like instance 0", i, got[i], errs[i], got[0])
		}
	}
	later, err := openTestStore(t, url, pgstore.Options{}).Secret(t.Context(), "trigger", "another")
	if err != nil || later != got[0] {
		t.Fatalf("after a restart: %q, %v; want %q", later, err, got[0])
	}
	if _, err := stores[0].Secret(t.Context(), "a:b", "x"); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("a name with a colon: %v, want ErrInvalid", err)
	}
}

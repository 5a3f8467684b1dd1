package testkit_test

import (
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nqd-dev/nqd/internal/testkit"
)

func TestClock(t *testing.T) {
	start := time.UnixMilli(1_800_000_000_000)
	c := testkit.NewClock(start)
	if !c.Now().Equal(start) {
		t.Fatalf("Now = %s, want %s", c.Now(), start)
	}
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { c.Add(time.Second) })
	}
	wg.Wait()
	if want := start.Add(10 * time.Second); !c.Now().Equal(want) {
		t.Errorf("after ten concurrent Add(1s): %s, want %s", c.Now(), want)
	}
	c.Set(start.Add(-time.Hour))
	if want := start.Add(-time.Hour); !c.Now().Equal(want) {
		t.Errorf("after Set: %s, want %s", c.Now(), want)
	}
}

// TestPipeServerInABubble: a server on a PipeListener answers inside a
// synctest bubble, where an hour of handler time passes at once, and tells
// its clients apart by address.
func TestPipeServerInABubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testkit.PipeServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(time.Hour)
			_, _ = io.WriteString(w, r.RemoteAddr)
		}))
		start := time.Now()
		seen := map[string]bool{}
		for range 2 {
			// A fresh transport each time, so that each request is a new
			// connection.
			c := &http.Client{Transport: &http.Transport{DialContext: srv.Client().Transport.(*http.Transport).DialContext}}
			res, err := c.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			c.CloseIdleConnections()
			if _, _, err := net.SplitHostPort(string(b)); err != nil {
				t.Errorf("remote address %q: %v", b, err)
			}
			seen[string(b)] = true
		}
		if len(seen) != 2 {
			t.Errorf("two connections seen as %v, want two addresses", seen)
		}
		if got := time.Since(start); got != 2*time.Hour {
			t.Errorf("fake time passed: %v, want 2h", got)
		}
	})
}

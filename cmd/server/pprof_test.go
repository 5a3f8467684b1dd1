package main

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/rs/zerolog"
)

func TestPprofListensOnLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0", "example.com:0", "127.0.0.1"} {
		if ln, err := listenPprof(addr); err == nil {
			_ = ln.Close()
			t.Errorf("listenPprof(%q) bound %s; want a refusal", addr, ln.Addr())
		}
	}
	ln, err := listenPprof("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { servePprof(ctx, ln, zerolog.Nop()); close(done) }()
	defer func() { cancel(); <-done }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || len(b) == 0 {
		t.Fatalf("goroutine profile: status %d, %d bytes", resp.StatusCode, len(b))
	}
}

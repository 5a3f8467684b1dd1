package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// The appends profile also offers its requests, at the same rate and
// concurrency, to a server that answers them without doing anything: this
// binary, re-executed with -serve-bare-http, in a process of its own so its
// CPU is measured apart. That is what one HTTP exchange costs on this
// machine with net/http alone, the part of nqd's CPU per append that no
// change inside nqd's handler or store can remove.

// bareAnswer is about as long as nqd's answer to an append.
var bareAnswer = []byte(`{"id":"1764150000000-0","v":1,"type":"bench","contextId":"a0","kind":"log","ts":"2026-11-26T10:00:00.000Z","data":{"pad":"` + pad + `"}}`)

// serveBare answers every POST 201 with bareAnswer and every other request
// 200, on addr, until the process ends.
func serveBare(addr string) error {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(bareAnswer)
	})
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	return srv.ListenAndServe()
}

// measureBareHTTP offers the appends profile's requests to a bare server
// and returns its row, with the server's cores in CPU, and its CPU seconds
// per request.
func measureBareHTTP(ctx context.Context, rate float64, d time.Duration, conns, contexts int) (latencyRow, float64, error) {
	exe, err := os.Executable()
	if err != nil {
		return latencyRow{}, 0, err
	}
	port, err := freePort()
	if err != nil {
		return latencyRow{}, 0, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c, err := start(exec.Command(exe, "-serve-bare-http", addr))
	if err != nil {
		return latencyRow{}, 0, err
	}
	defer c.stop()
	base := "http://" + addr
	if err := awaitHealthy(c, base, "the bare server"); err != nil {
		return latencyRow{}, 0, err
	}
	post := appendPoster(httpClient(conns), base, contexts)
	openLoop(ctx, "appends bare HTTP warm-up", rate, warmUp, conns, post)
	cpu0, err := cpuSeconds(c.pid())
	if err != nil {
		return latencyRow{}, 0, err
	}
	t0 := time.Now()
	r := openLoop(ctx, "appends bare HTTP", rate, d, conns, post)
	cpu1, err := cpuSeconds(c.pid())
	if err != nil {
		return latencyRow{}, 0, err
	}
	out := row("bare net/http, same requests", rate, r)
	out.CPU = fmt.Sprintf("server %.2f", (cpu1-cpu0)/time.Since(t0).Seconds())
	if r.Errors > 0 {
		return out, 0, errors.New("the bare server failed requests")
	}
	return out, (cpu1 - cpu0) / float64(max(r.OK, 1)), nil
}

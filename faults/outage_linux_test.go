package faults

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/internal/redistest"
)

// outageLength is how long Redis stays down in TestRedisOutageLog: long
// enough for dozens of engine ticks, live feed retries and go-redis dial
// failures, each of which used to log a line.
const outageLength = 10 * time.Second

// TestRedisOutageLog runs nqd on Redis with a client streaming a context,
// kills Redis for outageLength and starts it again: the log of the outage is
// a handful of lines, every one of them JSON, and says when things work
// again.
func TestRedisOutageLog(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	p := startProcess(t, "NQ_REDIS_URL=redis://"+srv.Addr+"/0", "NQ_FLOWS_DIR=../examples/flows")
	ctxURL := p.base + "/api/_events/flow/outage"
	resp, err := client.Post(ctxURL, "application/json", strings.NewReader(`{"kind":"log"}`))
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("append: %v, %v", resp, err)
	}
	_ = resp.Body.Close()
	// One stream, read until it ends, never reconnected: the lines counted
	// are nqd's own, not one per client request.
	sctx, stopStream := context.WithCancel(context.Background())
	defer stopStream()
	req, _ := http.NewRequestWithContext(sctx, http.MethodGet, ctxURL+"/stream", nil)
	stream, err := http.DefaultClient.Do(req)
	if err != nil || stream.StatusCode != http.StatusOK {
		t.Fatalf("stream: %v, %v", stream, err)
	}
	defer func() { _ = stream.Body.Close() }()
	eventually(t, "the live feed up", func() bool { return ready(p.base) })

	before, _ := p.output()
	srv.Kill()
	eventually(t, "/readyz failing", func() bool { return !ready(p.base) })
	// The outage's length is the scenario, not a wait for a condition.
	time.Sleep(outageLength)
	srv.Restart(t)
	eventually(t, "/readyz back", func() bool { return ready(p.base) })
	eventually(t, "the engine tick back in the log", func() bool {
		out, _ := p.output()
		return strings.Contains(strings.Join(out[len(before):], "\n"), `"engine tick works again"`)
	})

	stdout, stderr := p.output()
	outage := stdout[len(before):]
	for _, l := range outage {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Errorf("a log line that is not JSON: %q", l)
		}
	}
	if len(stderr) > 0 {
		t.Errorf("nqd wrote to stderr: %q", stderr)
	}
	// Down and back for each loop that reads the store (the engine tick,
	// the live feed, the schedule sync, the event triggers' look), the lost
	// Pub/Sub connection, the stream that ended: a handful.
	const handful = 10
	if len(outage) > handful {
		t.Errorf("%d log lines for a %v outage, want at most %d", len(outage), outageLength, handful)
	}
	t.Logf("%d log lines for a %v outage:\n%s", len(outage), outageLength, strings.Join(outage, "\n"))
}

// TestStreamsRefusedInARedisOutage: streams opened while Redis is down, as
// browsers open them again and again, are refused with 503 and Retry-After
// before anything is sent, and cost no log line each beyond the access log:
// the stream starts' failures are one line for the outage and one when it
// ends. A client streaming through the outage resumes without a gap.
func TestStreamsRefusedInARedisOutage(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{AOF: true})
	p := startProcess(t, "NQ_REDIS_URL=redis://"+srv.Addr+"/0")
	ctxURL := p.base + "/api/_events/flow/storm"
	resp, err := client.Post(ctxURL, "application/json", strings.NewReader(`{"kind":"log"}`))
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("append: %v, %v", resp, err)
	}
	var first struct{ ID string }
	_ = json.NewDecoder(resp.Body).Decode(&first)
	_ = resp.Body.Close()
	fctx, stopFollower := context.WithCancel(context.Background())
	defer stopFollower()
	f := follow(fctx, ctxURL+"/stream")
	eventually(t, "the follower has the first event", func() bool { return f.count() >= 1 })

	before, _ := p.output()
	srv.Kill()
	eventually(t, "/readyz failing", func() bool { return !ready(p.base) })
	const attempts = 200
	statuses := map[int]int{}
	for range attempts {
		req, _ := http.NewRequest(http.MethodGet, ctxURL+"/stream", nil)
		req.Header.Set("Last-Event-ID", first.ID)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		statuses[resp.StatusCode]++
		if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
			t.Error("a 503 without Retry-After")
		}
		_ = resp.Body.Close()
	}
	if statuses[http.StatusServiceUnavailable] != attempts {
		t.Errorf("streams opened during the outage: %v, want %d answered 503", statuses, attempts)
	}
	srv.Restart(t)
	eventually(t, "/readyz back", func() bool { return ready(p.base) })
	resp, err = client.Post(ctxURL, "application/json", strings.NewReader(`{"kind":"log"}`))
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("append after the outage: %v, %v", resp, err)
	}
	_ = resp.Body.Close()
	// A stream opened now starts, and ends the outage in the log.
	req, _ := http.NewRequest(http.MethodGet, ctxURL+"/stream", nil)
	req.Header.Set("Last-Event-ID", first.ID)
	if resp, err = client.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a stream after the outage: %v, %v", resp, err)
	}
	_ = resp.Body.Close()
	stored := readAll(t, ctxURL)
	eventually(t, "the follower catching up", func() bool { return f.count() >= len(stored) })
	f.check(t, "the follower", stored)
	stopFollower()

	out, _ := p.output()
	var streamLines []string
	for _, l := range out[len(before):] {
		var m struct{ Level, Message string }
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Errorf("a log line that is not JSON: %q", l)
		}
		if m.Message != "request" && (strings.Contains(m.Message, "stream") || strings.Contains(m.Message, "backfill")) {
			streamLines = append(streamLines, l)
		}
	}
	if len(streamLines) > 2 {
		t.Errorf("%d log lines about streams for %d refused, want the outage's start and end:\n%s",
			len(streamLines), attempts, strings.Join(streamLines, "\n"))
	}
	t.Logf("statuses of streams opened in the outage %v; %d log lines about them:\n%s", statuses, len(streamLines), strings.Join(streamLines, "\n"))
}

// TestRedisUnreachableAtStart: nqd started on a Redis that does not answer
// exits with one JSON line that says so.
func TestRedisUnreachableAtStart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // a port nothing listens on
	cmd := exec.Command(serverBinary(t))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NQ_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "NQ_ADDR=127.0.0.1:0", "NQ_LOG_FORMAT=json", "NQ_REDIS_URL=redis://"+addr+"/0")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("exit code %d (%v), want 1", code, err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()+stderr.String()), "\n")
	var line struct {
		Level, Message, Error string
	}
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &line) != nil ||
		line.Level != "error" || !strings.Contains(line.Error, "redis at redis://"+addr+"/0 is not reachable") {
		t.Fatalf("output of a start on an unreachable Redis:\n%s\nwant one JSON error line naming Redis", stdout.String()+stderr.String())
	}
}

// ready reports whether nqd's /readyz answers 200.
func ready(base string) bool {
	resp, err := client.Get(base + "/readyz")
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

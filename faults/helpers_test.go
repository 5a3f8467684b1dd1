package faults

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/wait"
)

// waitFor bounds every wait: generous for a loaded 2-core machine under
// -race, short enough that a broken recovery fails instead of hanging.
const waitFor = 30 * time.Second

// eventually polls cond until it holds, failing the test after waitFor.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	wait.For(t, waitFor, 10*time.Millisecond, what, cond)
}

// client is shared by the appenders; its timeout bounds an append stuck on a
// dead peer.
var client = &http.Client{Timeout: 5 * time.Second}

// batchSize is the number of events in each append: a batch is either all
// stored or not at all.
const batchSize = 2

// appender posts numbered batches to one context until stopped, keeping
// what each answer was.
type appender struct {
	url string // the context's append URL

	mu          sync.Mutex
	next        int              // number of the next batch
	acked       map[int][]string // batch → the ids nqd answered with
	failed      []int            // batches with no 201
	unavailable int              // 503 answers that carried Retry-After
	notStored   []int            // batches answered 503, which promises nothing was stored
	unknown     int              // 504 outcome_unknown answers: stored or not
	problems    []string         // answers that break the contract
	statuses    map[int]int      // status → count, for failure messages
	lastAcked   event.ID         // the newest acknowledged id
	stopping    atomic.Bool
	done        chan struct{}
}

func newAppender(base, typ, id string) *appender {
	return &appender{
		url:      base + "/api/_events/" + typ + "/" + id,
		acked:    map[int][]string{},
		statuses: map[int]int{},
		done:     make(chan struct{}),
	}
}

// run appends until stopped. Requests are never cut short: an append whose
// request was cancelled may still be stored, after the stream was checked.
func (a *appender) run() {
	defer close(a.done)
	ctx := context.Background()
	for !a.stopping.Load() {
		a.mu.Lock()
		n := a.next
		a.next++
		a.mu.Unlock()
		a.post(ctx, n)
	}
}

// stop ends run after its current append and waits for it.
func (a *appender) stop() {
	a.stopping.Store(true)
	<-a.done
}

func batchBody(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"events":[`)
	for part := range batchSize {
		if part > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"kind":"log","data":{"batch":%d,"part":%d}}`, n, part)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// post sends batch n once and records the answer.
func (a *appender) post(ctx context.Context, n int) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.url, bytes.NewReader(batchBody(n)))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "batch-"+strconv.Itoa(n))
	resp, err := client.Do(req)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.failed = append(a.failed, n)
		a.statuses[0]++
		return
	}
	defer func() { _ = resp.Body.Close() }()
	a.statuses[resp.StatusCode]++
	switch resp.StatusCode {
	case http.StatusCreated, http.StatusOK:
		var body struct {
			Events []struct {
				ID string `json:"id"`
			} `json:"events"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || len(body.Events) != batchSize {
			a.problems = append(a.problems, fmt.Sprintf("batch %d: %d answer with %d events, %v", n, resp.StatusCode, len(body.Events), err))
			return
		}
		for _, e := range body.Events {
			a.acked[n] = append(a.acked[n], e.ID)
		}
		if id, err := event.ParseID(body.Events[batchSize-1].ID); err == nil && id.Compare(a.lastAcked) > 0 {
			a.lastAcked = id
		}
	case http.StatusServiceUnavailable:
		a.failed = append(a.failed, n)
		if resp.Header.Get("Retry-After") == "" {
			a.problems = append(a.problems, fmt.Sprintf("batch %d: 503 without Retry-After", n))
		} else {
			a.unavailable++
			a.notStored = append(a.notStored, n)
		}
	case http.StatusGatewayTimeout:
		a.failed = append(a.failed, n)
		var body struct {
			Error struct{ Code string } `json:"error"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Error.Code != "outcome_unknown" || resp.Header.Get("Retry-After") == "" {
			a.problems = append(a.problems, fmt.Sprintf("batch %d: 504 %q (%v), want outcome_unknown with Retry-After", n, body.Error.Code, err))
		} else {
			a.unknown++
		}
	default:
		a.failed = append(a.failed, n)
		b, _ := io.ReadAll(resp.Body)
		if ctx.Err() == nil {
			a.problems = append(a.problems, fmt.Sprintf("batch %d: status %d: %s", n, resp.StatusCode, b))
		}
	}
}

func (a *appender) ackedCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.acked)
}

func (a *appender) unavailableCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.unavailable
}

// storedEvent is what the checks need of an event read back.
type storedEvent struct {
	ID   string `json:"id"`
	Data struct {
		Batch int `json:"batch"`
		Part  int `json:"part"`
	} `json:"data"`
}

// readAll reads a context's whole stream over HTTP, a page at a time.
func readAll(t *testing.T, ctxURL string) []storedEvent {
	t.Helper()
	var out []storedEvent
	from := ""
	for range 1000 {
		u := ctxURL + "?limit=1000"
		if from != "" {
			u += "&fromId=" + from
		}
		resp, err := client.Get(u)
		if err != nil {
			t.Fatalf("read %s: %v", u, err)
		}
		var body struct {
			Events []storedEvent `json:"events"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("read %s: status %d, %v", u, resp.StatusCode, err)
		}
		out = append(out, body.Events...)
		if len(body.Events) < 1000 {
			return out
		}
		from = body.Events[len(body.Events)-1].ID
	}
	t.Fatal("read: more pages than any test writes")
	return nil
}

// checkStream checks a's answers against the stream as stored: every
// acknowledged event is there with the id it was acknowledged with, every
// batch is whole, and no batch is there twice.
func checkStream(t *testing.T, a *appender, stored []storedEvent) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.problems {
		t.Error(p)
	}
	at := map[string]storedEvent{}
	parts := map[int][]int{}
	for _, e := range stored {
		at[e.ID] = e
		parts[e.Data.Batch] = append(parts[e.Data.Batch], e.Data.Part)
	}
	lost := 0
	for n, ids := range a.acked {
		for part, id := range ids {
			if e, ok := at[id]; !ok || e.Data.Batch != n || e.Data.Part != part {
				lost++
				if lost <= 5 {
					t.Errorf("acknowledged event %s (batch %d part %d) is not stored as acknowledged", id, n, part)
				}
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d acknowledged events lost of %d batches acknowledged", lost, len(a.acked))
	}
	for _, n := range a.notStored {
		if len(parts[n]) > 0 {
			t.Errorf("batch %d was answered 503, yet is stored", n)
		}
	}
	for n, ps := range parts {
		want := make([]int, batchSize)
		for i := range want {
			want[i] = i
		}
		if fmt.Sprint(ps) != fmt.Sprint(want) {
			t.Errorf("batch %d is stored as parts %v, want %v once", n, ps, want)
		}
	}
}

// follower is an SSE client that reconnects the way a browser does, sending
// Last-Event-ID, and keeps every id it received.
type follower struct {
	url string

	mu       sync.Mutex
	ids      []string
	last     event.ID
	problems []string
	connects int
	done     chan struct{}
}

// follow starts a follower of a context's stream until ctx ends.
func follow(ctx context.Context, streamURL string) *follower {
	f := &follower{url: streamURL, done: make(chan struct{})}
	go f.run(ctx)
	return f
}

func (f *follower) run(ctx context.Context) {
	defer close(f.done)
	for ctx.Err() == nil {
		f.once(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond): // the `retry:` a browser would wait, shortened
		}
	}
}

// once reads one connection until it ends.
func (f *follower) once(ctx context.Context) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.url, nil)
	if err != nil {
		panic(err)
	}
	f.mu.Lock()
	if !f.last.IsZero() {
		req.Header.Set("Last-Event-ID", f.last.String())
	}
	f.connects++
	f.mu.Unlock()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var id, kind string
	var hasData bool
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if hasData {
				f.receive(id, kind)
			}
			id, kind, hasData = "", "", false
		case strings.HasPrefix(line, "id: "):
			id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			kind = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			hasData = true
		}
	}
}

func (f *follower) receive(id, kind string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if kind != "" {
		f.problems = append(f.problems, fmt.Sprintf("got an %q message after %s", kind, f.last))
		return
	}
	eid, err := event.ParseID(id)
	if err != nil {
		f.problems = append(f.problems, fmt.Sprintf("event without a valid id %q", id))
		return
	}
	if eid.Compare(f.last) <= 0 {
		f.problems = append(f.problems, fmt.Sprintf("event %s after %s: duplicate or out of order", eid, f.last))
		return
	}
	f.ids = append(f.ids, id)
	f.last = eid
}

func (f *follower) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.ids)
}

// check compares what f received with the stored stream: the same ids, in
// the same order, none missing, none twice.
func (f *follower) check(t *testing.T, name string, stored []storedEvent) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.problems {
		t.Errorf("%s: %s", name, p)
	}
	if len(f.ids) != len(stored) {
		t.Errorf("%s: received %d events, the stream holds %d", name, len(f.ids), len(stored))
	}
	for i := range min(len(f.ids), len(stored)) {
		if f.ids[i] != stored[i].ID {
			t.Errorf("%s: event %d is %s, the stream's is %s", name, i, f.ids[i], stored[i].ID)
			return
		}
	}
}

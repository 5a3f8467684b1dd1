package redisstore_test

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/redistest"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/internal/wait"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/redisstore"
)

const waitTimeout = 10 * time.Second

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	wait.For(t, waitTimeout, 10*time.Millisecond, what, cond)
}

// next receives one event or fails at the deadline.
func next(t *testing.T, sub store.Subscription) event.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	e, err := store.Receive(ctx, sub)
	if ctx.Err() != nil {
		t.Fatal("no event before the deadline")
	}
	if err != nil {
		t.Fatalf("subscription ended: %v", err)
	}
	return e
}

// ended waits for sub to end and returns why.
func ended(t *testing.T, sub store.Subscription) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for {
		_, err := store.Receive(ctx, sub)
		if ctx.Err() != nil {
			t.Fatal("subscription did not end before the deadline")
		}
		if err != nil {
			return err
		}
	}
}

func mustAppend(t *testing.T, s store.Store, c store.Context, evs ...event.Event) []event.Event {
	t.Helper()
	res, err := s.Append(t.Context(), c, evs, store.AppendOptions{})
	if err != nil {
		t.Fatalf("Append(%s): %v", c, err)
	}
	return res.Events
}

func keysUnder(t *testing.T, client *redis.Client, prefix string) []string {
	t.Helper()
	keys, err := client.Keys(t.Context(), prefix+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}

func TestReadsNodeModuleEntries(t *testing.T) {
	prefix := redistest.Prefix(t)
	s, client := newTestStore(t, redisstore.Options{Prefix: prefix})
	c := store.Context{Type: "flow", ID: "run-node"}
	key := s.KeyPrefixOf("run-node") + ":flow:run-node"
	for _, fields := range []map[string]any{
		{"type": "step.started", "runId": "run-node", "flowName": "billing", "data": `{"input":{"x":1}}`,
			"ts": "1700000000000", "stepName": "charge", "stepId": "charge-1", "attempt": "2"},
		{"foo": "bar"}, // neither nqd's nor the Node module's: skipped
	} {
		if err := client.XAdd(t.Context(), &redis.XAddArgs{Stream: key, Values: fields}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	ours := mustAppend(t, s, c, event.Event{Kind: "log", Subject: c.ID, Data: json.RawMessage(`{"msg":"hi"}`)})

	got, err := s.Range(t.Context(), c, store.RangeQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("Range gave %d events, want the Node entry and ours: %+v", len(got), got)
	}
	node := got[0]
	want := event.Event{
		ID: node.ID, Kind: "step.started", Subject: c.ID, RunID: "run-node", FlowName: "billing",
		Step: "charge", Attempt: 2, Data: json.RawMessage(`{"input":{"x":1}}`),
	}
	if d := gocmp.Diff(want, node, gocmp.FilterPath(func(p gocmp.Path) bool { return p.Last().String() == ".Meta" }, gocmp.Ignore())); d != "" {
		t.Errorf("Node entry (-want +got):\n%s", d)
	}
	var meta map[string]any
	if err := json.Unmarshal(node.Meta, &meta); err != nil || meta["attempt"] != 2.0 || meta["stepId"] != "charge-1" {
		t.Errorf("Node entry meta = %s (%v), want attempt 2 and stepId charge-1", node.Meta, err)
	}
	if got[1].ID != ours[0].ID || got[1].Kind != "log" {
		t.Errorf("second event = %+v, want ours %v", got[1], ours[0].ID)
	}
	if info, err := s.Info(t.Context(), c); err != nil || info.Length != 3 {
		t.Errorf("Info = %+v, %v; want all 3 entries counted", info, err)
	}
}

// TestKeysAreTheDocumentedOnes checks the names of the one-shard layout
// (docs/storage.md); TestShardsSpreadRunsOverSlots those of several.
func TestKeysAreTheDocumentedOnes(t *testing.T) {
	prefix := redistest.Prefix(t)
	s, client := newTestStore(t, redisstore.Options{Prefix: prefix, IdempotencyWindow: time.Hour, Shards: 1})
	run := store.Context{Type: "flow", ID: "run-1"}
	hook := store.Context{Type: "webhook", ID: "hook.1~x"}
	const idemKey = "a key with spaces, : * { } and \n"

	if err := s.WatchKinds(t.Context(), "flow.started", "trigger.registered"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(t.Context(), run, []event.Event{
		{Kind: "flow.started", Subject: run.ID, FlowName: "billing"},
		{Kind: "flow.start", Subject: run.ID, FlowName: "billing"},
	}, store.AppendOptions{IdempotencyKey: idemKey}); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, hook, event.Event{Kind: "trigger.registered", Subject: hook.ID})

	// The idempotency key reaches Redis only as its SHA-256.
	sum := sha256.Sum256([]byte(idemKey))
	idem := prefix + ":flow:run-1:idem:" + hex.EncodeToString(sum[:])
	keys := keysUnder(t, client, prefix)
	// An append without a key leaves a short-lived record under a token of
	// its own, so that a lost reply can be resolved.
	var tokens []string
	keys = slices.DeleteFunc(keys, func(k string) bool {
		if strings.HasPrefix(k, prefix+":webhook:hook.1~x:idem:") {
			tokens = append(tokens, k)
			return true
		}
		return false
	})
	if len(tokens) != 1 {
		t.Errorf("token records %q, want one for the keyless append", tokens)
	} else if ttl, err := client.PTTL(t.Context(), tokens[0]).Result(); err != nil || ttl <= 0 || ttl > time.Minute {
		t.Errorf("token record TTL = %v, %v; want at most a minute", ttl, err)
	}
	want := []string{
		prefix + ":flow:run-1",
		idem,
		prefix + ":flows",
		prefix + ":flows:billing",
		prefix + ":triggers",
		prefix + ":webhook:hook.1~x",
		prefix + ":webhooks",
		prefix + ":engine:kinds:watched",
		prefix + ":engine:kind:flow.started",
		prefix + ":engine:kind:trigger.registered",
	}
	slices.Sort(want)
	if d := gocmp.Diff(want, keys); d != "" {
		t.Errorf("keys (-want +got):\n%s", d)
	}
	if ttl, err := client.PTTL(t.Context(), idem).Result(); err != nil || ttl <= 59*time.Minute || ttl > time.Hour {
		t.Errorf("idempotency key TTL = %v, %v; want the one-hour window", ttl, err)
	}

	// Names that could reach a key are refused before Redis sees them.
	for _, bad := range []event.Event{
		{Kind: "flow.started", Subject: "run-2", FlowName: "a:b"},
		{Kind: "flow.start", Subject: "run-2", FlowName: "*"},
		{Kind: "flow.started", Subject: "run-2", FlowName: "{x}"},
	} {
		c := store.Context{Type: "flow", ID: "run-2"}
		if _, err := s.Append(t.Context(), c, []event.Event{bad}, store.AppendOptions{}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Append(flowName %q) = %v, want ErrInvalid", bad.FlowName, err)
		}
	}
	if d := gocmp.Diff(append(keys, tokens...), keysUnder(t, client, prefix), cmpopts.SortSlices(func(a, b string) bool { return a < b })); d != "" {
		t.Errorf("rejected appends changed the keys (-before +after):\n%s", d)
	}
	for _, p := range []string{"", "a b", "x*", "{x}", "a::b", ":a"} {
		if p == "" {
			continue // the default prefix
		}
		if _, err := redisstore.New(client, redisstore.Options{Prefix: p}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("New(prefix %q) = %v, want ErrInvalid", p, err)
		}
	}
}

func TestMaxLenTrimsStreams(t *testing.T) {
	s, _ := newTestStore(t, redisstore.Options{MaxLen: 10})
	c := store.Context{Type: "flow", ID: "run-long"}
	for i := range 10 {
		batch := make([]event.Event, 100)
		for j := range batch {
			batch[j] = event.Event{Kind: "log", Subject: c.ID, Data: json.RawMessage(fmt.Sprint(i*100 + j))}
		}
		mustAppend(t, s, c, batch...)
	}
	info, err := s.Info(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	// MAXLEN ~ trims whole radix-tree nodes, so the length lands between
	// the cap and the cap plus one node (100 entries by default).
	if info.Length < 10 || info.Length >= 1000 {
		t.Errorf("Length = %d, want trimmed to about 10", info.Length)
	}
	got, err := s.Range(t.Context(), c, store.RangeQuery{Reverse: true, Limit: 1})
	if err != nil || len(got) != 1 || string(got[0].Data) != "999" {
		t.Errorf("newest event = %+v, %v; want the last appended", got, err)
	}
}

func TestSubscriptionsShareOneChannelSubscription(t *testing.T) {
	prefix := redistest.Prefix(t)
	s, client := newTestStore(t, redisstore.Options{Prefix: prefix})
	c := store.Context{Type: "flow", ID: "run-shared"}
	channel := s.KeyPrefixOf("run-shared") + ":flow:run-shared:live"
	numsub := func() int64 {
		n, err := client.PubSubNumSub(t.Context(), channel).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n[channel]
	}

	a, err := s.Subscribe(t.Context(), c, 10)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Subscribe(t.Context(), c, 10)
	if err != nil {
		t.Fatal(err)
	}
	if n := numsub(); n != 1 {
		t.Errorf("Redis subscribers of the channel = %d, want 1 shared", n)
	}
	a.Close()
	// b still receives: closing a did not unsubscribe the shared channel.
	e := mustAppend(t, s, c, event.Event{Kind: "log", Subject: c.ID})
	if got := next(t, b); got.ID != e[0].ID {
		t.Errorf("b received %v, want %v", got.ID, e[0].ID)
	}
	b.Close()
	waitFor(t, "channel unsubscribed after the last local subscriber left", func() bool { return numsub() == 0 })
}

// TestSubscribeChurn subscribes and leaves in quick succession, some
// subscribers giving up before Redis confirms. Every Subscribe that returns
// must already receive the next event.
func TestSubscribeChurn(t *testing.T) {
	s, _ := newTestStore(t, redisstore.Options{})
	c := store.Context{Type: "flow", ID: "run-churn"}
	for i := range 100 {
		ctx, cancel := context.WithCancel(t.Context())
		abandoned := make(chan struct{})
		go func() {
			defer close(abandoned)
			if sub, err := s.Subscribe(ctx, c, 1); err == nil {
				sub.Close()
			}
		}()
		cancel()
		sub, err := s.Subscribe(t.Context(), c, 10)
		if err != nil {
			t.Fatal(err)
		}
		e := mustAppend(t, s, c, event.Event{Kind: "log", Subject: c.ID, Data: json.RawMessage(fmt.Sprint(i))})
		if got := next(t, sub); got.ID != e[0].ID {
			t.Fatalf("round %d: received %v, want %v", i, got.ID, e[0].ID)
		}
		sub.Close()
		<-abandoned
	}
}

// TestSubscribeManyAtOnce subscribes to many channels at once, so that
// their SUBSCRIBEs share commands, then leaves and comes back to all of them
// before and after the UNSUBSCRIBEs went out. Every Subscribe that returns
// must already receive the next event, and Redis keeps no channel nobody
// listens to.
func TestSubscribeManyAtOnce(t *testing.T) {
	prefix := redistest.Prefix(t)
	s, client := newTestStore(t, redisstore.Options{Prefix: prefix})
	const n = 40
	channels := make([]string, n)
	for i := range n {
		id := fmt.Sprintf("run-%d", i)
		channels[i] = s.KeyPrefixOf(id) + ":flow:" + id + ":live"
	}
	numsub := func() int64 {
		counts, err := client.PubSubNumSub(t.Context(), channels...).Result()
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		for _, c := range counts {
			total += c
		}
		return total
	}
	round := func(name string) {
		subs := make([]store.Subscription, n)
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				sub, err := s.Subscribe(t.Context(), store.Context{Type: "flow", ID: fmt.Sprint("run-", i)}, 4)
				subs[i] = sub
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		for i, sub := range subs {
			c := store.Context{Type: "flow", ID: fmt.Sprint("run-", i)}
			e := mustAppend(t, s, c, event.Event{Kind: "log", Subject: c.ID})
			if got := next(t, sub); got.ID != e[0].ID {
				t.Fatalf("%s: run-%d received %v, want %v", name, i, got.ID, e[0].ID)
			}
			sub.Close()
		}
	}
	round("first subscribe")
	round("back before the unsubscribes")
	waitFor(t, "every channel unsubscribed after its last local subscriber left", func() bool { return numsub() == 0 })
	round("back after the unsubscribes")
	waitFor(t, "every channel unsubscribed again", func() bool { return numsub() == 0 })
}

// newDedicated runs a Store on a Redis of its own, which the test may kill.
func newDedicated(t *testing.T) (*redistest.Server, *redisstore.Store, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	// No retries: a dead server should fail each call at once.
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = client.Close() })
	s, err := redisstore.New(client, redisstore.Options{Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return srv, s, client
}

func TestPubSubKillEndsSubscriptionsWithLiveLost(t *testing.T) {
	t.Parallel()
	_, s, client := newDedicated(t)
	a := store.Context{Type: "flow", ID: "run-a"}
	b := store.Context{Type: "trigger", ID: "t-b"}
	subA, err := s.Subscribe(t.Context(), a, 10)
	if err != nil {
		t.Fatal(err)
	}
	subB, err := s.Subscribe(t.Context(), b, 10)
	if err != nil {
		t.Fatal(err)
	}
	killed, err := client.ClientKillByFilter(t.Context(), "TYPE", "pubsub").Result()
	if err != nil {
		t.Fatal(err)
	}
	if killed != 1 {
		t.Errorf("killed %d Pub/Sub connections, want the store's one", killed)
	}
	for name, sub := range map[string]store.Subscription{"a": subA, "b": subB} {
		if err := ended(t, sub); !errors.Is(err, store.ErrLiveLost) {
			t.Errorf("subscription %s: Err = %v, want ErrLiveLost", name, err)
		}
	}

	// Later subscribers get a new connection.
	sub, err := s.Subscribe(t.Context(), a, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	e := mustAppend(t, s, a, event.Event{Kind: "log", Subject: a.ID})
	if got := next(t, sub); got.ID != e[0].ID {
		t.Errorf("after reconnect received %v, want %v", got.ID, e[0].ID)
	}
	if err := s.LiveHealthy(t.Context()); err != nil {
		t.Errorf("LiveHealthy after reconnect = %v", err)
	}
}

func TestRedisDownIsUnavailable(t *testing.T) {
	t.Parallel()
	srv, s, _ := newDedicated(t)
	c := store.Context{Type: "flow", ID: "run-down"}
	sub, err := s.Subscribe(t.Context(), c, 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.LiveHealthy(t.Context()); err != nil {
		t.Fatalf("LiveHealthy = %v", err)
	}

	srv.Kill()
	if err := ended(t, sub); !errors.Is(err, store.ErrLiveLost) {
		t.Errorf("subscription: Err = %v, want ErrLiveLost", err)
	}
	ctx := t.Context()
	for name, err := range map[string]error{
		"Ping":        s.Ping(ctx),
		"LiveHealthy": s.LiveHealthy(ctx),
		"Append":      second(s.Append(ctx, c, []event.Event{{Kind: "log", Subject: c.ID}}, store.AppendOptions{})),
		"Range":       second(s.Range(ctx, c, store.RangeQuery{})),
		"Info":        second(s.Info(ctx, c)),
		"IndexAdd":    s.IndexAdd(ctx, store.Index{Type: "flow"}, "x", 1),
		"IndexList":   second(s.IndexList(ctx, store.Index{Type: "flow"}, 0, 10)),
		"Subscribe":   second(s.Subscribe(ctx, c, 10)),
	} {
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s with Redis down = %v, want ErrUnavailable", name, err)
		}
	}

	srv.Restart(t)
	// The client may keep refusing to dial for a moment after failures.
	waitFor(t, "store healthy after restart", func() bool { return s.Ping(ctx) == nil && s.LiveHealthy(ctx) == nil })
	sub, err = s.Subscribe(ctx, c, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	e := mustAppend(t, s, c, event.Event{Kind: "log", Subject: c.ID})
	if got := next(t, sub); got.ID != e[0].ID {
		t.Errorf("after restart received %v, want %v", got.ID, e[0].ID)
	}
}

func second[T any](_ T, err error) error { return err }

// TestWedgedPubSubIsReplaced stalls the server without closing any
// connection, as a silent network partition would: the periodic probe gets
// no answer and ends the subscriptions so they resume from the stream.
func TestWedgedPubSubIsReplaced(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = client.Close() })
	s, err := redisstore.New(client, redisstore.Options{LiveProbeInterval: 50 * time.Millisecond, Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	c := store.Context{Type: "flow", ID: "run-wedged"}
	sub, err := s.Subscribe(t.Context(), c, 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Do(t.Context(), "CLIENT", "PAUSE", "1000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	if err := ended(t, sub); !errors.Is(err, store.ErrLiveLost) {
		t.Errorf("Err of a subscription on a wedged connection = %v, want ErrLiveLost", err)
	}
}

// TestIndexListOrderSweep pages through an index full of ties with every
// offset and limit: runs of equal scores cut by a page edge are where
// ZREVRANGE's member-descending order would show.
func TestIndexListOrderSweep(t *testing.T) {
	s, _ := newTestStore(t, redisstore.Options{})
	ix := store.Index{Type: "flow", Name: "ties"}
	var all []store.IndexEntry
	for _, i := range rand.New(rand.NewPCG(3, 4)).Perm(30) {
		e := store.IndexEntry{ID: fmt.Sprintf("m%02d", i), Score: int64(i%4) * 100}
		all = append(all, e)
		if err := s.IndexAdd(t.Context(), ix, e.ID, e.Score); err != nil {
			t.Fatal(err)
		}
	}
	slices.SortFunc(all, func(a, b store.IndexEntry) int {
		if a.Score != b.Score {
			return cmp.Compare(b.Score, a.Score)
		}
		return strings.Compare(a.ID, b.ID)
	})
	for offset := 0; offset <= len(all)+1; offset++ {
		for limit := 1; limit <= 9; limit++ {
			page, err := s.IndexList(t.Context(), ix, offset, limit)
			if err != nil {
				t.Fatal(err)
			}
			want := all[min(offset, len(all)):min(offset+limit, len(all))]
			if d := gocmp.Diff(want, page.Entries, cmpopts.EquateEmpty()); d != "" || page.Total != int64(len(all)) {
				t.Fatalf("IndexList(offset %d, limit %d): total %d (-want +got):\n%s", offset, limit, page.Total, d)
			}
		}
	}
}

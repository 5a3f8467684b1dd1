package stream

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/backendtest"
	"github.com/nqd-dev/nqd/store"
)

// TestSlowClientsCutAtTheBound: clients that never read are cut once their
// queue passes its bound (1,000 events or 1 MiB), not when a blocked write
// times out; a client that reads receives every event in order meanwhile.
// The write timeout is a minute, so only the queue bound can cut them.
func TestSlowClientsCutAtTheBound(t *testing.T) {
	const stalled = 20
	backendtest.Each(t, backends, func(t *testing.T, b backendtest.Backend) {
		s := b.Open(t)
		rec := newRecorder()
		h := newTestHandler(t, s, Options{Observer: rec, QueueEvents: 1000, QueueBytes: 1 << 20, WriteTimeout: time.Minute})
		srv := newTestServer(t, h)
		c := newContext(t)
		for range stalled {
			dialStalled(t, srv.URL, streamURL(srv, c))
		}
		fast := dial(t, streamURL(srv, c), nil)
		eventually(t, "every client attaches", func() bool { return topicSubs(h, c) == stalled+1 })

		// 16 KiB events in batches of 60, just under 1 MiB as framed, so
		// that a client that reads each batch before the next is never
		// over its own bound (64 would be 1.07 MB framed: one batch could
		// overflow the reading client's queue before its writer ran once,
		// about 1 run in 10). A stalled client takes
		// what the socket buffers hold (the server side's send buffer grows
		// to tcp_wmem's maximum), then its queue fills: it must be cut before
		// more than that, its 1 MiB queue and the batch in flight went out.
		// The fast client reads each batch before the next.
		const perBatch = 60
		bound := sendBufferMax(t) + 2<<20
		big := strings.Repeat("x", 16<<10)
		var got, want []string
		var sent int
		cut := func() int { return rec.get(func(r *recorder) int { return r.closed[CloseSlow] }) }
		for i := 0; cut() < stalled; i++ {
			if sent > bound {
				t.Fatalf("%d of %d stalled clients cut after %d MiB were appended, bound %d MiB", cut(), stalled, sent>>20, bound>>20)
			}
			batch := make([]event.Event, perBatch)
			for j := range batch {
				batch[j] = logEvent(c, i*perBatch+j)
				batch[j].Data = []byte(`{"level":"info","msg":"` + big + `"}`)
			}
			res, err := s.Append(context.Background(), c, batch, store.AppendOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range res.Events {
				want = append(want, e.ID.String())
			}
			sent += perBatch * (16<<10 + 64)
			got = append(got, msgIDs(fast.readEvents(t, len(want)-len(got)))...)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("the reading client got %d events, want all %d in order", len(got), len(want))
		}
		t.Logf("all %d stalled clients cut after %d MiB (bound %d MiB); the reading client got all %d events", stalled, sent>>20, bound>>20, len(got))
		eventually(t, "only the reading client's connection open", func() bool { return openConns(h) == 1 })
	})
}

// sendBufferMax is the largest send buffer the kernel grows a TCP socket to
// (the last field of net.ipv4.tcp_wmem), 4 MiB where it cannot be read.
func sendBufferMax(t *testing.T) int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_wmem")
	if f := strings.Fields(string(b)); err == nil && len(f) == 3 {
		if n, err := strconv.Atoi(f[2]); err == nil {
			return n
		}
	}
	t.Log("tcp_wmem unreadable: assuming a 4 MiB send buffer")
	return 4 << 20
}

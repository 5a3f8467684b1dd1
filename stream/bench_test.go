package stream

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/backendtest"
	"github.com/nqd-dev/nqd/internal/wait"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
)

// TestMain lets the idle-connection benchmark run its clients in a child
// process, so that the parent's memory is the server's alone.
func TestMain(m *testing.M) {
	if spec := os.Getenv("NQD_BENCH_DIALER"); spec != "" {
		os.Exit(runDialer(spec))
	}
	os.Exit(m.Run())
}

// benchBackends runs f on bolt, and on Redis when a server is available.
func benchBackends(b *testing.B, f func(b *testing.B, s store.Backend)) {
	b.Run("bolt", func(b *testing.B) { f(b, bolttest.Open(b, boltstore.Options{})) })
	b.Run("redis", func(b *testing.B) { f(b, backendtest.OpenRedis(b, "")) })
}

// BenchmarkTimeToFirstEvent measures a new connection's time to its first
// backfilled event, on a context of 100 events.
func BenchmarkTimeToFirstEvent(b *testing.B) {
	benchBackends(b, func(b *testing.B, s store.Backend) {
		h := NewHandler(Options{Store: s})
		srv := newBenchServer(b, h)
		c := store.Context{Type: "flow", ID: fmt.Sprintf("ttfe-%d", time.Now().UnixNano())}
		appendN(b, s, c, 100)
		u := srv + "/api/_events/flow/" + c.ID + "/stream"
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
		var lat []time.Duration
		b.ResetTimer()
		for b.Loop() {
			start := time.Now()
			resp, err := client.Get(u)
			if err != nil {
				b.Fatal(err)
			}
			br := bufio.NewReader(resp.Body)
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					b.Fatal(err)
				}
				if strings.HasPrefix(line, "data: ") {
					break
				}
			}
			lat = append(lat, time.Since(start))
			_ = resp.Body.Close()
		}
		reportPercentiles(b, lat, "first-event")
	})
}

// BenchmarkFanout1000 appends to a context that 1,000 SSE clients watch and
// measures each delivery, from the start of the append to the client's read.
func BenchmarkFanout1000(b *testing.B) {
	const clients = 1000
	benchBackends(b, func(b *testing.B, s store.Backend) {
		h := NewHandler(Options{Store: s, TrustLive: s.Features().LiveReliable})
		srv := newBenchServer(b, h)
		c := store.Context{Type: "flow", ID: fmt.Sprintf("fan-%d", time.Now().UnixNano())}
		u := srv + "/api/_events/flow/" + c.ID + "/stream?backfill=0"

		var mu sync.Mutex
		sent := map[string]time.Time{}
		var lat []time.Duration
		var ready, done sync.WaitGroup
		var delivered atomic.Int64
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		transport := &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: clients}
		for range clients {
			ready.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
				resp, err := transport.RoundTrip(req)
				if err != nil {
					ready.Done()
					return
				}
				defer func() { _ = resp.Body.Close() }()
				br := bufio.NewReader(resp.Body)
				_, _ = br.ReadString('\n') // the opening comment: attached
				ready.Done()
				var mine []time.Duration
				defer func() {
					mu.Lock()
					lat = append(lat, mine...)
					mu.Unlock()
				}()
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					if id, ok := strings.CutPrefix(line, "id: "); ok {
						now := time.Now()
						mu.Lock()
						t0 := sent[strings.TrimSpace(id)]
						mu.Unlock()
						mine = append(mine, now.Sub(t0))
						delivered.Add(1)
					}
				}
			}()
		}
		ready.Wait()
		b.ResetTimer()
		i := 0
		for b.Loop() {
			ev := logEvent(c, i)
			i++
			mu.Lock()
			start := time.Now()
			// Held across the append so no reader looks the id up first.
			res, err := s.Append(context.Background(), c, []event.Event{ev}, store.AppendOptions{})
			if err == nil {
				sent[res.Events[0].ID.String()] = start
			}
			mu.Unlock()
			if err != nil {
				b.Fatal(err)
			}
			// A steady rate: 50 appends/s, 50,000 deliveries/s.
			time.Sleep(20 * time.Millisecond)
		}
		b.StopTimer()
		// Let the last deliveries land before hanging up; the ones that do
		// not are what clients-reached/event reports, so this is no failure.
		want := int64(i) * clients
		deadline := time.Now().Add(10 * time.Second)
		for delivered.Load() < want && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		done.Wait()
		reportPercentiles(b, lat, "delivery")
		b.ReportMetric(float64(len(lat))/float64(max(i, 1)), "clients-reached/event")
	})
}

// BenchmarkIdleConnMemory holds 10,000 idle SSE connections, 10 per context
// over 1,000 contexts, and reports the server's memory per connection. The
// clients run in a child process.
func BenchmarkIdleConnMemory(b *testing.B) {
	const conns, perContext = 10000, 10
	for b.Loop() {
		s := bolttest.Open(b, boltstore.Options{})
		h := NewHandler(Options{Store: s, TrustLive: true})
		srv := newBenchServer(b, h)
		before := memNow()
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("NQD_BENCH_DIALER=%s,%d,%d", strings.TrimPrefix(srv, "http://"), conns, perContext))
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil || strings.TrimSpace(line) != "ready" {
			b.Fatalf("dialer: %q %v", line, err)
		}
		wait.For(b, time.Minute, 10*time.Millisecond, fmt.Sprintf("%d connections open", conns), func() bool { return openConns(h) >= conns })
		after := memNow()
		_ = stdin.Close()
		_ = cmd.Wait()
		b.ReportMetric(float64(after.heap-before.heap)/conns, "heap-B/conn")
		b.ReportMetric(float64(after.rss-before.rss)/conns, "rss-B/conn")
		b.ReportMetric(float64(after.goroutines-before.goroutines)/conns, "goroutines/conn")
	}
}

type memSample struct {
	heap, rss  uint64
	goroutines int
}

func memNow() memSample {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	var rss uint64
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		f := strings.Fields(string(b))
		if len(f) > 1 {
			pages, _ := strconv.ParseUint(f[1], 10, 64)
			rss = pages * uint64(os.Getpagesize())
		}
	}
	return memSample{heap: ms.HeapInuse + ms.StackInuse, rss: rss, goroutines: runtime.NumGoroutine()}
}

// runDialer is the child of BenchmarkIdleConnMemory: it opens the streams,
// reads their headers, says "ready", and holds them until stdin closes.
func runDialer(spec string) int {
	parts := strings.Split(spec, ",")
	addr := parts[0]
	n, _ := strconv.Atoi(parts[1])
	per, _ := strconv.Atoi(parts[2])
	held := make([]net.Conn, 0, n)
	buf := make([]byte, 4096)
	for i := range n {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "dial:", err)
			return 1
		}
		path := "/api/_events/flow/idle-" + strconv.Itoa(i/per) + "/stream"
		if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, addr); err != nil {
			fmt.Fprintln(os.Stderr, "write:", err)
			return 1
		}
		if _, err := conn.Read(buf); err != nil {
			fmt.Fprintln(os.Stderr, "read:", err)
			return 1
		}
		held = append(held, conn)
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range held {
		_ = c.Close()
	}
	return 0
}

func newBenchServer(b *testing.B, h *Handler) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: routes(h)}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = h.Drain(ctx)
		_ = srv.Close()
		h.Close()
	})
	return "http://" + ln.Addr().String()
}

func reportPercentiles(b *testing.B, lat []time.Duration, name string) {
	if len(lat) == 0 {
		b.Fatal("no samples")
	}
	slices.Sort(lat)
	at := func(q float64) float64 {
		return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.50), name+"-p50-ms")
	b.ReportMetric(at(0.99), name+"-p99-ms")
	b.ReportMetric(float64(len(lat)), name+"-samples")
}

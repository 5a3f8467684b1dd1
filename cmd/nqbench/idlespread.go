package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The idle profile with -idle-instances N > 1 holds its streams over N nqd
// instances on the one Redis (nqd runs any number of instances), with the
// clients of each instance in a process of their own: this binary,
// re-executed with -idle-client. One process can hold only as many sockets
// as its open-files limit allows, 20,000 on the machine BENCHMARKS.md
// describes, and cannot raise it. Each instance listens on a loopback
// address and port of its own, so that the clients' ephemeral ports
// (net.ipv4.ip_local_port_range, about 28,000) are counted per instance.

// idleInstance is one nqd instance's share of the idle streams.
type idleInstance struct {
	Connections   int     `json:"connections"`
	RSSBefore     int64   `json:"rss_before_bytes"`
	RSSAfter      int64   `json:"rss_after_bytes"`
	RSSPerConn    float64 `json:"rss_per_connection_bytes"`
	HeapPerConn   float64 `json:"heap_per_connection_bytes"`
	GoroutinesPer float64 `json:"goroutines_per_connection"`
}

// clientConnects is how many streams the idle profile opens at once, in
// its own process or in each client process.
const clientConnects = 64

// runIdleSpread holds n live-only streams over n/perContext contexts, spread
// over instances nqd instances: e's and those startMore starts (stopped on
// return).
func runIdleSpread(ctx context.Context, e env, n, perContext, instances int, startMore func(addr string) (*child, string, error)) (idleResult, error) {
	res := idleResult{Connections: n, Contexts: max(n/perContext, 1)}
	type instance struct {
		base       string
		pid        int
		heap0, gr0 float64
		client     *exec.Cmd
		stdin      io.Closer
		opened     atomic.Int64
		ready      chan error
	}
	insts := []*instance{{base: e.base, pid: e.nqdPID}}
	for i := 1; i < instances; i++ {
		// 127.0.0.x is loopback too: an address of its own per instance.
		p, base, err := startMore(fmt.Sprintf("127.0.0.%d", i+1))
		if err != nil {
			return res, fmt.Errorf("instance %d: %w", i+1, err)
		}
		defer p.stop()
		insts = append(insts, &instance{base: base, pid: p.pid()})
	}
	for _, in := range insts {
		var err error
		if in.heap0, in.gr0, err = scrapeRuntime(in.base); err != nil {
			return res, err
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return res, err
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	start := time.Now()
	var rss0 []int64
	for _, in := range insts {
		r, err := rssBytes(in.pid)
		if err != nil {
			return res, err
		}
		rss0 = append(rss0, r)
	}
	defer func() {
		for _, in := range insts {
			if in.client != nil {
				_ = in.stdin.Close()
				_ = in.client.Wait()
			}
		}
	}()
	for i, in := range insts {
		share := n / instances
		if i < n%instances {
			share++
		}
		res.Instances = append(res.Instances, idleInstance{Connections: share})
		spec := fmt.Sprintf("%s %d %d %s-%d", in.base, share, max(share/perContext, 1), run, i)
		cmd := exec.CommandContext(ctx, exe, "-idle-client", spec)
		cmd.Stderr = os.Stderr
		// The clients die with the tool, however it ends.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return res, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return res, err
		}
		if err := cmd.Start(); err != nil {
			return res, err
		}
		in.client, in.stdin, in.ready = cmd, stdin, make(chan error, 1)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				switch {
				case len(f) == 2 && f[0] == "opened":
					k, _ := strconv.ParseInt(f[1], 10, 64)
					in.opened.Store(k)
				case len(f) == 3 && f[0] == "ready":
					failed, _ := strconv.Atoi(f[2])
					if failed > 0 {
						in.ready <- fmt.Errorf("%s: %d of %d streams failed to open", in.base, failed, share)
					} else {
						in.ready <- nil
					}
					_, _ = io.Copy(io.Discard, stdout)
					return
				}
			}
			in.ready <- fmt.Errorf("%s: the client process ended before its streams were open", in.base)
		}()
	}
	p := newProgress("idle connections", int64(n), func() int64 {
		var k int64
		for _, in := range insts {
			k += in.opened.Load()
		}
		return k
	})
	var errs []error
	for _, in := range insts {
		errs = append(errs, <-in.ready)
	}
	p.done()
	res.OpenTime = time.Since(start).Seconds()
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	var heapSum, grSum float64
	for i, in := range insts {
		heap1, gr1, err := scrapeRuntime(in.base)
		if err != nil {
			return res, err
		}
		rss1, err := rssBytes(in.pid)
		if err != nil {
			return res, err
		}
		r := &res.Instances[i]
		r.RSSBefore, r.RSSAfter = rss0[i], rss1
		r.RSSPerConn = float64(rss1-rss0[i]) / float64(r.Connections)
		r.HeapPerConn = (heap1 - in.heap0) / float64(r.Connections)
		r.GoroutinesPer = (gr1 - in.gr0) / float64(r.Connections)
		res.RSSBefore += rss0[i]
		res.RSSAfter += rss1
		heapSum += heap1 - in.heap0
		grSum += gr1 - in.gr0
	}
	res.RSSPerConn = float64(res.RSSAfter-res.RSSBefore) / float64(n)
	res.HeapPerConn = heapSum / float64(n)
	res.GoroutinesPer = grSum / float64(n)
	return res, nil
}

// runIdleClient is the client process of runIdleSpread: spec is "base n
// contexts run". It opens n live-only streams of nqd at base, reports
// "opened k" as it goes and "ready ok failed" when done, and holds them
// until its stdin closes.
func runIdleClient(spec string) error {
	f := strings.Fields(spec)
	if len(f) != 4 {
		return fmt.Errorf("bad -idle-client spec %q", spec)
	}
	u, err := url.Parse(f[0])
	if err != nil {
		return err
	}
	n, err1 := strconv.Atoi(f[1])
	contexts, err2 := strconv.Atoi(f[2])
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	conns := make([]net.Conn, n)
	var opened, failed atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, clientConnects)
	var out sync.Mutex
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			path := fmt.Sprintf("/api/_events/idle/%s-%d/stream?backfill=0", f[3], i%contexts)
			nc, err := openIdle(u.Host, path)
			if err != nil {
				if failed.Add(1) == 1 {
					fmt.Fprintf(os.Stderr, "nqbench client: %v\n", err)
				}
				return
			}
			conns[i] = nc
			if k := opened.Add(1); k%500 == 0 {
				out.Lock()
				fmt.Printf("opened %d\n", k)
				out.Unlock()
			}
		})
	}
	wg.Wait()
	fmt.Printf("opened %d\nready %d %d\n", opened.Load(), opened.Load(), failed.Load())
	// Held until the parent is done measuring: it closes stdin, or dies.
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, nc := range conns {
		if nc != nil {
			_ = nc.Close()
		}
	}
	return nil
}

// openIdle opens one stream over a socket of its own and returns once its
// first line, the opening comment, arrived. Nothing is read after: an idle
// stream's heartbeats wait in the socket's buffer.
func openIdle(host, path string) (net.Conn, error) {
	nc, err := net.DialTimeout("tcp", host, 30*time.Second)
	if err != nil {
		return nil, err
	}
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(nc, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, host); err != nil {
		_ = nc.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(nc, 1024)
	status, err := br.ReadString('\n')
	if err == nil && !strings.Contains(status, " 200 ") {
		err = fmt.Errorf("GET %s: %s", path, strings.TrimSpace(status))
	}
	for err == nil {
		var line string
		if line, err = br.ReadString('\n'); err == nil && strings.HasPrefix(line, ": nqd") {
			break
		}
	}
	if err != nil {
		_ = nc.Close()
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	return nc, nil
}

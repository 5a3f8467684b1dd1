package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// newHist records latencies in microseconds from 1 µs to one minute with
// three significant digits.
func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, 60_000_000, 3) }

// loadResult is what one open-loop run measured.
type loadResult struct {
	Sent     int64         // operations started
	OK       int64         // operations that succeeded
	Errors   int64         // operations that failed
	Elapsed  time.Duration // from the first intended send to the last completion
	Latency  *hdrhistogram.Histogram
	Dropped  int64 // operations never started because the run's time was up
	Achieved float64
}

// openLoop runs op at a fixed arrival rate for d with at most workers in
// flight. Latency counts from each operation's intended send time, not from
// when a worker was free to send it, so a stalled server shows as latency
// instead of as a slower arrival rate (coordinated omission).
func openLoop(ctx context.Context, name string, rate float64, d time.Duration, workers int, op func(ctx context.Context, seq int64, intended time.Time) error) loadResult {
	total := int64(rate * d.Seconds())
	interval := time.Duration(float64(time.Second) / rate)
	type job struct {
		seq      int64
		intended time.Time
	}
	jobs := make(chan job, total)
	var ok, failed atomic.Int64
	hists := make([]*hdrhistogram.Histogram, workers)
	var wg sync.WaitGroup
	for w := range workers {
		hists[w] = newHist()
		wg.Go(func() {
			for j := range jobs {
				err := op(ctx, j.seq, j.intended)
				lat := time.Since(j.intended)
				if err != nil {
					failed.Add(1)
					continue
				}
				ok.Add(1)
				_ = hists[w].RecordValue(max(lat.Microseconds(), 1))
			}
		})
	}
	p := newProgress(name, total, func() int64 { return ok.Load() + failed.Load() })
	start := time.Now()
	var sent int64
	for sent = 0; sent < total && ctx.Err() == nil; sent++ {
		intended := start.Add(time.Duration(sent) * interval)
		if wait := time.Until(intended); wait > 0 {
			time.Sleep(wait)
		}
		jobs <- job{seq: sent, intended: intended}
	}
	close(jobs)
	wg.Wait()
	elapsed := time.Since(start)
	p.done()
	h := newHist()
	for _, x := range hists {
		h.Merge(x)
	}
	return loadResult{
		Sent: sent, OK: ok.Load(), Errors: failed.Load(), Elapsed: elapsed, Latency: h,
		Dropped: total - sent, Achieved: float64(ok.Load()) / elapsed.Seconds(),
	}
}

// progress draws a one-line progress bar on stderr while it is a terminal.
type progress struct {
	stop chan struct{}
	wg   sync.WaitGroup
}

func newProgress(name string, total int64, done func() int64) *progress {
	p := &progress{stop: make(chan struct{})}
	if !isTerminal(os.Stderr) {
		return p
	}
	start := time.Now()
	draw := func() {
		n := done()
		const width = 30
		filled := int(float64(width) * float64(n) / float64(max(total, 1)))
		bar := make([]byte, width)
		for i := range bar {
			bar[i] = ' '
			if i < filled {
				bar[i] = '#'
			}
		}
		fmt.Fprintf(os.Stderr, "\r%-22s [%s] %d/%d %5.1fs", name, bar, n, total, time.Since(start).Seconds())
	}
	p.wg.Go(func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				draw()
				fmt.Fprintln(os.Stderr)
				return
			case <-t.C:
				draw()
			}
		}
	})
	return p
}

func (p *progress) done() {
	close(p.stop)
	p.wg.Wait()
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// schedulesResult is the schedules profile: many schedules at once, and
// how late their due times fire.
type schedulesResult struct {
	Schedules int        `json:"schedules"`
	Interval  int        `json:"interval_s"`
	Fires     int64      `json:"fires"`
	Lateness  latencyRow `json:"lateness"` // planned due time → the write that records the fire
	TickMs    float64    `json:"tick_ms"`
}

// engineTickMs is how often nqd's engine looks for due timers (its
// default Interval), the bound a fire's lateness is held to.
const engineTickMs = 250

// runSchedules creates n schedules of the `pipeline` flow, each every
// interval seconds (interval at most 60), lets them fire for d and
// reads each fire's lateness from the schedules' streams (schedule.fired
// carries it). No worker runs: lateness is the scheduler's alone.
func runSchedules(ctx context.Context, e env, n, interval int, d time.Duration) (schedulesResult, error) {
	res := schedulesResult{Schedules: n, Interval: interval, TickMs: engineTickMs}
	hc := httpClient(16)
	for i := range n {
		// Every interval seconds, offset by the schedule's number, so that
		// the fires spread evenly over each interval.
		body := fmt.Sprintf(`{"cron":"%d/%d * * * * *","overlap":"allow","jobId":"bench-%d"}`, i%interval, interval, i)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.base+"/api/_flows/pipeline/schedule", bytes.NewReader([]byte(body)))
		if err != nil {
			return res, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return res, err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return res, fmt.Errorf("create schedule %d: %s", i, resp.Status)
		}
	}
	cpu := meterCPU(e)
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(d):
	}
	used := cpu.String()
	h := hdrhistogram.New(1, 60_000_000, 3)
	for i := range n {
		var page struct {
			Events []struct {
				Kind string `json:"kind"`
				Data struct {
					Source     string `json:"source"`
					LatenessMs int64  `json:"latenessMs"`
				} `json:"data"`
			} `json:"events"`
		}
		if err := getJSON(ctx, hc, e.base+"/api/_events/schedule/bench-"+strconv.Itoa(i)+"?limit=1000", &page); err != nil {
			return res, err
		}
		for _, ev := range page.Events {
			if ev.Kind == "schedule.fired" && ev.Data.Source == "schedule" {
				_ = h.RecordValue(max(ev.Data.LatenessMs, 0) * 1000)
				res.Fires++
			}
		}
	}
	res.Lateness = rowOf(fmt.Sprintf("%d schedules", n), float64(n)/float64(interval), float64(res.Fires)/d.Seconds(), res.Fires, 0, h)
	res.Lateness.CPU = used
	return res, nil
}

// Command noop-worker serves the step `noop`, which does nothing, on one
// queue: the Go side of scripts/bench-sdks.sh. It reads NQD_URL, NQD_QUEUE,
// NQD_CONCURRENCY and NQD_TOKEN, as the other SDKs' bench workers do, and
// NQD_TRANSPORT: "http" takes the jobs over HTTP rather than the worker
// channel.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/nqd-dev/nqd/sdk/go/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := worker.Config{
		BaseURL: env("NQD_URL", "http://127.0.0.1:8080"),
		Token:   os.Getenv("NQD_TOKEN"),
		Queues:  []string{env("NQD_QUEUE", "bench-go")},
		Logger:  log,
	}
	switch t := os.Getenv("NQD_TRANSPORT"); t {
	case "", "channel":
	case "http":
		cfg.Transport = worker.HTTP
	default:
		log.Error("NQD_TRANSPORT: want channel or http", "got", t)
		os.Exit(2)
	}
	if s := os.Getenv("NQD_CONCURRENCY"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			log.Error("NQD_CONCURRENCY: want a whole number of at least 1", "got", s)
			os.Exit(2)
		}
		cfg.Concurrency = n
	}
	noop := func(context.Context, *worker.StepContext) (any, error) { return nil, nil }
	if err := worker.Run(ctx, cfg, map[string]worker.Handler{"noop": noop}); err != nil {
		log.Error("stopped", "err", err)
		os.Exit(1)
	}
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Command demo-worker runs the steps of the example flows in
// examples/flows against an nqd server, so a newcomer sees runs happen:
//
//	NQ_FLOWS_DIR=examples/flows go run ./cmd/server &
//	go run ./cmd/demo-worker --url http://127.0.0.1:8080
//
// or simply `make demo`. With tokens on the server, pass one of the write
// scope in NQD_TOKEN.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nqd-dev/nqd/examples/demo"
	"github.com/nqd-dev/nqd/sdk/go/worker"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:8080", "nqd's address")
	queues := flag.String("queues", "default", "queues to take jobs from, comma-separated")
	concurrency := flag.Int("concurrency", 8, "jobs run at once")
	work := flag.Duration("work", 300*time.Millisecond, "how long each step pretends to work")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("app", "demo-worker")
	cfg := worker.Config{BaseURL: *url, Token: os.Getenv("NQD_TOKEN"), Queues: strings.Split(*queues, ","), Concurrency: *concurrency, Logger: log}
	log.Info("taking jobs", "url", *url, "queues", cfg.Queues)
	if err := worker.Run(ctx, cfg, demo.Handlers(demo.Options{Work: *work})); err != nil {
		log.Error("stopped", "err", err)
		os.Exit(1)
	}
}

// Command server runs nqd: the event store, live streams and flow coordinator
// for Nuxt Queue flows.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	// Schedules name IANA time zones; the zone data goes in the binary so a
	// scratch container has it.
	_ "time/tzdata"

	"github.com/nqd-dev/nqd/config"
	"github.com/nqd-dev/nqd/internal/gcfloor"
	"github.com/nqd-dev/nqd/wiring"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := config.Load(os.Args[1:], os.Getenv, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return
	case err != nil:
		fmt.Fprintln(os.Stderr, "nqd: configuration:", err)
		os.Exit(2)
	case cfg.Version:
		fmt.Println("nqd", version)
		return
	case cfg.Healthcheck:
		if err := wiring.Healthcheck(ctx, cfg); err != nil {
			fmt.Fprintln(os.Stderr, "nqd: healthcheck:", err)
			os.Exit(1)
		}
		return
	}
	logger := wiring.Logger(cfg, os.Stdout).With().Str("version", version).Logger()
	for _, w := range config.Unknown(os.Environ()) {
		logger.Warn().Msg(w)
	}
	if cfg.PprofAddr != "" {
		ln, err := listenPprof(cfg.PprofAddr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "nqd: configuration:", err)
			os.Exit(2)
		}
		go servePprof(ctx, ln, logger)
	}
	if cfg.GCMinHeap > 0 {
		gcfloor.Start(uint64(cfg.GCMinHeap))
	}
	wiring.RouteRedisLog(logger)
	if err := wiring.Run(ctx, cfg, logger); err != nil {
		logger.Error().Err(err).Msg("nqd stopped")
		os.Exit(1)
	}
}

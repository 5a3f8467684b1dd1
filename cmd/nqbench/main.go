// Command nqbench measures nqd the same way every time: it starts its own
// redis-server and nqd on loopback, drives them open loop (a fixed arrival
// rate, latency counted from each operation's intended send time, recorded
// in HdrHistograms) and compares nqd with plain Redis in the same run.
//
// Profiles: appends (HTTP appends against pipelined XADD + PUBLISH),
// fanout (contexts × subscribers, append-to-receive latency, and a checker
// that every client got every id once, in order) and idle (streams held
// open, and nqd's memory per stream; with -idle-instances over several nqd
// instances on the one Redis, see idlespread.go) and flows (runs of a three-step flow
// carried out by the demo worker's handlers) and e2e (closed-loop runs of a
// one-step flow, each start followed by its event stream until the run
// completes, the step run by cmd/noop-worker in its own process, on the
// embedded store and on Redis, raced in the same run against a running Node
// original when -node-env names one; see e2e.go and node.go), and, not run by default,
// pg-appends (HTTP appends with nqd on a PostgreSQL the tool starts, against
// INSERT + pg_notify in one round trip on the same server) and pg-flows (the
// flows profile with nqd on that PostgreSQL; see pgflows.go) and cluster
// (the appends profile's nqd side on one Redis and on a Redis Cluster of
// three primaries with a replica each, with each node's keys and commands;
// see cluster.go). With -markdown it rewrites the
// generated part of BENCHMARKS.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/internal/pgtest"
)

// options are the command's flags.
type options struct {
	nqd, redis       string
	profiles         string
	duration         time.Duration
	appendRate       float64
	appendConns      int
	contexts         int
	fanoutRate       float64
	fanoutContexts   int
	fanoutSubs       int
	idleConns        int
	idleInstances    int
	idleClient       string
	bareHTTP         string
	flowsDir         string
	flowRate         float64
	flowWorkers      int
	jsonOut, mdOut   string
	command, version string
	e2e              e2eOptions
	e2eConc          string
	e2eStores        string
}

func main() {
	var o options
	flag.StringVar(&o.nqd, "nqd", "bin/nqd", "the nqd binary to measure")
	flag.StringVar(&o.redis, "redis-server", "redis-server", "the redis-server binary")
	flag.StringVar(&o.profiles, "profiles", "appends,fanout,idle,flows,e2e,schedules", "comma-separated profiles to run")
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "length of each timed run")
	flag.Float64Var(&o.appendRate, "append-rate", 2000, "offered appends per second in the appends profile")
	flag.IntVar(&o.appendConns, "append-conns", 32, "appends in flight at most (and connections)")
	flag.IntVar(&o.contexts, "contexts", 100, "contexts the appends profile spreads over")
	flag.Float64Var(&o.fanoutRate, "fanout-rate", 200, "offered appends per second in the fan-out profile")
	flag.IntVar(&o.fanoutContexts, "fanout-contexts", 100, "contexts in the fan-out profile")
	flag.IntVar(&o.fanoutSubs, "fanout-subs", 10, "subscribers per context in the fan-out profile")
	flag.IntVar(&o.idleConns, "idle-conns", 5000, "streams held open in the idle profile")
	flag.IntVar(&o.idleInstances, "idle-instances", 1, "nqd instances on the one Redis the idle profile spreads its streams over, each with a client process of its own (see idlespread.go); more than 15,000 streams need several")
	flag.StringVar(&o.idleClient, "idle-client", "", "run as a client process of the idle profile (internal)")
	flag.StringVar(&o.bareHTTP, "serve-bare-http", "", "run as the appends profile's bare HTTP server on this address (internal)")
	flag.StringVar(&o.flowsDir, "flows-dir", "examples/flows", "flow definitions nqd loads in the flows profile (must hold `pipeline`)")
	flag.Float64Var(&o.flowRate, "flow-rate", 100, "offered run starts per second in the flows profile")
	flag.IntVar(&o.flowWorkers, "flow-workers", 16, "steps the in-process demo worker runs at once")
	flag.StringVar(&o.e2e.worker, "noop-worker", "bin/noop-worker", "the noop-worker binary the e2e profile runs steps with")
	flag.IntVar(&o.e2e.runs, "e2e-runs", 3000, "measured runs per e2e row")
	flag.IntVar(&o.e2e.rounds, "e2e-rounds", 1, "times each e2e row is measured, alternating")
	flag.StringVar(&o.e2eConc, "e2e-conc", "8,32", "closed-loop starters of the e2e rows")
	flag.StringVar(&o.e2eStores, "e2e-stores", "embedded,redis", "stores of the e2e rows")
	flag.StringVar(&o.e2e.node.envFile, "node-env", "", "a file of KEY=value lines naming a running Node original for the e2e profile to race: NODE_URL, SERVER_PID, REDIS_PID")
	flag.StringVar(&o.e2e.node.url, "node-url", "", "the running Node original's base URL (overrides -node-env's)")
	flag.StringVar(&o.e2e.node.pids, "node-pids", "", "comma-separated process ids of the Node original, its server and its redis-server (override -node-env's)")
	flag.StringVar(&o.e2e.pprofDir, "pprof-dir", "", "write nqd's CPU and allocation profiles of each e2e row here")
	flag.StringVar(&o.jsonOut, "json", "", "also write the results as JSON to this file")
	flag.StringVar(&o.mdOut, "markdown", "", "rewrite the generated part of this Markdown file (BENCHMARKS.md)")
	flag.StringVar(&o.command, "command", "", "the command that reproduces this run, for the report")
	flag.StringVar(&o.version, "version", "", "nqd's version, for the report")
	flag.Parse()

	// go-redis logs pool events of the baseline client to stderr, where
	// they would break the progress line.
	redis.SetLogger(quietLogger{})
	if o.bareHTTP != "" {
		if err := serveBare(o.bareHTTP); err != nil {
			fmt.Fprintln(os.Stderr, "nqbench bare server:", err)
			os.Exit(1)
		}
		return
	}
	if o.idleClient != "" {
		if err := runIdleClient(o.idleClient); err != nil {
			fmt.Fprintln(os.Stderr, "nqbench client:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "nqbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	dir, err := os.MkdirTemp("", "nqbench-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	redisProc, redisAddr, err := startRedis(o.redis, dir)
	if err != nil {
		return err
	}
	defer redisProc.stop()
	rep := report{Machine: describeMachine(o.redis), Command: o.command, Version: o.version, Duration: o.duration.String()}
	var errs []error
	// PostgreSQL is started only for a profile that needs it, and once.
	var pg *pgtest.Server
	defer func() {
		if pg != nil {
			pg.Close()
		}
	}()
	for _, p := range strings.Split(o.profiles, ",") {
		if ctx.Err() != nil {
			break
		}
		if strings.TrimSpace(p) == "cluster" {
			// nqd on the one Redis and on a cluster of its own.
			r, err := runCluster(ctx, o, redisAddr, redisProc.pid(), dir)
			rep.Cluster = &r
			errs = append(errs, named("cluster", err))
			continue
		}
		if strings.TrimSpace(p) == "e2e" {
			// Every row starts an nqd and a worker of its own.
			r, err := runE2E(ctx, env{redisAddr: redisAddr, redisPID: redisProc.pid()}, dir, o.nqd, o.e2eOpts())
			rep.E2E = &r
			errs = append(errs, named("e2e", err))
			continue
		}
		// Each profile gets a fresh nqd, so that none inherits another's
		// heap, connections or subscriptions.
		var extra []string
		if flowProfile(strings.TrimSpace(p)) {
			extra = append(extra, "NQ_FLOWS_DIR="+o.flowsDir)
		}
		storeEnv := "NQ_REDIS_URL=redis://" + redisAddr + "/0"
		var pgPID int
		if pgProfile(strings.TrimSpace(p)) {
			if pg == nil {
				if pg, err = pgtest.Launch(); err != nil {
					errs = append(errs, fmt.Errorf("start PostgreSQL: %w", err))
					pg = nil
					break
				}
			}
			storeEnv, pgPID = "NQ_POSTGRES_URL="+pg.URL, pg.PID()
		}
		nqdProc, base, err := startNQD(o.nqd, storeEnv, extra...)
		if err != nil {
			errs = append(errs, err)
			break
		}
		e := env{base: base, redisAddr: redisAddr, nqdPID: nqdProc.pid(), redisPID: redisProc.pid(), pgPID: pgPID}
		switch strings.TrimSpace(p) {
		case "appends":
			r, err := runAppends(ctx, e, o.appendRate, o.duration, o.appendConns, o.contexts)
			rep.Appends = &r
			errs = append(errs, named("appends", err))
		case "pg-appends":
			r, err := runPGAppends(ctx, e, pg.URL, o.appendRate, o.duration, o.appendConns, o.contexts)
			rep.PGAppends = &r
			errs = append(errs, named("pg-appends", err))
		case "pg-flows":
			r, err := runPGFlows(ctx, e, o.flowRate, o.duration, o.appendConns, o.flowWorkers)
			rep.PGFlows = &r
			errs = append(errs, named("pg-flows", err))
		case "fanout":
			r, err := runFanout(ctx, e, o.fanoutRate, o.duration, o.fanoutContexts, o.fanoutSubs, o.appendConns)
			rep.Fanout = &r
			errs = append(errs, named("fanout", err))
		case "idle":
			var r idleResult
			var err error
			if o.idleInstances > 1 {
				r, err = runIdleSpread(ctx, e, o.idleConns, 10, o.idleInstances, func(host string) (*child, string, error) {
					return startNQDAt(o.nqd, host, storeEnv, extra...)
				})
			} else {
				r, err = runIdle(ctx, e, o.idleConns, 10)
			}
			rep.Idle = &r
			errs = append(errs, named("idle", err))
		case "flows":
			r, err := runFlows(ctx, e, o.flowRate, o.duration, o.appendConns, o.flowWorkers)
			rep.Flows = &r
			errs = append(errs, named("flows", err))
		case "schedules":
			r, err := runSchedules(ctx, e, 1000, 10, o.duration)
			rep.Schedules = &r
			errs = append(errs, named("schedules", err))
		default:
			errs = append(errs, fmt.Errorf("unknown profile %q", p))
		}
		nqdProc.stop()
	}
	err = errors.Join(errs...)
	if err != nil {
		rep.Failures = err.Error()
	}
	fmt.Print(rep.text())
	if o.jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if werr := os.WriteFile(o.jsonOut, append(b, '\n'), 0o644); werr != nil {
			err = errors.Join(err, werr)
		}
	}
	if o.mdOut != "" {
		err = errors.Join(err, rep.rewrite(o.mdOut))
	}
	return err
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func named(profile string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", profile, err)
	}
	return nil
}

// Package config reads nqd's settings from flags and the environment into one
// struct and validates it once, so that a wrong value stops the server at start
// with a reason that names the setting.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nqd-dev/nqd/auth"
	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/internal/gcfloor"
	"github.com/nqd-dev/nqd/registry"
	"github.com/nqd-dev/nqd/snapshots"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/redisstore"
	"github.com/nqd-dev/nqd/stream"
	"github.com/nqd-dev/nqd/sweeper"
)

// prefixRe keeps the key prefix free of the characters that structure keys.
var prefixRe = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// Config is every setting of an nqd process.
type Config struct {
	Addr     string // listen address
	RedisURL string // empty: the embedded store in DataDir, or PostgreSQL
	// PostgresURL selects the PostgreSQL store (postgres://...); empty
	// with RedisURL empty: the embedded store.
	PostgresURL string
	DataDir     string
	Prefix      string // key prefix
	LogLevel    string // trace, debug, info, warn, error
	LogFormat   string // auto, json, console

	MaxBodyBytes       int64
	MaxBatch           int
	RequestTimeout     time.Duration
	IdleTimeout        time.Duration // a keep-alive connection's longest wait for its next request
	ShutdownTimeout    time.Duration
	IdempotencyWindow  time.Duration
	RedisWaitReplicas  int              // 0: a write is acknowledged once the primary has it
	RedisWaitTimeout   time.Duration    // how long a write waits for RedisWaitReplicas
	RedisShards        int              // shards the Redis keys are split over; 1: one hash tag
	StreamMaxLen       int64            // 0: streams are not trimmed
	StreamMaxLenByType map[string]int64 // overrides StreamMaxLen per context type

	CORSOrigins    []string      // browser origins allowed to call the API
	AllowedHosts   []string      // Host names served besides IPs and localhost; "*": any
	SSEHeartbeat   time.Duration // longest silence on an SSE connection
	SSEMaxBackfill int           // most events one SSE backfill sends
	SSEMaxLifetime time.Duration // 0: SSE connections are not rotated

	FlowsDir string // flow definitions (*.json, *.yaml) loaded at start
	WebBase  string // path the dashboard is served at
	// UIUpstream is a Nuxt app (http://host:port) that every request nqd
	// does not serve is forwarded to, WebSocket upgrades included; "": none.
	UIUpstream string

	CacheEntries    int   // contexts whose reduced state is cached
	CacheBytes      int64 // approximate bytes of cached states
	CheckpointEvery int   // events between persisted state checkpoints; 0 disables
	GCMinHeap       int64 // heap below which no garbage collection starts; 0: Go's pacing alone

	// Retention of finished runs by terminal status; 0 keeps them forever.
	RetainCompleted   time.Duration
	RetainFailed      time.Duration
	RetainCancelled   time.Duration
	ArchiveDir        string        // a directory to archive runs to before they expire; empty: ArchiveURL or none
	ArchiveURL        string        // the bucket to archive runs to (s3://, file://); empty: ArchiveDir or none
	RetentionInterval time.Duration // how often due runs are looked for

	// The sweeper of runs the engine will not move on by itself.
	SweepInterval time.Duration // time between sweeps
	StallAfter    time.Duration // idle time after which a run with nothing pending counts as stuck

	// JobLease is how long a worker holds a claimed job without a heartbeat.
	JobLease time.Duration

	// The worker registry (registry.Options).
	WorkerHeartbeat time.Duration // a worker's heartbeat events are at most this often; also the sweep's interval
	WorkerLostAfter time.Duration // a worker heard from by no instance this long is marked lost
	WorkerRetain    time.Duration // registry events older than this are trimmed

	// Access control and abuse limits. Tokens hold only hashes and
	// StreamTokenKeys unexported secrets, so printing a Config leaks neither.
	Tokens              []auth.Token // NQ_TOKENS then NQ_TOKENS_FILE; none: every route is open
	TokensFile          string
	StreamTokenKeys     []auth.Key     // the first signs; none: a key the store keeps
	StreamTokenMaxTTL   time.Duration  // longest life of a stream token
	TriggerKeys         []auth.Key     // sign trigger ids, the first signs; none: a key the store keeps
	AllowInsecureBind   bool           // serve a non-loopback address without tokens
	AllowOpenWebhooks   bool           // take webhook calls that carry no credential
	RatePerToken        Rate           // appends, starts and trigger POSTs per token
	RatePerAddr         Rate           // the same per client address
	MaxEventBytes       int64          // largest event in an append
	LargeDataBytes      int64          // step data over this goes to the archive's bucket by reference
	MaxStreamsPerClient int            // open streams per token and per address; 0: no cap
	MetricsPublic       bool           // serve /metrics without a token
	TrustedProxies      []netip.Prefix // peers whose forwarding headers name the client; none by default

	// PprofAddr is the loopback address of the profiling listener; empty:
	// none.
	PprofAddr string

	// Commands instead of serving; flags only.
	Version     bool // print the version and exit
	Healthcheck bool // ask the nqd at Addr for /healthz and exit 0 if it answers 200
}

// Rate is a request budget: Requests per Window; zero Requests is no limit.
type Rate struct {
	Requests int
	Window   time.Duration
}

// Backend names the store the settings select.
func (c Config) Backend() string {
	switch {
	case c.RedisURL != "":
		return "redis"
	case c.PostgresURL != "":
		return "postgres"
	}
	return "embedded"
}

// setting ties a flag to its environment variable, so errors can name both.
// A setting without a flag is read from the environment only: most hold
// secrets, which a command line would show to every user of the machine.
type setting struct {
	flag, env, usage string
	def              string
	parse            func(string) error
}

// settings is the one table of nqd's settings, each parsing into its field
// of c.
func settings(c *Config) []setting {
	return []setting{
		{"addr", "NQ_ADDR", "listen address", "127.0.0.1:8080", str(&c.Addr)},
		{"redis-url", "NQ_REDIS_URL", "Redis URL (redis://, rediss://; add ?master_name= for Sentinel); empty uses the embedded store", "", str(&c.RedisURL)},
		{"redis-wait-replicas", "NQ_REDIS_WAIT_REPLICAS", "acknowledge a write on Redis once this many replicas have it (WAIT); 0: once the primary has it", "0", integer(&c.RedisWaitReplicas)},
		{"redis-wait-timeout", "NQ_REDIS_WAIT_TIMEOUT", "how long a write waits for NQ_REDIS_WAIT_REPLICAS before its outcome is unknown", durText(redisstore.DefaultWaitTimeout), dur(&c.RedisWaitTimeout)},
		{"redis-shards", "NQ_REDIS_SHARDS", "shards the Redis keys are split over, each its own hash slot on a cluster (docs/redis-cluster.md); data written with one number is not found with another, so nqd refuses to start on it", "1", integer(&c.RedisShards)},
		{"postgres-url", "NQ_POSTGRES_URL", "PostgreSQL URL (postgres://user:pass@host/db?sslmode=...); empty uses the embedded store", "", str(&c.PostgresURL)},
		{"data-dir", "NQ_DATA_DIR", "directory of the embedded store", "./data", str(&c.DataDir)},
		{"prefix", "NQ_PREFIX", "storage key prefix", store.DefaultPrefix, str(&c.Prefix)},
		{"log-level", "NQ_LOG_LEVEL", "trace, debug, info, warn or error", "info", str(&c.LogLevel)},
		{"log-format", "NQ_LOG_FORMAT", "auto (console on a terminal, else JSON), json or console", "auto", str(&c.LogFormat)},
		{"max-body-bytes", "NQ_MAX_BODY_BYTES", "largest accepted request body", itoa(handlers.DefaultMaxBodyBytes), i64(&c.MaxBodyBytes)},
		{"max-batch", "NQ_MAX_BATCH", "most events in one append", itoa(handlers.DefaultMaxBatch), integer(&c.MaxBatch)},
		{"request-timeout", "NQ_REQUEST_TIMEOUT", "time limit of a non-streaming request", durText(handlers.DefaultRequestTimeout), dur(&c.RequestTimeout)},
		{"idle-timeout", "NQ_IDLE_TIMEOUT", "how long a keep-alive connection may wait for its next request", durText(handlers.DefaultIdleTimeout), dur(&c.IdleTimeout)},
		{"shutdown-timeout", "NQ_SHUTDOWN_TIMEOUT", "time given to open requests on shutdown", "10s", dur(&c.ShutdownTimeout)},
		{"idempotency-window", "NQ_IDEMPOTENCY_WINDOW", "how long an Idempotency-Key is remembered", durText(store.DefaultIdempotencyWindow), dur(&c.IdempotencyWindow)},
		{"stream-maxlen", "NQ_STREAM_MAXLEN", "approximate cap on events per stream (0: no cap)", "0", i64(&c.StreamMaxLen)},
		{"stream-maxlen-by-type", "NQ_STREAM_MAXLEN_BY_TYPE", "per context type caps, e.g. flow=100000,trigger=1000 (0: no cap for that type)", "", typeCaps(&c.StreamMaxLenByType)},
		{"cors-origins", "NQ_CORS_ORIGINS", "comma-separated browser origins allowed to call the API (empty: same origin only)", "", list(&c.CORSOrigins)},
		{"allowed-hosts", "NQ_ALLOWED_HOSTS", "comma-separated host names the Host header may carry besides IP addresses and localhost (* for any); checked when listening on loopback or when set", "", list(&c.AllowedHosts)},
		{"sse-heartbeat", "NQ_SSE_HEARTBEAT", "longest silence on an SSE connection before a comment line; also how often a WebSocket is pinged", durText(stream.DefaultHeartbeat), dur(&c.SSEHeartbeat)},
		{"sse-max-backfill", "NQ_SSE_MAX_BACKFILL", "most events an SSE backfill sends (the newest, after an 'event: truncated' notice)", itoa(stream.DefaultMaxBackfill), integer(&c.SSEMaxBackfill)},
		{"web-base", "NQ_WEB_BASE", "path the browser dashboard is served at (empty: /)", "", str(&c.WebBase)},
		{"ui-upstream", "NQ_UI_UPSTREAM", "a Nuxt app, e.g. http://127.0.0.1:3000, that every request not for nqd's API is forwarded to, WebSocket upgrades included, so that the Nuxt Queue UI and nqd share one origin (empty: none)", "", str(&c.UIUpstream)},
		{"flows-dir", "NQ_FLOWS_DIR", "directory of flow definitions (*.json, *.yaml, *.yml) stored at start (empty: none)", "", str(&c.FlowsDir)},
		{"cache-entries", "NQ_CACHE_ENTRIES", "contexts whose reduced state is cached", itoa(snapshots.DefaultMaxEntries), integer(&c.CacheEntries)},
		{"cache-bytes", "NQ_CACHE_BYTES", "approximate bytes of cached reduced states", itoa(snapshots.DefaultMaxBytes), i64(&c.CacheBytes)},
		{"gc-min-heap", "NQ_GC_MIN_HEAP", "heap size in bytes below which no garbage collection starts, trading memory for CPU (0: Go's own pacing)", itoa(gcfloor.DefaultFloor), i64(&c.GCMinHeap)},
		{"checkpoint-every", "NQ_CHECKPOINT_EVERY", "events between persisted state checkpoints (0: none)", itoa(snapshots.DefaultCheckpointEvery), integer(&c.CheckpointEvery)},
		{"retain-completed", "NQ_RETAIN_COMPLETED", "how long a completed run is kept after it finished, e.g. 168h (0: forever)", "0", dur(&c.RetainCompleted)},
		{"retain-failed", "NQ_RETAIN_FAILED", "how long a failed run is kept after it finished, e.g. 720h (0: forever)", "0", dur(&c.RetainFailed)},
		{"retain-cancelled", "NQ_RETAIN_CANCELLED", "how long a cancelled run is kept after it finished (0: forever)", "0", dur(&c.RetainCancelled)},
		{"archive-dir", "NQ_ARCHIVE_DIR", "directory finished runs are archived to before they expire, short for NQ_ARCHIVE_URL=file://<dir> (empty: no archive)", "", str(&c.ArchiveDir)},
		{"archive-url", "NQ_ARCHIVE_URL", "bucket finished runs and compacted events are archived to: s3://bucket?region=...&endpoint=... or file:///dir (empty: NQ_ARCHIVE_DIR or no archive)", "", str(&c.ArchiveURL)},
		{"retention-interval", "NQ_RETENTION_INTERVAL", "how often runs whose retention ended are looked for", "1m", dur(&c.RetentionInterval)},
		{"sweep-interval", "NQ_SWEEP_INTERVAL", "time between sweeps for overdue awaits, stuck runs and orphaned run records", durText(sweeper.DefaultInterval), dur(&c.SweepInterval)},
		{"stall-after", "NQ_STALL_AFTER", "how long a run with no pending await and no leased job may go without an event before it is flagged stuck", durText(sweeper.DefaultStallAfter), dur(&c.StallAfter)},
		{"job-lease", "NQ_JOB_LEASE", "how long a worker holds a claimed job without a heartbeat before it goes to another worker", durText(engine.DefaultLease), dur(&c.JobLease)},
		{"worker-heartbeat", "NQ_WORKER_HEARTBEAT", "the worker registry writes a worker's heartbeat event at most this often (across all instances) and sweeps for lost workers this often", durText(registry.DefaultInterval), dur(&c.WorkerHeartbeat)},
		{"worker-lost-after", "NQ_WORKER_LOST_AFTER", "a worker heard from by no instance for this long is marked lost; more than NQ_WORKER_HEARTBEAT plus a claim's longest wait (30s)", durText(registry.DefaultLostAfter), dur(&c.WorkerLostAfter)},
		{"worker-retain", "NQ_WORKER_RETAIN", "how long the worker registry's stream keeps its events; at least NQ_WORKER_LOST_AFTER plus NQ_WORKER_HEARTBEAT", durText(registry.DefaultRetain), dur(&c.WorkerRetain)},
		{"sse-max-lifetime", "NQ_SSE_MAX_LIFETIME", "rotate SSE connections after this long, with jitter (0: never)", "0", dur(&c.SSEMaxLifetime)},
		{"", "NQ_TOKENS", "API tokens name:scope:secret or name:scope:sha256:<hex>, comma-separated", "", tokens(&c.Tokens)},
		{"tokens-file", "NQ_TOKENS_FILE", "file of API tokens, one name:scope:sha256:<hex> a line", "", str(&c.TokensFile)},
		{"", "NQ_STREAM_TOKEN_KEYS", "stream token signing keys id:secret, comma-separated; the first signs (empty: a key the store keeps, made by the first instance)", "", keys(&c.StreamTokenKeys)},
		{"", "NQ_TRIGGER_KEYS", "trigger id signing keys id:secret, comma-separated; the first signs (empty: a key the store keeps, made by the first instance)", "", keys(&c.TriggerKeys)},
		{"stream-token-max-ttl", "NQ_STREAM_TOKEN_MAX_TTL", "longest life of a stream token", durText(handlers.DefaultMaxStreamTokenTTL), dur(&c.StreamTokenMaxTTL)},
		{"allow-insecure-bind", "NQ_ALLOW_INSECURE_BIND", "serve a non-loopback address with no tokens configured", "false", boolean(&c.AllowInsecureBind)},
		{"allow-open-webhooks", "NQ_ALLOW_OPEN_WEBHOOKS", "take webhook calls with no credential: fire webhook triggers that have no secret and resolve await webhooks without their trigger id", "false", boolean(&c.AllowOpenWebhooks)},
		{"rate-per-token", "NQ_RATE_PER_TOKEN", "appends, starts and trigger POSTs per API token, as requests/window (0: no limit)", rateText(handlers.DefaultRatePerToken), rate(&c.RatePerToken)},
		{"rate-per-addr", "NQ_RATE_PER_ADDR", "appends, starts and trigger POSTs without a token, per client address, as requests/window (0: no limit)", rateText(handlers.DefaultRatePerAddr), rate(&c.RatePerAddr)},
		{"max-event-bytes", "NQ_MAX_EVENT_BYTES", "largest event in an append", itoa(handlers.DefaultMaxEventBytes), i64(&c.MaxEventBytes)},
		{"large-data-bytes", "NQ_LARGE_DATA_BYTES", "a run's input, a step result or an emit payload larger than this is kept in the archive's bucket and its event carries a reference (needs NQ_ARCHIVE_URL or NQ_ARCHIVE_DIR; 0: NQ_MAX_EVENT_BYTES)", "0", i64(&c.LargeDataBytes)},
		{"max-streams-per-client", "NQ_MAX_STREAMS_PER_CLIENT", "open SSE streams and WebSockets per token and per address (0: no cap)", "100", integer(&c.MaxStreamsPerClient)},
		{"metrics-public", "NQ_METRICS_PUBLIC", "serve /metrics without a token", "false", boolean(&c.MetricsPublic)},
		{"trusted-proxies", "NQ_TRUSTED_PROXIES", "comma-separated CIDRs (or addresses) of proxies whose X-Forwarded-For or Forwarded header names the client (empty: none)", "", prefixes(&c.TrustedProxies)},
		{"", "NQ_PPROF_ADDR", "loopback host:port serving Go's runtime profiles (net/http/pprof) (empty: none)", "", str(&c.PprofAddr)},
	}
}

// Load parses args (without the program name) over the environment given by
// getenv. Flags win over the environment, which wins over defaults.
func Load(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	var c Config
	settings := settings(&c)

	fs := flag.NewFlagSet("nqd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	for _, s := range settings {
		if s.flag == "" {
			continue
		}
		fs.Func(s.flag, fmt.Sprintf("%s (env %s, default %q)", s.usage, s.env, s.def), named(s, "-"+s.flag))
	}
	fs.BoolVar(&c.Version, "version", false, "print the version and exit")
	fs.BoolVar(&c.Healthcheck, "healthcheck", false, "exit 0 if the nqd listening on the address answers /healthz, else 1 (for a container HEALTHCHECK)")
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintln(out, "Usage of nqd (each flag also reads the environment variable it names):")
		fs.PrintDefaults()
		fmt.Fprintln(out, "\nSettings read from the environment only (a command line would show secrets to every user of the machine):")
		for _, s := range settings {
			if s.flag == "" {
				fmt.Fprintf(out, "  %s\n    \t%s\n", s.env, s.usage)
			}
		}
	}
	var envErr error
	for _, s := range settings {
		v, from := s.def, "default of -"+s.flag
		if s.flag == "" {
			from = "default of " + s.env
		}
		if e := getenv(s.env); e != "" {
			v, from = e, s.env
		}
		if err := named(s, from)(v); err != nil && envErr == nil {
			envErr = err
		}
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if c.Version {
		return c, nil // the version is printed whatever else is set
	}
	if envErr != nil {
		return Config{}, envErr
	}
	if c.TokensFile != "" {
		b, err := os.ReadFile(c.TokensFile)
		if err != nil {
			return Config{}, fmt.Errorf("NQ_TOKENS_FILE: %w", err)
		}
		more, err := auth.ParseTokens(string(b))
		if err != nil {
			return Config{}, fmt.Errorf("NQ_TOKENS_FILE %s: %w", c.TokensFile, err)
		}
		c.Tokens = append(c.Tokens, more...)
	}
	return c, c.validate()
}

// Unknown returns a warning for each variable of environ (KEY=value
// entries) that starts with NQ_ but is no setting, such as a mistyped
// NQ_ADR, which would otherwise be ignored without a word.
func Unknown(environ []string) []string {
	var known []string
	for _, s := range settings(&Config{}) {
		known = append(known, s.env)
	}
	var warnings []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "NQ_") || slices.Contains(known, name) {
			continue
		}
		w := name + " is not a setting of nqd and is ignored"
		if near := nearest(name, known); near != "" {
			w += "; did you mean " + near + "?"
		}
		warnings = append(warnings, w)
	}
	return warnings
}

// nearest is the name of names closest to s by edit distance, when at most
// two edits away.
func nearest(s string, names []string) string {
	best, bestDist := "", 3
	for _, n := range names {
		if d := editDistance(s, n); d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, by bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// itoa and durText write a package's default as the setting's default, so
// that each default has one source: the package it governs.
func itoa(n int) string { return strconv.Itoa(n) }

// rateText writes r the way the rate settings take it.
func rateText(r handlers.Rate) string { return itoa(r.Requests) + "/" + durText(r.Window) }

// durText writes d the way a user would, 24h rather than 24h0m0s.
func durText(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func named(s setting, from string) func(string) error {
	return func(v string) error {
		if err := s.parse(v); err != nil {
			return fmt.Errorf("%s: %w", from, err)
		}
		return nil
	}
}

func (c Config) validate() error {
	var errs []string
	bad := func(name, format string, a ...any) {
		errs = append(errs, name+": "+fmt.Sprintf(format, a...))
	}
	if host, port, err := net.SplitHostPort(c.Addr); err != nil {
		bad("NQ_ADDR", "want host:port, got %q", c.Addr)
	} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		bad("NQ_ADDR", "want a port number from 0 to 65535, got %q", port)
	} else if len(c.Tokens) == 0 && !c.AllowInsecureBind && !IsLoopback(host) {
		bad("NQ_ADDR", "%s is reachable from other machines and no tokens are configured: set NQ_TOKENS or NQ_TOKENS_FILE, listen on 127.0.0.1, or set NQ_ALLOW_INSECURE_BIND=1 to serve every route to anyone", c.Addr)
	}
	seen := map[string]bool{}
	for _, t := range c.Tokens {
		if seen[t.Name] {
			bad("NQ_TOKENS_FILE", "token name %q is also in NQ_TOKENS", t.Name)
		}
		seen[t.Name] = true
	}
	if c.StreamTokenMaxTTL < 10*time.Second || c.StreamTokenMaxTTL > 24*time.Hour {
		bad("NQ_STREAM_TOKEN_MAX_TTL", "want 10s to 24h, got %s", c.StreamTokenMaxTTL)
	}
	if c.MaxEventBytes < 256 || c.MaxEventBytes > c.MaxBodyBytes {
		bad("NQ_MAX_EVENT_BYTES", "want 256 to NQ_MAX_BODY_BYTES (%d), got %d", c.MaxBodyBytes, c.MaxEventBytes)
	}
	if c.LargeDataBytes < 0 || c.LargeDataBytes > c.MaxEventBytes {
		bad("NQ_LARGE_DATA_BYTES", "want 0 to NQ_MAX_EVENT_BYTES (%d), got %d", c.MaxEventBytes, c.LargeDataBytes)
	}
	if c.MaxStreamsPerClient < 0 {
		bad("NQ_MAX_STREAMS_PER_CLIENT", "must not be negative")
	}
	switch {
	case c.RedisURL != "" && c.PostgresURL != "":
		bad("NQ_REDIS_URL and NQ_POSTGRES_URL", "both set: nqd keeps its data in one store, so set only one")
	case c.RedisURL != "":
		u, err := url.Parse(c.RedisURL)
		if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix") {
			bad("NQ_REDIS_URL", "want a redis://, rediss:// or unix:// URL")
		}
	case c.PostgresURL != "":
		u, err := url.Parse(c.PostgresURL)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			bad("NQ_POSTGRES_URL", "want a postgres:// or postgresql:// URL")
		}
	case c.DataDir == "":
		bad("NQ_DATA_DIR", "must not be empty when neither NQ_REDIS_URL nor NQ_POSTGRES_URL is set")
	}
	if c.FlowsDir != "" {
		if st, err := os.Stat(c.FlowsDir); err != nil {
			bad("NQ_FLOWS_DIR", "%v", err)
		} else if !st.IsDir() {
			bad("NQ_FLOWS_DIR", "%s is not a directory", c.FlowsDir)
		}
	}
	if !prefixRe.MatchString(c.Prefix) {
		bad("NQ_PREFIX", "want lower-case letters, digits, - or _, starting with a letter, got %q", c.Prefix)
	}
	switch c.LogLevel {
	case "trace", "debug", "info", "warn", "error":
	default:
		bad("NQ_LOG_LEVEL", "want trace, debug, info, warn or error, got %q", c.LogLevel)
	}
	switch c.LogFormat {
	case "auto", "json", "console":
	default:
		bad("NQ_LOG_FORMAT", "want auto, json or console, got %q", c.LogFormat)
	}
	if c.MaxBodyBytes < 1024 || c.MaxBodyBytes > 64<<20 {
		bad("NQ_MAX_BODY_BYTES", "want 1024 to 67108864, got %d", c.MaxBodyBytes)
	}
	if c.MaxBatch < 1 || c.MaxBatch > 10000 {
		bad("NQ_MAX_BATCH", "want 1 to 10000, got %d", c.MaxBatch)
	}
	if c.RequestTimeout < 100*time.Millisecond {
		bad("NQ_REQUEST_TIMEOUT", "want at least 100ms, got %s", c.RequestTimeout)
	}
	if c.IdleTimeout < 100*time.Millisecond {
		bad("NQ_IDLE_TIMEOUT", "want at least 100ms, got %s", c.IdleTimeout)
	}
	if c.ShutdownTimeout < 0 {
		bad("NQ_SHUTDOWN_TIMEOUT", "must not be negative")
	}
	if c.IdempotencyWindow < time.Second {
		bad("NQ_IDEMPOTENCY_WINDOW", "want at least 1s, got %s", c.IdempotencyWindow)
	}
	if c.StreamMaxLen < 0 {
		bad("NQ_STREAM_MAXLEN", "must not be negative")
	}
	if c.RedisWaitReplicas < 0 {
		bad("NQ_REDIS_WAIT_REPLICAS", "must not be negative")
	}
	if c.RedisWaitTimeout <= 0 {
		bad("NQ_REDIS_WAIT_TIMEOUT", "must be positive")
	}
	if c.RedisShards < 1 || c.RedisShards > redisstore.MaxShards {
		bad("NQ_REDIS_SHARDS", "want 1 to %d, got %d", redisstore.MaxShards, c.RedisShards)
	}
	for name, d := range map[string]time.Duration{"NQ_RETAIN_COMPLETED": c.RetainCompleted, "NQ_RETAIN_FAILED": c.RetainFailed, "NQ_RETAIN_CANCELLED": c.RetainCancelled} {
		if d < 0 {
			bad(name, "must not be negative")
		}
	}
	if c.ArchiveURL != "" {
		u, err := url.Parse(c.ArchiveURL)
		switch {
		case c.ArchiveDir != "":
			bad("NQ_ARCHIVE_DIR and NQ_ARCHIVE_URL", "both set: nqd archives to one place, so set only one")
		case err != nil || (u.Scheme != "s3" && u.Scheme != "file"):
			bad("NQ_ARCHIVE_URL", "want an s3:// or file:// URL")
		case u.Scheme == "s3" && u.Host == "":
			bad("NQ_ARCHIVE_URL", "want a bucket name: s3://<bucket>?region=...")
		}
	}
	if c.RetentionInterval < time.Second {
		bad("NQ_RETENTION_INTERVAL", "want at least 1s, got %s", c.RetentionInterval)
	}
	if c.SweepInterval < time.Second {
		bad("NQ_SWEEP_INTERVAL", "want at least 1s, got %s", c.SweepInterval)
	}
	if c.StallAfter < time.Second {
		bad("NQ_STALL_AFTER", "want at least 1s, got %s", c.StallAfter)
	}
	if c.JobLease < time.Second {
		bad("NQ_JOB_LEASE", "want at least 1s, got %s", c.JobLease)
	}
	if c.WorkerHeartbeat < time.Second {
		bad("NQ_WORKER_HEARTBEAT", "want at least 1s, got %s", c.WorkerHeartbeat)
	}
	// An idle HTTP worker calls only when its long-polling claim ends, and
	// its record is written at the first call a heartbeat after the last:
	// a shorter timeout would mark live workers lost.
	if least := c.WorkerHeartbeat + handlers.MaxClaimWait; c.WorkerLostAfter <= least {
		bad("NQ_WORKER_LOST_AFTER", "want more than NQ_WORKER_HEARTBEAT (%s) plus a claim's longest wait (%s), got %s",
			c.WorkerHeartbeat, handlers.MaxClaimWait, c.WorkerLostAfter)
	}
	// A connected worker's newest event is younger than this; trimming
	// sooner would drop it from the registry.
	if least := registry.StaleAfter(c.WorkerHeartbeat, c.WorkerLostAfter); c.WorkerRetain < least {
		bad("NQ_WORKER_RETAIN", "want at least NQ_WORKER_LOST_AFTER plus NQ_WORKER_HEARTBEAT (%s), got %s", least, c.WorkerRetain)
	}
	if c.WebBase != "" && (!strings.HasPrefix(c.WebBase, "/") || strings.HasPrefix(c.WebBase, "/api") || strings.ContainsAny(c.WebBase, "*{}? ")) {
		bad("NQ_WEB_BASE", "want a path such as /ui, not under /api, got %q", c.WebBase)
	}
	if c.UIUpstream != "" {
		if u, err := url.Parse(c.UIUpstream); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			bad("NQ_UI_UPSTREAM", "want the app's origin, such as http://127.0.0.1:3000, got %q", c.UIUpstream)
		}
	}
	if c.CacheEntries < 1 {
		bad("NQ_CACHE_ENTRIES", "want at least 1, got %d", c.CacheEntries)
	}
	if c.CacheBytes < 1<<20 {
		bad("NQ_CACHE_BYTES", "want at least 1048576, got %d", c.CacheBytes)
	}
	if c.GCMinHeap < 0 {
		bad("NQ_GC_MIN_HEAP", "must not be negative")
	}
	if c.CheckpointEvery < 0 {
		bad("NQ_CHECKPOINT_EVERY", "must not be negative")
	}
	for _, o := range c.CORSOrigins {
		// The same rule that trusts the origin for state-changing requests.
		if o != "*" && http.NewCrossOriginProtection().AddTrustedOrigin(o) != nil {
			bad("NQ_CORS_ORIGINS", "want origins such as https://ui.example.com, got %q", o)
		}
	}
	for _, h := range c.AllowedHosts {
		if h != "*" && (strings.ContainsAny(h, "/:@ ") || strings.Trim(h, ".") == "") {
			bad("NQ_ALLOWED_HOSTS", "want host names such as nqd.example.com, without scheme or port, got %q", h)
		}
	}
	if c.SSEHeartbeat < time.Second || c.SSEHeartbeat > 60*time.Second {
		bad("NQ_SSE_HEARTBEAT", "want 1s to 60s, got %s", c.SSEHeartbeat)
	}
	if c.SSEMaxBackfill < 1 {
		bad("NQ_SSE_MAX_BACKFILL", "want at least 1, got %d", c.SSEMaxBackfill)
	}
	if c.SSEMaxLifetime != 0 && c.SSEMaxLifetime < 10*time.Second {
		bad("NQ_SSE_MAX_LIFETIME", "want 0 or at least 10s, got %s", c.SSEMaxLifetime)
	}
	if len(errs) > 0 {
		// One line, so a service manager's status shows the whole reason.
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// CheckHost reports whether requests must name an allowed Host: always when
// nqd listens on loopback (a web page could otherwise rebind its own DNS name
// to it), elsewhere only when NQ_ALLOWED_HOSTS names hosts; "*" turns it off.
func (c Config) CheckHost() bool {
	if slices.Contains(c.AllowedHosts, "*") {
		return false
	}
	host, _, _ := net.SplitHostPort(c.Addr)
	return IsLoopback(host) || len(c.AllowedHosts) > 0
}

// ServedHosts are the Host names requests may carry besides IP addresses
// and localhost: NQ_ALLOWED_HOSTS and the name NQ_ADDR listens on.
func (c Config) ServedHosts() []string {
	hosts := slices.Clone(c.AllowedHosts)
	if host, _, err := net.SplitHostPort(c.Addr); err == nil && host != "" && net.ParseIP(host) == nil {
		hosts = append(hosts, host)
	}
	return hosts
}

// IsLoopback reports whether a listen host only accepts connections from
// this machine. An empty host listens on every interface.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func tokens(p *[]auth.Token) func(string) error {
	return func(v string) error {
		toks, err := auth.ParseTokens(v)
		*p = toks
		return err
	}
}

func keys(p *[]auth.Key) func(string) error {
	return func(v string) error {
		ks, err := auth.ParseKeys(v)
		*p = ks
		return err
	}
}

func boolean(p *bool) func(string) error {
	return func(v string) error {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("want 1, 0, true or false, got %q", v)
		}
		*p = b
		return nil
	}
}

// rate reads requests/window such as 600/1m; a bare 0 is no limit.
func rate(p *Rate) func(string) error {
	return func(v string) error {
		v = strings.TrimSpace(v)
		if v == "0" {
			*p = Rate{}
			return nil
		}
		n, w, ok := strings.Cut(v, "/")
		requests, err1 := strconv.Atoi(n)
		window, err2 := time.ParseDuration(w)
		if !ok || err1 != nil || err2 != nil || requests < 1 || window < time.Second {
			return fmt.Errorf("want requests/window such as 600/1m (window at least 1s), or 0, got %q", v)
		}
		*p = Rate{Requests: requests, Window: window}
		return nil
	}
}

func str(p *string) func(string) error {
	return func(v string) error { *p = strings.TrimSpace(v); return nil }
}

func typeCaps(p *map[string]int64) func(string) error {
	return func(v string) error {
		caps := map[string]int64{}
		for _, part := range strings.Split(v, ",") {
			if part = strings.TrimSpace(part); part == "" {
				continue
			}
			typ, n, ok := strings.Cut(part, "=")
			limit, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
			if !ok || err != nil || limit < 0 || !event.ValidType(strings.TrimSpace(typ)) {
				return fmt.Errorf("want type=count pairs such as flow=100000,trigger=1000, got %q", part)
			}
			caps[strings.TrimSpace(typ)] = limit
		}
		*p = caps
		return nil
	}
}

// prefixes parses comma-separated CIDRs; a bare address is a CIDR of one.
func prefixes(p *[]netip.Prefix) func(string) error {
	return func(v string) error {
		*p = nil
		for _, part := range strings.Split(v, ",") {
			if part = strings.TrimSpace(part); part == "" {
				continue
			}
			pfx, err := netip.ParsePrefix(part)
			if err != nil {
				ip, ierr := netip.ParseAddr(part)
				if ierr != nil {
					return fmt.Errorf("want CIDRs such as 10.0.0.0/8 or addresses, got %q", part)
				}
				pfx = netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen())
			}
			*p = append(*p, pfx.Masked())
		}
		return nil
	}
}

func list(p *[]string) func(string) error {
	return func(v string) error {
		*p = nil
		for _, part := range strings.Split(v, ",") {
			if part = strings.TrimSpace(part); part != "" {
				*p = append(*p, part)
			}
		}
		return nil
	}
}

func integer(p *int) func(string) error {
	return func(v string) error {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("want a whole number, got %q", v)
		}
		*p = n
		return nil
	}
}

func i64(p *int64) func(string) error {
	return func(v string) error {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return fmt.Errorf("want a whole number, got %q", v)
		}
		*p = n
		return nil
	}
}

func dur(p *time.Duration) func(string) error {
	return func(v string) error {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("want a duration such as 10s or 5m, got %q", v)
		}
		*p = d
		return nil
	}
}

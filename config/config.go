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
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// prefixRe keeps the key prefix free of the characters that structure keys.
var prefixRe = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// Config is every setting of an nqd process.
type Config struct {
	Addr      string // listen address
	RedisURL  string // empty: the embedded store in DataDir
	DataDir   string
	Prefix    string // key prefix
	LogLevel  string // trace, debug, info, warn, error
	LogFormat string // auto, json, console

	MaxBodyBytes      int64
	MaxBatch          int
	RequestTimeout    time.Duration
	ShutdownTimeout   time.Duration
	IdempotencyWindow time.Duration
	StreamMaxLen      int64 // 0: streams are not trimmed

	CORSOrigins    []string      // browser origins allowed to call the API
	SSEHeartbeat   time.Duration // longest silence on an SSE connection
	SSEMaxBackfill int           // most events one SSE backfill sends
	SSEMaxLifetime time.Duration // 0: SSE connections are not rotated

	FlowsDir string // flow definitions (*.json, *.yaml) loaded at start

	CacheEntries    int   // contexts whose reduced state is cached
	CacheBytes      int64 // approximate bytes of cached states
	CheckpointEvery int   // events between persisted state checkpoints; 0 disables
}

// Backend names the store the settings select.
func (c Config) Backend() string {
	if c.RedisURL != "" {
		return "redis"
	}
	return "embedded"
}

// setting ties a flag to its environment variable, so errors can name both.
type setting struct {
	flag, env, usage string
	def              string
	parse            func(string) error
}

// Load parses args (without the program name) over the environment given by
// getenv. Flags win over the environment, which wins over defaults.
func Load(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	var c Config
	settings := []setting{
		{"addr", "NQ_ADDR", "listen address", "127.0.0.1:8080", str(&c.Addr)},
		{"redis-url", "NQ_REDIS_URL", "Redis URL (redis://, rediss://; add ?master_name= for Sentinel); empty uses the embedded store", "", str(&c.RedisURL)},
		{"data-dir", "NQ_DATA_DIR", "directory of the embedded store", "./data", str(&c.DataDir)},
		{"prefix", "NQ_PREFIX", "storage key prefix", "nq", str(&c.Prefix)},
		{"log-level", "NQ_LOG_LEVEL", "trace, debug, info, warn or error", "info", str(&c.LogLevel)},
		{"log-format", "NQ_LOG_FORMAT", "auto (console on a terminal, else JSON), json or console", "auto", str(&c.LogFormat)},
		{"max-body-bytes", "NQ_MAX_BODY_BYTES", "largest accepted request body", "1048576", i64(&c.MaxBodyBytes)},
		{"max-batch", "NQ_MAX_BATCH", "most events in one append", "1000", integer(&c.MaxBatch)},
		{"request-timeout", "NQ_REQUEST_TIMEOUT", "time limit of a non-streaming request", "10s", dur(&c.RequestTimeout)},
		{"shutdown-timeout", "NQ_SHUTDOWN_TIMEOUT", "time given to open requests on shutdown", "10s", dur(&c.ShutdownTimeout)},
		{"idempotency-window", "NQ_IDEMPOTENCY_WINDOW", "how long an Idempotency-Key is remembered", "24h", dur(&c.IdempotencyWindow)},
		{"stream-maxlen", "NQ_STREAM_MAXLEN", "approximate cap on events per stream (0: no cap)", "0", i64(&c.StreamMaxLen)},
		{"cors-origins", "NQ_CORS_ORIGINS", "comma-separated browser origins allowed to call the API (empty: same origin only)", "", list(&c.CORSOrigins)},
		{"sse-heartbeat", "NQ_SSE_HEARTBEAT", "longest silence on an SSE connection before a comment line", "15s", dur(&c.SSEHeartbeat)},
		{"sse-max-backfill", "NQ_SSE_MAX_BACKFILL", "most events an SSE backfill sends (the newest, after `event: truncated`)", "10000", integer(&c.SSEMaxBackfill)},
		{"flows-dir", "NQ_FLOWS_DIR", "directory of flow definitions (*.json, *.yaml, *.yml) stored at start (empty: none)", "", str(&c.FlowsDir)},
		{"cache-entries", "NQ_CACHE_ENTRIES", "contexts whose reduced state is cached", "1000", integer(&c.CacheEntries)},
		{"cache-bytes", "NQ_CACHE_BYTES", "approximate bytes of cached reduced states", "104857600", i64(&c.CacheBytes)},
		{"checkpoint-every", "NQ_CHECKPOINT_EVERY", "events between persisted state checkpoints (0: none)", "1000", integer(&c.CheckpointEvery)},
		{"sse-max-lifetime", "NQ_SSE_MAX_LIFETIME", "rotate SSE connections after this long, with jitter (0: never)", "0", dur(&c.SSEMaxLifetime)},
	}

	fs := flag.NewFlagSet("nqd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	for _, s := range settings {
		fs.Func(s.flag, fmt.Sprintf("%s (env %s, default %q)", s.usage, s.env, s.def), named(s, "-"+s.flag))
	}
	for _, s := range settings {
		v, from := s.def, "default of -"+s.flag
		if e := getenv(s.env); e != "" {
			v, from = e, s.env
		}
		if err := named(s, from)(v); err != nil {
			return Config{}, err
		}
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	return c, c.validate()
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
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		bad("NQ_ADDR", "want host:port, got %q", c.Addr)
	}
	if c.RedisURL != "" {
		u, err := url.Parse(c.RedisURL)
		if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix") {
			bad("NQ_REDIS_URL", "want a redis://, rediss:// or unix:// URL")
		}
	} else if c.DataDir == "" {
		bad("NQ_DATA_DIR", "must not be empty when NQ_REDIS_URL is unset")
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
	if c.ShutdownTimeout < 0 {
		bad("NQ_SHUTDOWN_TIMEOUT", "must not be negative")
	}
	if c.IdempotencyWindow < time.Second {
		bad("NQ_IDEMPOTENCY_WINDOW", "want at least 1s, got %s", c.IdempotencyWindow)
	}
	if c.StreamMaxLen < 0 {
		bad("NQ_STREAM_MAXLEN", "must not be negative")
	}
	if c.CacheEntries < 1 {
		bad("NQ_CACHE_ENTRIES", "want at least 1, got %d", c.CacheEntries)
	}
	if c.CacheBytes < 1<<20 {
		bad("NQ_CACHE_BYTES", "want at least 1048576, got %d", c.CacheBytes)
	}
	if c.CheckpointEvery < 0 {
		bad("NQ_CHECKPOINT_EVERY", "must not be negative")
	}
	for _, o := range c.CORSOrigins {
		if u, err := url.Parse(o); o != "*" && (err != nil || u.Scheme == "" || u.Host == "" || u.Path != "") {
			bad("NQ_CORS_ORIGINS", "want origins such as https://ui.example.com, got %q", o)
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

func str(p *string) func(string) error {
	return func(v string) error { *p = strings.TrimSpace(v); return nil }
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

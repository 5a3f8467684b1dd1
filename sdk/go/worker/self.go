package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// selfHeaders are the Nqd-Worker-* headers that name this worker process
// in nqd's worker registry: an id of its own, the program's name, the SDK
// and its version, the host and the concurrency.
func selfHeaders(cfg Config) http.Header {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	h := http.Header{}
	h.Set("Nqd-Worker-Id", idPart(host, 60)+"-"+strconv.Itoa(os.Getpid())+"-"+hex.EncodeToString(b[:]))
	h.Set("Nqd-Worker-Name", idPart(filepath.Base(os.Args[0]), 128))
	h.Set("Nqd-Worker-Sdk", "go")
	h.Set("Nqd-Worker-Version", sdkVersion())
	h.Set("Nqd-Worker-Host", idPart(host, 128))
	h.Set("Nqd-Worker-Concurrency", strconv.Itoa(cfg.Concurrency))
	return h
}

// idPart is s with what a worker id may not hold replaced by '-', cut to n
// bytes; "worker" when nothing is left.
func idPart(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' {
			return r
		}
		return '-'
	}, s)
	s = strings.TrimLeft(s, "-._")
	if len(s) > n {
		s = s[:n]
	}
	if s == "" {
		return "worker"
	}
	return s
}

// sdkVersion is the worker module's version as the program was built with
// it, "devel" when the build does not say.
func sdkVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			// A replace directive leaves the zero pseudo-version.
			if m.Path == "github.com/nqd-dev/nqd/sdk/go/worker" && m.Version != "" && m.Version != "(devel)" &&
				!strings.HasPrefix(m.Version, "v0.0.0-00010101000000-") {
				return m.Version
			}
		}
	}
	return "devel"
}

// goodbyeTimeout bounds the goodbye a stopping worker sends.
const goodbyeTimeout = 2 * time.Second

// goodbye tells nqd's worker registry that this worker stops. It is a
// courtesy: a worker that cannot say it is shown lost once silent.
func (c *client) goodbye(ctx context.Context) {
	_ = c.postWithin(ctx, goodbyeTimeout, "/api/_workers/goodbye", struct{}{}, "", nil)
}

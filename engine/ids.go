package engine

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"sync"

	"github.com/google/uuid"
)

// newRunID returns a version 7 UUID: its leading bits are the time, and ids
// made by one process only grow, so the keys of runs started close together
// are neighbours in every store's indexes and a commit rewrites fewer pages.
// NewV7 fails only if the system's random source does, which Go treats as
// fatal anyway.
func (e *Engine) newRunID() string {
	return uuid.Must(uuid.NewV7FromReader(&e.random)).String()
}

// idempotentRunID derives the run id from the key, so a repeated start
// finds the run the first one created.
func idempotentRunID(flow, key string) string {
	sum := sha256.Sum256([]byte(flow + "\x00" + key))
	return "idem-" + hex.EncodeToString(sum[:16])
}

func (e *Engine) newLease() string {
	var b [12]byte
	_, _ = e.random.Read(b[:])
	return hex.EncodeToString(b[:])
}

// randomBuffer is how many bytes of crypto/rand randomBytes reads at once,
// so that a run id or a lease costs a copy rather than a call into the
// system's random source (which also grew the caller's stack each time).
const randomBuffer = 4 << 10

// randomBytes is crypto/rand read ahead, safe for concurrent use.
type randomBytes struct {
	mu sync.Mutex
	r  *bufio.Reader
}

func (b *randomBytes) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return io.ReadFull(b.r, p)
}

package handlers

import (
	"sync"

	"github.com/nqd-dev/nqd"
)

// errKeyInFlight answers a request whose key a request still being served
// carries.
var errKeyInFlight = &nqd.Error{Code: nqd.CodeKeyInFlight,
	Message: "A request with this Idempotency-Key is still being served; retry once it has been answered."}

// inFlight is the idempotency keys of the requests this instance is serving.
// A retry that arrives before the first answer is refused rather than raced:
// the store would answer it correctly either way, but the client would not
// learn that it sent the request twice. It holds one entry per request being
// served, so it is bounded by the server's concurrency.
type inFlight struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

// begin claims key; end releases it. ok is false while another request holds
// it. An empty key is never held.
func (f *inFlight) begin(key string) (end func(), ok bool) {
	if key == "" {
		return func() {}, true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, held := f.keys[key]; held {
		return nil, false
	}
	if f.keys == nil {
		f.keys = map[string]struct{}{}
	}
	f.keys[key] = struct{}{}
	return func() {
		f.mu.Lock()
		delete(f.keys, key)
		f.mu.Unlock()
	}, true
}

// keyOf is the inFlight key of an idempotent request: its key within what
// it acts on. No key, no entry.
func keyOf(route, target, key string) string {
	if key == "" {
		return ""
	}
	return route + "\x00" + target + "\x00" + key
}

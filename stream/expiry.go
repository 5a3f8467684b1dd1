package stream

import (
	"context"
	"time"
)

type expiryKey struct{}

// WithExpiry marks the streams served under ctx to end at t: the expiry of
// the credential that opened them. The client must then come back with a
// fresh one.
func WithExpiry(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, expiryKey{}, t)
}

// expiry is the moment set by WithExpiry.
func expiry(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(expiryKey{}).(time.Time)
	return t, ok && !t.IsZero()
}

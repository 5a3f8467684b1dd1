package wiring

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/nqd-dev/nqd/auth"
	"github.com/nqd-dev/nqd/config"
	"github.com/nqd-dev/nqd/handlers"
)

// access builds the API's access control and abuse limits from the config,
// and says at start how exposed the server is. Token secrets never reach the
// log: the config holds only their hashes.
func (a *App) access(ctx context.Context) (handlers.Access, error) {
	cfg := a.cfg
	host, _, _ := net.SplitHostPort(cfg.Addr)
	switch {
	case len(cfg.Tokens) == 0 && config.IsLoopback(host):
		a.log.Warn().Str("addr", cfg.Addr).Msg("no API tokens configured: every route is open to anyone on this machine; set NQ_TOKENS or NQ_TOKENS_FILE before exposing nqd")
	case len(cfg.Tokens) == 0:
		a.log.Warn().Str("addr", cfg.Addr).Msg("no API tokens configured and NQ_ALLOW_INSECURE_BIND is set: every route is open to anyone who can reach this address")
	default:
		a.log.Info().Int("tokens", len(cfg.Tokens)).Msg("API tokens required")
	}

	// Without configured keys, stream tokens are signed with a key kept in
	// the store, so that a token one instance issued opens a stream on any.
	// Without API tokens no stream needs a token.
	keys := cfg.StreamTokenKeys
	if len(keys) == 0 && len(cfg.Tokens) > 0 {
		k, err := keptKey(ctx, a.secrets, streamTokenKeyName, keptKeyID(cfg))
		if err != nil {
			return handlers.Access{}, fmt.Errorf("stream token key: %w", err)
		}
		keys = []auth.Key{k}
	}
	var signer *auth.Signer
	if len(keys) > 0 {
		var err error
		if signer, err = auth.NewSigner(keys...); err != nil {
			return handlers.Access{}, err
		}
	}
	return handlers.Access{
		Auth:              auth.New(auth.NewTokens(cfg.Tokens), signer, time.Now),
		PerToken:          handlers.Rate(cfg.RatePerToken),
		PerAddr:           handlers.Rate(cfg.RatePerAddr),
		MaxStreams:        cfg.MaxStreamsPerClient,
		MaxStreamTokenTTL: cfg.StreamTokenMaxTTL,
		PublicMetrics:     cfg.MetricsPublic,
		TrustedProxies:    cfg.TrustedProxies,
	}, nil
}

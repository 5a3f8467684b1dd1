package wiring

import (
	"net"
	"time"

	"github.com/nqd-dev/nqd/auth"
	"github.com/nqd-dev/nqd/config"
	"github.com/nqd-dev/nqd/handlers"
)

// access builds the API's access control and abuse limits from the config,
// and says at start how exposed the server is. Token secrets never reach the
// log: the config holds only their hashes.
func (a *App) access() (handlers.Access, error) {
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

	var signer *auth.Signer
	if len(cfg.StreamTokenKeys) > 0 {
		var err error
		if signer, err = auth.NewSigner(cfg.StreamTokenKeys...); err != nil {
			return handlers.Access{}, err
		}
	} else if len(cfg.Tokens) > 0 && cfg.Backend() != "embedded" {
		a.log.Warn().Msg("NQ_STREAM_TOKEN_KEYS is unset: stream tokens are signed with a key of this process and open streams on this instance only")
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

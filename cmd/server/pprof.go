package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/rs/zerolog"
)

// pprofEnv names the opt-in profiling listener: Go's runtime profiles
// (net/http/pprof) on a loopback address of its own, never on nqd's API
// address, so profiles cannot be read from another machine. Unset, nothing
// listens.
const pprofEnv = "NQ_PPROF_ADDR"

// listenPprof binds addr when it is a loopback address; anything else is
// refused before nqd starts.
func listenPprof(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%s: want host:port on loopback, got %q", pprofEnv, addr)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("%s: %q is not a loopback address: profiles would be readable from other machines", pprofEnv, addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pprofEnv, err)
	}
	return ln, nil
}

// servePprof serves the profiles on ln until ctx ends.
func servePprof(ctx context.Context, ln net.Listener, log zerolog.Logger) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	log.Warn().Str("addr", ln.Addr().String()).Msg("serving runtime profiles (" + pprofEnv + ")")
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error().Err(err).Msg("profiles listener stopped")
	}
}

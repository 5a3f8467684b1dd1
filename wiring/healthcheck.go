package wiring

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/nqd-dev/nqd/config"
)

// Healthcheck asks the nqd listening on cfg.Addr for /healthz and returns
// nil when it answers 200. It is the container's health probe: the image
// holds no shell or curl, only nqd. An address that listens on every
// interface is probed on loopback.
func Healthcheck(ctx context.Context, cfg config.Config) error {
	host, port, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return fmt.Errorf("NQ_ADDR: %w", err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	url := "http://" + net.JoinHostPort(host, port) + "/healthz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return nil
}

package pgstore

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// shouldPing tells the pool to ping a connection before handing it out when
// it sat idle for over a second (pgx's rule) or when its server has already
// closed it. An append is a single statement with no BEGIN before it: sent
// on a connection whose server is gone, it could only fail with its outcome
// unknown, where a connection found dead first makes the store report
// ErrUnavailable, which promises nothing was written.
func shouldPing(_ context.Context, p pgxpool.ShouldPingParams) bool {
	return p.IdleDuration > time.Second || peerClosed(rawConn(p.Conn.PgConn().Conn()))
}

// rawConn is the socket under a TLS connection.
func rawConn(c net.Conn) net.Conn {
	if t, ok := c.(*tls.Conn); ok {
		return t.NetConn()
	}
	return c
}

package wiring

import (
	"context"
	"strings"
	"testing"

	"github.com/nqd-dev/nqd/internal/redistest"
)

func TestRedisClientFindsTheMode(t *testing.T) {
	ctx := context.Background()
	server, cluster := "redis://"+redistest.Addr(t), redistest.ClusterURL(t)
	for _, tc := range []struct{ url, mode, err string }{
		{url: server + "/0", mode: "standalone"},
		{url: cluster, mode: "cluster"},
		// Any one node is enough: the client learns the others from it.
		{url: "redis://" + strings.SplitN(strings.TrimPrefix(cluster, "redis://"), "?", 2)[0], mode: "cluster"},
		{url: strings.Replace(cluster, "?", "/3?", 1), err: "database 0 only"},
		{url: server + "?addr=" + redistest.Addr(t), err: "not in cluster mode"},
	} {
		c, mode, err := redisClient(ctx, tc.url)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.url, err, tc.err)
			}
			continue
		}
		if err != nil || mode != tc.mode {
			t.Errorf("%s: mode %q, %v; want %q", tc.url, mode, err, tc.mode)
			continue
		}
		if err := c.Ping(ctx).Err(); err != nil {
			t.Errorf("%s: ping: %v", tc.url, err)
		}
		_ = c.Close()
	}
}

package wiring

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// probeTimeout bounds the INFO that tells a cluster node from a server.
const probeTimeout = 5 * time.Second

// redisClient builds the client NQ_REDIS_URL names and says which kind it
// is: with `master_name`, Sentinel; when the node it names (or, if that one
// does not answer, a seed given as an `addr` parameter) runs in cluster mode,
// a Redis Cluster; otherwise one server. nqd needs no setting of its own to
// tell them apart, so the URL of a managed cluster works as it is.
//
// The client never retries a command by itself: an append script whose reply
// was lost may have run, and running it again would store the batch twice.
// The store sends such an append again only under its idempotency key (see
// redisstore.Store.Append), which makes the repeat exactly-once. A cluster
// client does follow MOVED and ASK, which Redis answers without running the
// command.
//
// Pipelines (the store's appends, sent together) share the main pool: a pool
// of their own would recover from an outage apart from it, so reads could
// still fail on a dead pool after appends work again.
func redisClient(ctx context.Context, raw string) (redis.UniversalClient, string, error) {
	if strings.Contains(raw, "master_name=") {
		opts, err := redis.ParseFailoverURL(raw)
		if err != nil {
			return nil, "", err
		}
		opts.MaxRetries, opts.PipelinePoolSize = -1, -1
		return redis.NewFailoverClient(opts), "sentinel", nil
	}
	// A unix socket, or a URL with options only one server has (a
	// database number), cannot name a cluster.
	if copts, err := redis.ParseClusterURL(raw); err == nil {
		cluster, answered := clusterEnabled(ctx, copts)
		if cluster {
			if u, err := url.Parse(raw); err == nil && strings.Trim(u.Path, "/") != "" && strings.Trim(u.Path, "/") != "0" {
				return nil, "", fmt.Errorf("a Redis Cluster has database 0 only, not %s", strings.Trim(u.Path, "/"))
			}
			// One dial per attempt: while a failover leaves the slot
			// unserved the store sends the write again itself, with a
			// pause, until the request's deadline (see redisstore).
			copts.MaxRetries, copts.PipelinePoolSize, copts.DialerRetries = -1, -1, 1
			return redis.NewClusterClient(copts), "cluster", nil
		}
		if len(copts.Addrs) > 1 && answered {
			return nil, "", fmt.Errorf("addr parameters name the seed nodes of a Redis Cluster, but %s is not in cluster mode", copts.Addrs[0])
		}
		if len(copts.Addrs) > 1 {
			return nil, "", fmt.Errorf("none of the seed nodes %s answered", strings.Join(copts.Addrs, ", "))
		}
	}
	opts, err := redis.ParseURL(raw)
	if err != nil {
		return nil, "", err
	}
	opts.MaxRetries, opts.PipelinePoolSize = -1, -1
	return redis.NewClient(opts), "standalone", nil
}

// clusterEnabled asks the seeds in turn whether they run in cluster mode
// (INFO cluster: cluster_enabled:1) and believes the first that answers;
// answered is false when none did.
func clusterEnabled(ctx context.Context, copts *redis.ClusterOptions) (cluster, answered bool) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	for _, addr := range copts.Addrs {
		c := redis.NewClient(&redis.Options{
			Addr: addr, Username: copts.Username, Password: copts.Password,
			TLSConfig: copts.TLSConfig, MaxRetries: -1,
		})
		info, err := c.Info(ctx, "cluster").Result()
		_ = c.Close()
		if err != nil {
			if ctx.Err() != nil {
				return false, false
			}
			continue
		}
		return strings.Contains(info, "cluster_enabled:1"), true
	}
	return false, false
}

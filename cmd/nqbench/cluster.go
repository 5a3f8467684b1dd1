package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/internal/redistest"
)

// clusterResult is the cluster profile: the appends profile's nqd side on
// one Redis and on a Redis Cluster of three primaries with a replica each,
// the cluster with one shard (NQ_REDIS_SHARDS=1) and with nine, three per
// primary, and where the keys and commands went. On one machine a cluster
// cannot add throughput; the profile shows what it costs, that one shard
// keeps nqd on the one primary serving its slot and nine spread it over the
// three, and that no command crosses slots (one would fail its append,
// counted among the errors).
type clusterResult struct {
	Rows []clusterRow `json:"rows"`
	// Fanout is the fan-out profile with nqd on the cluster with nine
	// shards: live delivery over sharded Pub/Sub from every primary, and
	// its checker.
	Fanout *fanoutResult `json:"fanout,omitempty"`
}

type clusterRow struct {
	Load  latencyRow  `json:"load"`
	Nodes []nodeShare `json:"nodes"`
}

// nodeShare is one Redis node's part of a row: its role, the keys the
// measured run added to it and the commands it processed during the run
// (replicas count the writes they replay).
type nodeShare struct {
	Addr     string `json:"addr"`
	Role     string `json:"role"`
	Keys     int64  `json:"keys"`
	Commands int64  `json:"commands"`
}

// runCluster runs the cluster profile: nqd on the Redis at redisAddr, then
// nqd on a cluster started in dir.
func runCluster(ctx context.Context, o options, redisAddr string, redisPID int, dir string) (clusterResult, error) {
	var res clusterResult
	cl, err := redistest.LaunchCluster(filepath.Join(dir, "cluster"))
	if err != nil {
		return res, fmt.Errorf("start a Redis Cluster: %w", err)
	}
	defer cl.Close()
	var clusterAddrs []string
	for _, n := range cl.Nodes {
		clusterAddrs = append(clusterAddrs, n.Addr)
	}
	for _, target := range []struct {
		name, url string
		pid       int
		nodes     []string
		shards    int
		fanout    bool
	}{
		{"one Redis", "redis://" + redisAddr + "/0", redisPID, []string{redisAddr}, 1, false},
		{"Redis Cluster, 3 primaries, 1 shard", cl.URL(), 0, clusterAddrs, 1, false},
		{"Redis Cluster, 3 primaries, 9 shards", cl.URL(), 0, clusterAddrs, 9, true},
	} {
		if ctx.Err() != nil {
			break
		}
		// A prefix per number of shards: nqd refuses data written with
		// another number.
		prefix := "nqbenchcluster"
		if target.shards > 1 {
			prefix = fmt.Sprintf("nqbenchshards%d", target.shards)
		}
		proc, base, err := startNQD(o.nqd, "NQ_REDIS_URL="+target.url, "NQ_PREFIX="+prefix, fmt.Sprintf("NQ_REDIS_SHARDS=%d", target.shards))
		if err != nil {
			return res, err
		}
		e := env{base: base, redisAddr: redisAddr, nqdPID: proc.pid(), redisPID: target.pid}
		before := nodeStats(ctx, target.nodes)
		row, r, _ := measureNQDAppends(ctx, e, "cluster "+target.name, o.appendRate, o.duration, o.appendConns, o.contexts)
		after := nodeStats(ctx, target.nodes)
		var fanoutErr error
		if target.fanout {
			f, err := runFanout(ctx, e, o.fanoutRate, o.duration, o.fanoutContexts, o.fanoutSubs, o.appendConns)
			res.Fanout, fanoutErr = &f, err
		}
		proc.stop()
		if fanoutErr != nil {
			return res, fmt.Errorf("fan-out on the cluster: %w", fanoutErr)
		}
		row.Name = "nqd HTTP append, " + target.name
		if target.pid == 0 {
			row.CPU = "" // the store's cores are six processes'; see the nodes
		}
		cr := clusterRow{Load: row}
		for i, n := range after {
			n.Keys -= before[i].Keys
			n.Commands -= before[i].Commands
			cr.Nodes = append(cr.Nodes, n)
		}
		res.Rows = append(res.Rows, cr)
		if r.Errors > 0 {
			return res, fmt.Errorf("%s: %d of %d appends failed", target.name, r.Errors, r.Sent)
		}
	}
	return res, nil
}

// nodeStats reads each node's role, key count and commands processed.
func nodeStats(ctx context.Context, addrs []string) []nodeShare {
	out := make([]nodeShare, len(addrs))
	for i, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		out[i] = nodeShare{Addr: addr}
		out[i].Keys, _ = c.DBSize(ctx).Result()
		info, _ := c.Info(ctx, "stats", "replication").Result()
		cancel()
		_ = c.Close()
		for line := range strings.Lines(info) {
			line = strings.TrimSpace(line)
			if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
				out[i].Commands, _ = strconv.ParseInt(v, 10, 64)
			}
			if v, ok := strings.CutPrefix(line, "role:"); ok {
				out[i].Role = map[string]string{"master": "primary", "slave": "replica"}[v]
			}
		}
	}
	return out
}

package redistest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/internal/spawn"
)

// clusterTimeout bounds how long a fresh cluster may take to serve every
// slot with every replica in sync.
const clusterTimeout = 60 * time.Second

// ClusterOptions configure a dedicated cluster.
type ClusterOptions struct {
	// NodeTimeout is cluster-node-timeout: how long a primary may stay
	// unreachable before its replica takes its place; default 3s, long
	// enough that a loaded machine does not fail nodes over by itself.
	NodeTimeout time.Duration
	// AOF is Options.AOF on every node.
	AOF bool
}

// Cluster is a Redis Cluster of three primaries with one replica each,
// every node a redis-server process on a free port.
type Cluster struct {
	// Nodes are the six servers; the first three started as primaries
	// (redis-cli pairs the others with them; see ReplicaOf).
	Nodes []*Server
}

var (
	sharedClusterOnce sync.Once
	sharedCluster     *Cluster
	sharedClusterErr  error
)

// ClusterURL returns a Redis URL of the cluster shared by every test of
// this binary, starting it on first use: its first node, with the others as
// go-redis addr parameters. Tests share it as they share Addr's server, each
// under its own Prefix (a prefix is its own hash slot in nqd's layout).
func ClusterURL(t testing.TB) string {
	t.Helper()
	sharedClusterOnce.Do(func() {
		dir, err := spawn.OwnedTempDir("nqd-redistest-cluster-")
		if err != nil {
			sharedClusterErr = err
			return
		}
		if sharedCluster, sharedClusterErr = launchCluster(ClusterOptions{}, dir); sharedClusterErr != nil {
			_ = os.RemoveAll(dir)
		}
	})
	if sharedClusterErr != nil {
		unavailable(t, sharedClusterErr)
	}
	return sharedCluster.URL()
}

// ClusterClient returns a cluster client of the shared cluster, closed when
// the test ends.
func ClusterClient(t testing.TB) *redis.ClusterClient {
	t.Helper()
	c := NewClusterClient(t, ClusterURL(t))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// NewClusterClient opens a client of the cluster at rawURL with the
// settings nqd uses (see wiring).
func NewClusterClient(t testing.TB, rawURL string) *redis.ClusterClient {
	t.Helper()
	opts, err := redis.ParseClusterURL(rawURL)
	if err != nil {
		t.Fatalf("redistest: cluster URL %s: %v", rawURL, err)
	}
	opts.MaxRetries, opts.PipelinePoolSize, opts.DialerRetries = -1, -1, 1
	return redis.NewClusterClient(opts)
}

// ReplicaOf returns the node that replicates primary, nil when it has none
// online.
func (c *Cluster) ReplicaOf(ctx context.Context, primary *Server) *Server {
	cl := redis.NewClient(&redis.Options{Addr: primary.Addr, MaxRetries: -1})
	defer func() { _ = cl.Close() }()
	info, err := cl.Info(ctx, "replication").Result()
	if err != nil {
		return nil
	}
	for line := range strings.Lines(info) {
		if !strings.HasPrefix(line, "slave0:") {
			continue
		}
		var ip, port string
		for kv := range strings.SplitSeq(strings.TrimSpace(strings.TrimPrefix(line, "slave0:")), ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "ip":
				ip = v
			case "port":
				port = v
			}
		}
		for _, n := range c.Nodes {
			if n.Addr == net.JoinHostPort(ip, port) {
				return n
			}
		}
	}
	return nil
}

// ClusterPrefix is Prefix on the shared cluster: a key prefix no other test
// uses, whose keys are deleted from every primary when the test ends.
func ClusterPrefix(t testing.TB) string {
	t.Helper()
	rawURL := ClusterURL(t)
	p := fmt.Sprintf("nqt%d%d", os.Getpid(), prefixSeq.Add(1))
	t.Cleanup(func() {
		opts, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			t.Errorf("redistest: %v", err)
			return
		}
		c := redis.NewClusterClient(opts)
		defer func() { _ = c.Close() }()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// nqd tags a prefix's keys {<prefix>}, or {<prefix>:<n>} with
		// several shards; an untagged key may sit on any primary.
		err = c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			for _, pattern := range []string{"{" + p + "}:*", "{" + p + ":*", p + ":*"} {
				if err := DeleteKeys(ctx, node, pattern); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Errorf("redistest: delete keys of %s: %v", p, err)
		}
	})
	return p
}

// StartCluster runs a dedicated cluster that the test may kill nodes of. Its
// nodes are killed when the test ends.
func StartCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	c, err := launchCluster(opts, t.TempDir())
	if err != nil {
		unavailable(t, err)
	}
	t.Cleanup(c.Close)
	return c
}

// URL is a Redis URL naming every node: the first as host, the others as
// addr parameters, as NQ_REDIS_URL names a cluster's seeds.
func (c *Cluster) URL() string {
	q := url.Values{}
	for _, n := range c.Nodes[1:] {
		q.Add("addr", n.Addr)
	}
	return "redis://" + c.Nodes[0].Addr + "?" + q.Encode()
}

// Close kills every node.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		n.Kill()
	}
}

// WaitServing waits until every node of live reports cluster_state:ok with
// every slot served, or fails the test at the deadline: after a primary was
// killed, its replica has taken over.
func (c *Cluster) WaitServing(t testing.TB, live []*Server) {
	t.Helper()
	if err := waitClusterOK(live, 0); err != nil {
		t.Fatalf("redistest: %v", err)
	}
}

// PrimaryOf returns the node that serves key's slot now.
func (c *Cluster) PrimaryOf(ctx context.Context, key string) (*Server, error) {
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.addrs()})
	defer func() { _ = cl.Close() }()
	node, err := cl.MasterForKey(ctx, key)
	if err != nil {
		return nil, err
	}
	addr := node.Options().Addr
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n, nil
		}
	}
	return nil, fmt.Errorf("no node at %s", addr)
}

func (c *Cluster) addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return addrs
}

func launchCluster(opts ClusterOptions, dir string) (*Cluster, error) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		return nil, &spawn.Missing{What: "redis-cli"}
	}
	timeout := opts.NodeTimeout
	if timeout <= 0 {
		timeout = 3 * time.Second
	}
	c := &Cluster{}
	for i := range 6 {
		nodeDir := filepath.Join(dir, "node"+strconv.Itoa(i))
		if err := os.MkdirAll(nodeDir, 0o750); err != nil {
			c.Close()
			return nil, err
		}
		s, err := launch(Options{AOF: opts.AOF}, nodeDir, []string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(timeout.Milliseconds(), 10),
			// A replica takes over however long it was cut off: the
			// tests kill primaries, never whole shards.
			"--cluster-replica-validity-factor", "0",
			// A replica syncs at once rather than waiting for others.
			"--repl-diskless-sync-delay", "0",
		})
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	args := append([]string{"--cluster", "create"}, c.addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("redis-cli --cluster create: %v: %s", err, out)
	}
	if err := waitClusterOK(c.Nodes, 3); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// waitClusterOK waits until every node of nodes reports cluster_state:ok
// with every slot assigned, and at least primaries of them report an online
// replica.
func waitClusterOK(nodes []*Server, primaries int) error {
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	var last string
	for {
		ok, why := clusterOK(ctx, nodes, primaries)
		if ok {
			return nil
		}
		last = why
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not ready within %s: %s", clusterTimeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func clusterOK(ctx context.Context, nodes []*Server, primaries int) (bool, string) {
	synced := 0
	for _, n := range nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		info, err := c.ClusterInfo(ctx).Result()
		if err != nil {
			_ = c.Close()
			return false, n.Addr + ": " + err.Error()
		}
		if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_assigned:16384") {
			_ = c.Close()
			return false, n.Addr + ": " + firstLine(info)
		}
		repl, err := c.Info(ctx, "replication").Result()
		_ = c.Close()
		if err != nil {
			return false, n.Addr + ": " + err.Error()
		}
		if strings.Contains(repl, "role:master") && strings.Contains(repl, "connected_slaves:1") && strings.Contains(repl, "state=online") {
			synced++
		}
	}
	if synced < primaries {
		return false, fmt.Sprintf("%d of %d primaries have an online replica", synced, primaries)
	}
	return true, ""
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return strings.TrimSpace(s)
}

// WaitFailover waits until a node other than old serves key's slot, as the
// live nodes see it, and every live node reports cluster_state:ok: after old
// was killed, its replica has taken over. It returns the new primary.
func (c *Cluster) WaitFailover(t testing.TB, key string, old *Server) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	var live []*Server
	for _, n := range c.Nodes {
		if n != old {
			live = append(live, n)
		}
	}
	probe := redis.NewClient(&redis.Options{Addr: live[0].Addr, MaxRetries: -1})
	want, err := probe.ClusterKeySlot(ctx, key).Result()
	_ = probe.Close()
	if err != nil {
		t.Fatalf("redistest: slot of %s: %v", key, err)
	}
	for {
		if n := servingPrimary(ctx, live, int(want)); n != nil && n != old {
			if err := waitClusterOK(live, 0); err != nil {
				t.Fatalf("redistest: %v", err)
			}
			return n
		}
		select {
		case <-ctx.Done():
			t.Fatalf("redistest: no failover of %s within %s", old.Addr, clusterTimeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TakeOver makes replica the primary of its shard at once with CLUSTER
// FAILOVER TAKEOVER: no agreement of the other primaries and no handshake
// with its own, which may be dead. Wait for the slot map with WaitFailover.
func (c *Cluster) TakeOver(t testing.TB, replica *Server) {
	t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: replica.Addr, MaxRetries: -1})
	defer func() { _ = cl.Close() }()
	if err := cl.Do(context.Background(), "cluster", "failover", "takeover").Err(); err != nil {
		t.Fatalf("redistest: CLUSTER FAILOVER TAKEOVER on %s: %v", replica.Addr, err)
	}
}

// servingPrimary is the node that every one of live names as the primary of
// slot, or nil while they disagree or cannot say.
func servingPrimary(ctx context.Context, live []*Server, slot int) *Server {
	var found *Server
	for _, n := range live {
		c := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		ranges, err := slotRanges(ctx, c)
		_ = c.Close()
		if err != nil {
			return nil
		}
		var addr string
		for _, r := range ranges {
			if r.start <= slot && slot <= r.end {
				addr = r.primary
			}
		}
		var node *Server
		for _, m := range live {
			if m.Addr == addr {
				node = m
			}
		}
		if node == nil || found != nil && found != node {
			return nil
		}
		found = node
	}
	return found
}

// WaitReplicaOf waits until n, restarted after a failover, is a replica in
// sync with its primary again.
func (c *Cluster) WaitReplicaOf(t testing.TB, n *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	cl := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
	defer func() { _ = cl.Close() }()
	for {
		info, err := cl.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up") {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("redistest: %s did not rejoin as a replica within %s: %v %s", n.Addr, clusterTimeout, err, info)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Reshard moves the n lowest slots of the primary serving key, which must
// be among them, to another primary with redis-cli --cluster reshard, and
// returns once every node agrees on the new owner. It returns the old and
// the new primary.
func (c *Cluster) Reshard(t testing.TB, key string, n int) (from, to *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	slot, lowest, from := c.slotOf(t, ctx, key)
	if slot-lowest >= n {
		t.Fatalf("redistest: the slot %d of %s is not among the %d lowest of its primary (from %d)", slot, key, n, lowest)
	}
	ids := map[*Server]string{}
	for _, s := range c.Nodes[:] {
		cl := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
		id, err := cl.Do(ctx, "cluster", "myid").Text()
		role, _ := cl.Do(ctx, "role").Slice()
		_ = cl.Close()
		if err != nil {
			continue // killed
		}
		if len(role) > 0 && role[0] == "master" {
			ids[s] = id
			if s != from && to == nil {
				to = s
			}
		}
	}
	if to == nil {
		t.Fatal("redistest: no other primary to reshard to")
	}
	out, err := exec.CommandContext(ctx, "redis-cli", "--cluster", "reshard", from.Addr,
		"--cluster-from", ids[from], "--cluster-to", ids[to], "--cluster-slots", strconv.Itoa(n), "--cluster-yes").CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster reshard: %v: %s", err, out)
	}
	var live []*Server
	for s := range ids {
		live = append(live, s)
	}
	for servingPrimary(ctx, live, slot) != to {
		select {
		case <-ctx.Done():
			t.Fatalf("redistest: slot %d not on %s after resharding", slot, to.Addr)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return from, to
}

// slotOf returns key's slot, the lowest slot of the range that holds it and
// that range's primary.
func (c *Cluster) slotOf(t testing.TB, ctx context.Context, key string) (slot, lowest int, primary *Server) {
	t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: c.Nodes[0].Addr, MaxRetries: -1})
	defer func() { _ = cl.Close() }()
	s, err := cl.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatalf("redistest: slot of %s: %v", key, err)
	}
	ranges, err := slotRanges(ctx, cl)
	if err != nil {
		t.Fatalf("redistest: cluster shards: %v", err)
	}
	for _, r := range ranges {
		if r.start <= int(s) && int(s) <= r.end {
			for _, n := range c.Nodes {
				if n.Addr == r.primary {
					return int(s), r.start, n
				}
			}
		}
	}
	t.Fatalf("redistest: no primary serves slot %d", s)
	return 0, 0, nil
}

// LowSlotTag returns a hash tag, base followed by a number, whose slot is
// among the n lowest of the primary serving it: a tag that Reshard with n
// moves.
func (c *Cluster) LowSlotTag(t testing.TB, base string, n int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	for i := range 100000 {
		tag := base + strconv.Itoa(i)
		if c.inLowSlots(t, ctx, "{"+tag+"}", n) {
			return tag
		}
	}
	t.Fatalf("redistest: no tag %s<n> in the %d lowest slots of a primary", base, n)
	return ""
}

// InLowSlots reports whether key's slot is among the n lowest of the
// primary serving it: a key that Reshard with n moves.
func (c *Cluster) InLowSlots(t testing.TB, key string, n int) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	return c.inLowSlots(t, ctx, key, n)
}

func (c *Cluster) inLowSlots(t testing.TB, ctx context.Context, key string, n int) bool {
	slot, lowest, _ := c.slotOf(t, ctx, key)
	return slot-lowest < n
}

// LaunchCluster starts a cluster of three primaries with a replica each in
// dir, for a command such as nqbench rather than a test; Close ends it.
func LaunchCluster(dir string) (*Cluster, error) {
	return launchCluster(ClusterOptions{}, dir)
}

// slotRange is a range of slots and the address of the primary serving it
// ("" when it has none online).
type slotRange struct {
	start, end int
	primary    string
}

// slotRanges reads the slot map as the node c is connected to sees it.
func slotRanges(ctx context.Context, c *redis.Client) ([]slotRange, error) {
	shards, err := c.ClusterShards(ctx).Result()
	if err != nil {
		return nil, err
	}
	var out []slotRange
	for _, sh := range shards {
		var primary string
		for _, n := range sh.Nodes {
			if n.Role == "master" && n.Health == "online" {
				primary = net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
			}
		}
		for _, r := range sh.Slots {
			out = append(out, slotRange{start: int(r.Start), end: int(r.End), primary: primary})
		}
	}
	return out, nil
}

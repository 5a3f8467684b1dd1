package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/store"
)

// maxPipeline bounds the script calls written to Redis in one pipeline, so
// one round trip never holds Redis or a reply buffer for long.
const maxPipeline = 128

// pipelinesInFlight is how many pipelines may be on their way at once. With
// one, a call that arrives while a pipeline is out waits for its whole
// round trip; with two, it goes at once unless both are out, and a busy
// server still sends many calls per pipeline.
const pipelinesInFlight = 2

// errNotSent is the error of a call that never left the process: its
// context ended, or the store closed, while it waited for its turn. Nothing
// ran, so it is not outcome unknown.
var errNotSent = errors.New("not sent to Redis")

// A pipeliner sends the script calls of concurrent requests to Redis
// together, as the embedded store commits concurrent appends in one
// transaction: calls that arrive while pipelinesInFlight pipelines are out
// wait, and the next pipeline carries all of them (one write and one read of
// the replies instead of one of each per call), each caller getting its own
// reply. A lone call goes at once.
//
// The pipelines are sent by the callers themselves, with no goroutine of
// the pipeliner's own: a call that finds a pipeline slot free sends itself,
// and a caller whose pipeline is answered hands its slot to the first call
// waiting, whose goroutine then sends every call waiting. A call handed to
// a goroutine of its own costs two more goroutine wake-ups (there and
// back), which on a lightly loaded server each wake a thread: about a fifth
// of a lone call's CPU. Appends, run updates, claims and heartbeats, the
// scripts a busy server runs most, go this way.
//
// Each call stays its own script run, so each is atomic and fails on its
// own, and no caller learns anything before Redis answered its call. A
// connection that breaks fails every call of the pipeline that had no reply
// yet with the connection's error, which the caller treats as any lost
// reply (see Append). go-redis's own AutoPipeliner does the like, but it is
// marked experimental, and an append must know exactly which calls may
// have run.
type pipeliner struct {
	client redis.UniversalClient
	// waitReplicas, when above 0, ends every pipeline with WAIT (see
	// Options.WaitReplicas).
	//
	// On a cluster a pipeline goes to node, the primary of the store's one
	// slot, rather than through the cluster client: WAIT counts the
	// replicas that have the writes of its own connection, which the
	// cluster client could send elsewhere, and the cluster client sends a
	// pipeline again when its connection breaks, which would run a script
	// twice whose reply was lost. reload refreshes the slot map when that
	// primary answers MOVED or does not answer.
	waitReplicas int
	waitTimeout  time.Duration
	node         func(context.Context) (*redis.Client, error)
	reload       func(context.Context)

	mu sync.Mutex
	// free is how many pipelines may still go out now. Calls wait only
	// when it is 0, so while calls wait it stays 0: a sender whose
	// pipeline is answered hands its slot on rather than freeing it.
	free    int
	waiting []*scriptCall
	closed  bool
	// sending counts the slots in use, so that close can wait for the
	// pipelines on their way.
	sending sync.WaitGroup
}

// scriptCall is one call of a script and, once woken is signalled, its
// command with the reply or error, or (batch set) the calls its goroutine is
// to send, itself first.
type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
	batch  []*scriptCall
	woken  chan struct{}
}

func newPipeliner(client redis.UniversalClient) *pipeliner {
	return &pipeliner{client: client, free: pipelinesInFlight}
}

// run calls script in the next pipeline and returns its reply as
// redis.Cmd.Slice would (see call).
func (p *pipeliner) run(ctx context.Context, script *redis.Script, keys []string, args []any) ([]any, error) {
	return p.call(ctx, script, keys, args).Slice()
}

// call calls script in the next pipeline and returns its command, to read
// the reply from. A call waiting for its turn gives up when ctx ends, with
// an error wrapping errNotSent: it was never written. Any other error may
// come after the script ran, as with a direct call (see mayHaveRun).
//
// On a cluster, a call that no primary ran (its primary is unreachable,
// or refuses while a failover is under way) is sent again until ctx ends,
// at most maxUnserved: a failover takes the cluster's node timeout and an
// election, a few seconds in which a request need not fail.
func (p *pipeliner) call(ctx context.Context, script *redis.Script, keys []string, args []any) *redis.Cmd {
	cmd := p.callOnce(ctx, script, keys, args)
	if p.node == nil || !unserved(cmd.Err()) {
		return cmd
	}
	// The retries end a tenth of the time left before ctx does, so that
	// the caller still answers that nothing ran (503) rather than that
	// its deadline passed.
	retryCtx, cancel := context.WithTimeout(ctx, maxUnserved)
	if deadline, ok := ctx.Deadline(); ok {
		retryCtx, cancel = context.WithDeadline(ctx, deadline.Add(-time.Until(deadline)/10))
	}
	defer cancel()
	for wait := 50 * time.Millisecond; unserved(cmd.Err()); wait = min(2*wait, time.Second) {
		select {
		case <-retryCtx.Done():
			return cmd
		case <-time.After(wait):
		}
		cmd = p.callOnce(ctx, script, keys, args)
	}
	return cmd
}

// maxUnserved bounds how long call sends again a call that no primary ran
// when its context has no earlier deadline.
const maxUnserved = 10 * time.Second

// unserved reports an error that says no primary ran the call: it could not
// be reached, or it refused the call (see isServerRefusal). A script's own
// error and a closed store are not.
func unserved(err error) bool {
	var opErr *net.OpError
	switch {
	case err == nil, errors.Is(err, store.ErrClosed), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	case errors.Is(err, errNoNode), errors.As(err, &opErr) && opErr.Op == "dial", isServerRefusal(err):
		return true
	}
	return false
}

// errNoNode is the error of a call sent nowhere: the slot map named no
// primary for the store's slot.
var errNoNode = errors.New("no primary serves the slot")

func (p *pipeliner) callOnce(ctx context.Context, script *redis.Script, keys []string, args []any) *redis.Cmd {
	if err := ctx.Err(); err != nil {
		return failedCmd(errors.Join(errNotSent, err))
	}
	c := &scriptCall{script: script, keys: keys, args: args}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return failedCmd(errors.Join(errNotSent, store.ErrClosed))
	}
	if p.free > 0 {
		p.free--
		p.sending.Add(1)
		p.mu.Unlock()
		p.lead([]*scriptCall{c})
		return c.cmd
	}
	c.woken = make(chan struct{}, 1)
	p.waiting = append(p.waiting, c)
	p.mu.Unlock()
	select {
	case <-c.woken:
	case <-ctx.Done():
		if p.withdraw(c) {
			return failedCmd(errors.Join(errNotSent, ctx.Err()))
		}
		// Taken into a pipeline already: once taken a call is written, and
		// its reply is awaited even though ctx ended, as go-redis awaits the
		// reply of a direct call: the caller learns what happened rather
		// than that it might have. The client's read and write timeouts
		// bound the wait.
		<-c.woken
	}
	if c.batch != nil {
		p.lead(c.batch)
	}
	return c.cmd
}

// failedCmd is the command of a call that failed with err.
func failedCmd(err error) *redis.Cmd {
	cmd := redis.NewCmd(context.Background())
	cmd.SetErr(err)
	return cmd
}

// lead sends batch, whose first call is the caller's own, with a pipeline
// slot the caller holds; then hands the slot to the first call waiting, with
// every call waiting (up to maxPipeline), or frees it; and wakes the other
// callers of batch with their replies.
func (p *pipeliner) lead(batch []*scriptCall) {
	p.send(batch)
	var next []*scriptCall
	p.mu.Lock()
	if n := min(len(p.waiting), maxPipeline); n > 0 {
		next = slices.Clone(p.waiting[:n])
		p.waiting = slices.Delete(p.waiting, 0, n)
	} else {
		p.free++
		p.sending.Done()
	}
	p.mu.Unlock()
	if len(next) > 0 {
		next[0].batch = next
		next[0].woken <- struct{}{}
	}
	for _, c := range batch[1:] {
		c.woken <- struct{}{}
	}
}

// withdraw takes c out of the calls waiting, unless a sender took it.
func (p *pipeliner) withdraw(c *scriptCall) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.Index(p.waiting, c)
	if i < 0 {
		return false
	}
	p.waiting = slices.Delete(p.waiting, i, i+1)
	return true
}

// close fails the calls waiting with errNotSent, refuses new ones, and
// returns once the pipelines on their way are answered.
func (p *pipeliner) close() {
	p.mu.Lock()
	p.closed = true
	waiting := p.waiting
	p.waiting = nil
	p.mu.Unlock()
	for _, c := range waiting {
		c.cmd = failedCmd(errors.Join(errNotSent, store.ErrClosed))
		c.woken <- struct{}{}
	}
	p.sending.Wait()
}

// send writes batch as one pipeline and sets each call's reply. It runs on a
// context of its own, since the calls of many callers travel together; the
// client's read and write timeouts bound the round trip.
func (p *pipeliner) send(batch []*scriptCall) {
	ctx := context.Background()
	todo := make([]int, len(batch))
	for i := range batch {
		todo[i] = i
	}
	// A primary that no longer serves the slot answers MOVED without
	// running anything; a few attempts cover the slot map catching up.
	for attempt := 0; len(todo) > 0; attempt++ {
		todo = p.sendOnce(ctx, batch, todo)
		if len(todo) == 0 || attempt == 2 || p.reload == nil {
			break
		}
		p.reload(ctx)
	}
}

// sendOnce sends the calls of batch at todo and returns those answered
// MOVED or ASK, when sent to one node itself (p.node).
func (p *pipeliner) sendOnce(ctx context.Context, batch []*scriptCall, todo []int) []int {
	var client redis.Cmdable = p.client
	if p.node != nil {
		node, err := p.node(ctx)
		if err != nil {
			for _, i := range todo {
				batch[i].cmd = failedCmd(errors.Join(errNotSent, errNoNode, err))
			}
			p.reload(ctx)
			return nil
		}
		client = node
	}
	cmds := make([]*redis.Cmd, len(batch))
	waitErr := make([]error, len(batch))
	unreplicated := p.exec(ctx, client, func(pipe redis.Pipeliner) {
		for _, i := range todo {
			c := batch[i]
			cmds[i] = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
		}
	})
	// Redis refuses EVALSHA of a script it does not hold (restarted, or
	// its scripts flushed) before running anything: those calls go again
	// with the script's source, as redis.Script.Run does.
	var again []int
	for _, i := range todo {
		waitErr[i] = unreplicated
		if err := cmds[i].Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		unreplicated := p.exec(ctx, client, func(pipe redis.Pipeliner) {
			for _, i := range again {
				c := batch[i]
				cmds[i] = c.script.Eval(ctx, pipe, c.keys, c.args...)
			}
		})
		for _, i := range again {
			waitErr[i] = unreplicated
		}
	}
	var moved []int
	lost := false
	for _, i := range todo {
		c := batch[i]
		c.cmd = cmds[i]
		if c.cmd.Err() == nil && waitErr[i] != nil {
			c.cmd.SetErr(waitErr[i])
		}
		err := c.cmd.Err()
		var rerr redis.Error
		switch {
		case p.node == nil || err == nil:
		case isRedirect(err):
			moved = append(moved, i)
		case !errors.As(err, &rerr) && !errors.As(err, new(*notReplicatedError)):
			// The primary did not answer: a failover may be under way,
			// and the next pipeline should find its successor.
			lost = true
		}
	}
	if lost {
		p.reload(ctx)
	}
	return moved
}

// exec runs a pipeline that add fills, ended with WAIT when replicas are
// waited for, and returns the error of the calls that succeeded but that
// too few replicas have (nil without WAIT, or when enough have them).
func (p *pipeliner) exec(ctx context.Context, client redis.Cmdable, add func(redis.Pipeliner)) error {
	pipe := client.Pipeline()
	add(pipe)
	var wait *redis.Cmd
	if p.waitReplicas > 0 {
		wait = pipe.Do(ctx, "wait", p.waitReplicas, p.waitTimeout.Milliseconds())
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	if wait == nil {
		return nil
	}
	switch n, err := wait.Int64(); {
	case err != nil:
		return &notReplicatedError{want: p.waitReplicas, cause: err}
	case int(n) < p.waitReplicas:
		return &notReplicatedError{want: p.waitReplicas, got: int(n)}
	}
	return nil
}

// notReplicatedError is the error of a write that ran on the primary but
// that fewer than the replicas asked for acknowledged in time: a failover
// now could lose it, so its outcome is unknown, as when a reply is lost.
type notReplicatedError struct {
	want, got int
	cause     error
}

func (e *notReplicatedError) Error() string {
	if e.cause != nil {
		return fmt.Sprintf("written on the primary, but waiting for %d replicas failed: %v", e.want, e.cause)
	}
	return fmt.Sprintf("written on the primary, but %d of %d replicas acknowledged it in time", e.got, e.want)
}

// isRedirect reports a reply saying another node serves the slot: the call
// did not run.
func isRedirect(err error) bool {
	return redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")
}

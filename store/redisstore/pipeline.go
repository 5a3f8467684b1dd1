package redisstore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"

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
// context ended while it waited for its turn, or the store was closed.
// Nothing ran, so it is not outcome unknown.
var errNotSent = errors.New("not sent to Redis")

// A pipeliner sends the script calls of concurrent requests to Redis
// together, as the embedded store commits concurrent writes in one
// transaction: calls that queue while pipelinesInFlight pipelines are on
// their way go as one pipeline (one write and one read of the replies
// instead of one of each per call), and each caller gets its own reply.
// Appends, run updates, claims and heartbeats, the scripts a busy server
// runs most, go this way.
//
// There is no goroutine of its own: a call that finds a pipeline free
// sends, on its caller's goroutine, itself and whatever queued, so a lone
// call goes at once with no hand-over between goroutines; once its own
// reply is in, a leader hands the calls queued meanwhile to a new goroutine.
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

	mu      sync.Mutex
	queue   []*scriptCall
	out     int // pipelines on their way, or about to be
	closed  bool
	running sync.WaitGroup // one per pipeline slot in use, for close
}

// scriptCall is one call of a script and, once ready is closed, its reply.
type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
	reply  []any
	err    error
	ready  chan struct{}
}

func newPipeliner(client redis.UniversalClient) *pipeliner {
	return &pipeliner{client: client}
}

// run calls script in the next pipeline and returns its reply as
// redis.Cmd.Slice would. A call waiting for its turn gives up when ctx
// ends, with an error wrapping errNotSent: it was never written. Any other
// error may come after the script ran, as with a direct call (see
// mayHaveRun).
func (p *pipeliner) run(ctx context.Context, script *redis.Script, keys []string, args []any) ([]any, error) {
	if err := ctx.Err(); err != nil {
		return nil, errors.Join(errNotSent, err)
	}
	c := &scriptCall{script: script, keys: keys, args: args, ready: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errors.Join(errNotSent, store.ErrClosed)
	}
	p.queue = append(p.queue, c)
	if p.out < pipelinesInFlight {
		p.out++
		p.running.Add(1)
		batch := p.takeLocked()
		p.mu.Unlock()
		p.lead(batch, c)
		return c.reply, c.err
	}
	p.mu.Unlock()
	select {
	case <-c.ready:
	case <-ctx.Done():
		if p.unqueue(c) {
			return nil, errors.Join(errNotSent, ctx.Err())
		}
		// Once taken the call is written, and its reply is awaited even
		// if ctx ends meanwhile, as go-redis awaits the reply of a direct
		// call: the caller learns what happened rather than that it might
		// have. The client's read and write timeouts bound the wait.
		<-c.ready
	}
	return c.reply, c.err
}

// takeLocked takes the next pipeline's calls off the queue; p.mu is held.
func (p *pipeliner) takeLocked() []*scriptCall {
	n := min(len(p.queue), maxPipeline)
	batch := slices.Clone(p.queue[:n])
	p.queue = slices.Delete(p.queue, 0, n)
	return batch
}

// next takes the next pipeline's calls, or gives up the slot when none wait.
func (p *pipeliner) next() []*scriptCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) == 0 {
		p.out--
		p.running.Done()
		return nil
	}
	return p.takeLocked()
}

// unqueue takes c out of the queue, unless a pipeline took it already.
func (p *pipeliner) unqueue(c *scriptCall) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.Index(p.queue, c)
	if i < 0 {
		return false
	}
	p.queue = slices.Delete(p.queue, i, i+1)
	return true
}

// lead sends batch, then the calls queued meanwhile, until none wait; once
// mine is answered the rest goes on on a new goroutine, so that mine's
// caller is answered at once.
func (p *pipeliner) lead(batch []*scriptCall, mine *scriptCall) {
	for batch != nil {
		p.send(batch)
		served := mine != nil && slices.Contains(batch, mine)
		batch = p.next()
		if served && batch != nil {
			go p.lead(batch, nil)
			return
		}
	}
}

// close waits for the pipelines on their way and the calls queued behind
// them; calls made after it fail with errNotSent.
func (p *pipeliner) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.running.Wait()
}

// send writes batch as one pipeline and answers each call. It runs on a
// context of its own, since the calls of many callers travel together; the
// client's read and write timeouts bound the round trip.
func (p *pipeliner) send(batch []*scriptCall) {
	ctx := context.Background()
	cmds := make([]*redis.Cmd, len(batch))
	pipe := p.client.Pipeline()
	for i, c := range batch {
		cmds[i] = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	// Redis refuses EVALSHA of a script it does not hold (restarted, or
	// its scripts flushed) before running anything: those calls go again
	// with the script's source, as redis.Script.Run does.
	var again []int
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		pipe := p.client.Pipeline()
		for _, i := range again {
			c := batch[i]
			cmds[i] = c.script.Eval(ctx, pipe, c.keys, c.args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	for i, c := range batch {
		c.reply, c.err = cmds[i].Slice()
		close(c.ready)
	}
}

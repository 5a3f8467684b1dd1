package redisstore

import (
	"context"
	"errors"
	"slices"
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
// reply, or (batch set) the calls its goroutine is to send, itself first.
type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
	reply  []any
	err    error
	batch  []*scriptCall
	woken  chan struct{}
}

func newPipeliner(client redis.UniversalClient) *pipeliner {
	return &pipeliner{client: client, free: pipelinesInFlight}
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
	c := &scriptCall{script: script, keys: keys, args: args}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errors.Join(errNotSent, store.ErrClosed)
	}
	if p.free > 0 {
		p.free--
		p.sending.Add(1)
		p.mu.Unlock()
		p.lead([]*scriptCall{c})
		return c.reply, c.err
	}
	c.woken = make(chan struct{}, 1)
	p.waiting = append(p.waiting, c)
	p.mu.Unlock()
	select {
	case <-c.woken:
	case <-ctx.Done():
		if p.withdraw(c) {
			return nil, errors.Join(errNotSent, ctx.Err())
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
	return c.reply, c.err
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
		c.err = errors.Join(errNotSent, store.ErrClosed)
		c.woken <- struct{}{}
	}
	p.sending.Wait()
}

// send writes batch as one pipeline and sets each call's reply. It runs on a
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
		if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
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
	}
}

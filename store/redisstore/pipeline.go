package redisstore

import (
	"context"
	"errors"
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
// transaction: one goroutine takes every call waiting, writes them as one
// pipeline (one write and one read of the replies instead of one of each per
// call) and hands each caller its own reply. Calls wait only while the
// previous pipeline is on its way, so a lone call goes at once and a busy
// server sends many per round trip. Appends, run updates, claims and
// heartbeats, the scripts a busy server runs most, go this way.
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
	// calls is unbuffered: a call is either taken by the loop, which then
	// answers it, or never sent.
	calls chan *scriptCall
	done  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
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
	p := &pipeliner{client: client, calls: make(chan *scriptCall), done: make(chan struct{})}
	for range pipelinesInFlight {
		p.wg.Add(1)
		go p.loop()
	}
	return p
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
	select {
	case p.calls <- c:
	case <-p.done:
		return nil, errors.Join(errNotSent, store.ErrClosed)
	case <-ctx.Done():
		return nil, errors.Join(errNotSent, ctx.Err())
	}
	// Once taken the call is written, and its reply is awaited even if ctx
	// ends meanwhile, as go-redis awaits the reply of a direct call: the
	// caller learns what happened rather than that it might have. The
	// client's read and write timeouts bound the wait.
	<-c.ready
	return c.reply, c.err
}

// close stops the loop once the pipeline on its way is answered; calls that
// did not get in fail with errNotSent.
func (p *pipeliner) close() {
	p.once.Do(func() { close(p.done) })
	p.wg.Wait()
}

func (p *pipeliner) loop() {
	defer p.wg.Done()
	batch := make([]*scriptCall, 0, maxPipeline)
	for {
		select {
		case <-p.done:
			return
		case c := <-p.calls:
			batch = append(batch[:0], c)
		}
	fill:
		for len(batch) < maxPipeline {
			select {
			case c := <-p.calls:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		p.send(batch)
		clear(batch)
	}
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
		close(c.ready)
	}
}

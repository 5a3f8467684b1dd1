package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/nqd-dev/nqd/internal/redistest"
)

// ScriptPipelines counts the pipelines of script calls a client sends and
// their commands; a new connection's own setup, also a pipeline, does not
// count. Exported for the package's external tests too.
type ScriptPipelines struct {
	mu              sync.Mutex
	pipelines, cmds int
}

func (*ScriptPipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*ScriptPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (s *ScriptPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if name := cmds[0].Name(); name == "evalsha" || name == "eval" {
			s.mu.Lock()
			s.pipelines++
			s.cmds += len(cmds)
			s.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// Counts returns the pipelines and their commands so far.
func (s *ScriptPipelines) Counts() (pipelines, cmds int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pipelines, s.cmds
}

// TestPipelinerHandsItsSlotToTheCallsWaiting holds every pipeline slot, so
// that calls wait: a waiting call whose context ends is never sent, and when
// a sender's pipeline is answered, the calls waiting go out together in the
// next pipeline, each answered with its own reply.
func TestPipelinerHandsItsSlotToTheCallsWaiting(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: redistest.Addr(t), MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	echo := redis.NewScript("return {ARGV[1]}")
	if err := echo.Load(t.Context(), client).Err(); err != nil {
		t.Fatal(err)
	}
	sent := &ScriptPipelines{}
	client.AddHook(sent)
	p := newPipeliner(client)

	// Every slot is out, as if pipelinesInFlight senders were on their way.
	p.mu.Lock()
	p.free = 0
	p.sending.Add(pipelinesInFlight)
	p.mu.Unlock()
	waiting := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; {
			p.mu.Lock()
			got := len(p.waiting)
			p.mu.Unlock()
			if got == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d calls waiting, want %d", got, n)
			}
			time.Sleep(time.Millisecond)
		}
	}

	ctx, cancel := context.WithCancel(t.Context())
	withdrawn := make(chan error, 1)
	go func() {
		_, err := p.run(ctx, echo, nil, []any{"withdrawn"})
		withdrawn <- err
	}()
	waiting(1)
	const calls = 3
	replies := make([][]any, calls)
	errs := make([]error, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() { replies[i], errs[i] = p.run(t.Context(), echo, nil, []any{fmt.Sprint("call ", i)}) })
	}
	waiting(1 + calls)
	cancel()
	if err := <-withdrawn; !errors.Is(err, errNotSent) || !errors.Is(err, context.Canceled) {
		t.Fatalf("the withdrawn call = %v, want not sent and canceled", err)
	}
	waiting(calls)

	// One sender's pipeline is answered: it hands its slot on.
	own := &scriptCall{script: echo, args: []any{"own"}}
	p.lead([]*scriptCall{own})
	if reply, err := own.cmd.Slice(); len(reply) != 1 || reply[0] != "own" || err != nil {
		t.Fatalf("the sender's own call = %v, %v", reply, err)
	}
	wg.Wait()
	for i := range calls {
		if want := fmt.Sprint("call ", i); errs[i] != nil || len(replies[i]) != 1 || replies[i][0] != want {
			t.Errorf("call %d = %v, %v; want %q", i, replies[i], errs[i], want)
		}
	}
	if pipelines, cmds := sent.Counts(); pipelines != 2 || cmds != 1+calls {
		t.Errorf("%d pipelines of %d commands, want the sender's own and one of the %d calls waiting", pipelines, cmds, calls)
	}
	p.mu.Lock()
	if p.free != 1 || len(p.waiting) != 0 {
		t.Errorf("free = %d, %d waiting; want the slot back once nothing waits", p.free, len(p.waiting))
	}
	p.free++ // the other slot comes back too
	p.mu.Unlock()
	p.sending.Done()
	p.close()
	if _, err := p.run(t.Context(), echo, nil, []any{"late"}); !errors.Is(err, errNotSent) {
		t.Fatalf("a call after close = %v, want not sent", err)
	}
}

package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/registry"
	"github.com/nqd-dev/nqd/socket"
	"github.com/nqd-dev/nqd/store"
)

// The worker channel (docs/worker-protocol.md, The worker channel): one
// WebSocket per worker process. nqd claims jobs on the worker's behalf
// while it has free slots and pushes them as offers; the worker's
// heartbeats, events and outcomes come as frames, each answered with what
// the HTTP call would answer. Every report goes through the functions the
// HTTP routes call (worker.go), so leases, redelivery, attempts and
// idempotency are the HTTP protocol's.

// ChannelObserver counts what the worker channels do (metrics).
type ChannelObserver interface {
	ChannelOpened()
	ChannelClosed()
	// Offered counts jobs offered to workers.
	Offered(n int)
	// Frame counts one frame of type typ, received ("in") or sent ("out").
	Frame(direction, typ string)
}

type nopChannelObserver struct{}

func (nopChannelObserver) ChannelOpened()       {}
func (nopChannelObserver) ChannelClosed()       {}
func (nopChannelObserver) Offered(int)          {}
func (nopChannelObserver) Frame(string, string) {}

// Bounds of one channel.
const (
	// maxChannelInFlight bounds the requests of one channel nqd works on at
	// once; while that many are, the channel is not read further, so that
	// a worker that sends faster than nqd stores waits in its own socket.
	maxChannelInFlight = 32
	// channelFrameSlack is what a frame may hold beyond the body of the
	// HTTP call it stands for: its type, ref and job.
	channelFrameSlack = 64 << 10
	// maxOffer bounds the jobs of one claim for a channel, as a claim's max.
	maxOffer = 100
	// registryTimeout bounds a call to the worker registry.
	registryTimeout = 5 * time.Second
	// nextJobWait is how long a slot freed by a completion with next waits
	// to be handed a job when its completion's write took none, as the Go
	// SDK's completion claims over HTTP: long enough that a run started
	// right after the last one completed goes to the slot in its start's
	// own write, short enough that an idle slot is free again at once.
	nextJobWait = 50 * time.Millisecond
)

// errNoHello refuses a channel's frame before its hello, and a second one.
var errNoHello = &nqd.Error{Code: nqd.CodeBadRequest, Message: "The channel's first frame must be its hello, and only that one."}

// workerSocketOptions are the worker channels' socket options: a frame is
// as large as the HTTP call's body it stands for, and more.
func workerSocketOptions(o socket.Options, lim Limits) socket.Options {
	o.MaxMessageBytes = lim.MaxBodyBytes + channelFrameSlack
	return o
}

// serveWorkerChannel admits a worker's channel: the route's scope (write)
// is checked by the route table, the origin here as on the UI's sockets.
func (a *API) serveWorkerChannel(w http.ResponseWriter, r *http.Request) {
	if !a.workerSockets.OriginAllowed(r) {
		writeError(w, r, &nqd.Error{Code: nqd.CodeCrossOrigin,
			Message: "A page of another origin may not open this socket; add its origin to NQ_CORS_ORIGINS to allow it."})
		return
	}
	if !strings.Contains(strings.ToLower(r.Header.Get("Upgrade")), "websocket") {
		writeError(w, r, badRequest("This route is a WebSocket: send an upgrade request (docs/worker-protocol.md, The worker channel)."))
		return
	}
	err := a.workerSockets.Serve(w, r, time.Time{}, func(c *socket.Conn) socket.Session {
		return a.newWorkerChannel(c)
	})
	if err != nil {
		writeError(w, r, err)
	}
}

// workerChannel is one worker's channel. Message runs on the socket's read
// loop; requests run in goroutines of their own (at most
// maxChannelInFlight), and so do the offer loop and the registry's beats.
type workerChannel struct {
	api  *API
	conn *socket.Conn
	log  zerolog.Logger
	// requests holds a token per request being worked on; work hands a
	// request to an idle runner (run).
	requests chan struct{}
	work     chan func()
	wg       sync.WaitGroup

	// hello is set by the read loop once, before anything reads it.
	hello *registry.Hello

	// mu guards the slot counts. free is how many slots of the worker are
	// free as nqd counts them; reserved how many of those a claim of the
	// offer loop is filling; inFlight the jobs the worker holds, for the
	// registry; pauses the pause frames so far. A slot waiting for its
	// next job (nextJob) is in none of these.
	mu       sync.Mutex
	free     int
	reserved int
	inFlight int
	pauses   int
	// caps is the hello's queueConcurrency (nil without), set before any
	// goroutine of the channel starts. qfree counts the free slots of each
	// capped queue as free counts the worker's, and qreserved those a
	// claim is filling, so that no claim takes a capped queue past its cap.
	caps      map[string]int
	qfree     map[string]int
	qreserved map[string]int
	// wakes tell the offer loops (one for all queues, or one per queue
	// with caps) that free slots grew.
	wakes []chan struct{}
}

func (a *API) newWorkerChannel(c *socket.Conn) *workerChannel {
	a.channels.ChannelOpened()
	return &workerChannel{api: a, conn: c, log: a.log,
		requests: make(chan struct{}, maxChannelInFlight), work: make(chan func())}
}

// helloFrame is a worker's first frame. Its concurrency bounds the jobs
// offered to the channel before it frees a slot.
type helloFrame struct {
	Type        string   `json:"type"`
	WorkerID    string   `json:"workerId"`
	Name        string   `json:"name"`
	SDK         string   `json:"sdk"`
	Version     string   `json:"version"`
	Host        string   `json:"host"`
	Queues      []string `json:"queues" validate:"required,min=1,max=32,dive,key_name"`
	Concurrency int      `json:"concurrency" validate:"gte=1,lte=1000"`
	Slots       *int     `json:"slots" validate:"omitempty,gte=0,lte=1000"`
	// QueueConcurrency, when set, caps the jobs of each queue the worker
	// runs at once; the caps add up to at most Concurrency. One channel
	// then serves queues of different concurrency. Held is how many jobs
	// of each queue the worker holds as it says hello (a reconnect).
	QueueConcurrency map[string]int `json:"queueConcurrency" validate:"max=32,dive,keys,key_name,endkeys,gte=1,lte=1000"`
	Held             map[string]int `json:"held" validate:"max=32,dive,keys,key_name,endkeys,gte=0,lte=1000"`
}

// welcomeFrame answers a hello.
type welcomeFrame struct {
	Type          string `json:"type"`
	LeaseMs       int64  `json:"leaseMs"`
	HeartbeatMs   int64  `json:"heartbeatMs"`
	MaxFrameBytes int64  `json:"maxFrameBytes"`
	MaxInFlight   int    `json:"maxInFlight"`
	// NextInAck says that a complete frame may carry nextInAck: a worker
	// of an nqd without it sends none, which that nqd would refuse.
	NextInAck bool `json:"nextInAck"`
}

// jobFrame is what every request frame has besides its call's body.
type jobFrame struct {
	Type  string `json:"type"`
	Ref   string `json:"ref"`
	Queue string `json:"queue"`
	JobID string `json:"jobId"`
}

type heartbeatFrame struct {
	jobFrame
	leaseRequest
}

type eventsFrame struct {
	jobFrame
	reportRequest
	IdempotencyKey *string `json:"idempotencyKey"`
}

type completeFrame struct {
	jobFrame
	completeRequest
	Next bool `json:"next"`
	// NextInAck, with Next, has the slot's next job come in the ack's body
	// (completeBody, as the HTTP completion's claim answers) rather than in
	// an offer after it: one frame where there were two.
	NextInAck bool `json:"nextInAck"`
}

type failFrame struct {
	jobFrame
	failRequest
	Next bool `json:"next"`
}

type slotsFrame struct {
	Type string `json:"type"`
	Add  int    `json:"add" validate:"gte=1,lte=1000"`
	// Queue names the queue whose jobs held the slots, which frees them
	// there too when the hello capped it.
	Queue string `json:"queue" validate:"omitempty,key_name"`
}

type ackFrame struct {
	Type string `json:"type"`
	Ref  string `json:"ref"`
	Body any    `json:"body"`
}

type errorFrame struct {
	Type         string      `json:"type"`
	Ref          string      `json:"ref,omitempty"`
	Status       int         `json:"status"`
	Error        errorFields `json:"error"`
	RetryAfterMs int64       `json:"retryAfterMs,omitempty"`
}

type offerFrame struct {
	Type string      `json:"type"`
	Jobs []store.Job `json:"jobs"`
}

// Message handles one frame of the worker.
func (c *workerChannel) Message(typ string, raw []byte) bool {
	c.api.channels.Frame("in", frameType(typ))
	switch typ {
	case "hello":
		c.helloed(raw)
	case "slots":
		var f slotsFrame
		if c.decode(raw, &f, "") {
			c.freeQueue(f.Queue, f.Add)
			c.addFree(f.Add)
		}
	case "pause":
		var f struct {
			Type string `json:"type"`
		}
		if c.decode(raw, &f, "") {
			c.mu.Lock()
			c.free = 0
			c.pauses++
			c.mu.Unlock()
		}
	case "heartbeat":
		c.request(raw, c.heartbeat)
	case "events":
		c.request(raw, c.events)
	case "complete":
		c.request(raw, c.complete)
	case "fail":
		c.request(raw, c.fail)
	default:
		return false
	}
	return true
}

// frameType names a frame's type in the metrics: one of the protocol's, or
// "unknown", so that a client cannot grow the series.
func frameType(typ string) string {
	switch typ {
	case "hello", "slots", "pause", "heartbeat", "events", "complete", "fail":
		return typ
	}
	return "unknown"
}

// decode reads a frame without a ref strictly into v and validates it (its
// part named by part, when not the whole), telling the worker when it
// cannot; a frame before the hello ends the channel.
func (c *workerChannel) decode(raw []byte, v any, ref string) bool {
	err := error(errNoHello)
	if c.hello != nil {
		err = decodeChecked(raw, v, "")
		if err == nil {
			err = c.api.validateStruct(v, "")
		}
	}
	if err != nil {
		c.answerError(ref, err)
		if c.hello == nil {
			c.conn.Fail(websocket.StatusPolicyViolation, "hello first")
		}
		return false
	}
	return true
}

// helloed takes the worker's hello: it is welcomed, told to the registry,
// and offered jobs from then on. A hello that breaks a rule ends the
// channel.
func (c *workerChannel) helloed(raw []byte) {
	var f helloFrame
	err := error(errNoHello)
	if c.hello == nil {
		err = decodeChecked(raw, &f, "")
		if err == nil {
			err = c.api.validateStruct(&f, "")
		}
	}
	h := registry.Hello{ID: f.WorkerID, Name: f.Name, SDK: f.SDK, Version: f.Version, Host: f.Host,
		Queues: f.Queues, Concurrency: f.Concurrency, Transport: registry.TransportChannel}
	if err == nil {
		err = registry.Check(h)
	}
	if err == nil && f.Slots != nil && *f.Slots > f.Concurrency {
		err = invalidField("slots", "must be at most concurrency")
	}
	if err == nil {
		err = checkQueueCaps(&f)
	}
	if err != nil {
		c.answerError("", err)
		c.conn.Fail(websocket.StatusPolicyViolation, "bad hello")
		return
	}
	c.hello = &h
	free := f.Concurrency
	if f.Slots != nil {
		free = *f.Slots
	}
	c.mu.Lock()
	c.free, c.inFlight = free, f.Concurrency-free
	groups := [][]string{h.Queues}
	if len(f.QueueConcurrency) > 0 {
		c.caps, c.qfree, c.qreserved = f.QueueConcurrency, map[string]int{}, map[string]int{}
		for q, n := range f.QueueConcurrency {
			c.qfree[q] = n - f.Held[q]
		}
		// Each queue's long-polling claim waits for that queue's room.
		groups = groups[:0]
		for _, q := range h.Queues {
			groups = append(groups, []string{q})
		}
	}
	c.mu.Unlock()
	c.log = c.api.log.With().Str("worker", h.ID).Logger()
	lease := c.api.jobLease
	c.send("welcome", welcomeFrame{Type: "welcome", LeaseMs: lease.Milliseconds(), HeartbeatMs: (lease / 3).Milliseconds(),
		MaxFrameBytes: c.api.limits.MaxBodyBytes + channelFrameSlack, MaxInFlight: maxChannelInFlight, NextInAck: true})
	if reg := c.api.workers; reg != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.conn.Context()), registryTimeout)
		if err := reg.Arrive(ctx, h); err != nil {
			c.log.Warn().Err(err).Msg("the worker registry could not record a worker's arrival")
		}
		cancel()
		c.wg.Go(func() { c.beats(reg, lease/3) })
	}
	c.wakes = make([]chan struct{}, len(groups))
	for i := range groups {
		c.wakes[i] = make(chan struct{}, 1)
	}
	for i, qs := range groups {
		c.wg.Go(func() { c.offers(qs, c.wakes[i]) })
	}
}

// checkQueueCaps checks a hello's queueConcurrency and held against its
// queues and concurrency. Every queue is capped and the caps fit in
// concurrency, so that each queue's room is free slots of the worker's
// that no other queue's claim can take.
func checkQueueCaps(f *helloFrame) error {
	if len(f.QueueConcurrency) == 0 {
		if len(f.Held) > 0 {
			return invalidField("held", "only with queueConcurrency")
		}
		return nil
	}
	sum := 0
	for q, n := range f.QueueConcurrency {
		if !slices.Contains(f.Queues, q) {
			return invalidField("queueConcurrency", "names only queues of queues")
		}
		sum += n
	}
	for _, q := range f.Queues {
		if _, ok := f.QueueConcurrency[q]; !ok {
			return invalidField("queueConcurrency", "names every queue of queues")
		}
	}
	if sum > f.Concurrency {
		return invalidField("queueConcurrency", "adds up to at most concurrency")
	}
	for q, n := range f.Held {
		if n > f.QueueConcurrency[q] {
			return invalidField("held", "names only queues of queueConcurrency, each with at most its concurrency")
		}
	}
	return nil
}

// claimable is the queues of qs a claim for at most n jobs may take from,
// and n cut to the room the capped ones among them have; that room is
// reserved until the claim gives it back (reserveQueues with -n). extra,
// when capped, has one slot more: a
// completion's, whose claim is stored only with it. Called with mu held.
func (c *workerChannel) claimable(qs []string, n int, extra string) ([]string, int) {
	if c.caps == nil {
		return qs, n
	}
	open := make([]string, 0, len(qs))
	for _, q := range qs {
		free, capped := c.qfree[q]
		if capped {
			room := free - c.qreserved[q]
			if q == extra {
				room++
			}
			if room <= 0 {
				continue
			}
			n = min(n, room)
		}
		open = append(open, q)
	}
	if len(open) == 0 {
		return nil, 0
	}
	c.reserveQueues(open, n)
	return open, n
}

// reserveQueues adds n to the reserved room of the capped queues of qs (a
// negative n gives it back). Called with mu held.
func (c *workerChannel) reserveQueues(qs []string, n int) {
	for _, q := range qs {
		if _, capped := c.caps[q]; capped {
			c.qreserved[q] += n
		}
	}
}

// tookQueues counts the slots of the capped queues that jobs take. Called
// with mu held.
func (c *workerChannel) tookQueues(jobs []store.Job) {
	for _, j := range jobs {
		if _, capped := c.caps[j.Queue]; capped {
			c.qfree[j.Queue]--
		}
	}
}

// freeQueue counts n more free slots of queue q when the hello capped it.
func (c *workerChannel) freeQueue(q string, n int) {
	if c.caps == nil {
		return
	}
	c.mu.Lock()
	if most, capped := c.caps[q]; capped {
		c.qfree[q] = min(c.qfree[q]+n, most)
	}
	c.mu.Unlock()
	c.wakeAll()
}

// answer is what a request frame is answered with: the HTTP call's body,
// and jobs to offer right after it, or with next a slot that waits for its
// next job after it (nextJob). With inAck (a complete frame's nextInAck)
// the jobs, or the slot's wait for its next job, come first, and the jobs
// go in the ack's body (completeBody) rather than in an offer.
type answer struct {
	body  any
	offer []store.Job
	next  bool
	inAck bool
}

// request runs one request frame in a goroutine of its own once fewer than
// maxChannelInFlight are running, waiting for that (and so reading nothing
// more of the channel) meanwhile. do reads the frame, names its ref and
// answers it.
func (c *workerChannel) request(raw []byte, do func(ctx context.Context, raw []byte, head *jobFrame) (answer, error)) {
	if c.hello == nil {
		c.answerError(refOf(raw), errNoHello)
		c.conn.Fail(websocket.StatusPolicyViolation, "hello first")
		return
	}
	select {
	case c.requests <- struct{}{}:
	case <-c.conn.Context().Done():
		return
	}
	c.run(func() {
		// A slot waiting for its next job after the ack holds no token.
		release := sync.OnceFunc(func() { <-c.requests })
		defer release()
		// A request outlives its channel, as an HTTP call outlives its
		// client: a completion being stored when the channel drops is
		// stored, and its repeat is answered as a repeat.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.conn.Context()), c.api.limits.RequestTimeout)
		defer cancel()
		var head jobFrame
		ans, err := do(ctx, raw, &head)
		ref := head.Ref
		if head.Type == "" {
			ref = refOf(raw) // the frame could not be read
		}
		if err != nil {
			c.answerError(ref, err)
			return
		}
		if ans.inAck {
			if ans.next {
				release()
				ans.offer = c.nextJob()
			}
			if ans.offer == nil {
				ans.offer = []store.Job{}
			}
			ans.body = completeBody{Status: "ok", Jobs: ans.offer}
		}
		if !c.send("ack", ackFrame{Type: "ack", Ref: ref, Body: ans.body}) {
			return
		}
		switch {
		case len(ans.offer) == 0:
		case ans.inAck:
			c.api.channels.Offered(len(ans.offer))
		default:
			c.offer(ans.offer)
		}
		if ans.next && !ans.inAck {
			release()
			if jobs := c.nextJob(); len(jobs) > 0 {
				c.offer(jobs)
			}
		}
	})
}

// runnerIdle is how long a runner of a channel's requests waits for the
// next one before it exits.
const runnerIdle = time.Second

// run runs f on an idle runner of the channel's requests, or on a new one.
// A runner waits a while for the next request before it exits: its stack,
// grown once deep in the engine and the store, then serves the next
// request as it is, where a goroutine of its own per request grew its
// stack again each time.
func (c *workerChannel) run(f func()) {
	select {
	case c.work <- f:
		return
	default:
	}
	c.wg.Go(func() {
		idle := time.NewTimer(runnerIdle)
		defer idle.Stop()
		done := c.conn.Context().Done()
		for {
			f()
			idle.Reset(runnerIdle)
			select {
			case f = <-c.work:
			case <-idle.C:
				return
			case <-done:
				return
			}
		}
	})
}

// refOf is the ref of a frame that could not be read, if it has one.
func refOf(raw []byte) string {
	var head struct {
		Ref any `json:"ref"`
	}
	_ = json.Unmarshal(raw, &head)
	ref, _ := head.Ref.(string)
	if len(ref) > maxRef {
		return ""
	}
	return ref
}

// maxRef bounds a request's ref.
const maxRef = 64

// job reads a request frame into f, whose head is head, checks its call's
// body (the part of f that is body) and names its job.
func (c *workerChannel) job(raw []byte, f any, head *jobFrame, body leased) (store.JobAck, error) {
	if err := decodeChecked(raw, f, ""); err != nil {
		return store.JobAck{}, err
	}
	if len(head.Ref) < 1 || len(head.Ref) > maxRef {
		return store.JobAck{}, invalidField("ref", "must be 1 to 64 bytes")
	}
	if err := c.api.validateStruct(body, ""); err != nil {
		return store.JobAck{}, err
	}
	return jobOf(head.Queue, head.JobID, body.lease())
}

func (c *workerChannel) heartbeat(ctx context.Context, raw []byte, head *jobFrame) (answer, error) {
	var f heartbeatFrame
	ack, err := c.job(raw, &f, &f.jobFrame, &f.leaseRequest)
	*head = f.jobFrame
	if err != nil {
		return answer{}, err
	}
	beat, err := c.api.engine.Heartbeat(ctx, ack)
	return answer{body: beat}, err
}

func (c *workerChannel) events(ctx context.Context, raw []byte, head *jobFrame) (answer, error) {
	var f eventsFrame
	ack, err := c.job(raw, &f, &f.jobFrame, &f.reportRequest)
	*head = f.jobFrame
	if err == nil && f.IdempotencyKey != nil {
		err = checkKey("idempotencyKey", *f.IdempotencyKey)
	}
	if err != nil {
		return answer{}, err
	}
	key := ""
	if f.IdempotencyKey != nil {
		key = *f.IdempotencyKey
	}
	body, err := c.api.report(ctx, ack, f.Events, key)
	return answer{body: body}, err
}

func (c *workerChannel) complete(ctx context.Context, raw []byte, head *jobFrame) (answer, error) {
	var f completeFrame
	ack, err := c.job(raw, &f, &f.jobFrame, &f.completeRequest)
	*head = f.jobFrame
	if err == nil && f.Claim != nil {
		err = invalidField("claim", "not on the channel: next offers the slot's next job")
	}
	if err == nil && f.NextInAck && !f.Next {
		err = invalidField("nextInAck", "only with next")
	}
	if err != nil {
		c.ended(false, err)
		return answer{}, err
	}
	var next *engine.Next
	if f.Next {
		// The slot the job frees takes a job ready now in the
		// completion's own write, where the store can.
		c.mu.Lock()
		qs, n := c.claimable(c.hello.Queues, 1, f.Queue)
		c.mu.Unlock()
		if n > 0 {
			next = &engine.Next{Queues: qs, Max: 1}
			defer func() {
				c.mu.Lock()
				c.reserveQueues(qs, -n)
				c.mu.Unlock()
			}()
		}
	}
	jobs, claimed, err := c.api.completeReport(ctx, ack, &f.completeRequest, next)
	if err != nil {
		c.ended(false, err)
		return answer{}, err
	}
	if f.Next {
		c.freeQueue(f.Queue, 1)
	}
	ok := answer{body: statusBody{Status: "ok"}}
	if claimed && len(jobs) > 0 {
		if err := c.api.resolveInputs(ctx, jobs); err != nil {
			// The completion stands; the job goes back to its queue when
			// its lease runs out, and the slot is free.
			c.log.Error().Err(err).Msg("the input of a claimed job could not be read from the bucket")
			c.ended(f.Next, nil)
			ok.inAck = f.NextInAck
			return ok, nil
		}
		// The slot is taken again at once; a job beyond it (a store that
		// claimed more than asked) takes one more.
		c.mu.Lock()
		c.free -= len(jobs) - 1
		c.inFlight += len(jobs) - 1
		c.tookQueues(jobs)
		c.mu.Unlock()
		ok.offer, ok.inAck = jobs, f.NextInAck
		return ok, nil
	}
	c.ended(false, nil)
	ok.next, ok.inAck = f.Next, f.NextInAck
	return ok, nil
}

// nextJob is the slot a completion with next freed, when the completion's
// write took no job for it: it waits briefly to be handed one started
// meanwhile, as the completion's claim over HTTP does (claimNext), and
// returns it for the worker; otherwise the slot counts as free. Each slot
// waits on its own, so that every start finds a waiting claim while the
// worker's slots wait, where the offer loop's one claim would take a
// single job and then look at the store again. A pause while it waits
// leaves the slot taken.
func (c *workerChannel) nextJob() []store.Job {
	c.mu.Lock()
	pauses := c.pauses
	qs, n := c.claimable(c.hello.Queues, 1, "")
	c.mu.Unlock()
	jobs := []store.Job{}
	if n > 0 {
		jobs = c.api.claimNext(c.conn.Context(), c.log, qs, 1, nextJobWait)
	}
	c.mu.Lock()
	c.reserveQueues(qs, -n)
	c.tookQueues(jobs)
	c.inFlight += len(jobs)
	paused := c.pauses != pauses
	c.mu.Unlock()
	if len(jobs) == 0 && !paused {
		c.addFree(1)
	}
	return jobs
}

func (c *workerChannel) fail(ctx context.Context, raw []byte, head *jobFrame) (answer, error) {
	var f failFrame
	ack, err := c.job(raw, &f, &f.jobFrame, &f.failRequest)
	*head = f.jobFrame
	if err == nil {
		err = c.api.failReport(ctx, ack, &f.failRequest)
	}
	c.ended(f.Next && err == nil, err)
	if err != nil {
		return answer{}, err
	}
	if f.Next {
		c.freeQueue(f.Queue, 1)
	}
	return answer{body: statusBody{Status: "ok"}}, nil
}

// ended counts a job's outcome answered with err (nil for ack): the worker
// holds the job no more unless it will repeat the outcome (the count the
// registry shows), and with free its slot is free (only an ack frees one:
// after any other answer the worker says so with slots when it is done
// with the job).
func (c *workerChannel) ended(free bool, err error) {
	if err != nil {
		status, _ := answerOf(err)
		if status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500 {
			return // the worker repeats it
		}
	}
	c.mu.Lock()
	c.inFlight = max(c.inFlight-1, 0)
	c.mu.Unlock()
	if free {
		c.addFree(1)
	}
}

// addFree counts n more free slots, never more than the worker has.
func (c *workerChannel) addFree(n int) {
	c.mu.Lock()
	c.free = min(c.free+n, c.hello.Concurrency)
	c.mu.Unlock()
	c.wakeAll()
}

// wakeAll tells every offer loop that slots were freed.
func (c *workerChannel) wakeAll() {
	for _, wake := range c.wakes {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
}

// offers claims jobs of queues for the worker's free slots and offers
// them, until the channel ends: a long-polling claim for as many jobs as
// slots are free (and, for a capped queue, as it has room for), woken as
// any claim is.
func (c *workerChannel) offers(queues []string, wake <-chan struct{}) {
	ctx := c.conn.Context()
	for {
		c.mu.Lock()
		n := min(c.free-c.reserved, maxOffer)
		var qs []string
		if n > 0 {
			qs, n = c.claimable(queues, n, "")
			c.reserved += n
		}
		c.mu.Unlock()
		if n <= 0 {
			select {
			case <-ctx.Done():
				return
			case <-wake:
				continue
			}
		}
		jobs, err := c.api.claimResolved(ctx, c.api.engine.Claim, qs, n, MaxClaimWait)
		c.mu.Lock()
		c.reserved -= n
		c.reserveQueues(qs, -n)
		// A pause while the claim went on leaves the jobs it took
		// offered: never more than the slots free before it.
		c.free = max(c.free-len(jobs), 0)
		c.tookQueues(jobs)
		c.inFlight += len(jobs)
		c.mu.Unlock()
		if len(jobs) > 0 {
			c.offer(jobs)
		}
		switch {
		case ctx.Err() != nil, errors.Is(err, errShuttingDown):
			// The channel ends, or will with the server's shutdown.
			return
		case err != nil:
			c.log.Warn().Err(err).Msg("a claim for a worker channel failed; trying again")
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// offer sends jobs claimed for the worker, their large inputs resolved.
// Jobs that cannot be sent are leased to nobody until their leases run
// out, as the jobs of a claim whose answer was lost.
func (c *workerChannel) offer(jobs []store.Job) {
	if c.send("offer", offerFrame{Type: "offer", Jobs: jobs}) {
		c.api.channels.Offered(len(jobs))
	}
}

// beats tells the registry every interval that the worker is here, with
// its jobs in flight.
func (c *workerChannel) beats(reg *registry.Registry, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	ctx := c.conn.Context()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		n := c.inFlight
		c.mu.Unlock()
		bctx, cancel := context.WithTimeout(ctx, registryTimeout)
		if err := reg.Beat(bctx, c.hello.ID, n); err != nil && ctx.Err() == nil {
			c.log.Warn().Err(err).Msg("the worker registry could not record a worker's beat")
		}
		cancel()
	}
}

// send writes one frame, reporting whether it went out.
func (c *workerChannel) send(typ string, v any) bool {
	if err := c.conn.Send(v); err != nil {
		return false
	}
	c.api.channels.Frame("out", typ)
	return true
}

// answerError tells the worker of err, in answer to the request ref when
// not empty.
func (c *workerChannel) answerError(ref string, err error) {
	status, body := answerOf(err)
	if status >= 500 {
		c.log.Error().Err(err).Int("status", status).Msg("a worker channel's request failed")
	}
	f := errorFrame{Type: "error", Ref: ref, Status: status, Error: body.Error}
	if retryAfter(status, body.Error.Code) {
		f.RetryAfterMs = retryAfterWait.Milliseconds()
	}
	c.send("error", f)
}

// Close waits for the channel's goroutines and, when the worker closed the
// channel itself, tells the registry it left. A channel that drops, or that
// nqd closes as it shuts down, leaves the worker to reconnect (here or to
// another instance) within the registry's lost time; the jobs it holds keep
// their leases.
func (c *workerChannel) Close() {
	c.wg.Wait()
	c.api.channels.ChannelClosed()
	if c.hello == nil || c.api.workers == nil || !c.conn.ClientClosed() || c.api.closing.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), registryTimeout)
	defer cancel()
	if err := c.api.workers.Leave(ctx, c.hello.ID, registry.ReasonClosed); err != nil {
		c.log.Warn().Err(err).Msg("the worker registry could not record a worker's departure")
	}
}

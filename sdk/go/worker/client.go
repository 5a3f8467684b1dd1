package worker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"
)

// StatusError is an answer of nqd other than 2xx, with the error body of
// the protocol.
type StatusError struct {
	Status  int
	Code    string
	Message string
	Fields  map[string]string
	// RetryAfter is the answer's Retry-After, when it had one.
	RetryAfter time.Duration
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("nqd answered %d %s: %s", e.Status, e.Code, e.Message)
	for k, v := range e.Fields {
		msg += fmt.Sprintf(" (%s: %s)", k, v)
	}
	return msg
}

// retriable reports whether a failed call may succeed when repeated: no
// answer at all (a call that timed out included), or an answer that says
// nqd is busy or unwell. Callers whose own context ended stop regardless.
func retriable(err error) bool {
	var ee *EncodeError
	if errors.As(err, &ee) {
		return false
	}
	var se *StatusError
	if !errors.As(err, &se) {
		return true
	}
	return se.Status == http.StatusRequestTimeout || se.Status == http.StatusTooManyRequests || se.Status >= 500
}

func hasStatus(err error, codes ...int) bool {
	var se *StatusError
	if !errors.As(err, &se) {
		return false
	}
	for _, c := range codes {
		if se.Status == c {
			return true
		}
	}
	return false
}

type client struct {
	base  string
	http  *http.Client
	token string
	// self names the worker in nqd's registry: the Nqd-Worker-* headers
	// every call carries (docs/worker-protocol.md).
	self http.Header
	// ch is the open worker channel, nil when there is none.
	ch atomic.Pointer[chConn]
}

// Job is a claimed job as nqd hands it out.
type Job struct {
	ID       string          `json:"id"`
	Queue    string          `json:"queue"`
	FlowName string          `json:"flowName"`
	RunID    string          `json:"runId"`
	Step     string          `json:"step"`
	Input    json.RawMessage `json:"input"`
	Attempt  int             `json:"attempt"`
	Lease    string          `json:"lease"`
	// LeaseEnd is when the lease runs out unless extended, epoch ms.
	LeaseEnd int64 `json:"leaseUntil"`
}

func (c *client) claim(ctx context.Context, queues []string, max int) ([]Job, error) {
	var ans struct{ Jobs []Job }
	body := map[string]any{"queues": queues, "max": max, "waitMs": claimWait.Milliseconds()}
	err := c.postWithin(ctx, claimWait+callTimeout, "/api/_workers/claim", body, "", &ans)
	return ans.Jobs, err
}

// jobPath is the base of the calls about job j.
func jobPath(j Job) string {
	return "/api/_workers/jobs/" + url.PathEscape(j.Queue) + "/" + url.PathEscape(j.ID)
}

// post sends body as JSON to path, with key as its Idempotency-Key when
// set, and decodes a 2xx answer into out, within callTimeout.
func (c *client) post(ctx context.Context, path string, body any, key string, out any) error {
	return c.postWithin(ctx, callTimeout, path, body, key, out)
}

func (c *client) postWithin(ctx context.Context, timeout time.Duration, path string, body any, key string, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return &EncodeError{Field: "the body of " + path, Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	return c.do(req, out)
}

func (c *client) get(ctx context.Context, path string, out any) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	return c.do(req, out)
}

// maxAnswer bounds an answer read into memory.
const maxAnswer = 16 << 20

func (c *client) do(req *http.Request, out any) error {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for k, v := range c.self {
		req.Header[k] = v
	}
	res, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer))
	if err != nil {
		return err
	}
	if res.StatusCode/100 != 2 {
		se := &StatusError{Status: res.StatusCode}
		var body struct {
			Error struct {
				Code    string            `json:"code"`
				Message string            `json:"message"`
				Fields  map[string]string `json:"fields"`
			} `json:"error"`
		}
		if json.Unmarshal(b, &body) == nil && body.Error.Code != "" {
			se.Code, se.Message, se.Fields = body.Error.Code, body.Error.Message, body.Error.Fields
		} else {
			se.Message = http.StatusText(res.StatusCode)
		}
		if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil && s > 0 {
			se.RetryAfter = time.Duration(s) * time.Second
		}
		return se
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// newKey is a fresh Idempotency-Key for one report.
func newKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

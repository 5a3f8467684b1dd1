package handlers_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/nqd-dev/nqd/handlers"
	"github.com/nqd-dev/nqd/stream"
)

// withStream mounts the SSE routes on a real stream handler.
func withStream(t testing.TB) func(*handlers.Deps) {
	return func(d *handlers.Deps) {
		sh := stream.NewHandler(stream.Options{Store: d.Store.(stream.Source), Log: d.Log, TrustLive: true})
		t.Cleanup(sh.Close)
		d.Stream = sh
	}
}

func TestStreamInvalidRequest(t *testing.T) {
	api := newTestAPI(t, withStream(t))
	for _, path := range []string{
		"/api/_events/Flow/run-1/stream",
		"/api/_events/flows/run-1/stream",
		"/api/_events/flow/list/stream",
		"/api/_events/flow/-x/stream",
		"/api/_events/flow/run-1/stream?backfill=-1",
		"/api/_events/flow/run-1/stream?backfill=ten",
		"/api/_events/sse?stream=nq:flow",
		"/api/_events/sse?stream=",
		"/api/_events/sse?stream=other:flow:run-1",
		"/api/_events/sse?stream=" + url.QueryEscape("nq:flow:a b"),
	} {
		rec := api.do(t, get(path))
		body := decode[struct {
			Error struct {
				Code, Message string
				Fields        map[string]string
			}
		}](t, rec)
		if rec.Code != http.StatusBadRequest || body.Error.Code != "validation_failed" || len(body.Error.Fields) == 0 {
			t.Errorf("GET %s: got %d %+v, want 400 validation_failed with fields", path, rec.Code, body)
		}
	}
}

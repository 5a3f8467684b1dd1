package handlers_test

import (
	"net/http"
	"testing"
)

// TestLogTextInBothSpellings: a log line is stored with its text as both
// data.message (the v0.3 UI) and data.msg (the SDKs), whichever was sent, and
// two different texts are refused.
func TestLogTextInBothSpellings(t *testing.T) {
	api := newTestAPI(t)
	rec := api.do(t, post("/api/_events/flow/logs-1", `{"events":[
		{"kind":"log","data":{"level":"info","msg":"from an SDK"}},
		{"kind":"log.warn","data":{"message":"from the v0.3 UI"}}]}`))
	wantStatus(t, rec, http.StatusCreated)
	rec = api.do(t, get("/api/_events/flow/logs-1"))
	wantStatus(t, rec, http.StatusOK)
	body := decode[struct {
		Events []struct {
			Data struct{ Msg, Message string }
		}
	}](t, rec)
	if len(body.Events) != 2 {
		t.Fatalf("got %d events, want 2", len(body.Events))
	}
	for i, want := range []string{"from an SDK", "from the v0.3 UI"} {
		if d := body.Events[i].Data; d.Msg != want || d.Message != want {
			t.Errorf("event %d: data.msg %q, data.message %q; want both %q", i, d.Msg, d.Message, want)
		}
	}

	rec = api.do(t, post("/api/_events/flow/logs-1", `{"kind":"log","data":{"msg":"a","message":"b"}}`))
	wantStatus(t, rec, http.StatusBadRequest)
	if e := decode[errorBody](t, rec); e.Error.Fields["data.message"] == "" {
		t.Errorf("a log with two texts: %+v, want a data.message field error", e)
	}
}

package handlers_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/nqd-dev/nqd/archive"
	"github.com/nqd-dev/nqd/handlers"
)

// withData keeps step data over large bytes by reference in a directory
// bucket, and bounds a claim's answer at claimBytes.
func withData(t testing.TB, large, claimBytes int64) func(*handlers.Deps) {
	return func(d *handlers.Deps) {
		b, err := archive.NewDir(t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		d.Data = b
		d.Limits.LargeDataBytes = large
		d.Limits.ClaimBytes = claimBytes
	}
}

// bigInput is a run's input of about n bytes.
func bigInput(n int, tag string) string {
	return fmt.Sprintf(`{"tag":%q,"blob":%q}`, tag, strings.Repeat("x", n))
}

type claimedInput struct {
	Jobs []struct {
		RunID string          `json:"runId"`
		Input json.RawMessage `json:"input"`
	} `json:"jobs"`
}

// TestLargeInputAtStartByReference: a run's input over the threshold is
// kept by reference, as results are: the run's state carries the
// reference, the entry step's claim the value, and the reference's url
// answers it; a keyed start repeated finds the same run, and the key with
// another large input is refused.
func TestLargeInputAtStartByReference(t *testing.T) {
	api := newTestAPI(t, withState(t), withData(t, 1024, 0))
	putDemoFlowOpen(t, api)
	input := bigInput(4096, "a")

	rec := api.do(t, withKey(post("/api/_flows/demo/start", input), "big-1"))
	wantStatus(t, rec, http.StatusOK)
	run := decode[struct{ FlowID string }](t, rec).FlowID
	wantStatus(t, api.do(t, withKey(post("/api/_flows/demo/start", input), "big-1")), http.StatusOK)
	rec = api.do(t, withKey(post("/api/_flows/demo/start", bigInput(4096, "b")), "big-1"))
	wantStatus(t, rec, http.StatusUnprocessableEntity)

	rec = api.do(t, get("/api/_events/flow/"+run+"/state"))
	wantStatus(t, rec, http.StatusOK)
	var st struct {
		State struct {
			Input struct {
				Ref struct {
					Bytes int64  `json:"bytes"`
					URL   string `json:"url"`
				} `json:"$nqdRef"`
			} `json:"input"`
		} `json:"state"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.State.Input.Ref.URL == "" {
		t.Fatalf("state %s: want the input by reference (%v)", rec.Body, err)
	}
	if st.State.Input.Ref.Bytes != int64(len(input)) {
		t.Errorf("reference of %d bytes, want %d", st.State.Input.Ref.Bytes, len(input))
	}
	rec = api.do(t, get(st.State.Input.Ref.URL))
	wantStatus(t, rec, http.StatusOK)
	if rec.Body.String() != input {
		t.Errorf("GET %s: %d bytes, want the input", st.State.Input.Ref.URL, rec.Body.Len())
	}

	rec = api.do(t, post("/api/_workers/claim", `{"queues":["q1"],"max":1}`))
	wantStatus(t, rec, http.StatusOK)
	jobs := decode[claimedInput](t, rec).Jobs
	if len(jobs) != 1 || string(jobs[0].Input) != input {
		t.Fatalf("claimed %d jobs; want the run's job with its input resolved", len(jobs))
	}

	// A small input stays in the event.
	rec = api.do(t, post("/api/_flows/demo/start", `{"n":1}`))
	wantStatus(t, rec, http.StatusOK)
	small := decode[struct{ FlowID string }](t, rec).FlowID
	rec = api.do(t, get("/api/_events/flow/"+small+"/state"))
	if !strings.Contains(rec.Body.String(), `"input":{"n":1}`) {
		t.Errorf("state %s: want the small input inline", rec.Body)
	}
}

// TestClaimAnswerBudget: a claim stops adding jobs once their resolved
// inputs reach the budget, and a job over it goes alone; the jobs left
// stay ready for the next claim.
func TestClaimAnswerBudget(t *testing.T) {
	api := newTestAPI(t, withData(t, 1024, 10000))
	putDemoFlowOpen(t, api)
	for _, in := range []string{bigInput(6000, "a"), bigInput(6000, "b"), bigInput(6000, "c"), bigInput(30000, "d"), `{"tag":"e"}`} {
		wantStatus(t, api.do(t, post("/api/_flows/demo/start", in)), http.StatusOK)
	}
	var sizes [][]int
	for range 4 {
		rec := api.do(t, post("/api/_workers/claim", `{"queues":["q1"],"max":10}`))
		wantStatus(t, rec, http.StatusOK)
		var got []int
		for _, j := range decode[claimedInput](t, rec).Jobs {
			got = append(got, len(j.Input))
		}
		sizes = append(sizes, got)
	}
	a, d, e := len(bigInput(6000, "a")), len(bigInput(30000, "d")), len(`{"tag":"e"}`)
	want := [][]int{{a, a}, {a, d}, {e}, nil}
	if fmt.Sprint(sizes) != fmt.Sprint(want) {
		t.Errorf("claim answers of input sizes %v, want %v", sizes, want)
	}
}

// putDemoFlowOpen stores the one-step flow "demo" on queue q1 on a server
// without tokens.
func putDemoFlowOpen(t *testing.T, api *testAPI) {
	t.Helper()
	rec := api.do(t, request{method: http.MethodPut, target: "/api/_flows/demo", body: `{"entry":"a","steps":{"a":{"queue":"q1"}}}`})
	wantStatus(t, rec, http.StatusOK)
}

// TestClearHistoryDeletesValues: clearing a flow's history deletes the
// values its runs kept by reference (nothing refers to them any more),
// and no other flow's.
func TestClearHistoryDeletesValues(t *testing.T) {
	api := newTestAPI(t, withState(t), withData(t, 1024, 0))
	putDemoFlowOpen(t, api)
	rec := api.do(t, request{method: http.MethodPut, target: "/api/_flows/other", body: `{"entry":"a","steps":{"a":{"queue":"q2"}}}`})
	wantStatus(t, rec, http.StatusOK)
	inputURL := func(flow, input string) string {
		t.Helper()
		rec := api.do(t, post("/api/_flows/"+flow+"/start", input))
		wantStatus(t, rec, http.StatusOK)
		run := decode[struct{ FlowID string }](t, rec).FlowID
		rec = api.do(t, get("/api/_events/flow/"+run+"/state"))
		var st struct {
			State struct {
				Input struct {
					Ref struct {
						URL string `json:"url"`
					} `json:"$nqdRef"`
				} `json:"input"`
			} `json:"state"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.State.Input.Ref.URL == "" {
			t.Fatalf("state %s: want the input by reference (%v)", rec.Body, err)
		}
		return st.State.Input.Ref.URL
	}
	cleared := []string{inputURL("demo", bigInput(4096, "a")), inputURL("demo", bigInput(4096, "b"))}
	kept := inputURL("other", bigInput(4096, "c"))

	rec = api.do(t, request{method: http.MethodDelete, target: "/api/_flows/demo/clear-history"})
	wantStatus(t, rec, http.StatusOK)
	for _, u := range cleared {
		wantStatus(t, api.do(t, get(u)), http.StatusNotFound)
	}
	wantStatus(t, api.do(t, get(kept)), http.StatusOK)
}

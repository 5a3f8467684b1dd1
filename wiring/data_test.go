package wiring

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/s3blob" // the raw handle on the test bucket

	"github.com/nqd-dev/nqd/internal/s3test"
)

// claimOne claims one job of queue default, waiting for it.
func claimOne(t *testing.T, base string) map[string]any {
	t.Helper()
	code, body := do(t, "POST", base+"/api/_workers/claim", `{"queues":["default"],"waitMs":5000}`)
	jobs, _ := body["jobs"].([]any)
	if code != http.StatusOK || len(jobs) != 1 {
		t.Fatalf("claim: got %d %v, want one job", code, body)
	}
	return jobs[0].(map[string]any)
}

func jobURL(base string, job map[string]any, call string) string {
	return fmt.Sprintf("%s/api/_workers/jobs/%s/%s/%s", base, job["queue"], job["id"], call)
}

// TestLargeStepDataByReference passes a result and an emit payload of 3 MB
// through a server whose archive is a bucket of a real S3-compatible
// server: the events carry references, the next step's claimed input holds
// the payload itself, and each reference's url answers its value.
func TestLargeStepDataByReference(t *testing.T) {
	flows := t.TempDir()
	def := "entry: make\nsteps:\n  make:\n    queue: default\n    emits: [made]\n  use:\n    queue: default\n    subscribes: [made]\n"
	if err := os.WriteFile(filepath.Join(flows, "big.yaml"), []byte(def), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.ArchiveURL = s3test.Start(t).Bucket(t, "data")
	cfg.FlowsDir = flows
	cfg.MaxBodyBytes = 16 << 20
	base, _ := mustStartApp(t, cfg)

	big := `"` + strings.Repeat("x", 3<<20) + `"`
	payload := `{"blob":` + big + `}`
	if code, body := do(t, "POST", base+"/api/_flows/big/start", `{}`); code != http.StatusAccepted && code != http.StatusOK && code != http.StatusCreated {
		t.Fatalf("start: got %d %v", code, body)
	}
	job := claimOne(t, base)
	emit := `{"kind":"emit","data":{"event":"made","payload":` + payload + `}}`
	complete := fmt.Sprintf(`{"lease":%q,"result":%s,"events":[%s]}`, job["lease"], big, emit)
	if code, body := do(t, "POST", jobURL(base, job, "complete"), complete); code != http.StatusOK {
		t.Fatalf("complete with 6 MB of data: got %d %v", code, body)
	}

	next := claimOne(t, base)
	in, _ := json.Marshal(next["input"])
	if want := `{"made":` + payload + `}`; string(in) != want {
		t.Fatalf("claimed input: %d bytes, want the payload itself (%d bytes)", len(in), len(want))
	}

	run := job["runId"].(string)
	_, page := do(t, "GET", base+"/api/_events/flow/"+run+"?limit=100", "")
	refs := 0
	events, _ := page["events"].([]any)
	for _, e := range events {
		raw, _ := json.Marshal(e.(map[string]any)["data"])
		if int64(len(raw)) > cfg.MaxEventBytes {
			t.Errorf("an event of %d bytes in the stream, over NQ_MAX_EVENT_BYTES", len(raw))
		}
		i := bytes.Index(raw, []byte(`"url":"`))
		if i < 0 {
			continue
		}
		refs++
		u := string(raw[i+7:])
		u = u[:strings.IndexByte(u, '"')]
		res, err := http.Get(base + u)
		if err != nil {
			t.Fatal(err)
		}
		value, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || (string(value) != big && string(value) != payload) {
			t.Errorf("GET %s: %d, %d bytes; want the result or the payload", u, res.StatusCode, len(value))
		}
	}
	if refs != 2 {
		t.Errorf("events with a reference: %d, want the result's and the emit's", refs)
	}

	// A value changed in the bucket is refused, not handed on.
	raw, err := blob.OpenBucket(t.Context(), cfg.ArchiveURL)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	sum := sha256.Sum256([]byte(big))
	key := "_data/" + run + "/" + hex.EncodeToString(sum[:])
	if err := raw.WriteAll(t.Context(), key, []byte(`"changed"`), &blob.WriterOptions{ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
	code, body := do(t, "GET", base+"/api/_events/flow/"+run+"/data/"+hex.EncodeToString(sum[:]), "")
	if code != http.StatusBadGateway || fmt.Sprint(body["error"]) == "" || !strings.Contains(fmt.Sprint(body["error"]), "archive_corrupt") {
		t.Errorf("a changed value: got %d %v, want 502 archive_corrupt", code, body)
	}

	res, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	scrape, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{"nqd_archive_objects_written_total 2", "nqd_archive_corrupt_total 1", "nqd_archive_write_failures_total 0"} {
		if !strings.Contains(string(scrape), want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestLargeStepDataWithoutABucket: without an archive a result over the
// event limit is refused with 413, naming the setting that would take it.
func TestLargeStepDataWithoutABucket(t *testing.T) {
	flows := t.TempDir()
	if err := os.WriteFile(filepath.Join(flows, "big.yaml"), []byte("entry: make\nsteps:\n  make:\n    queue: default\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.FlowsDir = flows
	base, _ := mustStartApp(t, cfg)
	do(t, "POST", base+"/api/_flows/big/start", `{}`)
	job := claimOne(t, base)
	big := `"` + strings.Repeat("x", 300<<10) + `"`
	code, body := do(t, "POST", jobURL(base, job, "complete"), fmt.Sprintf(`{"lease":%q,"result":%s}`, job["lease"], big))
	msg := fmt.Sprint(body["error"])
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "NQ_ARCHIVE_URL") {
		t.Fatalf("complete with a 300 KB result and no bucket: got %d %v, want 413 naming NQ_ARCHIVE_URL", code, body)
	}
}

package e2e_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nqd-dev/nqd/internal/s3test"
	"github.com/nqd-dev/nqd/sdk/go/worker"
)

// TestLargeDataThroughTheGoSDK runs the pipeline flow with a 10 MB input,
// result and emit payload (2 MB each under the race detector, which would
// take minutes over 10) through the Go worker SDK, unchanged, on a server
// whose archive is a bucket of a real S3-compatible server: the entry
// step's input is the run's input itself, the next step's the payload, and
// an SSE client gets the completion with a reference whose url answers the
// result.
func TestLargeDataThroughTheGoSDK(t *testing.T) {
	bucket := s3test.Start(t).Bucket(t, "data")
	base := startServer(t, []string{"-data-dir", t.TempDir(), "-archive-url", bucket, "-max-body-bytes", fmt.Sprint(48 << 20)})

	size := 10 << 20
	if raceEnabled {
		size = 2 << 20
	}
	big := strings.Repeat("0123456789abcdef", size/16)
	sum := sha256.Sum256([]byte(`"` + big + `"`))
	got := make(chan string, 1)
	startWorker(t, base, 1, map[string]worker.Handler{
		"ingest": func(ctx context.Context, sc *worker.StepContext) (any, error) {
			var in struct{ Blob string }
			if err := sc.Input(&in); err != nil {
				return nil, err
			}
			if in.Blob != big {
				return nil, fmt.Errorf("ingest's input holds %d bytes, want the %d-byte run input", len(in.Blob), len(big))
			}
			if err := sc.Emit("ingested", map[string]string{"blob": big}); err != nil {
				return nil, err
			}
			return big, nil
		},
		"transform": func(ctx context.Context, sc *worker.StepContext) (any, error) {
			var in struct {
				Ingested struct{ Blob string } `json:"ingested"`
			}
			if err := sc.Input(&in); err != nil {
				return nil, err
			}
			got <- in.Ingested.Blob
			return map[string]int{"bytes": len(in.Ingested.Blob)}, sc.Emit("transformed", map[string]int{"bytes": len(in.Ingested.Blob)})
		},
		"publish": func(ctx context.Context, sc *worker.StepContext) (any, error) { return "ok", nil },
	})

	began := time.Now()
	run := startRun(t, base, "pipeline", map[string]string{"blob": big})
	select {
	case blob := <-got:
		if blob != big {
			t.Fatalf("transform's input holds %d bytes, want the %d-byte payload", len(blob), len(big))
		}
	case <-time.After(60 * time.Second):
		t.Fatal("transform never ran")
	}
	waitFor(t, 60*time.Second, "pipeline to complete", func() bool { return runs(t, base, "pipeline", "completed", 0, 1).Total == 1 })
	t.Logf("%d-byte input, result and emit through the Go SDK: %v", len(big), time.Since(began).Round(time.Millisecond))

	// An SSE client reads the run from its start: ingest's completion
	// carries the reference, not 10 MB.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/api/_events/flow/"+run+"/stream?fromId=0-0", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var ref struct {
		Ref struct {
			SHA256 string `json:"sha256"`
			Bytes  int64  `json:"bytes"`
			URL    string `json:"url"`
		} `json:"$nqdRef"`
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20) // no event line comes near 10 MB
	for ref.Ref.URL == "" && sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok || !strings.Contains(line, `"step.completed"`) || !strings.Contains(line, `"ingest"`) {
			continue
		}
		var e struct {
			Record struct {
				Data struct {
					Result json.RawMessage `json:"result"`
				} `json:"data"`
			} `json:"record"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("SSE event %s: %v", line, err)
		}
		if err := json.Unmarshal(e.Record.Data.Result, &ref); err != nil || ref.Ref.URL == "" {
			t.Fatalf("ingest's completion on SSE: %s, want a reference", line)
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("SSE: %v", err)
	}
	if ref.Ref.SHA256 != hex.EncodeToString(sum[:]) || ref.Ref.Bytes != int64(len(big)+2) {
		t.Fatalf("reference %+v, want the result's hash and size", ref.Ref)
	}
	cancel()

	vres, err := http.Get(base + ref.Ref.URL)
	if err != nil {
		t.Fatal(err)
	}
	value, _ := io.ReadAll(vres.Body)
	vres.Body.Close()
	if vres.StatusCode != http.StatusOK || string(value) != `"`+big+`"` {
		t.Fatalf("GET %s: %d, %d bytes; want the %d-byte result", ref.Ref.URL, vres.StatusCode, len(value), len(big)+2)
	}
}

package wiring_test

import (
	"testing"
	"time"

	"github.com/nqd-dev/nqd/config"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/s3test"
	"github.com/nqd-dev/nqd/internal/testkit"
	"github.com/nqd-dev/nqd/internal/wait"
	"github.com/nqd-dev/nqd/store"
	"github.com/nqd-dev/nqd/store/boltstore"
	"github.com/nqd-dev/nqd/store/boltstore/bolttest"
	"github.com/nqd-dev/nqd/wiring"
)

func TestStartRetentionArchivesThenExpires(t *testing.T) {
	t.Run("dir", func(t *testing.T) {
		testRetentionArchives(t, config.Config{RetainCompleted: time.Hour, ArchiveDir: t.TempDir(), RetentionInterval: time.Second})
	})
	t.Run("s3", func(t *testing.T) {
		u := s3test.Start(t).Bucket(t, "runs")
		testRetentionArchives(t, config.Config{RetainCompleted: time.Hour, ArchiveURL: u, RetentionInterval: time.Second})
	})
}

func testRetentionArchives(t *testing.T, cfg config.Config) {
	st := bolttest.Open(t, boltstore.Options{Retention: wiring.RetentionPolicy(cfg)})
	finished := time.Now().Add(-2 * time.Hour).UnixMilli()
	m := store.RunMeta{FlowName: "f", RunID: "r1", Status: store.RunCompleted, StartedAt: finished, CompletedAt: finished}
	if _, err := st.UpdateRun(t.Context(), store.RunUpdate{Meta: m, Events: []event.Event{{Kind: "flow.completed", Subject: "r1", RunID: "r1", FlowName: "f"}}}); err != nil {
		t.Fatal(err)
	}

	arch, err := wiring.OpenArchive(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer arch.Close()
	stop := wiring.StartRetention(t.Context(), st, cfg, arch, testkit.Logger(t))
	defer stop()
	wait.For(t, 20*time.Second, 20*time.Millisecond, "the run to expire", func() bool {
		info, err := st.Info(t.Context(), store.Context{Type: "flow", ID: "r1"})
		if err != nil {
			t.Fatal(err)
		}
		return info.Length == 0
	})
	if man, err := arch.Verify(t.Context(), store.Context{Type: "flow", ID: "r1"}); err != nil || man.Events != 1 {
		t.Fatalf("archive of the expired run: %+v, %v", man, err)
	}
}

package spawn

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestOwnedTempDirSweepsDirsOfExitedOwners(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	const prefix = "nqd-sweeptest-"

	// A process that has exited and been waited for: its pid is free.
	exited := exec.Command("true")
	if err := exited.Run(); err != nil {
		t.Fatal(err)
	}
	// A process that runs until the test ends.
	live := exec.Command("sleep", "600")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = live.Process.Kill(); _ = live.Wait() })

	owned := func(name string, pid int) string {
		dir := filepath.Join(tmp, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if pid != 0 {
			if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(pid)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	deadOwner := owned(prefix+"dead", exited.Process.Pid)
	liveOwner := owned(prefix+"live", live.Process.Pid)
	selfOwned := owned(prefix+"self", os.Getpid())
	otherPrefix := owned("nqd-othertest-dead", exited.Process.Pid)
	unownedNew := owned(prefix+"unowned-new", 0)
	unownedOld := owned(prefix+"unowned-old", 0)
	old := time.Now().Add(-2 * unownedGrace)
	if err := os.Chtimes(unownedOld, old, old); err != nil {
		t.Fatal(err)
	}

	dir, err := OwnedTempDir(prefix)
	if err != nil {
		t.Fatal(err)
	}

	exists := func(dir string) bool {
		_, err := os.Stat(dir)
		return err == nil
	}
	for _, c := range []struct {
		dir  string
		want bool
	}{
		{deadOwner, false},
		{unownedOld, false},
		{liveOwner, true},
		{selfOwned, true},
		{otherPrefix, true},
		{unownedNew, true},
		{dir, true},
	} {
		if got := exists(c.dir); got != c.want {
			t.Errorf("%s: exists = %v, want %v", filepath.Base(c.dir), got, c.want)
		}
	}

	if filepath.Dir(dir) != tmp || !strings.HasPrefix(filepath.Base(dir), prefix) {
		t.Errorf("new dir %s: want %s/%s*", dir, tmp, prefix)
	}
	b, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if err != nil || string(b) != strconv.Itoa(os.Getpid()) {
		t.Errorf("owner file of the new dir: %q, %v; want this process's pid %d", b, err, os.Getpid())
	}
}

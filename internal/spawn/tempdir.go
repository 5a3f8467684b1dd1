package spawn

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ownerFile holds the pid of the test binary that made an owned directory.
const ownerFile = "owner.pid"

// unownedGrace is how long a directory without an owner file is left alone:
// its maker may not have written the file yet.
const unownedGrace = time.Hour

// OwnedTempDir makes a new temporary directory named prefix+random, owned by
// this process, after removing the directories of that prefix whose owner is
// gone. It is for what lives as long as the test binary (a shared server, a
// built binary): nothing runs after the binary to remove it, and a run cut
// short skips its cleanup, so the next run sweeps it instead. The owner is
// the test binary, not a server it starts: a test may kill its server and
// restart it on the same directory.
func OwnedTempDir(prefix string) (string, error) {
	sweepStale(prefix)
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// sweepStale removes the directories of prefix whose owning process has
// exited, and those without an owner older than unownedGrace.
func sweepStale(prefix string) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			if st, err := os.Stat(dir); err == nil && st.IsDir() && time.Since(st.ModTime()) > unownedGrace {
				_ = os.RemoveAll(dir)
			}
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		// EPERM means the process exists under another user: not stale.
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(dir)
		}
	}
}

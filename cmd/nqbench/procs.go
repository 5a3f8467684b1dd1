package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// startTimeout bounds how long redis-server or nqd may take to come up.
const startTimeout = 30 * time.Second

// child is a process the tool started and must end.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func (c *child) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func start(cmd *exec.Cmd) (*child, error) {
	// The children die with the tool, however it ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// startRedis runs redis-server on a free loopback port in dir, with no
// persistence: the baseline and nqd then measure the same in-memory server.
func startRedis(bin, dir string) (*child, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--loglevel", "warning", "--logfile", "redis.log")
	c, err := start(cmd)
	if err != nil {
		return nil, "", fmt.Errorf("start %s: %w", bin, err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = rdb.Close() }()
	deadline := time.Now().Add(startTimeout)
	for rdb.Ping(context.Background()).Err() != nil {
		select {
		case <-c.done:
			return nil, "", fmt.Errorf("redis-server exited at start (see %s/redis.log)", dir)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.stop()
			return nil, "", errors.New("redis-server did not answer PING in time")
		}
	}
	return c, addr, nil
}

// startNQD runs the nqd binary on a free loopback port over the store that
// storeEnv selects (NQ_REDIS_URL=… or NQ_POSTGRES_URL=…) and returns it with
// its base URL once /healthz answers.
func startNQD(bin, storeEnv string, extraEnv ...string) (*child, string, error) {
	return startNQDAt(bin, "127.0.0.1", storeEnv, extraEnv...)
}

// startNQDAt is startNQD listening on host, a loopback address.
func startNQDAt(bin, host, storeEnv string, extraEnv ...string) (*child, string, error) {
	cmd := exec.Command(bin)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NQ_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// Logging every request would cost nqd more than some of what is
	// measured, so only warnings are logged, and the address is chosen here
	// rather than read from the info-level listening line.
	port, err := freePortOn(host)
	if err != nil {
		return nil, "", err
	}
	cmd.Env = append(cmd.Env, "NQ_ADDR="+net.JoinHostPort(host, strconv.Itoa(port)), "NQ_LOG_FORMAT=json", "NQ_LOG_LEVEL=warn",
		storeEnv,
		// One client offers all the load: nqd's per-client limits would
		// measure themselves rather than nqd.
		"NQ_RATE_PER_TOKEN=0", "NQ_RATE_PER_ADDR=0", "NQ_MAX_STREAMS_PER_CLIENT=0", "NQ_METRICS_PUBLIC=true")
	cmd.Env = append(cmd.Env, extraEnv...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	c, err := start(cmd)
	if err != nil {
		return nil, "", fmt.Errorf("start %s: %w", bin, err)
	}
	go drainLog(stdout)
	base := "http://" + net.JoinHostPort(host, strconv.Itoa(port))
	if err := awaitHealthy(c, base, "nqd"); err != nil {
		return nil, "", err
	}
	return c, base, nil
}

// awaitHealthy waits until the server c started answers 200 at
// base/healthz; it stops c when that does not come in time.
func awaitHealthy(c *child, base, name string) error {
	deadline := time.Now().Add(startTimeout)
	for {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-c.done:
			return errors.New(name + " exited at start")
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.stop()
			return errors.New(name + " did not answer /healthz in time")
		}
	}
}

// drainLog passes nqd's errors through and drops the rest.
func drainLog(r interface{ Read([]byte) (int, error) }) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var line struct {
			Level   string `json:"level"`
			Message string `json:"message"`
			Error   string `json:"error"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Level == "error" {
			fmt.Fprintf(os.Stderr, "nqd: %s: %s\n", line.Message, line.Error)
		}
	}
}

func freePort() (int, error) { return freePortOn("127.0.0.1") }

func freePortOn(host string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// rssBytes reads a process's resident set size from /proc.
func rssBytes(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS")
}

// treeCPUSeconds is the CPU time of a process, of its live children and of
// the children it has reaped: PostgreSQL works in one backend process per
// connection under the postmaster.
func treeCPUSeconds(pid int) (float64, error) {
	total, err := statCPU(pid, true)
	if err != nil {
		return 0, err
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) < 13 || f[1] != strconv.Itoa(pid) {
			continue
		}
		child, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		v, _ := statCPU(child, false)
		total += v
	}
	return total, nil
}

// cpuSeconds reads a process's user and system CPU time from /proc.
func cpuSeconds(pid int) (float64, error) { return statCPU(pid, false) }

// statCPU reads a process's user and system CPU time from /proc, and with
// reaped that of its waited-for children too.
func statCPU(pid int, reaped bool) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which may hold spaces, start after ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	if reaped {
		cutime, _ := strconv.ParseFloat(f[13], 64)
		cstime, _ := strconv.ParseFloat(f[14], 64)
		utime, stime = utime+cutime, stime+cstime
	}
	return (utime + stime) / 100, nil // USER_HZ is 100 on Linux
}

// machineCPU reads the seconds all cores spent busy and in all from
// /proc/stat, so that a row can say how busy the machine was: runs/s on
// cores that other work shares is bound by what is left of them.
func machineCPU() (busy, total float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0
	}
	for i, s := range f[1:] {
		v, _ := strconv.ParseFloat(s, 64)
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy / 100, total / 100 // USER_HZ is 100 on Linux
}

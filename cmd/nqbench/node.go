package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// The e2e profile races the Node.js original (Nuxt Queue's SSE generation,
// whose API nqd serves) when it is given one already running: its URL and
// the process ids of its server and of its redis-server. Both systems are
// then driven by the same closed loop, round by round, so that both see the
// same machine: absolute figures from another run do not compare, as these
// machines' speed drifts by 2× from one day to the next.

// nodeFlow is the Node original's one-step no-op flow: its entry step
// returns at once, run by BullMQ inside the server.
const nodeFlow = "bench-noop"

// nodeOriginal is a running Node original.
type nodeOriginal struct {
	URL  string `json:"url"`
	PIDs []int  `json:"pids"` // its server and its redis-server
}

// nodeFlags are the flags that point the e2e profile at a Node original.
type nodeFlags struct {
	envFile string // KEY=value lines: NODE_URL, SERVER_PID, REDIS_PID
	url     string
	pids    string // comma-separated
}

// resolve returns the Node original the flags name, or nil and the reason
// there is none to race.
func (f nodeFlags) resolve() (*nodeOriginal, string) {
	url, pids := f.url, f.pids
	if f.envFile != "" {
		vars, err := readEnvFile(f.envFile)
		if err != nil {
			return nil, err.Error()
		}
		if url == "" {
			url = vars["NODE_URL"]
		}
		if pids == "" {
			pids = vars["SERVER_PID"] + "," + vars["REDIS_PID"]
		}
	}
	if url == "" {
		return nil, "no Node original given (-node-env or -node-url)"
	}
	n := &nodeOriginal{URL: strings.TrimRight(url, "/")}
	for _, s := range strings.Split(pids, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		pid, err := strconv.Atoi(s)
		if err != nil || pid <= 0 {
			return nil, fmt.Sprintf("Node original's process id %q is not a process id", s)
		}
		if _, err := cpuSeconds(pid); err != nil {
			return nil, fmt.Sprintf("Node original's process %d is not running", pid)
		}
		n.PIDs = append(n.PIDs, pid)
	}
	if len(n.PIDs) == 0 {
		return nil, "no process ids of the Node original given (-node-env or -node-pids): its CPU could not be measured"
	}
	if err := n.check(); err != nil {
		return nil, fmt.Sprintf("the Node original at %s does not answer: %v", n.URL, err)
	}
	return n, ""
}

// check asks the Node original for its flows and wants nodeFlow among them.
func (n *nodeOriginal) check() error {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(n.URL + "/api/_flows")
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), nodeFlow) {
		return fmt.Errorf("GET /api/_flows: status %d without the flow %s", resp.StatusCode, nodeFlow)
	}
	return nil
}

// target is how the driver runs the Node original's flow: it has no
// flow.completed, so a run is done at its one step's step.completed. Its
// replayed frames name the kind in "event" but its live ones do not, so
// the record's own "type" is what both carry.
func (n *nodeOriginal) target() target {
	return target{
		start:  n.URL + "/api/_flows/" + nodeFlow + "/start",
		stream: func(id string) string { return n.URL + "/api/_events/flow/" + id + "/stream" },
		done:   []byte(`"type":"step.completed"`),
		// Its runs are done within 100 ms at the 99th percentile even on
		// a busy machine; a stream still waiting after a second has lost
		// the run's end.
		stall: time.Second,
	}
}

// readEnvFile reads KEY=value lines, as a shell would source them.
func readEnvFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("the Node original's env file: %w", err)
	}
	defer func() { _ = f.Close() }()
	vars := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if ok && !strings.HasPrefix(k, "#") {
			vars[k] = strings.Trim(v, `"'`)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(vars) == 0 {
		return nil, errors.New("the Node original's env file " + path + " holds no KEY=value line")
	}
	return vars, nil
}

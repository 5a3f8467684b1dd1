// TestNuxtQueueV05UIThroughModule walks the Nuxt Queue v0.5 UI as an app
// that lists nqd-nuxt beside the Nuxt Queue modules serves it: the UI's API
// and its WebSockets come from nqd through the app's own origin, with no
// proxy of nqd's in front, and the Nuxt Queue module's own backend and
// workers are off as docs/nuxt.md says.
//
// Like TestNuxtQueueV05UI it needs a local copy of the Nuxt Queue repository
// in NQD_NUXT_QUEUE_REPO, and is skipped without it; it always builds anew.

package e2e_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestNuxtQueueV05UIThroughModule(t *testing.T) {
	repo := os.Getenv("NQD_NUXT_QUEUE_REPO")
	if repo == "" {
		t.Skip("NQD_NUXT_QUEUE_REPO not set: give it a local copy of the Nuxt Queue repository to walk its v0.5.15 UI through nqd-nuxt")
	}
	for _, tool := range []string{"git", "node", "npm", "npx", "chromium"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the v0.5 UI test needs %s: %v", tool, err)
		}
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	nqd := startServer(t, []string{"-data-dir", t.TempDir(), "-allow-open-webhooks", "true"})
	startStepFiles(t, root, nqd)
	waitFor(t, 30*time.Second, "the step files' flows stored", func() bool {
		return len(flowNamed(t, nqd, "hello", "approval")) == 2
	})

	dir := t.TempDir()
	checkoutUI(t, repo, dir)
	hostWithModule(t, root, filepath.Join(dir, "ui-host"))
	env := []string{"NUXT_TELEMETRY_DISABLED=1", "CI=", "NUXT_NQD_URL=" + nqd}
	runCmd(t, dir, env, "npx", "-y", pnpmPkg, "install", "--no-frozen-lockfile")
	runCmd(t, dir, env, "npx", "-y", pnpmPkg, "-C", "ui-host", "exec", "nuxi", "build")

	appAddr := freeAddr(t)
	_, appPort, _ := net.SplitHostPort(appAddr)
	startCmd(t, dir, []string{"HOST=127.0.0.1", "PORT=" + appPort, "NUXT_TELEMETRY_DISABLED=1", "NUXT_NQD_URL=" + nqd}, "node", "ui-host/.output/server/index.mjs")
	app := "http://" + appAddr
	waitFor(t, 30*time.Second, "the Nuxt app up", func() bool {
		res, err := http.Get(app + "/_nvent")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	// Stands for the network between the browser and the app, so that the
	// page's sockets can be broken.
	front := newFrontProxy(t, app)
	b := newBrowser(t)
	page := func(p string) string { return front.URL + "/_nvent" + p }

	t.Run("flows list with live stats", func(t *testing.T) {
		b.nav(t, page("?p=/flows"))
		b.waitText(t, `/\bhello\b/`)
		b.waitText(t, `/\bapproval\b/`)
	})

	t.Run("start a run and watch it to the end", func(t *testing.T) {
		b.nav(t, page("?p=/flows/hello"))
		b.waitText(t, `/No runs yet/`)
		b.click(t, "button", "Start")
		b.click(t, "button", "Start Flow")
		b.waitText(t, `/\b1 run\b/`)
		b.waitText(t, `/greeting/`)
		b.waitText(t, `/completed/i`)
		runs := flowRuns(t, nqd, "hello")
		if len(runs) != 1 || runs[0].Status != "completed" {
			t.Fatalf("runs of hello = %+v, want one completed", runs)
		}
	})

	t.Run("webhook await continued through the app, through a dropped socket", func(t *testing.T) {
		b.nav(t, page("?p=/flows/approval"))
		b.click(t, "button", "Start")
		b.click(t, "button", "Start Flow")
		b.waitText(t, `/awaiting/i`)
		runs := flowRuns(t, nqd, "approval")
		if len(runs) != 1 {
			t.Fatalf("runs of approval = %+v, want one", runs)
		}
		if n := front.dropSockets(); n == 0 {
			t.Fatal("the page held no WebSocket through the app")
		}
		res := post(t, front.URL+"/api/_webhook/await/approval/"+runs[0].ID+"/approve", `{"approvedBy":"ops"}`)
		if res.status != http.StatusOK || !strings.Contains(res.body, `"success":true`) {
			t.Fatalf("await webhook: %d %s", res.status, res.body)
		}
		b.waitText(t, `/Completed/i`)
		if front.upgrades() < 2 {
			t.Errorf("%d socket upgrades, want the page to have reconnected after the drop", front.upgrades())
		}
	})

	t.Run("queues", func(t *testing.T) {
		b.nav(t, page("?p=/queues"))
		b.waitText(t, `/\bhello\b/`)
	})

	b.logConsole(t)
}

// hostWithModule makes the host app list nqd-nuxt beside the Nuxt Queue
// modules, with their backend and workers off, and installs the SDK and the
// module as npm packs them.
func hostWithModule(t *testing.T, root, host string) {
	t.Helper()
	packs := t.TempDir()
	pack := func(pkg string) string {
		dir := filepath.Join(root, "sdk", pkg)
		if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
			runCmd(t, dir, nil, "npm", "ci", "--no-audit", "--no-fund")
		}
		runCmd(t, dir, nil, "npm", "run", "build")
		cmd := exec.Command("npm", "pack", "--ignore-scripts", "--json", "--pack-destination", packs)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("npm pack in %s: %v", dir, err)
		}
		var files []struct{ Filename string }
		if err := json.Unmarshal(out, &files); err != nil || len(files) != 1 {
			t.Fatalf("npm pack in %s said %s", dir, out)
		}
		return filepath.Join(packs, files[0].Filename)
	}
	sdk, module := pack("typescript"), pack("nuxt")
	if err := os.RemoveAll(filepath.Join(host, "modules")); err != nil {
		t.Fatal(err)
	}
	pkg := fmt.Sprintf(`{
  "private": true,
  "name": "ui-host",
  "type": "module",
  "dependencies": {
    "nuxt": "4.2.2",
    "@nuxt/ui": "4.2.1",
    "nvent": "workspace:*",
    "@nvent-addon/app": "workspace:*",
    "nqd-worker": "file:%s",
    "nqd-nuxt": "file:%s"
  }
}
`, sdk, module)
	config := `// The Nuxt Queue UI served from nqd through nqd-nuxt; the Nuxt Queue
// module's own workers are off and its stores in memory (docs/nuxt.md).
export default defineNuxtConfig({
  ssr: false,
  pages: true,
  modules: ['@nuxt/ui', 'nvent', '@nvent-addon/app', 'nqd-nuxt'],
  css: ['~/assets/css/main.css'],
  ui: { fonts: false },
  nvent: {
    queue: { adapter: 'memory', worker: { autorun: false } },
    store: { adapter: 'memory' },
    stream: { adapter: 'memory' },
  },
})
`
	for name, text := range map[string]string{"package.json": pkg, "nuxt.config.ts": config} {
		if err := os.WriteFile(filepath.Join(host, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// flowNamed returns those of names that nqd has stored as flows.
func flowNamed(t *testing.T, nqd string, names ...string) []string {
	t.Helper()
	var listed []struct{ ID string }
	if getJSON(nqd+"/api/_flows", &listed) != nil {
		return nil
	}
	var got []string
	for _, f := range listed {
		for _, n := range names {
			if f.ID == n {
				got = append(got, n)
			}
		}
	}
	return got
}

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
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestNuxtQueueV05UIThroughModule(t *testing.T) {
	repo, root := needNuxtQueue(t, "git", "node", "npm", "npx", "chromium")
	nqd, _ := startWithStepFiles(t, root)

	dir := t.TempDir()
	checkoutUI(t, repo, dir)
	hostWithModule(t, root, filepath.Join(dir, "ui-host"))
	env := []string{"NUXT_TELEMETRY_DISABLED=1", "CI=", "NUXT_NQD_URL=" + nqd}
	runCmd(t, dir, env, "npx", "-y", pnpmPkg, "install", "--no-frozen-lockfile")
	runCmd(t, dir, env, "npx", "-y", pnpmPkg, "-C", "ui-host", "exec", "nuxi", "build")

	appAddr := freeAddr(t)
	_, appPort, _ := net.SplitHostPort(appAddr)
	startNuxt(t, dir, appPort, []string{"NUXT_NQD_URL=" + nqd})
	// Stands for the network between the browser and the app, so that the
	// page's sockets can be broken.
	front := newFrontProxy(t, "http://"+appAddr)
	b := newBrowser(t)
	page := func(p string) string { return front.URL + "/_nvent" + p }

	walkRuns(t, b, front, nqd)

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

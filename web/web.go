// Package web holds the browser dashboard's static files; handlers mounts them.
package web

import "embed"

// FS is the dashboard: index.html and the assets it loads.
//
//go:embed index.html assets
var FS embed.FS

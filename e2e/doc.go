// Package e2e holds nqd's end-to-end tests and benchmarks: the real server
// (in process through wiring, or built and run as a child process that the
// tests kill), the example flows of examples/flows and the demo worker's
// handlers through the Go worker SDK, on the embedded store and on Redis.
package e2e

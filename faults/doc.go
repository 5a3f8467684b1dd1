// Package faults holds nqd's fault tests: Redis killed and restarted under
// load, its Pub/Sub connections killed while streaming, and nqd itself killed
// with SIGKILL and restarted, on both stores. Each test checks what the
// README promises: no acknowledged event is lost, a client that resumes by
// Last-Event-ID misses nothing and sees nothing twice, and no batch is ever
// half applied. The package has no code of its own beyond its tests.
package faults

// Package faults holds nqd's fault tests: Redis and PostgreSQL killed and
// restarted under load, Redis's Pub/Sub connections killed while streaming,
// nqd itself killed with SIGKILL and restarted, and two nqd instances sharing
// one PostgreSQL database. Each test checks what docs/guarantees.md promises: no
// acknowledged event is lost, a client that resumes by Last-Event-ID misses
// nothing and sees nothing twice, and no batch is ever half applied. The
// package has no code of its own beyond its tests.
package faults

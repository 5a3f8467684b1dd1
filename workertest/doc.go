// Package workertest holds the tests of the Go worker SDK (the package
// github.com/nqd-dev/nqd/sdk/go/worker, of the module in sdk/go): the
// conformance scenarios of docs/worker-protocol.md and the SDK's own, each against a real nqd built
// from this tree. They live in the server's module so that the SDK's module
// needs none of the server's dependencies.
package workertest

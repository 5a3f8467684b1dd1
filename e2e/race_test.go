//go:build race

package e2e_test

// The race detector makes decoding and hashing megabytes of JSON tens of
// times slower: tests size their large values by it.
const raceEnabled = true

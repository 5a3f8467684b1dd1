package boltstore

import (
	bolt "go.etcd.io/bbolt"
)

// A stream's length lives in the streams bucket next to the stream itself,
// under the context key and a 0 byte (no context key holds one, so it
// sorts right after its stream and before any other): an append rewrites
// the leaf that holds the stream's header (or the whole stream, while it is
// small enough to live inside that leaf), and the length costs no page of
// its own. Files written before kept lengths in a bucket of their own,
// bLengths; a length found there moves here with its stream's next write.
func lengthKey(ck []byte) []byte {
	return append(append(make([]byte, 0, len(ck)+1), ck...), 0)
}

// streamLength is the number of events of the stream ck.
func streamLength(tx *bolt.Tx, ck []byte) uint64 {
	if v := tx.Bucket(bStreams).Get(lengthKey(ck)); v != nil {
		return getUint64(v)
	}
	return getUint64(tx.Bucket(bLengths).Get(ck))
}

// setStreamLength records n as the length of the stream ck.
func setStreamLength(tx *bolt.Tx, ck []byte, n uint64) error {
	if err := tx.Bucket(bStreams).Put(lengthKey(ck), putUint64(n)); err != nil {
		return err
	}
	if old := tx.Bucket(bLengths); old.Get(ck) != nil {
		return old.Delete(ck)
	}
	return nil
}

// dropStreamLength forgets the length of the stream ck, in either place.
func dropStreamLength(tx *bolt.Tx, ck []byte) error {
	if err := tx.Bucket(bStreams).Delete(lengthKey(ck)); err != nil {
		return err
	}
	return tx.Bucket(bLengths).Delete(ck)
}

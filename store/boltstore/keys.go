package boltstore

import (
	"encoding/binary"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

const idLen = 16

func contextKey(c store.Context) []byte { return []byte(c.Type + ":" + c.ID) }

// indexKey cannot collide between a type's index and a named one because
// neither a type nor a name may hold a colon.
func indexKey(ix store.Index) []byte {
	if ix.Name == "" {
		return []byte(ix.Type)
	}
	return []byte(ix.Type + ":" + ix.Name)
}

func idKey(id event.ID) []byte {
	k := make([]byte, idLen)
	binary.BigEndian.PutUint64(k, id.MS)
	binary.BigEndian.PutUint64(k[8:], id.Seq)
	return k
}

func parseIDKey(k []byte) event.ID {
	return event.ID{MS: binary.BigEndian.Uint64(k), Seq: binary.BigEndian.Uint64(k[8:])}
}

func putUint64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func getUint64(b []byte) uint64 {
	if len(b) < 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

// sortableScore maps an int64 onto a uint64 with the same order, so negative
// scores sort before positive ones byte-wise.
func sortableScore(score int64) uint64 { return uint64(score) ^ (1 << 63) }

// orderKey sorts an index's members highest score first and, within a score,
// by member ascending: the order IndexList returns.
func orderKey(score int64, member string) []byte {
	k := binary.BigEndian.AppendUint64(nil, ^sortableScore(score))
	return append(k, member...)
}

func parseOrderKey(k []byte) store.IndexEntry {
	score := int64(^binary.BigEndian.Uint64(k) ^ (1 << 63))
	return store.IndexEntry{ID: string(k[8:]), Score: score}
}

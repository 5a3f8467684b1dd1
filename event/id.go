// Package event defines the event record that every nqd component shares: its
// identifiers, its wire form with both UI generations' field spellings, and the
// name rules that keep client strings out of storage keys.
package event

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ID is a stream entry id, `<ms>-<seq>`, as Redis Streams assign them. IDs of
// one context are strictly increasing.
type ID struct {
	MS  uint64
	Seq uint64
}

// ErrBadID is returned by ParseID for text that is not an entry id.
var ErrBadID = errors.New("not a stream entry id")

// MaxID sorts after every other id.
var MaxID = ID{MS: ^uint64(0), Seq: ^uint64(0)}

// ParseID parses `<ms>-<seq>`; a bare `<ms>` means `<ms>-0`.
func ParseID(s string) (ID, error) {
	if s == "" || len(s) > 41 {
		return ID{}, ErrBadID
	}
	msPart, seqPart, hasSeq := strings.Cut(s, "-")
	ms, err := strconv.ParseUint(msPart, 10, 64)
	if err != nil {
		return ID{}, ErrBadID
	}
	var seq uint64
	if hasSeq {
		if seq, err = strconv.ParseUint(seqPart, 10, 64); err != nil {
			return ID{}, ErrBadID
		}
	}
	return ID{MS: ms, Seq: seq}, nil
}

// IDAt is the largest id that can carry time t: every entry written at or before
// t sorts at or before it.
func IDAt(t time.Time) ID {
	return ID{MS: uint64(t.UnixMilli()), Seq: ^uint64(0)}
}

func (id ID) String() string { return fmt.Sprintf("%d-%d", id.MS, id.Seq) }

// IsZero reports whether id is the zero value, which no entry has.
func (id ID) IsZero() bool { return id.MS == 0 && id.Seq == 0 }

// Compare returns -1, 0 or +1 as id sorts before, equal to or after o.
func (id ID) Compare(o ID) int {
	switch {
	case id.MS < o.MS:
		return -1
	case id.MS > o.MS:
		return 1
	case id.Seq < o.Seq:
		return -1
	case id.Seq > o.Seq:
		return 1
	}
	return 0
}

// Next is the smallest id after id.
func (id ID) Next() ID {
	if id.Seq == ^uint64(0) {
		return ID{MS: id.MS + 1}
	}
	return ID{MS: id.MS, Seq: id.Seq + 1}
}

// Time is the wall-clock time encoded in the id's milliseconds.
func (id ID) Time() time.Time { return time.UnixMilli(int64(id.MS)).UTC() }

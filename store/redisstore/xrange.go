package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
)

// streamEntry is one entry of an XRANGE reply: its id and its fields and
// values, alternating. Both point into the reply; nothing is copied.
type streamEntry struct {
	id     []byte
	fields [][]byte
}

// field is the last value of name in e, as a map of the fields would hold.
func (e streamEntry) field(name string) ([]byte, bool) {
	for i := len(e.fields) - 2; i >= 0; i -= 2 {
		if string(e.fields[i]) == name {
			return e.fields[i+1], true
		}
	}
	return nil, false
}

// xrange reads one page of key with XRANGE (XREVRANGE when rev) and hands
// fn each entry, read straight out of Redis's reply. go-redis's own XRANGE
// builds a map and a string per field of every entry, which was the larger
// part of reading a long stream (see BENCHMARKS.md). fn must not keep the
// entry's slices: they point into a buffer used again. It returns the number of entries and the last one's id.
func (s *Store) xrange(ctx context.Context, key, from, to string, count int64, rev bool, fn func(streamEntry)) (int, string, error) {
	cmd := "XRANGE"
	if rev {
		cmd = "XREVRANGE"
	}
	buf := replyBuffers.Get().(*bytes.Buffer)
	defer putReplyBuffer(buf)
	buf.Reset()
	if err := s.client.Process(ctx, redis.NewRawWriteToCmd(ctx, buf, cmd, key, from, to, "COUNT", count)); err != nil {
		return 0, "", err
	}
	return parseXRange(buf.Bytes(), fn)
}

// replyBuffers hold raw replies while they are parsed: a page of a long
// stream is a few hundred KB, which a buffer grown anew for every page
// would copy over and over.
var replyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledReply is the largest buffer put back for reuse, so one huge
// page does not stay in memory for good.
const maxPooledReply = 4 << 20

func putReplyBuffer(b *bytes.Buffer) {
	if b.Cap() <= maxPooledReply {
		replyBuffers.Put(b)
	}
}

// errReply is a reply that is not what XRANGE answers.
var errReply = errors.New("redisstore: unexpected reply to XRANGE")

// parseXRange reads a RESP2 or RESP3 XRANGE reply: an array of entries, each
// an array of the id and an array (or, in RESP3, possibly a map) of fields
// and values.
func parseXRange(raw []byte, fn func(streamEntry)) (int, string, error) {
	r := respReader{b: raw}
	n, err := r.aggregate()
	if err != nil {
		return 0, "", err
	}
	var (
		last   []byte // valid until raw goes back to its pool, after return
		fields [][]byte
	)
	for range n {
		if m, err := r.aggregate(); err != nil || m != 2 {
			return 0, "", fmt.Errorf("%w: an entry of %d elements (%v)", errReply, m, err)
		}
		id, err := r.bulk()
		if err != nil {
			return 0, "", err
		}
		nf, err := r.aggregate()
		if err != nil {
			return 0, "", err
		}
		fields = fields[:0]
		for range nf {
			f, err := r.bulk()
			if err != nil {
				return 0, "", err
			}
			fields = append(fields, f)
		}
		fn(streamEntry{id: id, fields: fields})
		last = id
	}
	return n, string(last), nil
}

// respReader walks a raw RESP reply.
type respReader struct {
	b []byte
	i int
}

// line returns the type byte and the rest of the next line.
func (r *respReader) line() (byte, []byte, error) {
	end := bytes.Index(r.b[r.i:], []byte("\r\n"))
	if end < 1 {
		return 0, nil, fmt.Errorf("%w: truncated", errReply)
	}
	t, rest := r.b[r.i], r.b[r.i+1:r.i+end]
	r.i += end + 2
	if t == '-' {
		return 0, nil, fmt.Errorf("redisstore: %s", rest)
	}
	return t, rest, nil
}

// aggregate reads an array's or a map's header and returns how many
// elements follow (a map's pairs count twice); a null array has none.
func (r *respReader) aggregate() (int, error) {
	t, rest, err := r.line()
	if err != nil {
		return 0, err
	}
	if t == '_' {
		return 0, nil
	}
	n, err := strconv.Atoi(string(rest))
	switch {
	case err != nil || (t != '*' && t != '%'):
		return 0, fmt.Errorf("%w: %q where an array belongs", errReply, t)
	case n < 0:
		return 0, nil
	case t == '%':
		return 2 * n, nil
	}
	return n, nil
}

// bulk reads a bulk or simple string.
func (r *respReader) bulk() ([]byte, error) {
	t, rest, err := r.line()
	if err != nil {
		return nil, err
	}
	switch t {
	case '+':
		return rest, nil
	case '$':
		n, err := strconv.Atoi(string(rest))
		if err != nil || n < 0 || r.i+n+2 > len(r.b) {
			return nil, fmt.Errorf("%w: bulk string of length %q", errReply, rest)
		}
		v := r.b[r.i : r.i+n]
		r.i += n + 2
		return v, nil
	}
	return nil, fmt.Errorf("%w: %q where a string belongs", errReply, t)
}

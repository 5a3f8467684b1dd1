package archive

import (
	"context"
	"fmt"
	"strings"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// Segments hold the early part of a long run that compaction trimmed from the
// live stream while the run goes on. A context's segments sit in a folder
// of their own beside its whole-run archive:
//
//	<type>/<id>/seg-<first>-<last>.ndjson.gz      the events
//	<type>/<id>/seg-<first>-<last>.manifest.json  the Manifest
//
// where <first> and <last> are the ids of its first and last events, each
// part zero-padded to 20 digits so that names sort in id order. As with Put,
// the manifest is written last: a segment without one does not exist.

const (
	segPrefix       = "seg-"
	segDataExt      = ".ndjson.gz"
	segManifestExt  = ".manifest.json"
	segIDPartDigits = 20
)

// SegmentRef names one segment by the ids of its first and last events.
type SegmentRef struct {
	FirstID event.ID
	LastID  event.ID
}

func (r SegmentRef) base() string {
	return fmt.Sprintf("%s%0*d-%0*d-%0*d-%0*d", segPrefix,
		segIDPartDigits, r.FirstID.MS, segIDPartDigits, r.FirstID.Seq,
		segIDPartDigits, r.LastID.MS, segIDPartDigits, r.LastID.Seq)
}

func parseSegmentName(name string) (SegmentRef, bool) {
	rest, ok := strings.CutPrefix(name, segPrefix)
	if !ok {
		return SegmentRef{}, false
	}
	if rest, ok = strings.CutSuffix(rest, segManifestExt); !ok {
		return SegmentRef{}, false
	}
	parts := strings.Split(rest, "-")
	if len(parts) != 4 {
		return SegmentRef{}, false
	}
	first, err1 := event.ParseID(trimZeros(parts[0]) + "-" + trimZeros(parts[1]))
	last, err2 := event.ParseID(trimZeros(parts[2]) + "-" + trimZeros(parts[3]))
	if err1 != nil || err2 != nil {
		return SegmentRef{}, false
	}
	return SegmentRef{FirstID: first, LastID: last}, true
}

func trimZeros(s string) string {
	if t := strings.TrimLeft(s, "0"); t != "" {
		return t
	}
	return "0"
}

func segmentFolder(c store.Context) string { return c.Type + "/" + c.ID + "/" }

func segmentKeys(c store.Context, r SegmentRef) (data, manifest string) {
	base := segmentFolder(c) + r.base()
	return base + segDataExt, base + segManifestExt
}

// PutSegment archives evs, consecutive events of c in id order, as one
// segment, replacing a segment with the same first and last ids. Errors:
// store.ErrInvalid (bad context, no events, events out of order), the
// bucket's.
func (a *Bucket) PutSegment(ctx context.Context, c store.Context, evs []event.Event) (Manifest, error) {
	if err := checkContext(c); err != nil {
		return Manifest{}, err
	}
	if len(evs) == 0 {
		return Manifest{}, fmt.Errorf("archive: segment of %s without events: %w", c, store.ErrInvalid)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].ID.Compare(evs[i-1].ID) <= 0 {
			return Manifest{}, fmt.Errorf("archive: segment of %s: %s after %s: %w", c, evs[i].ID, evs[i-1].ID, store.ErrInvalid)
		}
	}
	ref := SegmentRef{FirstID: evs[0].ID, LastID: evs[len(evs)-1].ID}
	dataKey, manifestKey := segmentKeys(c, ref)
	return a.write(ctx, c, dataKey, manifestKey, Manifest{Type: c.Type, ID: c.ID}, Slice(evs))
}

// Segments lists c's segments in id order; none is an empty list. Errors:
// store.ErrInvalid, the bucket's.
func (a *Bucket) Segments(ctx context.Context, c store.Context) ([]SegmentRef, error) {
	if err := checkContext(c); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	names, err := a.list(ctx, segmentFolder(c))
	if err != nil {
		return nil, err
	}
	// list sorts by name, and the padded names sort in id order.
	out := []SegmentRef{}
	for _, name := range names {
		if r, ok := parseSegmentName(name); ok {
			out = append(out, r)
		}
	}
	return out, nil
}

// Segmented lists the ids of the contexts of type typ that have segments,
// in order. Errors: store.ErrInvalid, the bucket's.
func (a *Bucket) Segmented(ctx context.Context, typ string) ([]string, error) {
	if !event.ValidType(typ) {
		return nil, fmt.Errorf("archive: type %q: %w", typ, store.ErrInvalid)
	}
	names, err := a.list(ctx, typ+"/")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, name := range names {
		if id, ok := strings.CutSuffix(name, "/"); ok && checkContext(store.Context{Type: typ, ID: id}) == nil {
			out = append(out, id)
		}
	}
	return out, nil
}

// ReadSegment hands the events of c's segment r to fn in order until fn
// returns false. A read to the end checks the segment against its manifest;
// one stopped early trusts what it decoded, as the segment was verified when
// compaction wrote it. Errors: store.ErrNotFound, ErrCorrupt,
// store.ErrInvalid, ctx's error, the bucket's.
func (a *Bucket) ReadSegment(ctx context.Context, c store.Context, r SegmentRef, fn func(event.Event) bool) (Manifest, error) {
	if err := checkContext(c); err != nil {
		return Manifest{}, err
	}
	dataKey, manifestKey := segmentKeys(c, r)
	m, err := a.readManifest(ctx, c, manifestKey)
	if err != nil {
		return Manifest{}, a.readDone(err)
	}
	if m.FirstID != r.FirstID.String() || m.LastID != r.LastID.String() {
		return Manifest{}, a.readDone(fmt.Errorf("archive: segment %s of %s: manifest holds %s..%s: %w", r.base(), c, m.FirstID, m.LastID, ErrCorrupt))
	}
	m, err = a.readData(ctx, c, m, dataKey, fn)
	return m, a.readDone(err)
}

// VerifySegment reads c's segment r to the end and checks it against its
// manifest. Errors: as ReadSegment.
func (a *Bucket) VerifySegment(ctx context.Context, c store.Context, r SegmentRef) (Manifest, error) {
	return a.ReadSegment(ctx, c, r, func(event.Event) bool { return true })
}

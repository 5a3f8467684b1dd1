package compact

import (
	"context"

	"github.com/nqd-dev/nqd/archive"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/snapshots"
	"github.com/nqd-dev/nqd/store"
)

// Segments is the part of an archive that compaction writes and reads back;
// *archive.Bucket is one.
type Segments interface {
	PutSegment(ctx context.Context, c store.Context, evs []event.Event) (archive.Manifest, error)
	Segments(ctx context.Context, c store.Context) ([]archive.SegmentRef, error)
	ReadSegment(ctx context.Context, c store.Context, r archive.SegmentRef, fn func(event.Event) bool) (archive.Manifest, error)
	VerifySegment(ctx context.Context, c store.Context, r archive.SegmentRef) (archive.Manifest, error)
}

var _ Segments = (*archive.Bucket)(nil)

// Reader reads a context's whole history although compaction trimmed its
// early events: ids up to the last archived one come from the segments, the
// rest from the live store. It serves the snapshot cache, whose time travel
// then folds through the archive.
type Reader struct {
	live snapshots.Reader
	seg  Segments
}

// NewReader returns a reader of live's streams that reads through to seg.
// Checkpoints stay with the live store: compaction writes one there before
// it trims.
func NewReader(live snapshots.Reader, seg Segments) *Reader {
	return &Reader{live: live, seg: seg}
}

// Range answers q as the live store would had nothing been trimmed. Errors:
// the live store's and the archive's.
func (r *Reader) Range(ctx context.Context, c store.Context, q store.RangeQuery) ([]event.Event, error) {
	segs, err := r.seg.Segments(ctx, c)
	if err != nil {
		return nil, err
	}
	for {
		if len(segs) == 0 {
			return r.live.Range(ctx, c, q)
		}
		out, err := r.rangeOver(ctx, c, q, segs)
		if err != nil {
			return nil, err
		}
		// A compaction that archived and trimmed more while the live
		// store was read may have taken events from under that read; its
		// segment was written before the trim, so a second look finds it.
		again, err := r.seg.Segments(ctx, c)
		if err != nil {
			return nil, err
		}
		if len(again) == len(segs) && again[len(again)-1] == segs[len(segs)-1] {
			return out, nil
		}
		segs = again
	}
}

func (r *Reader) rangeOver(ctx context.Context, c store.Context, q store.RangeQuery, segs []archive.SegmentRef) ([]event.Event, error) {
	archived := segs[len(segs)-1].LastID
	liveQ := q
	if liveQ.After.Compare(archived) < 0 {
		liveQ.After = archived
	}
	if q.Reverse {
		out, err := r.live.Range(ctx, c, liveQ)
		if err != nil || full(q, out) {
			return out, err
		}
		older, err := r.fromSegments(ctx, c, q, segs, q.Limit-len(out))
		if err != nil {
			return nil, err
		}
		return append(out, older...), nil
	}
	out, err := r.fromSegments(ctx, c, q, segs, q.Limit)
	if err != nil || full(q, out) || !below(q, archived.Next()) {
		return out, err
	}
	if q.Limit > 0 {
		liveQ.Limit = q.Limit - len(out)
	}
	newer, err := r.live.Range(ctx, c, liveQ)
	if err != nil {
		return nil, err
	}
	return append(out, newer...), nil
}

// fromSegments reads the events q selects from segs, at most limit (0: all),
// oldest first or, for a reverse q, newest first.
func (r *Reader) fromSegments(ctx context.Context, c store.Context, q store.RangeQuery, segs []archive.SegmentRef, limit int) ([]event.Event, error) {
	out := []event.Event{}
	if q.Reverse {
		for i := len(segs) - 1; i >= 0 && (limit <= 0 || len(out) < limit); i-- {
			s := segs[i]
			if !above(q, s.LastID) {
				break
			}
			if !below(q, s.FirstID) {
				continue
			}
			var in []event.Event
			if _, err := r.seg.ReadSegment(ctx, c, s, func(e event.Event) bool {
				if !below(q, e.ID) {
					return false
				}
				if above(q, e.ID) {
					in = append(in, e)
				}
				return true
			}); err != nil {
				return nil, err
			}
			for j := len(in) - 1; j >= 0 && (limit <= 0 || len(out) < limit); j-- {
				out = append(out, in[j])
			}
		}
		return out, nil
	}
	var last event.ID // overlapping segments from racing compactions are read once
	for _, s := range segs {
		if !above(q, s.LastID) || (!last.IsZero() && s.LastID.Compare(last) <= 0) {
			continue
		}
		if !below(q, s.FirstID) {
			break
		}
		done := false
		if _, err := r.seg.ReadSegment(ctx, c, s, func(e event.Event) bool {
			if !below(q, e.ID) {
				done = true
				return false
			}
			if !above(q, e.ID) || (!last.IsZero() && e.ID.Compare(last) <= 0) {
				return true
			}
			last = e.ID
			out = append(out, e)
			if limit > 0 && len(out) >= limit {
				done = true
				return false
			}
			return true
		}); err != nil {
			return nil, err
		}
		if done {
			break
		}
	}
	return out, nil
}

// above reports whether id is past q's lower bound.
func above(q store.RangeQuery, id event.ID) bool {
	return q.After.IsZero() || id.Compare(q.After) > 0
}

// below reports whether id is within q's upper bound.
func below(q store.RangeQuery, id event.ID) bool {
	return q.Through.IsZero() || id.Compare(q.Through) <= 0
}

func full(q store.RangeQuery, out []event.Event) bool { return q.Limit > 0 && len(out) >= q.Limit }

func segmentRef(evs []event.Event) archive.SegmentRef {
	return archive.SegmentRef{FirstID: evs[0].ID, LastID: evs[len(evs)-1].ID}
}

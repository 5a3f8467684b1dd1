package archive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"gocloud.dev/blob"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// Step data too large to travel in its event (a result, an emit's payload)
// is kept in the bucket beside the archives, one object a value, named by
// the run and the value's SHA-256:
//
//	_data/<run>/<sha256>
//
// The leading underscore keeps the folder apart from the context types. The
// objects stay as long as the run's events refer to them, in the store or
// in its archive.

// Ref names one value kept in the bucket.
type Ref struct {
	RunID  string `json:"run"`
	SHA256 string `json:"sha256"` // hex digest of the value
	Bytes  int64  `json:"bytes"`  // -1 in a GetData: not known, at most MaxDataBytes
}

// MaxDataBytes bounds a value read without its size: no request body that
// brought one in is larger.
const MaxDataBytes = 64 << 20

const dataFolder = "_data/"

func (r Ref) key() string { return dataFolder + r.RunID + "/" + r.SHA256 }

func (r Ref) check() error {
	if !event.ValidContextID(r.RunID) || len(r.SHA256) != sha256.Size*2 || r.Bytes < -1 {
		return fmt.Errorf("archive: data reference %+v: %w", r, store.ErrInvalid)
	}
	if _, err := hex.DecodeString(r.SHA256); err != nil {
		return fmt.Errorf("archive: data reference %+v: %w", r, store.ErrInvalid)
	}
	return nil
}

// PutData keeps value, step data of run, and returns its reference. The
// same value of the same run is one object; a second Put finds it there.
// The object is committed whole and its size read back before the
// reference is handed out. Errors: store.ErrInvalid, the bucket's.
func (a *Bucket) PutData(ctx context.Context, run string, value []byte) (Ref, error) {
	sum := sha256.Sum256(value)
	ref := Ref{RunID: run, SHA256: hex.EncodeToString(sum[:]), Bytes: int64(len(value))}
	if err := ref.check(); err != nil {
		return Ref{}, err
	}
	if len(value) > MaxDataBytes {
		return Ref{}, fmt.Errorf("archive: data of %s: %d bytes, over %d: %w", run, len(value), MaxDataBytes, store.ErrInvalid)
	}
	if attrs, err := a.b.Attributes(ctx, ref.key()); err == nil && attrs.Size == ref.Bytes {
		return ref, nil
	}
	err := a.putObject(ctx, ref.key(), "application/json", func(w io.Writer) error {
		_, err := io.Copy(w, bytes.NewReader(value))
		return err
	})
	if err != nil {
		return Ref{}, fmt.Errorf("archive: put data of %s: %w", run, err)
	}
	attrs, err := a.b.Attributes(ctx, ref.key())
	if err != nil {
		return Ref{}, fmt.Errorf("archive: data of %s after its write: %w", run, err)
	}
	if attrs.Size != ref.Bytes {
		return Ref{}, fmt.Errorf("archive: data of %s reads back as %d bytes, not %d: %w", run, attrs.Size, ref.Bytes, ErrCorrupt)
	}
	return ref, nil
}

// GetData reads the value ref names, checked against its size and hash.
// Errors: store.ErrInvalid, store.ErrNotFound, ErrCorrupt, the bucket's.
func (a *Bucket) GetData(ctx context.Context, ref Ref) ([]byte, error) {
	v, err := a.getData(ctx, ref)
	return v, a.readDone(err)
}

func (a *Bucket) getData(ctx context.Context, ref Ref) ([]byte, error) {
	if err := ref.check(); err != nil {
		return nil, err
	}
	r, err := a.b.NewReader(ctx, ref.key(), nil)
	if isNotFound(err) {
		return nil, fmt.Errorf("archive: data %s of %s: %w", ref.SHA256, ref.RunID, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	defer r.Close()
	// One byte more than the reference allows tells a grown object apart.
	limit := ref.Bytes
	if limit < 0 {
		limit = MaxDataBytes
	}
	value, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("archive: data %s of %s: %w", ref.SHA256, ref.RunID, err)
	}
	sum := sha256.Sum256(value)
	if int64(len(value)) > limit || (ref.Bytes >= 0 && int64(len(value)) != ref.Bytes) || hex.EncodeToString(sum[:]) != ref.SHA256 {
		return nil, fmt.Errorf("archive: data %s of %s does not match its reference: %w", ref.SHA256, ref.RunID, ErrCorrupt)
	}
	return value, nil
}

// ListData returns the references of every value kept, by run and hash.
// Errors: the bucket's.
func (a *Bucket) ListData(ctx context.Context) ([]Ref, error) {
	it := a.b.List(&blob.ListOptions{Prefix: dataFolder})
	var out []Ref
	for {
		o, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("archive: list data: %w", err)
		}
		run, sum, ok := strings.Cut(strings.TrimPrefix(o.Key, dataFolder), "/")
		ref := Ref{RunID: run, SHA256: sum, Bytes: o.Size}
		if ok && ref.check() == nil {
			out = append(out, ref)
		}
	}
}

// DeleteData deletes the values kept for run, unless an archive of the run
// (type flow) refers to them: then they stay with it. It reports how many
// it deleted. Errors: store.ErrInvalid, the bucket's.
func (a *Bucket) DeleteData(ctx context.Context, run string) (int, error) {
	if !event.ValidContextID(run) {
		return 0, fmt.Errorf("archive: data of %q: %w", run, store.ErrInvalid)
	}
	_, manifest := keys(store.Context{Type: "flow", ID: run})
	archived, err := a.b.Exists(ctx, manifest)
	if err != nil {
		return 0, fmt.Errorf("archive: data of %s: %w", run, err)
	}
	if archived {
		return 0, nil
	}
	prefix := dataFolder + run + "/"
	names, err := a.list(ctx, prefix)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range names {
		if strings.HasSuffix(name, "/") {
			continue
		}
		if err := a.b.Delete(ctx, prefix+name); err != nil && !isNotFound(err) {
			return n, fmt.Errorf("archive: delete data of %s: %w", run, err)
		}
		n++
	}
	return n, nil
}

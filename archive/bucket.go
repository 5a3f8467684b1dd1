package archive

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/s3blob"
	"gocloud.dev/gcerrors"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// Bucket is an Archive in a bucket of an object store: S3 or a store that
// speaks its protocol (MinIO, Ceph, R2, ...), or a local directory. Its keys:
//
//	<type>/<id>.ndjson.gz      the events, one wire-form JSON record a line
//	<type>/<id>.manifest.json  the Manifest
//
// An object exists only once its writer committed it whole (a directory's by
// renaming a finished temporary file, S3's by a completed upload), and the
// manifest is written after the events it describes, so a reader never sees
// half an archive. Several nqd instances may share one bucket: each reads
// and restores what any of them archived.
type Bucket struct {
	b     *blob.Bucket
	now   func() time.Time
	name  string // the bucket's URL without its query, for errors
	stats stats
}

// Stats count a Bucket's traffic since it was opened, for metrics.
type Stats struct {
	ObjectsWritten int64 // objects committed: archives, manifests, segments, step data
	BytesWritten   int64 // their bytes
	WriteFailures  int64 // writes that committed nothing
	ReadFailures   int64 // reads the bucket failed (not found excepted)
	Corrupt        int64 // reads that found an object unlike its manifest or reference
}

type stats struct {
	objects, bytes, writeFailures, readFailures, corrupt atomic.Int64
}

// Stats reads the counts.
func (a *Bucket) Stats() Stats {
	return Stats{
		ObjectsWritten: a.stats.objects.Load(), BytesWritten: a.stats.bytes.Load(),
		WriteFailures: a.stats.writeFailures.Load(), ReadFailures: a.stats.readFailures.Load(),
		Corrupt: a.stats.corrupt.Load(),
	}
}

// readDone counts err, the outcome of a read, and hands it back.
func (a *Bucket) readDone(err error) error {
	switch {
	case err == nil, errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrInvalid), errors.Is(err, context.Canceled):
	case errors.Is(err, ErrCorrupt):
		a.stats.corrupt.Add(1)
	default:
		a.stats.readFailures.Add(1)
	}
	return err
}

var _ Archive = (*Bucket)(nil)

// Open opens the archive at rawURL: s3://bucket?region=...&endpoint=...
// (credentials from the AWS chain: the environment, the shared files, the
// instance's role) or file:///dir, a directory created if needed. now stamps
// manifests; nil means time.Now. Close releases it.
func Open(ctx context.Context, rawURL string, now func() time.Time) (*Bucket, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	switch u.Scheme {
	case "file":
		dir := u.Path
		if u.Host == "." { // file://./relative/dir
			dir = "." + dir
		}
		if dir == "" || len(u.Query()) > 0 {
			return nil, fmt.Errorf("archive: %s: want file:///absolute/dir or file://./relative/dir, without options", rawURL)
		}
		return NewDir(dir, now)
	case "s3":
		b, err := (&s3blob.URLOpener{}).OpenBucketURL(ctx, u)
		if err != nil {
			return nil, fmt.Errorf("archive: %w", err)
		}
		return newBucket(b, "s3://"+u.Host, now), nil
	}
	return nil, fmt.Errorf("archive: %s: unsupported scheme %q: want s3:// or file://", redact(u), u.Scheme)
}

// NewDir returns an archive in the directory root, creating it if needed.
// now stamps manifests; nil means time.Now.
func NewDir(root string, now func() time.Time) (*Bucket, error) {
	b, err := fileblob.OpenBucket(root, &fileblob.Options{
		CreateDir:   true,
		DirFileMode: 0o750,
		// Temporary files beside their final names rename on the same
		// file system, and no attribute files sit beside the archives.
		NoTempDir: true,
		Metadata:  fileblob.MetadataDontWrite,
	})
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	return newBucket(b, "file://"+root, now), nil
}

func newBucket(b *blob.Bucket, name string, now func() time.Time) *Bucket {
	if now == nil {
		now = time.Now
	}
	return &Bucket{b: b, now: now, name: name}
}

func redact(u *url.URL) string {
	v := *u
	v.RawQuery, v.User = "", nil
	return v.String()
}

// String names the bucket, without its options.
func (a *Bucket) String() string { return a.name }

// Close releases the bucket's connections.
func (a *Bucket) Close() error { return a.b.Close() }

func keys(c store.Context) (data, manifest string) {
	base := c.Type + "/" + c.ID
	return base + ".ndjson.gz", base + ".manifest.json"
}

func checkContext(c store.Context) error {
	// The name rules keep ids free of separators and "..", so a key never
	// leaves its type's folder.
	if !c.Valid() || strings.ContainsAny(c.ID, `/\`) || c.ID == "." || c.ID == ".." {
		return fmt.Errorf("archive: context %q: %w", c, store.ErrInvalid)
	}
	return nil
}

// Put writes c's archive. Errors: store.ErrInvalid, the sequence's error, the
// bucket's.
func (a *Bucket) Put(ctx context.Context, c store.Context, record json.RawMessage, events iter.Seq2[event.Event, error]) (Manifest, error) {
	if err := checkContext(c); err != nil {
		return Manifest{}, err
	}
	dataKey, manifestKey := keys(c)
	return a.write(ctx, c, dataKey, manifestKey, Manifest{Type: c.Type, ID: c.ID, Record: record}, events)
}

// write stores events at dataKey and then m, completed, at manifestKey.
func (a *Bucket) write(ctx context.Context, c store.Context, dataKey, manifestKey string, m Manifest, events iter.Seq2[event.Event, error]) (Manifest, error) {
	sum := sha256.New()
	var counted *countWriter
	err := a.putObject(ctx, dataKey, "application/gzip", func(w io.Writer) error {
		counted = &countWriter{w: io.MultiWriter(w, sum)}
		zw := gzip.NewWriter(counted)
		bw := bufio.NewWriterSize(zw, 64<<10)
		if err := writeEvents(ctx, bw, events, &m); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		return zw.Close()
	})
	if err != nil {
		return Manifest{}, fmt.Errorf("archive: put %s: %w", c, err)
	}
	m.SHA256 = hex.EncodeToString(sum.Sum(nil))
	m.Bytes = counted.n
	m.CreatedAt = a.now().UTC()
	body, err := json.Marshal(m)
	if err != nil {
		return Manifest{}, fmt.Errorf("archive: %w", err)
	}
	err = a.putObject(ctx, manifestKey, "application/json", func(w io.Writer) error {
		_, err := w.Write(append(body, '\n'))
		return err
	})
	if err != nil {
		return Manifest{}, fmt.Errorf("archive: put manifest of %s: %w", c, err)
	}
	return m, nil
}

// putObject writes the object key from fill. The object appears whole when
// fill and the commit succeed, or not at all: a failed fill cancels the
// writer's context, which aborts the upload instead of committing it.
func (a *Bucket) putObject(ctx context.Context, key, contentType string, fill func(io.Writer) error) (err error) {
	var n int64
	defer func() {
		if err != nil {
			a.stats.writeFailures.Add(1)
			return
		}
		a.stats.objects.Add(1)
		a.stats.bytes.Add(n)
	}()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var file *os.File // set by a directory's driver, so the data reaches the disk before the rename
	w, err := a.b.NewWriter(wctx, key, &blob.WriterOptions{
		ContentType: contentType,
		BeforeWrite: func(as func(any) bool) error { as(&file); return nil },
	})
	if err != nil {
		return err
	}
	counted := &countWriter{w: w}
	err = fill(counted)
	n = counted.n
	if err == nil && file != nil {
		err = file.Sync()
	}
	if err != nil {
		cancel()
		_ = w.Close()
		return err
	}
	return w.Close()
}

func writeEvents(ctx context.Context, w io.Writer, events iter.Seq2[event.Event, error], m *Manifest) error {
	for e, err := range events {
		if err != nil {
			return err
		}
		if m.Events%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		line, err := e.MarshalJSON()
		if err != nil {
			return err
		}
		if _, err := w.Write(append(line, '\n')); err != nil {
			return err
		}
		if m.FirstID == "" {
			m.FirstID = e.ID.String()
		}
		m.LastID = e.ID.String()
		m.Events++
	}
	return nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func isNotFound(err error) bool { return gcerrors.Code(err) == gcerrors.NotFound }

func (a *Bucket) manifest(ctx context.Context, c store.Context) (Manifest, error) {
	_, manifestKey := keys(c)
	return a.readManifest(ctx, c, manifestKey)
}

func (a *Bucket) readManifest(ctx context.Context, c store.Context, key string) (Manifest, error) {
	body, err := a.b.ReadAll(ctx, key)
	if isNotFound(err) {
		return Manifest{}, fmt.Errorf("archive: %s: %w", c, store.ErrNotFound)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("archive: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(body, &m); err != nil {
		return Manifest{}, fmt.Errorf("archive: manifest of %s: %w: %v", c, ErrCorrupt, err)
	}
	if m.Type != c.Type || m.ID != c.ID {
		return Manifest{}, fmt.Errorf("archive: manifest of %s names %s:%s: %w", c, m.Type, m.ID, ErrCorrupt)
	}
	return m, nil
}

// Get reads c's archive, checking the checksum, the size and the events
// against the manifest. Errors: store.ErrNotFound, ErrCorrupt,
// store.ErrInvalid, the bucket's.
func (a *Bucket) Get(ctx context.Context, c store.Context) (Manifest, []event.Event, error) {
	var evs []event.Event
	m, err := a.read(ctx, c, func(e event.Event) { evs = append(evs, e) })
	if err != nil {
		return Manifest{}, nil, err
	}
	if evs == nil {
		evs = []event.Event{}
	}
	return m, evs, nil
}

// Verify checks c's archive as Get does, keeping no events. Errors: as Get.
func (a *Bucket) Verify(ctx context.Context, c store.Context) (Manifest, error) {
	return a.read(ctx, c, func(event.Event) {})
}

// read decodes the events while hashing the compressed bytes, so one pass
// both verifies and reads. fn sees each event before the checksum is known,
// which is why Get drops everything it collected when read fails.
func (a *Bucket) read(ctx context.Context, c store.Context, fn func(event.Event)) (Manifest, error) {
	if err := checkContext(c); err != nil {
		return Manifest{}, err
	}
	m, err := a.manifest(ctx, c)
	if err != nil {
		return Manifest{}, a.readDone(err)
	}
	dataKey, _ := keys(c)
	m, err = a.readData(ctx, c, m, dataKey, func(e event.Event) bool { fn(e); return true })
	return m, a.readDone(err)
}

// readData decodes the events of m's object at key in order, handing each to
// fn until fn returns false. Only a read to the end checks the object
// against m: the checksum covers all of it.
func (a *Bucket) readData(ctx context.Context, c store.Context, m Manifest, key string, fn func(event.Event) bool) (Manifest, error) {
	r, err := a.b.NewReader(ctx, key, nil)
	if isNotFound(err) {
		return Manifest{}, fmt.Errorf("archive: %s: events missing: %w", c, ErrCorrupt)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("archive: %w", err)
	}
	defer r.Close()
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("archive: %s: %s: %w", c, fmt.Sprintf(format, args...), ErrCorrupt)
	}
	// A read that fails on the way (the bucket went away) is an IO error,
	// not a corrupt archive: readErr tells the two apart.
	src := &errReader{r: bufio.NewReaderSize(r, 64<<10)}
	sum := sha256.New()
	counted := &countWriter{w: sum}
	tee := io.TeeReader(src, counted)
	zr, err := gzip.NewReader(tee)
	if err != nil {
		if src.err != nil {
			return Manifest{}, fmt.Errorf("archive: %s: %w", c, src.err)
		}
		return Manifest{}, corrupt("%v", err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	var n int64
	var first, last string
	for sc.Scan() {
		if n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return Manifest{}, err
			}
		}
		var e event.Event
		if err := e.UnmarshalJSON(sc.Bytes()); err != nil {
			return Manifest{}, corrupt("event %d: %v", n+1, err)
		}
		if first == "" {
			first = e.ID.String()
		}
		last = e.ID.String()
		n++
		if !fn(e) {
			return m, nil
		}
	}
	if err := sc.Err(); err != nil {
		if src.err != nil {
			return Manifest{}, fmt.Errorf("archive: %s: %w", c, src.err)
		}
		return Manifest{}, corrupt("%v", err)
	}
	// Drain what gzip did not need, so the checksum covers the whole object.
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return Manifest{}, fmt.Errorf("archive: %s: %w", c, err)
	}
	switch {
	case hex.EncodeToString(sum.Sum(nil)) != m.SHA256:
		return Manifest{}, corrupt("checksum differs from the manifest")
	case counted.n != m.Bytes:
		return Manifest{}, corrupt("%d bytes, the manifest says %d", counted.n, m.Bytes)
	case n != m.Events || first != m.FirstID || last != m.LastID:
		return Manifest{}, corrupt("%d events %s..%s, the manifest says %d events %s..%s", n, first, last, m.Events, m.FirstID, m.LastID)
	}
	return m, nil
}

// errReader remembers the first error other than io.EOF of the reader it
// wraps.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && e.err == nil {
		e.err = err
	}
	return n, err
}

// list returns the names (the last part of the key) under prefix, which ends
// in "/", in order: folders with their trailing "/", objects without.
func (a *Bucket) list(ctx context.Context, prefix string) ([]string, error) {
	it := a.b.List(&blob.ListOptions{Prefix: prefix, Delimiter: "/"})
	var out []string
	for {
		o, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("archive: list %s: %w", prefix, err)
		}
		out = append(out, strings.TrimPrefix(o.Key, prefix))
	}
	sort.Strings(out)
	return out, nil
}

// List returns the manifests of type typ, ordered by id. Errors:
// store.ErrInvalid, ErrCorrupt, the bucket's.
func (a *Bucket) List(ctx context.Context, typ string) ([]Manifest, error) {
	if !event.ValidType(typ) {
		return nil, fmt.Errorf("archive: type %q: %w", typ, store.ErrInvalid)
	}
	names, err := a.list(ctx, typ+"/")
	if err != nil {
		return nil, err
	}
	out := []Manifest{}
	for _, name := range names {
		id, ok := strings.CutSuffix(name, ".manifest.json")
		if !ok || strings.HasPrefix(name, ".") || strings.Contains(name, "/") {
			continue
		}
		c := store.Context{Type: typ, ID: id}
		if checkContext(c) != nil {
			continue // not a name nqd writes
		}
		m, err := a.manifest(ctx, c)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Types lists the context types that have archives or segments.
func (a *Bucket) Types(ctx context.Context) ([]string, error) {
	names, err := a.list(ctx, "")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, name := range names {
		if typ, ok := strings.CutSuffix(name, "/"); ok && event.ValidType(typ) {
			out = append(out, typ)
		}
	}
	return out, nil
}

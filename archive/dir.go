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
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/store"
)

// Dir is an Archive in a directory:
//
//	<root>/<type>/<id>.ndjson.gz      the events, one wire-form JSON record a line
//	<root>/<type>/<id>.manifest.json  the Manifest
//
// Both files are written under temporary names and renamed into place, the
// manifest last, so a reader never sees half an archive.
type Dir struct {
	root string
	now  func() time.Time
}

var _ Archive = (*Dir)(nil)

// NewDir returns an archive rooted at root, creating it if needed. now stamps
// manifests; nil means time.Now.
func NewDir(root string, now func() time.Time) (*Dir, error) {
	if now == nil {
		now = time.Now
	}
	if err := os.MkdirAll(root, 0o750); err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	return &Dir{root: root, now: now}, nil
}

func (d *Dir) paths(c store.Context) (data, manifest string) {
	base := filepath.Join(d.root, c.Type, c.ID)
	return base + ".ndjson.gz", base + ".manifest.json"
}

func checkContext(c store.Context) error {
	// The name rules keep ids free of path separators and "..".
	if !c.Valid() || strings.ContainsAny(c.ID, `/\`) || c.ID == "." || c.ID == ".." {
		return fmt.Errorf("archive: context %q: %w", c, store.ErrInvalid)
	}
	return nil
}

// Put writes c's archive. Errors: store.ErrInvalid, the sequence's error, IO
// errors.
func (d *Dir) Put(ctx context.Context, c store.Context, record json.RawMessage, events iter.Seq2[event.Event, error]) (Manifest, error) {
	if err := checkContext(c); err != nil {
		return Manifest{}, err
	}
	dataPath, manifestPath := d.paths(c)
	return d.write(ctx, c, dataPath, manifestPath, Manifest{Type: c.Type, ID: c.ID, Record: record}, events)
}

// write stores events at dataPath and then m, completed, at manifestPath.
func (d *Dir) write(ctx context.Context, c store.Context, dataPath, manifestPath string, m Manifest, events iter.Seq2[event.Event, error]) (Manifest, error) {
	if err := os.MkdirAll(filepath.Dir(dataPath), 0o750); err != nil {
		return Manifest{}, fmt.Errorf("archive: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dataPath), ".put-*")
	if err != nil {
		return Manifest{}, fmt.Errorf("archive: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename this finds nothing

	sum := sha256.New()
	counted := &countWriter{w: io.MultiWriter(tmp, sum)}
	zw := gzip.NewWriter(counted)
	bw := bufio.NewWriterSize(zw, 64<<10)
	err = writeEvents(ctx, bw, events, &m)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = zw.Close()
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("archive: put %s: %w", c, err)
	}
	m.SHA256 = hex.EncodeToString(sum.Sum(nil))
	m.Bytes = counted.n
	m.CreatedAt = d.now().UTC()
	if err := os.Rename(tmp.Name(), dataPath); err != nil {
		return Manifest{}, fmt.Errorf("archive: %w", err)
	}
	body, err := json.Marshal(m)
	if err != nil {
		return Manifest{}, fmt.Errorf("archive: %w", err)
	}
	if err := writeFileAtomic(manifestPath, append(body, '\n')); err != nil {
		return Manifest{}, fmt.Errorf("archive: %w", err)
	}
	return m, nil
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

func writeFileAtomic(path string, body []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".manifest-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(body); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
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

func (d *Dir) manifest(c store.Context) (Manifest, error) {
	_, manifestPath := d.paths(c)
	return readManifest(c, manifestPath)
}

func readManifest(c store.Context, manifestPath string) (Manifest, error) {
	body, err := os.ReadFile(manifestPath)
	if errors.Is(err, fs.ErrNotExist) {
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
// store.ErrInvalid.
func (d *Dir) Get(ctx context.Context, c store.Context) (Manifest, []event.Event, error) {
	var evs []event.Event
	m, err := d.read(ctx, c, func(e event.Event) { evs = append(evs, e) })
	if err != nil {
		return Manifest{}, nil, err
	}
	if evs == nil {
		evs = []event.Event{}
	}
	return m, evs, nil
}

// Verify checks c's archive as Get does, keeping no events. Errors:
// store.ErrNotFound, ErrCorrupt, store.ErrInvalid.
func (d *Dir) Verify(ctx context.Context, c store.Context) (Manifest, error) {
	return d.read(ctx, c, func(event.Event) {})
}

// read decodes the events while hashing the compressed bytes, so one pass
// both verifies and reads. fn sees each event before the checksum is known,
// which is why Get drops everything it collected when read fails.
func (d *Dir) read(ctx context.Context, c store.Context, fn func(event.Event)) (Manifest, error) {
	if err := checkContext(c); err != nil {
		return Manifest{}, err
	}
	m, err := d.manifest(c)
	if err != nil {
		return Manifest{}, err
	}
	dataPath, _ := d.paths(c)
	return readData(ctx, c, m, dataPath, func(e event.Event) bool { fn(e); return true })
}

// readData decodes the events of m's file at dataPath in order, handing each
// to fn until fn returns false. Only a read to the end checks the file
// against m: the checksum covers the whole file.
func readData(ctx context.Context, c store.Context, m Manifest, dataPath string, fn func(event.Event) bool) (Manifest, error) {
	f, err := os.Open(dataPath)
	if errors.Is(err, fs.ErrNotExist) {
		return Manifest{}, fmt.Errorf("archive: %s: events missing: %w", c, ErrCorrupt)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("archive: %w", err)
	}
	defer f.Close()
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("archive: %s: %s: %w", c, fmt.Sprintf(format, args...), ErrCorrupt)
	}

	sum := sha256.New()
	counted := &countWriter{w: sum}
	src := io.TeeReader(bufio.NewReaderSize(f, 64<<10), counted)
	zr, err := gzip.NewReader(src)
	if err != nil {
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
		return Manifest{}, corrupt("%v", err)
	}
	// Drain what gzip did not need, so the checksum covers the whole file.
	if _, err := io.Copy(io.Discard, src); err != nil {
		return Manifest{}, fmt.Errorf("archive: %w", err)
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

// List returns the manifests of type typ, ordered by id. Errors:
// store.ErrInvalid, ErrCorrupt.
func (d *Dir) List(ctx context.Context, typ string) ([]Manifest, error) {
	if !event.ValidType(typ) {
		return nil, fmt.Errorf("archive: type %q: %w", typ, store.ErrInvalid)
	}
	entries, err := os.ReadDir(filepath.Join(d.root, typ))
	if errors.Is(err, fs.ErrNotExist) {
		return []Manifest{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	out := []Manifest{}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".manifest.json")
		if !ok || e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		m, err := d.manifest(store.Context{Type: typ, ID: id})
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Types lists the directories of archived types.
func (d *Dir) Types(ctx context.Context) ([]string, error) {
	entries, err := os.ReadDir(d.root)
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && event.ValidType(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

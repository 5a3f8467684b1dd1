// Command nqarchive inspects the archives nqd writes before finished runs
// expire (NQ_ARCHIVE_URL or NQ_ARCHIVE_DIR).
//
//	nqarchive verify <dir>|<url>   check every archive against its manifest
//
// A URL is one NQ_ARCHIVE_URL takes: s3://bucket?region=... (credentials
// from the AWS environment) or file:///dir.
// verify prints one line per archive, compaction segment and step value kept
// by reference, and exits 1 if any is corrupt.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/nqd-dev/nqd/archive"
	"github.com/nqd-dev/nqd/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 || args[0] != "verify" {
		fmt.Fprintln(stderr, "usage: nqarchive verify <dir>|<s3:// or file:// url>")
		return 2
	}
	bad, err := verify(ctx, args[1], stdout)
	if err != nil {
		fmt.Fprintln(stderr, "nqarchive:", err)
		return 1
	}
	if bad > 0 {
		fmt.Fprintf(stderr, "nqarchive: %d corrupt archives\n", bad)
		return 1
	}
	return 0
}

// open opens the archive at where, a URL or a directory that must exist:
// verifying a mistyped path would create it and find nothing wrong.
func open(ctx context.Context, where string) (*archive.Bucket, error) {
	if strings.Contains(where, "://") {
		return archive.Open(ctx, where, nil)
	}
	if _, err := os.Stat(where); err != nil {
		return nil, err
	}
	return archive.NewDir(where, nil)
}

// verify checks every archive at where and returns how many are corrupt;
// an error means the archive itself could not be read.
func verify(ctx context.Context, where string, out io.Writer) (int, error) {
	a, err := open(ctx, where)
	if err != nil {
		return 0, err
	}
	defer a.Close()
	types, err := a.Types(ctx)
	if err != nil {
		return 0, err
	}
	bad := 0
	for _, typ := range types {
		list, err := a.List(ctx, typ)
		if err != nil {
			fmt.Fprintf(out, "CORRUPT %s: %v\n", typ, err)
			bad++
			continue
		}
		for _, m := range list {
			if _, err := a.Verify(ctx, m.Context()); err != nil {
				fmt.Fprintf(out, "CORRUPT %s: %v\n", m.Context(), err)
				bad++
				continue
			}
			fmt.Fprintf(out, "ok      %s: %d events %s..%s\n", m.Context(), m.Events, m.FirstID, m.LastID)
		}
		n, err := verifySegments(ctx, a, typ, out)
		if err != nil {
			return bad, err
		}
		bad += n
	}
	n, err := verifyData(ctx, a, out)
	return bad + n, err
}

// verifyData checks every step value kept by reference against its hash
// and returns how many are corrupt.
func verifyData(ctx context.Context, a *archive.Bucket, out io.Writer) (int, error) {
	refs, err := a.ListData(ctx)
	if err != nil {
		return 0, err
	}
	bad := 0
	for _, ref := range refs {
		if _, err := a.GetData(ctx, ref); err != nil {
			fmt.Fprintf(out, "CORRUPT data %s/%s: %v\n", ref.RunID, ref.SHA256, err)
			bad++
			continue
		}
		fmt.Fprintf(out, "ok      data %s/%s: %d bytes\n", ref.RunID, ref.SHA256, ref.Bytes)
	}
	return bad, nil
}

// verifySegments checks the segments compaction wrote for the contexts of
// typ and returns how many are corrupt.
func verifySegments(ctx context.Context, a *archive.Bucket, typ string, out io.Writer) (int, error) {
	ids, err := a.Segmented(ctx, typ)
	if err != nil {
		return 0, err
	}
	bad := 0
	for _, id := range ids {
		c := store.Context{Type: typ, ID: id}
		segs, err := a.Segments(ctx, c)
		if err != nil {
			return bad, err
		}
		for _, r := range segs {
			m, err := a.VerifySegment(ctx, c, r)
			if err != nil {
				fmt.Fprintf(out, "CORRUPT %s segment %s..%s: %v\n", c, r.FirstID, r.LastID, err)
				bad++
				continue
			}
			fmt.Fprintf(out, "ok      %s segment: %d events %s..%s\n", c, m.Events, m.FirstID, m.LastID)
		}
	}
	return bad, nil
}

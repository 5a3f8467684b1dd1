// Command nqarchive inspects the archives nqd writes before finished runs
// expire (NQ_ARCHIVE_DIR).
//
//	nqarchive verify <dir>   check every archive against its manifest
//
// verify prints one line per archive and exits 1 if any is corrupt.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/nqd-dev/nqd/archive"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 || args[0] != "verify" {
		fmt.Fprintln(stderr, "usage: nqarchive verify <dir>")
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

// verify checks every archive under root and returns how many are corrupt;
// an error means the directory itself could not be read.
func verify(ctx context.Context, root string, out io.Writer) (int, error) {
	if _, err := os.Stat(root); err != nil {
		return 0, err
	}
	a, err := archive.NewDir(root, nil)
	if err != nil {
		return 0, err
	}
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
	}
	return bad, nil
}

package pgstore

import (
	"fmt"

	"github.com/nqd-dev/nqd/store"
)

var (
	_ store.DefinitionStore = (*Store)(nil)
	_ store.RunStore        = (*Store)(nil)
)

var errConflict = fmt.Errorf("pgstore: %w", store.ErrConflict)

package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nqd-dev/nqd/flows"
	"github.com/nqd-dev/nqd/store"
)

// Definition returns the flow definition name. While the store cannot be
// read for it (store.ErrUnavailable) it is the one this instance read last:
// on a store whose keys are split (the Redis store's shards) the
// definitions live on one part, and its outage would otherwise stop the runs
// of every part. Errors: store.ErrNotFound.
func (e *Engine) Definition(ctx context.Context, name string) (*flows.Definition, error) {
	body, err := e.st.Definition(ctx, name)
	e.defsMu.Lock()
	c, ok := e.defs[name]
	e.defsMu.Unlock()
	if err != nil {
		if ok && errors.Is(err, store.ErrUnavailable) {
			return c.def, nil
		}
		return nil, err
	}
	if ok && string(c.body) == string(body) {
		return c.def, nil
	}
	d, err := flows.Parse(body, false, name)
	if err != nil {
		return nil, fmt.Errorf("engine: stored flow %q: %w", name, err)
	}
	e.defsMu.Lock()
	e.defs[name] = cachedDef{body: body, def: d}
	e.defsMu.Unlock()
	return d, nil
}

// Definitions returns every stored definition, by name.
func (e *Engine) Definitions(ctx context.Context) ([]*flows.Definition, error) {
	all, err := e.st.Definitions(ctx)
	if err != nil {
		return nil, err
	}
	var out []*flows.Definition
	for name := range all {
		d, err := e.Definition(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

type cachedDef struct {
	body []byte
	def  *flows.Definition
}

// checkedDefinition returns the cached definition of name and its body,
// when the store checks definitions on update (store.Features
// ChecksDefinitions); nil otherwise. On such a store a start may be decided
// on a cached definition without reading it first: a definition changed
// meanwhile, on any instance, makes the write fail and the start is decided
// again on the stored one.
func (e *Engine) checkedDefinition(name string) ([]byte, *flows.Definition) {
	if !e.features.ChecksDefinitions {
		return nil, nil
	}
	e.defsMu.Lock()
	defer e.defsMu.Unlock()
	c, ok := e.defs[name]
	if !ok {
		return nil, nil
	}
	return c.body, c.def
}

// PutDefinition validates d and stores it for every instance. The kinds
// its event awaits wait for are watched first (see store.KindIndex), so the
// kind index holds every such event appended once the definition exists.
func (e *Engine) PutDefinition(ctx context.Context, d *flows.Definition) error {
	if err := d.Validate(); err != nil {
		return err
	}
	body, err := json.Marshal(d)
	if err != nil {
		return err
	}
	if err := e.watchKinds(ctx, d); err != nil {
		return err
	}
	err = e.st.PutDefinition(ctx, d.Name, body)
	e.forgetDefinition(d.Name)
	return err
}

// forgetDefinition drops name from the cache, so that this instance's next
// start reads the definition it just changed rather than be refused once.
func (e *Engine) forgetDefinition(name string) {
	e.defsMu.Lock()
	delete(e.defs, name)
	e.defsMu.Unlock()
}

// DeleteDefinition removes a flow definition; its runs stay. Errors:
// store.ErrNotFound.
func (e *Engine) DeleteDefinition(ctx context.Context, name string) error {
	err := e.st.DeleteDefinition(ctx, name)
	e.forgetDefinition(name)
	return err
}

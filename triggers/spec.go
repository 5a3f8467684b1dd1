package triggers

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/cond"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/reducers"
	"github.com/nqd-dev/nqd/schedule"
	"github.com/nqd-dev/nqd/store"
)

// Bounds of what a registration may say.
const (
	maxDisplayName   = 256
	maxDescription   = 4096
	maxSource        = 64
	maxSubscriptions = 1000
	maxPath          = 512
	// minSecret is the shortest webhook secret accepted; a generated one
	// is 32 random bytes.
	minSecret = 16
)

// DefaultAuthHeader is the header a webhook call carries its secret in when
// the trigger names none, the original's default.
const DefaultAuthHeader = "X-API-Key"

// WebhookPath is the path a webhook trigger is fired at.
func WebhookPath(name string) string { return "/api/_webhook/trigger/" + name }

// Spec is a trigger to register: the body of POST /api/_triggers.
type Spec struct {
	Name        string          `json:"name"`
	Type        string          `json:"type"`
	Scope       string          `json:"scope"`
	DisplayName string          `json:"displayName"`
	Description string          `json:"description"`
	Status      string          `json:"status"`
	Source      string          `json:"source"`
	Config      json.RawMessage `json:"config"`
	// Subscriptions are flows to subscribe in auto mode.
	Subscriptions []string `json:"subscriptions"`
	// RegisteredBy names who registered it (the API token's name).
	RegisteredBy string `json:"-"`
}

// Patch changes a registered trigger: the body of PATCH
// /api/_triggers/{name}. Nil fields keep what is stored; Config's fields
// replace the stored ones they name.
type Patch struct {
	DisplayName   *string         `json:"displayName"`
	Description   *string         `json:"description"`
	Status        *string         `json:"status"`
	Config        json.RawMessage `json:"config"`
	Subscriptions *[]string       `json:"subscriptions"`
}

// Saved is a registered or updated trigger, with the webhook secret nqd
// generated for it, if it did: the only time the secret is told.
type Saved struct {
	Trigger Trigger
	Secret  string
}

// config is every type's configuration; normalize keeps a type's fields.
type config struct {
	// webhook
	Path        string `json:"path,omitempty"`
	Method      string `json:"method,omitempty"`
	RequireAuth bool   `json:"requireAuth,omitempty"`
	AuthHeader  string `json:"authHeader,omitempty"`
	// Secret is taken in and never given back or stored.
	Secret string `json:"secret,omitempty"`
	// event
	Event  string          `json:"event,omitempty"`
	Filter json.RawMessage `json:"filter,omitempty"`
}

var webhookMethods = []string{"GET", "POST", "PUT", "PATCH", "DELETE"}

// types are the trigger types.
var types = []string{TypeEvent, TypeWebhook, TypeSchedule, TypeManual}

// ownKinds are the registry's own event kinds, which no event trigger may
// wait for: a trigger fired by its own fires would never stop.
func ownKind(kind string) bool {
	return strings.HasPrefix(kind, "trigger.") || strings.HasPrefix(kind, "subscription.")
}

// normalize checks c for a trigger of type typ named name and returns it as
// stored: the type's fields with their defaults, the secret taken out.
func normalize(typ, name string, c config) (config, error) {
	switch typ {
	case TypeWebhook:
		out := config{Path: c.Path, Method: strings.ToUpper(c.Method), RequireAuth: c.RequireAuth, Secret: c.Secret}
		if out.Path == "" {
			out.Path = WebhookPath(name)
		}
		if !strings.HasPrefix(out.Path, "/") || len(out.Path) > maxPath || strings.ContainsAny(out.Path, " \t\r\n") {
			return config{}, invalid("config.path", "Webhook config.path must be a URL path starting with /")
		}
		if out.Method == "" {
			out.Method = "POST"
		}
		if !slices.Contains(webhookMethods, out.Method) {
			return config{}, invalid("config.method", "Webhook config.method must be GET, POST, PUT, PATCH or DELETE")
		}
		if out.RequireAuth {
			out.AuthHeader = c.AuthHeader
			if out.AuthHeader == "" {
				out.AuthHeader = DefaultAuthHeader
			}
			if !validHeaderName(out.AuthHeader) {
				return config{}, invalid("config.authHeader", "Webhook config.authHeader must be an HTTP header name")
			}
		}
		if c.Secret != "" && len(c.Secret) < minSecret {
			return config{}, invalid("config.secret", fmt.Sprintf("Webhook config.secret must have at least %d characters", minSecret))
		}
		return out, nil
	case TypeSchedule:
		return config{}, errors.New("triggers: a schedule's config is a schedule.Spec")
	case TypeEvent:
		out := config{Event: c.Event, Filter: objectText(c.Filter)}
		if out.Event == "" {
			return config{}, invalid("config.event", "Event triggers require config.event")
		}
		if !event.ValidKind(out.Event) || ownKind(out.Event) {
			return config{}, invalid("config.event", "Event config.event "+event.KindRule+", not one of the trigger registry's own")
		}
		if _, err := compileFilter(out.Filter); err != nil {
			return config{}, invalid("config.filter", "Event config.filter "+err.Error())
		}
		if isEmptyFilter(out.Filter) {
			out.Filter = nil
		}
		return out, nil
	case TypeManual:
		return config{}, nil
	}
	return config{}, invalid("type", "Invalid trigger type")
}

func validHeaderName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// scheduleConfig checks a schedule trigger's config by the rules of package
// schedule and returns it with its defaults filled in, as stored.
func scheduleConfig(name string, raw json.RawMessage) (json.RawMessage, error) {
	var sp schedule.Spec
	if t := bytes.TrimSpace(raw); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		if err := json.Unmarshal(raw, &sp); err != nil {
			return nil, invalid("config", "Schedule config must be an object with cron or interval (seconds), timezone and the schedule policies")
		}
	}
	if sp.Cron == "" && sp.Interval == 0 {
		return nil, invalid("config", "Schedule triggers require config.cron or config.interval")
	}
	sc, err := schedule.Compile(sp, name)
	if err != nil {
		var e *nqd.Error
		if errors.As(err, &e) {
			for field, rule := range e.Fields {
				return nil, invalid("config."+field, "Schedule config."+field+": "+rule)
			}
		}
		return nil, invalid("config", "Schedule config: "+nqd.ErrorMessage(err))
	}
	return mustJSON(sc.Spec()), nil
}

// storedConfig checks raw, the config of a trigger of type typ named name,
// and returns the config to store, the hash of its webhook secret (the
// stored one unless a new one is given) and a secret nqd generated.
func storedConfig(typ, name string, raw json.RawMessage, storedHash string) (json.RawMessage, string, string, error) {
	if typ == TypeSchedule {
		c, err := scheduleConfig(name, raw)
		return c, "", "", err
	}
	c, err := decodeConfig(raw)
	if err != nil {
		return nil, "", "", err
	}
	if c, err = normalize(typ, name, c); err != nil {
		return nil, "", "", err
	}
	hash, secret := withSecret(c, storedHash)
	return marshalConfig(c), hash, secret, nil
}

// decodeConfig reads a config object; a missing one is empty.
func decodeConfig(raw json.RawMessage) (config, error) {
	var c config
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return c, nil
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return config{}, invalid("config", "config must be an object of the trigger type's settings")
	}
	return c, nil
}

// hashSecret is what is stored of a webhook secret.
func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

func newSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// withSecret settles a webhook's secret: the one given, else the stored
// one, else a new one when calls must carry one. It returns the hash to
// store and the secret to tell, when nqd made it.
func withSecret(c config, storedHash string) (hash, generated string) {
	switch {
	case !c.RequireAuth:
		return "", ""
	case c.Secret != "":
		return hashSecret(c.Secret), ""
	case storedHash != "":
		return storedHash, ""
	}
	s := newSecret()
	return hashSecret(s), s
}

func marshalConfig(c config) json.RawMessage {
	c.Secret = ""
	b, _ := json.Marshal(c)
	return b
}

// checkText bounds the free-text fields of a spec.
func checkText(displayName, description, source string) error {
	switch {
	case len(displayName) > maxDisplayName:
		return invalid("displayName", fmt.Sprintf("displayName must have at most %d bytes", maxDisplayName))
	case len(description) > maxDescription:
		return invalid("description", fmt.Sprintf("description must have at most %d bytes", maxDescription))
	case len(source) > maxSource:
		return invalid("source", fmt.Sprintf("source must have at most %d bytes", maxSource))
	}
	return nil
}

func checkStatus(s string) error {
	if s != StatusActive && s != StatusInactive && s != StatusRetired {
		return invalid("status", "status must be active, inactive or retired")
	}
	return nil
}

// checkFlows dedupes subscriptions and checks their names.
func checkFlows(flows []string) ([]string, error) {
	if len(flows) > maxSubscriptions {
		return nil, invalid("subscriptions", fmt.Sprintf("at most %d subscriptions", maxSubscriptions))
	}
	out := []string{}
	for _, f := range flows {
		if !event.ValidName(f) {
			return nil, invalid("subscriptions", "Flow name "+event.NameRule)
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

// build checks sp and returns the stored spec, the flows to subscribe and a
// generated secret.
func build(sp Spec) (reducers.TriggerSpec, []string, string, error) {
	switch {
	case sp.Name == "":
		return reducers.TriggerSpec{}, nil, "", invalid("name", "Missing required field: name")
	case !ValidName(sp.Name):
		return reducers.TriggerSpec{}, nil, "", invalid("name", NameRule)
	case sp.Type == "":
		return reducers.TriggerSpec{}, nil, "", invalid("type", "Missing required field: type")
	}
	if sp.Scope == "" {
		sp.Scope = ScopeFlow
	}
	if sp.Scope != ScopeFlow && sp.Scope != ScopeRun {
		return reducers.TriggerSpec{}, nil, "", invalid("scope", "scope must be flow or run")
	}
	if sp.Status == "" {
		sp.Status = StatusActive
	}
	if sp.Source == "" {
		sp.Source = "ui"
	}
	if err := checkStatus(sp.Status); err != nil {
		return reducers.TriggerSpec{}, nil, "", err
	}
	if err := checkText(sp.DisplayName, sp.Description, sp.Source); err != nil {
		return reducers.TriggerSpec{}, nil, "", err
	}
	if !slices.Contains(types, sp.Type) {
		return reducers.TriggerSpec{}, nil, "", invalid("type", "Invalid trigger type")
	}
	config, hash, secret, err := storedConfig(sp.Type, sp.Name, sp.Config, "")
	if err != nil {
		return reducers.TriggerSpec{}, nil, "", err
	}
	flows, err := checkFlows(sp.Subscriptions)
	if err != nil {
		return reducers.TriggerSpec{}, nil, "", err
	}
	return reducers.TriggerSpec{
		Name: sp.Name, Type: sp.Type, Scope: sp.Scope, DisplayName: sp.DisplayName, Description: sp.Description,
		Source: sp.Source, Status: sp.Status, Config: config, RegisteredBy: sp.RegisteredBy, SecretHash: hash,
	}, flows, secret, nil
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only maps and structs of plain values reach here
	}
	return b
}

// watch makes the store's kind index record the events an event trigger
// waits for, before the trigger is stored, so that none appended once it
// is active is missed.
func (g *Registry) watch(ctx context.Context, sp reducers.TriggerSpec) error {
	if sp.Type != TypeEvent {
		return nil
	}
	var c config
	if err := json.Unmarshal(sp.Config, &c); err != nil || c.Event == "" {
		return nil
	}
	return g.st.WatchKinds(ctx, c.Event)
}

// write appends evs to the trigger's stream as the change decided on the
// state at pos: of two changes decided on the same state, the second is
// refused with errStateMoved.
func (g *Registry) write(ctx context.Context, name string, pos event.ID, evs []event.Event) error {
	res, err := g.st.Append(ctx, Context(name), evs, store.AppendOptions{IdempotencyKey: "registry:" + pos.String()})
	if err != nil {
		return err
	}
	if res.Replayed && (len(res.Events) != len(evs) || res.Events[0].Kind != evs[0].Kind || !bytes.Equal(res.Events[0].Data, evs[0].Data)) {
		return errStateMoved
	}
	return nil
}

// Create registers sp and subscribes its flows, in one append. Errors:
// ErrExists, validation errors (code validation_failed, with the field),
// the store's.
func (g *Registry) Create(ctx context.Context, sp Spec) (Saved, error) {
	spec, flows, secret, err := build(sp)
	if err != nil {
		return Saved{}, err
	}
	ts, ok, err := g.registered(ctx, spec.Name)
	if err != nil {
		return Saved{}, err
	}
	if ok {
		return Saved{}, ErrExists
	}
	if err := g.watch(ctx, spec); err != nil {
		return Saved{}, err
	}
	// Indexed first: a member with no registration is passed over, a
	// registration with no member would never be listed.
	if err := g.st.IndexAdd(ctx, Index, spec.Name, g.opts.Now().UnixMilli()); err != nil {
		return Saved{}, err
	}
	evs := []event.Event{{Kind: reducers.KindTriggerRegistered, Subject: spec.Name, Trigger: spec.Name, Data: mustJSON(spec)}}
	for _, f := range flows {
		evs = append(evs, subscriptionEvent(reducers.KindSubscriptionAdded, spec.Name, f, spec.Source))
	}
	if err := g.write(ctx, spec.Name, ts.Position(), evs); err != nil {
		if errors.Is(err, errStateMoved) {
			return Saved{}, ErrExists
		}
		return Saved{}, err
	}
	t, err := g.Get(ctx, spec.Name)
	return Saved{Trigger: t, Secret: secret}, err
}

func subscriptionEvent(kind, trigger, flow, source string) event.Event {
	return event.Event{Kind: kind, Subject: trigger, Trigger: trigger, FlowName: flow,
		Data: mustJSON(map[string]string{"flowName": flow, "mode": ModeAuto, "source": source})}
}

// maxRetries bounds how often a change decided on a state that moved is
// decided again.
const maxRetries = 5

// Update applies p to the trigger named name: one trigger.updated with the
// whole new spec, and the subscriptions added and removed, in one append.
// Errors: ErrNotFound, validation errors, the store's.
func (g *Registry) Update(ctx context.Context, name string, p Patch) (Saved, error) {
	for range maxRetries {
		saved, err := g.update(ctx, name, p)
		if !errors.Is(err, errStateMoved) {
			return saved, err
		}
	}
	return Saved{}, fmt.Errorf("triggers: update of %s: %w", name, store.ErrConflict)
}

func (g *Registry) update(ctx context.Context, name string, p Patch) (Saved, error) {
	ts, ok, err := g.registered(ctx, name)
	if err != nil {
		return Saved{}, err
	}
	if !ok {
		return Saved{}, ErrNotFound
	}
	old := ts.Registry.Spec
	spec := old
	if p.DisplayName != nil {
		spec.DisplayName = *p.DisplayName
	}
	if p.Description != nil {
		spec.Description = *p.Description
	}
	if p.Status != nil {
		spec.Status = *p.Status
		if err := checkStatus(spec.Status); err != nil {
			return Saved{}, err
		}
	}
	if err := checkText(spec.DisplayName, spec.Description, spec.Source); err != nil {
		return Saved{}, err
	}
	secret := ""
	if len(bytes.TrimSpace(p.Config)) > 0 && !bytes.Equal(bytes.TrimSpace(p.Config), []byte("null")) {
		merged, err := mergeConfig(old.Config, p.Config)
		if err != nil {
			return Saved{}, err
		}
		if spec.Config, spec.SecretHash, secret, err = storedConfig(spec.Type, spec.Name, merged, old.SecretHash); err != nil {
			return Saved{}, err
		}
	}
	var evs []event.Event
	if p.Subscriptions != nil {
		want, err := checkFlows(*p.Subscriptions)
		if err != nil {
			return Saved{}, err
		}
		var have []string
		for _, s := range ts.Registry.Subscriptions {
			have = append(have, s.FlowName)
			if !slices.Contains(want, s.FlowName) {
				evs = append(evs, subscriptionEvent(reducers.KindSubscriptionRemoved, name, s.FlowName, spec.Source))
			}
		}
		for _, f := range want {
			if !slices.Contains(have, f) {
				evs = append(evs, subscriptionEvent(reducers.KindSubscriptionAdded, name, f, spec.Source))
			}
		}
	}
	if err := g.watch(ctx, spec); err != nil {
		return Saved{}, err
	}
	up := event.Event{Kind: reducers.KindTriggerUpdated, Subject: name, Trigger: name, Data: mustJSON(spec)}
	if err := g.write(ctx, name, ts.Position(), append([]event.Event{up}, evs...)); err != nil {
		return Saved{}, err
	}
	t, err := g.Get(ctx, name)
	return Saved{Trigger: t, Secret: secret}, err
}

// mergeConfig lays patch's fields over the stored config's.
func mergeConfig(stored, patch json.RawMessage) (json.RawMessage, error) {
	base := map[string]json.RawMessage{}
	if len(stored) > 0 {
		_ = json.Unmarshal(stored, &base)
	}
	var over map[string]json.RawMessage
	if err := json.Unmarshal(patch, &over); err != nil || over == nil {
		return nil, invalid("config", "config must be an object of the trigger type's settings")
	}
	maps.Copy(base, over)
	return json.Marshal(base)
}

// Delete ends the trigger named name: trigger.deleted, after which it is
// neither listed nor fired, and its name may be registered again. Its
// stream stays, the record of what it did. Errors: ErrNotFound, the
// store's.
func (g *Registry) Delete(ctx context.Context, name string) error {
	for range maxRetries {
		ts, ok, err := g.registered(ctx, name)
		if err != nil {
			return err
		}
		if !ok {
			return ErrNotFound
		}
		ev := event.Event{Kind: reducers.KindTriggerDeleted, Subject: name, Trigger: name, Data: mustJSON(map[string]string{"name": name})}
		if err := g.write(ctx, name, ts.Position(), []event.Event{ev}); !errors.Is(err, errStateMoved) {
			return err
		}
	}
	return fmt.Errorf("triggers: delete of %s: %w", name, store.ErrConflict)
}

// compileFilter checks an event trigger's filter: a condition in the
// language of event awaits (a string, see package cond), or an object whose
// fields the event's data must equal. It returns the compiled condition.
func compileFilter(f json.RawMessage) (*cond.Program, error) {
	if isEmptyFilter(f) {
		return nil, nil
	}
	switch bytes.TrimSpace(f)[0] {
	case '"':
		var src string
		if err := json.Unmarshal(f, &src); err != nil {
			return nil, errors.New("is not a JSON string")
		}
		if strings.TrimSpace(src) == "" {
			return nil, nil
		}
		p, err := cond.Compile(src)
		if err != nil {
			return nil, fmt.Errorf("is not a condition: %v", err)
		}
		return p, nil
	case '{':
		var m map[string]json.RawMessage
		if err := json.Unmarshal(f, &m); err != nil {
			return nil, errors.New("is not a JSON object")
		}
		return nil, nil
	}
	return nil, errors.New("must be a condition string or an object of data fields to equal")
}

// objectText turns a filter sent as the text of a JSON object, as the edit
// form of the v0.5 UI sends it, into that object.
func objectText(f json.RawMessage) json.RawMessage {
	var src string
	if len(f) == 0 || f[0] != '"' || json.Unmarshal(f, &src) != nil {
		return f
	}
	t := strings.TrimSpace(src)
	if strings.HasPrefix(t, "{") && json.Valid([]byte(t)) {
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(t), &m) == nil {
			return json.RawMessage(t)
		}
	}
	return f
}

func isEmptyFilter(f json.RawMessage) bool {
	t := bytes.TrimSpace(f)
	return len(t) == 0 || bytes.Equal(t, []byte("null")) || bytes.Equal(t, []byte(`""`)) || bytes.Equal(t, []byte("{}"))
}

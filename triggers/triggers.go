// Package triggers is the trigger registry: named triggers (event, webhook,
// schedule and manual) that flows subscribe to, so that a fire starts each
// subscribed flow. A trigger keeps its whole life in its own stream, context
// `trigger:<name>`: its registration, updates, subscriptions, deletion, every
// fire and every flow a fire started or failed to start. What the registry
// answers is the fold of that stream (reducers.Registered), so every nqd
// instance on the same store serves the same registry, and a trigger's
// events page and live feed are its stream.
package triggers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/auth"
	"github.com/nqd-dev/nqd/engine"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/reducers"
	"github.com/nqd-dev/nqd/schedule"
	"github.com/nqd-dev/nqd/store"
)

// Trigger types, scopes and statuses.
const (
	TypeEvent    = "event"
	TypeWebhook  = "webhook"
	TypeSchedule = "schedule"
	TypeManual   = "manual"

	// ScopeFlow: a fire starts each flow subscribed in auto mode.
	ScopeFlow = "flow"
	// ScopeRun: a fire is recorded and starts nothing; runs wait for it.
	ScopeRun = "run"

	StatusActive   = "active"
	StatusInactive = "inactive"
	StatusRetired  = "retired"

	ModeAuto   = "auto"
	ModeManual = "manual"
)

// ContextType is the type of a trigger's stream.
const ContextType = "trigger"

// Index lists the registry's triggers. It is not the type index of trigger
// streams, which also holds the await triggers of runs.
var Index = store.Index{Type: ContextType, Name: "registry"}

// Context is the stream of the trigger named name.
func Context(name string) store.Context { return store.Context{Type: ContextType, ID: name} }

// Store is what the registry keeps triggers in. Any engine.Store is one.
type Store interface {
	Append(ctx context.Context, c store.Context, evs []event.Event, opts store.AppendOptions) (store.AppendResult, error)
	Range(ctx context.Context, c store.Context, q store.RangeQuery) ([]event.Event, error)
	Info(ctx context.Context, c store.Context) (store.StreamInfo, error)
	IndexAdd(ctx context.Context, ix store.Index, id string, score int64) error
	IndexList(ctx context.Context, ix store.Index, offset, limit int) (store.IndexPage, error)
	store.KindIndex
}

// States folds a context's stream (see snapshots.Cache).
type States interface {
	StateAt(ctx context.Context, c store.Context, at event.ID) (reducers.State, error)
}

// Starter starts flow runs (see engine.Engine.Start).
type Starter interface {
	Start(ctx context.Context, flow string, input json.RawMessage, idempotencyKey string) (engine.Started, error)
}

// Options tune a Registry. The zero value is usable.
type Options struct {
	// Now is the registry's clock; default time.Now.
	Now func() time.Time
	// Poll is how often Run looks for the events event triggers wait for;
	// default 1s.
	Poll   time.Duration
	Logger zerolog.Logger
}

// Registry is the trigger registry. It is safe for concurrent use.
type Registry struct {
	st      Store
	states  States
	starter Starter
	opts    Options
	log     zerolog.Logger
}

// New returns the registry kept in st, folded by states, starting flows with
// starter.
func New(st Store, states States, starter Starter, opts Options) *Registry {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	return &Registry{st: st, states: states, starter: starter, opts: opts, log: opts.Logger}
}

// Errors of the registry beyond the store's sentinels.
var (
	// ErrExists: a trigger of that name is registered.
	ErrExists error = &nqd.Error{Code: nqd.CodeConflict, Message: "Trigger already exists", Err: store.ErrConflict}
	// ErrNotFound: no trigger of that name is registered.
	ErrNotFound error = &nqd.Error{Code: nqd.CodeNotFound, Message: "Trigger not found", Err: store.ErrNotFound}
	// ErrNotActive: the trigger is inactive or retired and does not fire.
	ErrNotActive error = &nqd.Error{Code: nqd.CodeConflict, Message: "Trigger not active", Err: store.ErrConflict}
)

// invalid is a refused trigger field: message is what the client is told.
func invalid(field, message string) error {
	return &nqd.Error{Code: nqd.CodeValidation, Message: message, Fields: map[string]string{field: message}, Err: store.ErrInvalid}
}

// reservedNames are paths beside /api/_triggers/{name}.
var reservedNames = map[string]bool{"stats": true, "ws": true}

// ValidName reports whether name may name a registry trigger: a context id
// (event/names.go) that is not shaped like the signed id of a run's await
// trigger, whose streams share the type, nor a route's (stats, ws).
func ValidName(name string) bool {
	return event.ValidContextID(name) && !auth.LooksLikeTriggerID(name) && !reservedNames[name]
}

// NameRule is what ValidName checks, as a client is told it.
const NameRule = "Trigger name " + event.ContextIDRule + ", must not be stats or ws, nor shaped like a signed trigger id (tg1.*)"

// Trigger is a registered trigger as the API answers it: the item of
// GET /api/_triggers, and with its subscriptions GET /api/_triggers/{name}.
type Trigger struct {
	Name              string          `json:"name"`
	Type              string          `json:"type"`
	Scope             string          `json:"scope"`
	DisplayName       string          `json:"displayName"`
	Description       string          `json:"description"`
	Source            string          `json:"source"`
	Status            string          `json:"status"`
	RegisteredAt      string          `json:"registeredAt"`
	LastActivityAt    string          `json:"lastActivityAt"`
	RegisteredBy      string          `json:"registeredBy"`
	Version           int             `json:"version"`
	Webhook           *Webhook        `json:"webhook"`
	Schedule          *Schedule       `json:"schedule"`
	Config            json.RawMessage `json:"config"`
	SubscribedFlows   []string        `json:"subscribedFlows"`
	SubscriptionCount int             `json:"subscriptionCount"`
	Subscriptions     []Subscription  `json:"subscriptions"`
	Stats             Stats           `json:"stats"`

	// secretHash is the stored hash of the webhook secret.
	secretHash string
	// activeSince is when an event trigger last became active.
	activeSince time.Time
	// recentFires are the newest fire times, epoch ms.
	recentFires []int64
}

// Webhook is a webhook trigger's endpoint.
type Webhook struct {
	Path   string       `json:"path"`
	Method string       `json:"method"`
	Auth   *WebhookAuth `json:"auth,omitempty"`
	// FullURL is filled in by the HTTP layer, which knows the origin.
	FullURL string `json:"fullUrl,omitempty"`
}

// WebhookAuth names the header a webhook call carries its secret in.
type WebhookAuth struct {
	Header string `json:"header"`
}

// Schedule is a schedule trigger's timing. Interval is in seconds.
type Schedule struct {
	Cron     string  `json:"cron,omitempty"`
	Interval float64 `json:"interval,omitempty"`
	Timezone string  `json:"timezone"`
	Enabled  bool    `json:"enabled"`
}

// Subscription is a flow subscribed to a trigger.
type Subscription struct {
	TriggerName  string `json:"triggerName"`
	FlowName     string `json:"flowName"`
	Mode         string `json:"mode"`
	Source       string `json:"source"`
	RegisteredAt string `json:"registeredAt"`
}

// Stats are a trigger's counts. SuccessCount and FailureCount count the
// flow starts of its fires; SuccessRate is their ratio in percent, 100
// before any.
type Stats struct {
	TotalFires        int64  `json:"totalFires"`
	TotalFlowsStarted int64  `json:"totalFlowsStarted"`
	Last24h           int    `json:"last24h"`
	SuccessCount      int64  `json:"successCount"`
	FailureCount      int64  `json:"failureCount"`
	ActiveSubscribers int    `json:"activeSubscribers"`
	SuccessRate       int    `json:"successRate"`
	LastFiredAt       string `json:"lastFiredAt,omitempty"`
	AvgResponseTime   int    `json:"avgResponseTime"`
}

// AutoFlows are the flows a fire starts: the subscriptions in auto mode,
// for a trigger of flow scope.
func (t *Trigger) AutoFlows() []string {
	if t.Scope != ScopeFlow {
		return nil
	}
	var out []string
	for _, s := range t.Subscriptions {
		if s.Mode == ModeAuto {
			out = append(out, s.FlowName)
		}
	}
	return out
}

// HasSecret reports whether webhook calls must carry a secret.
func (t *Trigger) HasSecret() bool { return t.secretHash != "" }

func isoTime(t reducers.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(event.TimeFormat)
}

// view turns a folded registry trigger into its answer at now.
func view(r *reducers.Registered, now time.Time) Trigger {
	sp := r.Spec
	t := Trigger{
		Name: sp.Name, Type: sp.Type, Scope: sp.Scope, DisplayName: sp.DisplayName, Description: sp.Description,
		Source: sp.Source, Status: sp.Status, RegisteredAt: isoTime(r.RegisteredAt), LastActivityAt: isoTime(r.LastActivityAt),
		RegisteredBy: sp.RegisteredBy, Version: r.Version, Config: sp.Config,
		SubscribedFlows: []string{}, Subscriptions: []Subscription{},
		secretHash: sp.SecretHash, activeSince: r.ActiveSince.Time, recentFires: r.RecentFires,
	}
	if t.DisplayName == "" {
		t.DisplayName = sp.Name
	}
	if t.Status == "" {
		t.Status = StatusActive
	}
	if len(t.Config) == 0 {
		t.Config = json.RawMessage(`{}`)
	}
	var c config
	_ = json.Unmarshal(sp.Config, &c)
	switch sp.Type {
	case TypeWebhook:
		t.Webhook = &Webhook{Path: c.Path, Method: c.Method}
		if c.RequireAuth {
			t.Webhook.Auth = &WebhookAuth{Header: c.AuthHeader}
		}
	case TypeSchedule:
		var sc schedule.Spec
		_ = json.Unmarshal(sp.Config, &sc)
		t.Schedule = &Schedule{Cron: sc.Cron, Interval: sc.Interval, Timezone: sc.Timezone, Enabled: t.Status == StatusActive}
	}
	for _, s := range r.Subscriptions {
		t.SubscribedFlows = append(t.SubscribedFlows, s.FlowName)
		t.Subscriptions = append(t.Subscriptions, Subscription{
			TriggerName: sp.Name, FlowName: s.FlowName, Mode: s.Mode, Source: s.Source, RegisteredAt: isoTime(s.RegisteredAt),
		})
	}
	t.SubscriptionCount = len(t.SubscribedFlows)
	t.Stats = Stats{
		TotalFires: r.Fires, TotalFlowsStarted: r.FlowsStarted, SuccessCount: r.FlowsStarted, FailureCount: r.FlowsFailed,
		ActiveSubscribers: len(t.AutoFlows()), SuccessRate: 100, LastFiredAt: isoTime(r.LastFiredAt),
	}
	if n := r.FlowsStarted + r.FlowsFailed; n > 0 {
		t.Stats.SuccessRate = int(r.FlowsStarted * 100 / n)
	}
	since := now.Add(-24 * time.Hour).UnixMilli()
	for _, ms := range r.RecentFires {
		if ms >= since {
			t.Stats.Last24h++
		}
	}
	return t
}

// registered reads the registry trigger named name; ok is false when there
// is none (never registered, deleted, or an await trigger's stream).
func (g *Registry) registered(ctx context.Context, name string) (*reducers.TriggerState, bool, error) {
	if !ValidName(name) {
		return nil, false, invalid("name", NameRule)
	}
	s, err := g.states.StateAt(ctx, Context(name), event.MaxID)
	if err != nil {
		return nil, false, err
	}
	ts, ok := s.(*reducers.TriggerState)
	if !ok {
		return nil, false, fmt.Errorf("triggers: state of %s is %T", name, s)
	}
	return ts, ts.Registry != nil && !ts.Registry.Deleted, nil
}

// Get returns the trigger named name. Errors: ErrNotFound, a validation
// error for a bad name, the store's.
func (g *Registry) Get(ctx context.Context, name string) (Trigger, error) {
	ts, ok, err := g.registered(ctx, name)
	if err != nil {
		return Trigger{}, err
	}
	if !ok {
		return Trigger{}, ErrNotFound
	}
	return view(ts.Registry, g.opts.Now()), nil
}

// listPage is how many index members one read takes.
const listPage = 500

// List returns every registered trigger, newest registration first.
func (g *Registry) List(ctx context.Context) ([]Trigger, error) {
	out := []Trigger{}
	now := g.opts.Now()
	for off := 0; ; off += listPage {
		page, err := g.st.IndexList(ctx, Index, off, listPage)
		if err != nil {
			return nil, err
		}
		for _, en := range page.Entries {
			ts, ok, err := g.registered(ctx, en.ID)
			if err != nil {
				return nil, err
			}
			if ok {
				out = append(out, view(ts.Registry, now))
			}
		}
		if len(page.Entries) < listPage {
			break
		}
	}
	slices.SortStableFunc(out, func(a, b Trigger) int {
		if c := strings.Compare(b.RegisteredAt, a.RegisteredAt); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

// Summary counts the registry: GET /api/_triggers/stats.
type Summary struct {
	Total              int            `json:"total"`
	Active             int            `json:"active"`
	Inactive           int            `json:"inactive"`
	Retired            int            `json:"retired"`
	ByType             map[string]int `json:"byType"`
	ByScope            map[string]int `json:"byScope"`
	ByStatus           map[string]int `json:"byStatus"`
	TotalSubscriptions int            `json:"totalSubscriptions"`
	TotalFires         int64          `json:"totalFires"`
	WithSubscribers    int            `json:"withSubscribers"`
}

// Summarize counts the registry's triggers.
func (g *Registry) Summarize(ctx context.Context) (Summary, error) {
	ts, err := g.List(ctx)
	if err != nil {
		return Summary{}, err
	}
	s := Summary{ByType: map[string]int{}, ByScope: map[string]int{}, ByStatus: map[string]int{}}
	for _, t := range ts {
		s.Total++
		switch t.Status {
		case StatusActive:
			s.Active++
		case StatusInactive:
			s.Inactive++
		case StatusRetired:
			s.Retired++
		}
		s.ByType[t.Type]++
		s.ByScope[t.Scope]++
		s.ByStatus[t.Status]++
		s.TotalSubscriptions += t.SubscriptionCount
		s.TotalFires += t.Stats.TotalFires
		if t.SubscriptionCount > 0 {
			s.WithSubscribers++
		}
	}
	return s, nil
}

// Record is a trigger event as the v0.5 UI reads it: `ts` in epoch ms.
type Record struct {
	ID          string          `json:"id"`
	TS          int64           `json:"ts"`
	Type        string          `json:"type"`
	TriggerName string          `json:"triggerName"`
	Data        json.RawMessage `json:"data"`
}

// RecordOf renders a trigger stream's event e of trigger name.
func RecordOf(name string, e event.Event) Record {
	data := e.Data
	if len(data) == 0 {
		data = json.RawMessage(`{}`)
	}
	return Record{ID: e.ID.String(), TS: e.Time().UnixMilli(), Type: e.Kind, TriggerName: name, Data: data}
}

// EventQuery pages a trigger's events, newest first.
type EventQuery struct {
	Limit, Offset int
	// Types keeps only events of these kinds; empty keeps all.
	Types []string
}

// EventPage is one page of a trigger's events.
type EventPage struct {
	TriggerName string   `json:"triggerName"`
	Events      []Record `json:"events"`
	Count       int      `json:"count"`
	Total       int64    `json:"total"`
	HasMore     bool     `json:"hasMore"`
}

// MaxEventScan bounds how many of a trigger's newest events a filtered
// events page reads.
const MaxEventScan = 10000

// Events returns a page of the trigger's events, newest first. Errors:
// ErrNotFound, the store's.
func (g *Registry) Events(ctx context.Context, name string, q EventQuery) (EventPage, error) {
	if _, err := g.Get(ctx, name); err != nil {
		return EventPage{}, err
	}
	c := Context(name)
	page := EventPage{TriggerName: name, Events: []Record{}}
	var evs []event.Event
	var err error
	if len(q.Types) == 0 {
		info, err := g.st.Info(ctx, c)
		if err != nil {
			return EventPage{}, err
		}
		page.Total = info.Length
		if evs, err = g.st.Range(ctx, c, store.RangeQuery{Reverse: true, Limit: q.Offset + q.Limit}); err != nil {
			return EventPage{}, err
		}
	} else {
		if evs, err = g.st.Range(ctx, c, store.RangeQuery{Reverse: true, Limit: MaxEventScan}); err != nil {
			return EventPage{}, err
		}
		evs = slices.DeleteFunc(evs, func(e event.Event) bool { return !slices.Contains(q.Types, e.Kind) })
		page.Total = int64(len(evs))
	}
	if q.Offset < len(evs) {
		evs = evs[q.Offset:]
	} else {
		evs = nil
	}
	if len(evs) > q.Limit {
		evs = evs[:q.Limit]
	}
	for _, e := range evs {
		page.Events = append(page.Events, RecordOf(name, e))
	}
	page.Count = len(page.Events)
	page.HasMore = int64(q.Offset+q.Limit) < page.Total
	return page, nil
}

// errStateMoved is a mutation refused because another one was stored
// first on the same state.
var errStateMoved = errors.New("triggers: the trigger changed meanwhile")

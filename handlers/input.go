package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/nqd-dev/nqd"
	"github.com/nqd-dev/nqd/event"
	"github.com/nqd-dev/nqd/internal/jsonscan"
	"github.com/nqd-dev/nqd/store"
)

// inputRecord is one event as a client sends it (EventInput in openapi.yaml):
// either spelling of each aliased pair (docs/compatibility.md), and `stepId`,
// which the Node module's records carry and nqd keeps as meta.stepId.
type inputRecord struct {
	ID            json.RawMessage `json:"id"` // ignored: the store assigns it
	TS            json.RawMessage `json:"ts"` // ignored: the id's time is the record's
	Kind          string          `json:"kind"`
	Type          string          `json:"type"`
	Subject       string          `json:"subject"`
	Flow          string          `json:"flow"`
	RunID         string          `json:"runId"`
	FlowName      string          `json:"flowName"`
	Step          string          `json:"step"`
	StepName      string          `json:"stepName"`
	StepID        string          `json:"stepId"`
	Attempt       *int            `json:"attempt"`
	Trigger       string          `json:"trigger"`
	CorrelationID string          `json:"correlationId"`
	Data          json.RawMessage `json:"data"`
	Meta          json.RawMessage `json:"meta"`
}

// appendBody is a POST body: one record, or a batch of them under `events`.
// Decoding the union in one pass keeps unknown fields an error at the top.
type appendBody struct {
	inputRecord
	Events []json.RawMessage `json:"events"`
}

// record is an input record with its aliases resolved: what the validator
// checks. Names that become part of storage keys follow the key rules; the
// others are only bounded.
type record struct {
	Kind          string `json:"kind" validate:"required,event_kind"`
	Flow          string `json:"flow" validate:"max=256"`
	FlowName      string `json:"flowName" validate:"omitempty,key_name"`
	Step          string `json:"step" validate:"max=256"`
	Attempt       int    `json:"attempt" validate:"gte=0"`
	Trigger       string `json:"trigger" validate:"max=256"`
	CorrelationID string `json:"correlationId" validate:"max=256"`
}

// pathContext is the context a route's URL names.
type pathContext struct {
	Type string `json:"type" validate:"context_type"`
	ID   string `json:"id" validate:"context_id"`
}

// contextParam reads and checks the {type} and {id} of the URL, so that no
// client string reaches a storage key unchecked.
func (a *API) contextParam(r *http.Request) (store.Context, error) {
	p := pathContext{Type: chi.URLParam(r, "type"), ID: chi.URLParam(r, "id")}
	if err := a.validateStruct(p, ""); err != nil {
		return store.Context{}, err
	}
	return store.Context{Type: p.Type, ID: p.ID}, nil
}

// idempotencyOptions reads the Idempotency-Key header (see checkKey).
func idempotencyOptions(r *http.Request) (store.AppendOptions, error) {
	vals, ok := r.Header["Idempotency-Key"]
	if !ok {
		return store.AppendOptions{}, nil
	}
	if len(vals) != 1 {
		return store.AppendOptions{}, invalidField("Idempotency-Key", keyRule)
	}
	if err := checkKey("Idempotency-Key", vals[0]); err != nil {
		return store.AppendOptions{}, err
	}
	return store.AppendOptions{IdempotencyKey: vals[0], SameRequest: true}, nil
}

const keyRule = "must be 1 to 255 printable ASCII characters"

// checkKey checks an idempotency key, named field: 1–255 printable ASCII
// characters, so it can be stored as is.
func checkKey(field, key string) error {
	if len(key) < 1 || len(key) > 255 {
		return invalidField(field, keyRule)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return invalidField(field, keyRule)
		}
	}
	return nil
}

// checkJSONContent accepts a JSON media type or none (some clients send
// none); anything else is not an event.
func checkJSONContent(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || !isJSONMedia(mt) {
		return badRequest("The body must be JSON, sent as Content-Type: application/json.")
	}
	return nil
}

// decodeAppend reads a POST body into the events to append to c. batch
// reports whether the body was `{"events":[...]}`. Every bad field of every
// event is reported; one bad event fails the whole batch.
func (a *API) decodeAppend(r *http.Request, c store.Context) (evs []event.Event, batch bool, err error) {
	defer func() { fillContextFields(c, evs) }()
	if err := checkJSONContent(r); err != nil {
		return nil, false, err
	}
	var body appendBody
	src := &countingReader{r: r.Body}
	if err := decodeStrict(src, &body, ""); err != nil {
		return nil, false, err
	}
	if body.Events == nil {
		if src.n > a.limits.MaxEventBytes {
			return nil, false, eventTooLarge("The event", a.limits.MaxEventBytes)
		}
		ev, err := a.toEvent(body.inputRecord, c.ID, "")
		if err != nil {
			return nil, false, err
		}
		return []event.Event{ev}, false, nil
	}

	if !reflect.ValueOf(body.inputRecord).IsZero() {
		return nil, true, badRequest("A batch body holds only `events`; put every field inside its event.")
	}
	switch n := len(body.Events); {
	case n == 0:
		return nil, true, invalidField("events", "must hold at least 1 event")
	case n > a.limits.MaxBatch:
		return nil, true, invalidField("events", fmt.Sprintf("must hold at most %d events", a.limits.MaxBatch))
	}
	evs = make([]event.Event, 0, len(body.Events))
	fields := map[string]string{}
	for i, raw := range body.Events {
		if int64(len(raw)) > a.limits.MaxEventBytes {
			return nil, true, eventTooLarge(fmt.Sprintf("events[%d]", i), a.limits.MaxEventBytes)
		}
		ev, err := a.decodeEvent(raw, c.ID, fmt.Sprintf("events[%d].", i))
		var apiErr *nqd.Error
		switch {
		case err == nil:
			evs = append(evs, ev)
		case errors.As(err, &apiErr) && len(apiErr.Fields) > 0:
			maps.Copy(fields, apiErr.Fields) // go on: the client learns of every bad event at once
		default:
			return nil, true, err
		}
	}
	if len(fields) > 0 {
		return nil, true, invalid(fields)
	}
	return evs, true, nil
}

// eventTooLarge is the 413 of an event over the size limit, whatever the
// size of the body it came in.
func eventTooLarge(what string, limit int64) *nqd.Error {
	return &nqd.Error{
		Code:    nqd.CodeTooLarge,
		Message: fmt.Sprintf("%s is larger than %d bytes.", what, limit),
	}
}

// countingReader counts the bytes read through it: a single-event body's
// size is the event's.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// fillContextFields gives the events of a flow run its run id, and those of a
// trigger the trigger id, when the client left them out: the UI reads `runId`
// from every record of a run, and the engine writes it on each of its own.
func fillContextFields(c store.Context, evs []event.Event) {
	for i := range evs {
		switch {
		case c.Type == "flow" && evs[i].RunID == "":
			evs[i].RunID = c.ID
		case c.Type == "trigger" && evs[i].Trigger == "":
			evs[i].Trigger = c.ID
		}
	}
}

// decodeEvent reads one event of a batch; prefix is its place in the body.
func (a *API) decodeEvent(raw json.RawMessage, subject, prefix string) (event.Event, error) {
	var in inputRecord
	if err := decodeChecked(raw, &in, prefix); err != nil {
		return event.Event{}, err
	}
	return a.toEvent(in, subject, prefix)
}

// toEvent resolves the aliases of in and checks the result. prefix is put
// before every field name an error reports.
func (a *API) toEvent(in inputRecord, subject, prefix string) (event.Event, error) {
	fields := map[string]string{}
	pick := func(name, v, alias, av string) string {
		if v != "" && av != "" && v != av {
			fields[prefix+alias] = "must equal " + name + " when both are sent"
		}
		if v != "" {
			return v
		}
		return av
	}
	kind := pick("kind", in.Kind, "type", in.Type)
	flow := pick("flow", in.Flow, "runId", in.RunID)
	step := pick("step", in.Step, "stepName", in.StepName)
	if in.Subject != "" && in.Subject != subject {
		fields[prefix+"subject"] = "must equal the context id of the URL"
	}
	meta, attempt := resolveMeta(in, prefix, fields)

	rec := record{
		Kind: kind, Flow: flow, FlowName: in.FlowName, Step: step, Attempt: attempt,
		Trigger: in.Trigger, CorrelationID: in.CorrelationID,
	}
	if err := a.validateStruct(rec, prefix); err != nil {
		var apiErr *nqd.Error
		if !errors.As(err, &apiErr) {
			return event.Event{}, err
		}
		maps.Copy(fields, apiErr.Fields)
	}
	data := nonNull(in.Data)
	if event.IsLog(kind) {
		var ok bool
		if data, ok = event.LogTextAliases(data); !ok {
			fields[prefix+"data.message"] = "must equal data.msg when both are sent"
		}
	}
	if len(fields) > 0 {
		return event.Event{}, invalid(fields)
	}
	return event.Event{
		Kind: kind, Subject: subject, RunID: flow, FlowName: in.FlowName,
		Step: step, Attempt: attempt, Trigger: in.Trigger, CorrelationID: in.CorrelationID,
		Data: data, Meta: meta,
	}, nil
}

// resolveMeta checks that meta is an object and agrees with the top-level
// attempt and stepId, and copies those into it, so that a stored record says
// each thing once and both spellings read back equal. Problems go to fields.
func resolveMeta(in inputRecord, prefix string, fields map[string]string) (json.RawMessage, int) {
	attempt := 0
	if in.Attempt != nil {
		attempt = *in.Attempt
	}
	meta := nonNull(in.Meta)
	if meta == nil && attempt == 0 && in.StepID == "" {
		return nil, 0
	}
	if meta != nil {
		if a, ok := checkMeta(meta, attempt, in.StepID, prefix, fields); ok {
			return meta, a
		}
	}
	return mergeMeta(meta, attempt, in.StepID, prefix, fields)
}

// mergeMeta is resolveMeta's general path: meta decoded, checked, given what
// it lacks and encoded again.
func mergeMeta(meta json.RawMessage, attempt int, stepID, prefix string, fields map[string]string) (json.RawMessage, int) {
	var m map[string]json.RawMessage
	if meta != nil {
		if err := json.Unmarshal(meta, &m); err != nil {
			fields[prefix+"meta"] = "must be an object"
			return nil, attempt
		}
	}
	changed := false
	set := func(key string, v any) {
		if m == nil {
			m = map[string]json.RawMessage{}
		}
		m[key], _ = json.Marshal(v) // an int or a string always encodes
		changed = true
	}

	if raw, ok := m["attempt"]; ok && nonNull(raw) != nil {
		var ma int
		if err := json.Unmarshal(raw, &ma); err != nil {
			fields[prefix+"meta.attempt"] = "must be an integer"
		} else {
			attempt = agreeAttempt(attempt, ma, prefix, fields)
		}
	} else if attempt != 0 {
		set("attempt", attempt)
	}

	if stepID != "" {
		if raw, ok := m["stepId"]; ok {
			var s string
			err := json.Unmarshal(raw, &s)
			agreeStepID(stepID, s, err == nil, prefix, fields)
		} else {
			set("stepId", stepID)
		}
	}

	if changed {
		meta, _ = json.Marshal(m) // re-encoding decoded JSON cannot fail
	}
	return meta, attempt
}

// decodeStrict decodes exactly one JSON value from src into v, refusing
// fields v does not have, strings that are not UTF-8 and names that appear
// twice in an object. prefix names where v sits in the body.
func decodeStrict(src io.Reader, v any, prefix string) error {
	b, err := io.ReadAll(src)
	if err != nil {
		return err
	}
	return decodeChecked(b, v, prefix)
}

// strictJSON are the decoding options of every body: one pass checks the
// syntax, UTF-8, duplicate names and unknown fields and fills v. Names match
// fields regardless of case, as encoding/json matched them before.
var strictJSON = jsonv2.JoinOptions(jsonv2.RejectUnknownMembers(true), jsonv2.MatchCaseInsensitiveNames(true))

// decodeChecked is decodeStrict for b already read, such as one event of a
// batch body.
func decodeChecked(b []byte, v any, prefix string) error {
	err := jsonv2.Unmarshal(b, v, strictJSON)
	if err == nil {
		return nil
	}
	// A failed decode is read again to say exactly what is wrong: a string
	// that is not UTF-8 or a name twice, by its path.
	if err := checkJSONText(b, prefix); err != nil {
		return err
	}
	return jsonError(b, err, prefix)
}

// jsonError turns a decoding error of b into the answer the client gets.
func jsonError(b []byte, err error, prefix string) error {
	var (
		syn *jsontext.SyntacticError
		sem *jsonv2.SemanticError
	)
	switch {
	case len(bytes.TrimSpace(b)) == 0:
		return badRequest("The body is empty; it must be a JSON object.")
	case errors.As(err, &syn), errors.Is(err, io.ErrUnexpectedEOF):
		dec := jsontext.NewDecoder(bytes.NewReader(b))
		if _, first := dec.ReadValue(); first == nil {
			return badRequest("The body holds more than one JSON value.")
		}
		return badRequest("The body is not valid JSON.")
	case errors.As(err, &sem):
		field := fieldPath(prefix, sem.JSONPointer)
		if errors.Is(err, jsonv2.ErrUnknownName) {
			return invalidField(field, "unknown field")
		}
		if sem.JSONPointer == "" && prefix == "" {
			return badRequest("The body must be a JSON object.")
		}
		return invalidField(field, "must be "+jsonTypeName(sem.GoType))
	}
	return badRequest("The body cannot be read.")
}

func jsonTypeName(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "of another JSON type"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	default:
		return "of another JSON type"
	}
}

// checkMeta is resolveMeta for a meta object that needs nothing copied into
// it, read in place: it already holds attempt and stepId where the record
// sends them. ok is false when meta needs the general path: a member to add,
// a name written with escapes, a value not read here.
func checkMeta(meta json.RawMessage, attempt int, stepID, prefix string, fields map[string]string) (int, bool) {
	var (
		ma, hasAttempt, hasStep = 0, false, false
		step                    string
		general                 = false
	)
	ok := jsonscan.Object(meta, func(key, val []byte) bool {
		switch {
		case !jsonscan.Plain(key):
			general = true
		case string(key) == "attempt" && !jsonscan.IsNull(val):
			ma, hasAttempt = jsonscan.Int(val)
			general = !hasAttempt // not an integer: the general path says so
		case string(key) == "stepId":
			step, hasStep = jsonscan.String(val)
		}
		return !general
	})
	if !ok || general || !hasAttempt && attempt != 0 || !hasStep && stepID != "" {
		return 0, false
	}
	if hasAttempt {
		attempt = agreeAttempt(attempt, ma, prefix, fields)
	}
	agreeStepID(stepID, step, hasStep, prefix, fields)
	return attempt, true
}

// A record's top-level attempt and stepId restate meta.attempt and
// meta.stepId (openapi.yaml): either spelling may be sent alone, and sent
// both they must agree. agreeAttempt and agreeStepID are that rule for both
// readers of meta, checkMeta and mergeMeta; what to do when meta lacks a
// member is each reader's own.

// agreeAttempt returns the record's attempt given meta.attempt, ma: ma,
// unless the top-level attempt names another, which goes to fields.
func agreeAttempt(attempt, ma int, prefix string, fields map[string]string) int {
	if attempt != 0 && attempt != ma {
		fields[prefix+"attempt"] = "must equal meta.attempt when both are sent"
		return attempt
	}
	return ma
}

// agreeStepID checks the top-level stepId against meta.stepId, ms, which
// isString says is a string; a disagreement goes to fields.
func agreeStepID(stepID, ms string, isString bool, prefix string, fields map[string]string) {
	if stepID != "" && (!isString || ms != stepID) {
		fields[prefix+"stepId"] = "must equal meta.stepId when both are sent"
	}
}

func nonNull(m json.RawMessage) json.RawMessage {
	if len(m) == 0 || bytes.Equal(m, []byte("null")) {
		return nil
	}
	return m
}

// intParam reads an optional integer query parameter: def when absent, an
// error below lo, capped at hi.
func intParam(q url.Values, name string, def, lo, hi int) (int, error) {
	s := q.Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, invalidField(name, "must be an integer")
	}
	if n < lo {
		return 0, invalidField(name, fmt.Sprintf("must be at least %d", lo))
	}
	return min(n, hi), nil
}

// onlyParams refuses a query parameter outside known, naming it: on a route
// that does not page or filter by it, an ignored parameter would answer as
// if it had been applied.
func onlyParams(q url.Values, known ...string) error {
	for name := range q {
		if !slices.Contains(known, name) {
			return invalidField(name, "is not a parameter of this route, which takes "+strings.Join(known, ", "))
		}
	}
	return nil
}

// idParam reads an optional stream entry id; absent it is the zero id, which
// sorts before every entry.
func idParam(q url.Values, name string) (event.ID, error) {
	s := q.Get(name)
	if s == "" {
		return event.ID{}, nil
	}
	id, err := event.ParseID(s)
	if err != nil {
		return event.ID{}, invalidField(name, "must be a stream entry id such as 1732000000000-0")
	}
	return id, nil
}

// enumParam reads an optional query parameter that takes one of allowed
// values; absent it is "". Present and empty, or any other value, is a 400
// naming the parameter and the values it takes.
func enumParam(q url.Values, name string, allowed []string) (string, error) {
	if !q.Has(name) {
		return "", nil
	}
	v := q.Get(name)
	if !slices.Contains(allowed, v) {
		return "", invalidField(name, "must be one of "+strings.Join(allowed, ", "))
	}
	return v, nil
}

// noUpperBound is the hi of intParam for parameters without a cap.
const noUpperBound = math.MaxInt

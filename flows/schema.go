package flows

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Schema is a JSON Schema (draft 2020-12) that a trigger's payload or a
// run's state must satisfy: a trigger await's schema, a flow's stateSchema.
// nqd enforces every keyword it accepts; CompileSchema refuses the others,
// so a schema never says more than what is checked.
type Schema struct {
	compiler *jsonschema.Compiler
	doc      map[string]any
	root     *jsonschema.Schema
}

// schemaURL is where a compiled schema lives for the compiler; nothing is
// ever loaded from anywhere else.
const schemaURL = "mem:///schema.json"

// draft2020 is the only $schema accepted besides none.
const draft2020 = "https://json-schema.org/draft/2020-12/schema"

// CompileSchema compiles raw. A keyword nqd does not enforce (one of
// OpenAPI's, a misspelling, a remote $ref, a format it does not know) is
// refused: bad names each by its path in the schema, after at.
func CompileSchema(raw json.RawMessage, at string) (*Schema, map[string]string) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	obj, isObj := doc.(map[string]any)
	if err != nil || !isObj {
		return nil, map[string]string{at: "must be a JSON Schema object"}
	}
	bad := map[string]string{}
	if v, ok := obj["$schema"]; ok && v != draft2020 {
		bad[at+".$schema"] = "must be " + draft2020 + " or left out"
	}
	checkKeywords(obj, at, bad)
	if len(bad) > 0 {
		return nil, bad
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.AssertContent()
	c.UseLoader(noLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, map[string]string{at: err.Error()}
	}
	root, err := c.Compile(schemaURL)
	if err != nil {
		return nil, map[string]string{at: "is not a valid JSON Schema: " + oneLine(err.Error())}
	}
	return &Schema{compiler: c, doc: obj, root: root}, nil
}

// noLoader refuses every URL: a schema holds all it refers to.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s: only references within the schema are allowed", url)
}

// Validate checks the JSON value raw and answers one message per failing
// path, each named after at (at.approved, at.items[2]); nil when it passes.
func (s *Schema) Validate(raw json.RawMessage, at string) map[string]string {
	return validate(s.root, raw, at)
}

// Property is the schema of one key of an object schema, for a value set
// under that key alone: its property's schema, else additionalProperties.
// ok is false when the schema allows no such key; a nil Schema with ok
// means the key is not constrained.
func (s *Schema) Property(key string) (sub *jsonschema.Schema, ok bool, err error) {
	if props, _ := s.doc["properties"].(map[string]any); props != nil {
		if _, has := props[key]; has {
			sub, err := s.compiler.Compile(schemaURL + "#/properties/" + escapePointer(key))
			return sub, true, err
		}
	}
	switch ap := s.doc["additionalProperties"].(type) {
	case bool:
		return nil, ap, nil
	case map[string]any:
		sub, err := s.compiler.Compile(schemaURL + "#/additionalProperties")
		return sub, true, err
	}
	return nil, true, nil
}

// ValidateWith checks raw against sub (from Property) as Validate does.
func ValidateWith(sub *jsonschema.Schema, raw json.RawMessage, at string) map[string]string {
	return validate(sub, raw, at)
}

func validate(sch *jsonschema.Schema, raw json.RawMessage, at string) map[string]string {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return map[string]string{at: "is not JSON"}
	}
	err = sch.Validate(v)
	if err == nil {
		return nil
	}
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return map[string]string{at: oneLine(err.Error())}
	}
	p := message.NewPrinter(language.English)
	out := map[string]string{}
	var leaves func(e *jsonschema.ValidationError)
	leaves = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			path := instancePath(at, e.InstanceLocation)
			msg := oneLine(e.ErrorKind.LocalizedString(p))
			if prev, dup := out[path]; dup && prev != msg {
				msg = prev + "; " + msg
			}
			out[path] = msg
			return
		}
		for _, c := range e.Causes {
			leaves(c)
		}
	}
	leaves(ve)
	return out
}

// instancePath names a place in a value the way error fields do:
// at.items[2].name.
func instancePath(at string, loc []string) string {
	var b strings.Builder
	b.WriteString(at)
	for _, tok := range loc {
		if _, err := strconv.ParseUint(tok, 10, 64); err == nil {
			b.WriteString("[" + tok + "]")
			continue
		}
		b.WriteString("." + tok)
	}
	return b.String()
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// The keywords of draft 2020-12 that nqd enforces (all its validation,
// applicator, unevaluated, format-assertion and content vocabularies, with
// references within the schema) and the annotations that claim nothing.
var (
	// Keywords whose value is a schema.
	schemaKeywords = []string{"additionalProperties", "unevaluatedProperties", "unevaluatedItems", "items",
		"contains", "propertyNames", "not", "if", "then", "else", "contentSchema"}
	// Keywords whose value is an array of schemas.
	schemaListKeywords = []string{"allOf", "anyOf", "oneOf", "prefixItems"}
	// Keywords whose value is an object of schemas.
	schemaMapKeywords = []string{"properties", "patternProperties", "$defs", "dependentSchemas"}
	// Keywords with a plain value.
	valueKeywords = []string{"$schema", "$ref", "$anchor", "$comment", "type", "enum", "const",
		"multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
		"maxLength", "minLength", "pattern", "maxItems", "minItems", "uniqueItems", "maxContains", "minContains",
		"maxProperties", "minProperties", "required", "dependentRequired", "format",
		"contentEncoding", "contentMediaType",
		"title", "description", "default", "deprecated", "readOnly", "writeOnly", "examples"}
	// The formats nqd checks (draft 2020-12's).
	knownFormats = []string{"date-time", "date", "time", "duration", "email", "idn-email", "hostname",
		"idn-hostname", "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid",
		"uri-template", "json-pointer", "relative-json-pointer", "regex"}
)

// checkKeywords walks a schema object and names, under bad, every keyword
// nqd would not enforce.
func checkKeywords(node any, at string, bad map[string]string) {
	obj, ok := node.(map[string]any)
	if !ok {
		if _, isBool := node.(bool); !isBool {
			bad[at] = "must be a schema: an object or a boolean"
		}
		return
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, path := obj[k], at+"."+k
		switch {
		case slices.Contains(schemaKeywords, k):
			checkKeywords(v, path, bad)
		case slices.Contains(schemaListKeywords, k):
			list, ok := v.([]any)
			if !ok {
				bad[path] = "must be an array of schemas"
				continue
			}
			for i, sub := range list {
				checkKeywords(sub, fmt.Sprintf("%s[%d]", path, i), bad)
			}
		case slices.Contains(schemaMapKeywords, k):
			m, ok := v.(map[string]any)
			if !ok {
				bad[path] = "must be an object of schemas"
				continue
			}
			for name, sub := range m {
				checkKeywords(sub, path+"."+name, bad)
			}
		case k == "$ref":
			if s, _ := v.(string); !strings.HasPrefix(s, "#") {
				bad[path] = "must refer within the schema (#/$defs/...)"
			}
		case k == "contentMediaType" && v != "application/json", k == "contentEncoding" && v != "base64":
			bad[path] = "nqd checks only application/json and base64 content"
		case k == "format":
			if s, _ := v.(string); !slices.Contains(knownFormats, s) {
				bad[path] = "is not a format nqd checks: " + strings.Join(knownFormats, ", ")
			}
		case slices.Contains(valueKeywords, k):
		default:
			bad[path] = "is not a JSON Schema 2020-12 keyword nqd enforces"
		}
	}
}

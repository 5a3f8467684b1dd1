package flows

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Parse reads one definition from JSON, or from YAML when yamlInput is set,
// and validates it. A definition without a name takes fallbackName (the file
// name or the URL's). Unknown fields are errors, so a typo never silently
// drops a retry policy.
func Parse(data []byte, yamlInput bool, fallbackName string) (*Definition, error) {
	if yamlInput {
		var v any
		if err := yaml.Unmarshal(data, &v); err != nil {
			return nil, fmt.Errorf("flows: yaml: %w", err)
		}
		var err error
		// One decoding path for both formats: YAML becomes JSON first, so
		// both reject the same unknown fields with the same messages.
		if data, err = json.Marshal(v); err != nil {
			return nil, fmt.Errorf("flows: yaml: %w", err)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var d Definition
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("flows: %w", err)
	}
	if dec.More() {
		return nil, errors.New("flows: trailing data after the definition")
	}
	if d.Name == "" {
		d.Name = fallbackName
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return &d, nil
}

// LoadDir reads every *.json, *.yaml and *.yml file of dir (not recursing)
// as one definition named after the file unless it names itself. Any bad
// file fails the whole load, so a typo stops the server at start instead of
// dropping a flow.
func LoadDir(dir string) ([]*Definition, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("flows: %w", err)
	}
	var out []*Definition
	seen := map[string]string{}
	for _, e := range entries {
		if e.IsDir() || e.Type()&fs.ModeType != 0 {
			continue
		}
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if ext != ".json" && ext != ".yaml" && ext != ".yml" {
			continue
		}
		path := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("flows: %w", err)
		}
		d, err := Parse(data, ext != ".json", strings.TrimSuffix(e.Name(), filepath.Ext(e.Name())))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if prev, dup := seen[d.Name]; dup {
			return nil, fmt.Errorf("flows: %s and %s both define flow %q", prev, path, d.Name)
		}
		seen[d.Name] = path
		out = append(out, d)
	}
	return out, nil
}

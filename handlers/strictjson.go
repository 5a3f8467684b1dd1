package handlers

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// checkJSONText refuses JSON that encoding/json would take but a strict
// reader would not: a string that is not valid UTF-8 (encoding/json would
// store it as sent, and every later read of the context would carry it to
// clients that refuse it), and an object with a name twice (encoding/json
// keeps the last, so two readers may see two values). The error names the
// field by its path, after prefix. Other syntax errors are left to the
// decoder that follows.
func checkJSONText(b []byte, prefix string) error {
	_, err := jsontext.NewDecoder(bytes.NewReader(b)).ReadValue()
	var se *jsontext.SyntacticError
	if !errors.As(err, &se) {
		return nil
	}
	rule := ""
	switch {
	case errors.Is(err, jsontext.ErrDuplicateName):
		rule = "appears twice in its object"
	case !utf8.Valid(b):
		rule = "must be valid UTF-8"
	case strings.Contains(se.Err.Error(), "surrogate"):
		rule = "must be valid UTF-16 in its \\u escapes"
	default:
		return nil
	}
	return invalidField(fieldPath(prefix, se.JSONPointer), rule)
}

// fieldPath writes a JSON pointer the way error fields name fields:
// events[3].data.s. The body itself is "body".
func fieldPath(prefix string, p jsontext.Pointer) string {
	var sb strings.Builder
	sb.WriteString(strings.TrimSuffix(prefix, "."))
	for tok := range p.Tokens() {
		if _, err := strconv.ParseUint(tok, 10, 64); err == nil {
			sb.WriteString("[" + tok + "]")
			continue
		}
		if sb.Len() > 0 {
			sb.WriteByte('.')
		}
		sb.WriteString(tok)
	}
	if sb.Len() == 0 {
		return "body"
	}
	return sb.String()
}

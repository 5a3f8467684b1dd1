// Package jsonscan reads the top-level members of a JSON object without
// reflection or allocation, for the hot decoders of stored records and
// reducer payloads. It validates what it reads as encoding/json does, so a
// caller can trust a successful scan and fall back to encoding/json for
// anything it does not handle itself.
package jsonscan

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// maxDepth bounds nesting; deeper values are left to encoding/json, which
// has its own limit.
const maxDepth = 1000

// Object validates b as one JSON object, surrounded by whitespace at most,
// and calls fn with each member in order: the key as written between its
// quotes (escapes left in) and the value's bytes. It returns false when b is
// not a valid object, or when fn returns false; fn may have been called
// before either.
func Object(b []byte, fn func(key, val []byte) bool) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return false
		}
		end, ok := skipString(b, i)
		if !ok {
			return false
		}
		key := b[i+1 : end-1]
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		start := i
		if i, ok = skipValue(b, i, 1); !ok {
			return false
		}
		if !fn(key, b[start:i]) {
			return false
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return skipSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

// Valid reports whether b is one JSON value, surrounded by whitespace at
// most, as json.Valid does.
func Valid(b []byte) bool {
	i, ok := skipValue(b, skipSpace(b, 0), 1)
	return ok && skipSpace(b, i) == len(b)
}

// Array calls fn with each element of val, a valid JSON array as Object
// reports values, and returns false when fn does.
func Array(val []byte, fn func(elem []byte) bool) bool {
	i := skipSpace(val, 1)
	if i < len(val) && val[i] == ']' {
		return true
	}
	for i < len(val) {
		start := i
		end, ok := skipValue(val, i, 1)
		if !ok || !fn(val[start:end]) {
			return false
		}
		i = skipSpace(val, end)
		if i >= len(val) || val[i] == ']' {
			return true
		}
		i = skipSpace(val, i+1) // the comma
	}
	return true
}

// Plain reports whether a key as Object passes it is plain ASCII without
// escapes, so that its bytes are its name.
func Plain(key []byte) bool {
	for _, c := range key {
		if c == '\\' || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// Fields scans the object b for the members names lists, calling fn with
// the index in names of each one found and its value. It reports false,
// as soon as it knows, where encoding/json decoding into a struct of those
// fields might read b otherwise: b is not an object, a key is not Plain, a
// key matches a name only ignoring case, or fn says false.
func Fields(b []byte, names []string, fn func(i int, val []byte) bool) bool {
	return Object(b, func(key, val []byte) bool {
		if !Plain(key) {
			return false
		}
		for i, n := range names {
			if string(key) == n {
				return fn(i, val)
			}
		}
		return !Folds(key, names)
	})
}

// Folds reports whether key, as Plain accepts it, matches one of names
// ignoring ASCII case, as encoding/json matches a member that names no field
// exactly to a field.
func Folds(key []byte, names []string) bool {
	for _, n := range names {
		if len(n) == len(key) && equalFold(key, n) {
			return true
		}
	}
	return false
}

func equalFold(b []byte, s string) bool {
	for i := range b {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// String returns the string a valid JSON value holds, as encoding/json would
// decode it, and false for any other kind of value.
func String(val []byte) (string, bool) {
	if len(val) < 2 || val[0] != '"' {
		return "", false
	}
	inner := val[1 : len(val)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner), true
	}
	var s string
	if json.Unmarshal(val, &s) != nil {
		return "", false
	}
	return s, true
}

// Int returns the value of a plain JSON integer that fits in an int, and
// false for anything else, which encoding/json would either refuse or read
// with rules of its own.
func Int(val []byte) (int, bool) {
	neg := len(val) > 0 && val[0] == '-'
	digits := val
	if neg {
		digits = val[1:]
	}
	if len(digits) == 0 || len(digits) > 18 {
		return 0, false
	}
	n := 0
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// IsNull reports whether val is the literal null.
func IsNull(val []byte) bool { return len(val) == 4 && string(val) == "null" }

func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"'.
func skipString(b []byte, i int) (int, bool) {
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return 0, false
		case c == '\\':
			i++
			if i >= len(b) {
				return 0, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) {
					return 0, false
				}
				for _, h := range b[i+1 : i+5] {
					if !isHex(h) {
						return 0, false
					}
				}
				i += 4
			default:
				return 0, false
			}
		}
	}
	return 0, false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// skipValue returns the index after the value starting at b[i].
func skipValue(b []byte, i, depth int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch c := b[i]; {
	case c == '"':
		return skipString(b, i)
	case c == '{', c == '[':
		return skipComposite(b, i, depth)
	case c == '-' || ('0' <= c && c <= '9'):
		return skipNumber(b, i)
	case c == 't':
		return skipLiteral(b, i, "true")
	case c == 'f':
		return skipLiteral(b, i, "false")
	case c == 'n':
		return skipLiteral(b, i, "null")
	}
	return 0, false
}

func skipLiteral(b []byte, i int, lit string) (int, bool) {
	if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
		return i + len(lit), true
	}
	return 0, false
}

func skipComposite(b []byte, i, depth int) (int, bool) {
	if depth >= maxDepth {
		return 0, false
	}
	closer := byte(']')
	object := b[i] == '{'
	if object {
		closer = '}'
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == closer {
		return i + 1, true
	}
	for {
		var ok bool
		if object {
			if i >= len(b) || b[i] != '"' {
				return 0, false
			}
			if i, ok = skipString(b, i); !ok {
				return 0, false
			}
			i = skipSpace(b, i)
			if i >= len(b) || b[i] != ':' {
				return 0, false
			}
			i = skipSpace(b, i+1)
		}
		if i, ok = skipValue(b, i, depth+1); !ok {
			return 0, false
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case closer:
			return i + 1, true
		default:
			return 0, false
		}
	}
}

// skipNumber follows JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func skipNumber(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = skipDigits(b, i)
	default:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		j := skipDigits(b, i+1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := skipDigits(b, i)
		if j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

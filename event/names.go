package event

// The name rules: a context's type and id, and an event's kind. A string that
// passes them cannot add a `:`, `*`, `{`, `}` or white space to a storage key.
const (
	typePattern = `^[a-z][a-z0-9_-]{0,31}$`
	idPattern   = `^[A-Za-z0-9][A-Za-z0-9._~-]{0,127}$`
)

// kindPattern is what ValidKind checks, with the length bound MaxKindLen.
const kindPattern = `^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$`

// The patterns are checked by the loops below rather than by package regexp:
// every request checks several names, and a loop over a byte class costs a
// tenth of a regexp match. names_test.go fuzzes each loop against its
// pattern.

// The name rules as a client is told them when a string breaks one; each
// completes "<field> ...".
const (
	// TypeRule is what ValidType checks.
	TypeRule = "must match " + typePattern + ", be singular (not end in s) and not be reserved by nqd"
	// ContextIDRule is what ValidContextID checks.
	ContextIDRule = "must match " + idPattern + " and not be list"
	// NameRule is what ValidName checks.
	NameRule = "must match " + idPattern
	// KindRule is what ValidKind checks.
	KindRule = "must be a dot.case event kind such as step.completed"
)

// MaxKindLen bounds an event kind; kindPattern gives its form, this keeps it sane.
const MaxKindLen = 128

// reservedTypes name keys nqd keeps beside the streams (`<prefix>:await:<id>`
// and the like); a context of such a type would share their key space.
var reservedTypes = map[string]bool{
	"await": true, "kv": true, "queue": true, "timer": true, "lease": true,
	"meta": true, "checkpoint": true, "idem": true, "live": true, "sweeper": true,
}

// ValidType reports whether s may name a context type. A type is singular: one
// ending in `s` would name the index key of another type (`<prefix>:flows:x` is
// the index of flow `x`, not the stream of type `flows`), and a few types are
// reserved for nqd's own keys.
func ValidType(s string) bool {
	return matchType(s) && s[len(s)-1] != 's' && !reservedTypes[s]
}

// ValidContextID reports whether s may name a context id. `list` is reserved
// for the list route.
func ValidContextID(s string) bool { return s != "list" && matchID(s) }

// ValidName reports whether s may be used as a flow name, index name or other
// identifier that becomes part of a key.
func ValidName(s string) bool { return matchID(s) }

// ValidKind reports whether s is a dot.case event kind.
func ValidKind(s string) bool { return len(s) <= MaxKindLen && matchKind(s) }

func lower(c byte) bool { return 'a' <= c && c <= 'z' }
func digit(c byte) bool { return '0' <= c && c <= '9' }
func alnum(c byte) bool { return lower(c) || digit(c) || 'A' <= c && c <= 'Z' }

// matchType is typePattern.
func matchType(s string) bool {
	if len(s) == 0 || len(s) > 32 || !lower(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !lower(c) && !digit(c) && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// matchID is idPattern.
func matchID(s string) bool {
	if len(s) == 0 || len(s) > 128 || !alnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '.' && c != '_' && c != '~' && c != '-' {
			return false
		}
	}
	return true
}

// matchKind is kindPattern: lower-case words of [a-z0-9_] joined by single
// dots, the first starting with a letter.
func matchKind(s string) bool {
	if len(s) == 0 || !lower(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '.':
			if s[i-1] == '.' || i == len(s)-1 {
				return false
			}
		case !lower(c) && !digit(c) && c != '_':
			return false
		}
	}
	return true
}

package event

import "regexp"

// The name rules: a context's type and id, and an event's kind. A string that
// passes them cannot add a `:`, `*`, `{`, `}` or white space to a storage key.
const (
	typePattern = `^[a-z][a-z0-9_-]{0,31}$`
	idPattern   = `^[A-Za-z0-9][A-Za-z0-9._~-]{0,127}$`
)

var (
	typeRe = regexp.MustCompile(typePattern)
	idRe   = regexp.MustCompile(idPattern)
	kindRe = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$`)
)

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

// MaxKindLen bounds an event kind; kindRe gives the pattern, this keeps it sane.
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
	return typeRe.MatchString(s) && s[len(s)-1] != 's' && !reservedTypes[s]
}

// ValidContextID reports whether s may name a context id. `list` is reserved
// for the list route.
func ValidContextID(s string) bool { return s != "list" && idRe.MatchString(s) }

// ValidName reports whether s may be used as a flow name, index name or other
// identifier that becomes part of a key.
func ValidName(s string) bool { return idRe.MatchString(s) }

// ValidKind reports whether s is a dot.case event kind.
func ValidKind(s string) bool { return len(s) <= MaxKindLen && kindRe.MatchString(s) }

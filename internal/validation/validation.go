// Package validation collects field-level validation errors and holds the
// name rules shared by every resource of the API.
package validation

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// ErrInvalid is matched by errors.Is for every *Errors.
var ErrInvalid = errors.New("invalid")

// FieldError is one invalid field.
type FieldError struct {
	// Field is the JSON path of the field, e.g. "env.FOO".
	Field string `json:"field"`
	// Msg says what is wrong and what is allowed.
	Msg string `json:"message"`
}

// Errors is a list of invalid fields of one resource. Its message names
// every field so that a user can fix them all at once.
type Errors struct {
	// Resource is what was validated, e.g. "function".
	Resource string
	Fields   []FieldError
}

// Add records an invalid field.
func (e *Errors) Add(field, format string, args ...any) {
	e.Fields = append(e.Fields, FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
}

// Name records field as invalid when name is not a valid DNS-1123 label
// (see CheckName).
func (e *Errors) Name(field, name string) {
	if msg := CheckName(name); msg != "" {
		e.Add(field, "%s", msg)
	}
}

// Namespace records field as invalid when ns is not a name a new resource
// may be created in (see CheckNamespace).
func (e *Errors) Namespace(field, ns string) {
	if msg := CheckNamespace(ns); msg != "" {
		e.Add(field, "%s", msg)
	}
}

// Range records field as invalid when v is outside [lo, hi].
func (e *Errors) Range(field string, v, lo, hi int) {
	if msg := CheckRange(v, lo, hi); msg != "" {
		e.Add(field, "%s", msg)
	}
}

// MaxLen records field as invalid when value is longer than max bytes. It
// reports whether value is within the limit, so that a caller can skip the
// checks whose messages would quote it.
func (e *Errors) MaxLen(field, value string, max int) bool {
	if len(value) <= max {
		return true
	}
	e.Add(field, "must be at most %d bytes (got %d)", max, len(value))
	return false
}

// Err returns e when it holds a field error and nil otherwise.
func (e *Errors) Err() error {
	if len(e.Fields) == 0 {
		return nil
	}
	return e
}

func (e *Errors) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Field + ": " + f.Msg
	}
	return fmt.Sprintf("invalid %s: %s", e.Resource, strings.Join(parts, "; "))
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *Errors) Is(target error) bool { return target == ErrInvalid }

// MaxNameLength is the longest resource or namespace name: a DNS-1123
// label, which a Kubernetes namespace or custom resource holds unchanged and
// from which internal/names derives every other object's name.
const MaxNameLength = 63

// ReservedNamespacePrefix starts the names of the namespaces Kubernetes keeps
// for itself (kube-system, kube-public, kube-node-lease): an API namespace
// maps to the Kubernetes namespace of the same name, so none may be created
// with it.
const ReservedNamespacePrefix = "kube-"

var dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// CheckName returns why name is not a valid DNS-1123 label, or "".
func CheckName(name string) string {
	switch {
	case name == "":
		return "is required"
	case len(name) > MaxNameLength:
		return fmt.Sprintf("must be at most %d characters (got %d)", MaxNameLength, len(name))
	case !dns1123Label.MatchString(name):
		return fmt.Sprintf("%q must consist of lower-case letters, digits and '-', and start and end with a letter or digit", name)
	}
	return ""
}

// MaxDNSNameLength is the longest DNS name (a DNS-1123 subdomain): a host
// name, or the name of a Kubernetes object such as a Secret or an
// IngressClass.
const MaxDNSNameLength = 253

// CheckDNSName returns why name is not a DNS-1123 subdomain, or "": at most
// MaxDNSNameLength characters, dot-separated labels of lower-case letters,
// digits and '-' that start and end with a letter or digit, such as
// hello.example.com. A long name is not quoted back.
func CheckDNSName(name string) string {
	switch {
	case name == "":
		return "is required"
	case len(name) > MaxDNSNameLength:
		return fmt.Sprintf("must be at most %d characters (got %d)", MaxDNSNameLength, len(name))
	}
	for _, label := range strings.Split(name, ".") {
		if len(label) > MaxNameLength || !dns1123Label.MatchString(label) {
			return fmt.Sprintf("%q is not a DNS name: dot-separated parts of at most %d lower-case letters, digits and '-', "+
				"each starting and ending with a letter or digit, such as hello.example.com", name, MaxNameLength)
		}
	}
	return ""
}

// CheckNamespace returns why ns cannot hold new resources, or "": it must
// be a valid name (see CheckName) without the reserved "kube-" prefix.
// Reading from such a namespace stays allowed, so that nothing stored before
// this rule existed becomes unreachable.
func CheckNamespace(ns string) string {
	if msg := CheckName(ns); msg != "" {
		return msg
	}
	if strings.HasPrefix(ns, ReservedNamespacePrefix) {
		return fmt.Sprintf("%q starts with %q, which Kubernetes reserves for its own namespaces", ns, ReservedNamespacePrefix)
	}
	return ""
}

// CheckRange returns why v is outside [lo, hi], or "".
func CheckRange(v, lo, hi int) string {
	if v < lo || v > hi {
		return fmt.Sprintf("must be between %d and %d (got %d)", lo, hi, v)
	}
	return ""
}

// Page sizes of every list call of the API.
const (
	DefaultPageSize = 50
	MaxPageSize     = 500
)

// PageSize returns the page size to use for a requested limit: the default
// for 0 (or less), at most MaxPageSize.
func PageSize(limit int) int {
	if limit <= 0 {
		return DefaultPageSize
	}
	return min(limit, MaxPageSize)
}

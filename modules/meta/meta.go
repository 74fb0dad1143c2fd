// Package meta holds what the objects of every module share: the key that
// names one in its namespace and the options of a list. functions.Key and
// triggers.Key are this Key, so a function's key, a trigger's and the
// executor's are one.
package meta

// Key names an object (a function, a trigger, a job) in its namespace.
type Key struct {
	Namespace, Name string
}

// String returns "namespace/name".
func (k Key) String() string { return k.Namespace + "/" + k.Name }

// ListOptions selects a page of a list.
type ListOptions struct {
	// Limit is the page size; see validation.PageSize.
	Limit int
	// After is the name after which the page starts (a continue token).
	After string
}

package runtime

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// ErrUnknown is returned (wrapped) by Registry.Get for a runtime that no
// provider registered.
var ErrUnknown = errors.New("unknown runtime")

var namePattern = regexp.MustCompile(`^[a-z][a-z0-9._-]{0,31}$`)

// Registry is the set of runtime providers known to this server. It is
// immutable after NewRegistry and safe for concurrent use.
type Registry struct {
	byName map[string]Provider
	names  []string
}

// NewRegistry returns a registry of providers sorted by name. It fails on an
// invalid or duplicate name so that a misconfigured plugin stops start-up
// with a message naming it.
func NewRegistry(providers []Provider) (*Registry, error) {
	r := &Registry{byName: make(map[string]Provider, len(providers))}
	for _, p := range providers {
		if p == nil {
			return nil, errors.New("runtime registry: nil provider")
		}
		name := p.Name()
		if !namePattern.MatchString(name) {
			return nil, fmt.Errorf("runtime registry: invalid runtime name %q: use lower-case letters, digits, '.', '-', '_', starting with a letter, at most 32 bytes", name)
		}
		if _, dup := r.byName[name]; dup {
			return nil, fmt.Errorf("runtime registry: runtime %q is registered twice", name)
		}
		r.byName[name] = p
		r.names = append(r.names, name)
	}
	slices.Sort(r.names)
	return r, nil
}

// Get returns the provider of the named runtime, or an error wrapping
// ErrUnknown that lists the known runtimes.
func (r *Registry) Get(name string) (Provider, error) {
	if p, ok := r.byName[name]; ok {
		return p, nil
	}
	return nil, fmt.Errorf("%w %q; known runtimes: %s", ErrUnknown, name, strings.Join(r.names, ", "))
}

// Names returns the registered runtime names in sorted order.
func (r *Registry) Names() []string { return slices.Clone(r.names) }

var (
	modulePathPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*(/[A-Za-z_][A-Za-z0-9_-]*)*$`)
	identPattern      = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)
)

// SplitHandler splits a handler "dir/module.function" at its last dot into
// the module path relative to the code root ("dir/module") and the function
// name. Dots before the last one separate directories, like slashes
// ("pkg.mod.fn" is module "pkg/mod"). It rejects absolute paths and "..".
func SplitHandler(handler string) (module, function string, err error) {
	i := strings.LastIndexByte(handler, '.')
	if i <= 0 || i == len(handler)-1 {
		return "", "", fmt.Errorf("handler %q must be <file>.<function>, e.g. handler.handle", handler)
	}
	module = strings.ReplaceAll(handler[:i], ".", "/")
	function = handler[i+1:]
	if !modulePathPattern.MatchString(module) {
		return "", "", fmt.Errorf("handler %q: module path %q must be relative, made of letters, digits, '_' and '-' separated by '/' or '.'", handler, module)
	}
	if !identPattern.MatchString(function) {
		return "", "", fmt.Errorf("handler %q: %q is not a valid function name", handler, function)
	}
	return module, function, nil
}

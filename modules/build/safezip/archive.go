package safezip

import (
	"path"
	"slices"
	"strings"
)

// maxLinkHops bounds the symbolic links followed by one lookup, as Linux's
// MAXSYMLINKS does.
const maxLinkHops = 40

// Archive is a checked archive: the tree it extracts to.
type Archive struct {
	p *plan
}

// IsFile reports whether name (slash-separated, relative to the archive
// root) is a regular file once extracted, following symbolic links inside
// the archive as the kernel would.
func (a *Archive) IsFile(name string) bool {
	n := a.p.lookup(path.Clean(name))
	return n != nil && n.kind == kindFile
}

// TopLevel lists the names at the archive's root, sorted, directories with
// a trailing "/".
func (a *Archive) TopLevel() []string {
	var names []string
	for _, n := range a.p.root.children {
		name := n.name
		if n.kind == kindDir {
			name += "/"
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// lookup returns the node at the cleaned path name, following symbolic
// links, or nil. Resolving a link's target lexically is what the kernel
// does here: checkLinkTarget allows ".." only at the start of a target and
// no entry lives beneath a link, so every directory a target climbs out of
// is a real one.
func (p *plan) lookup(name string) *node {
	rest := strings.Split(name, "/")
	dir, n := "", &p.root
	for hops := 0; len(rest) > 0; {
		next := path.Join(dir, rest[0])
		rest = rest[1:]
		if next == "." || next == "" {
			dir, n = "", &p.root
			continue
		}
		if n = p.nodes[next]; n == nil {
			return nil
		}
		if n.kind != kindLink {
			dir = next
			continue
		}
		if hops++; hops > maxLinkHops {
			return nil
		}
		rest = append(strings.Split(path.Join(path.Dir(next), n.target), "/"), rest...)
		dir, n = "", &p.root
	}
	return n
}

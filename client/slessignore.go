package client

import (
	"bufio"
	"fmt"
	"io"
	"path"
	"strings"
)

// ignoreFile is the name of the file, at the root of a directory being
// zipped, that lists paths to leave out of the upload.
const ignoreFile = ".slessignore"

// ignoreRule is one pattern of a .slessignore file.
type ignoreRule struct {
	// segments is the pattern split on "/". A "**" segment matches any
	// number of path segments: zero or more in the middle or at the start,
	// one or more at the end (so "dir/**" matches what is inside dir, not
	// dir itself). Other segments are path.Match patterns.
	segments []string
	negate   bool // "!pattern": re-include what earlier rules excluded
	dirOnly  bool // "pattern/": match directories only
}

// ignoreRules is a parsed .slessignore file; later rules override earlier
// ones, as in .gitignore.
type ignoreRules []ignoreRule

// parseIgnore reads gitignore-style patterns: blank lines and lines starting
// with "#" are skipped, "!" negates, a trailing "/" matches directories only,
// a pattern containing "/" is anchored to the root (a leading "/" only
// anchors) while one without matches at any depth, and "*", "?", "[...]" and
// "**" are wildcards. A backslash escapes the next character.
func parseIgnore(r io.Reader) (ignoreRules, error) {
	var rules ignoreRules
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		rule, ok, err := parseIgnoreLine(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", ignoreFile, line, err)
		}
		if ok {
			rules = append(rules, rule)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", ignoreFile, err)
	}
	return rules, nil
}

// parseIgnoreLine parses one line; ok is false for lines that hold no
// pattern.
func parseIgnoreLine(line string) (rule ignoreRule, ok bool, err error) {
	p := strings.TrimSuffix(line, "\r")
	// Trailing spaces are dropped unless escaped, as git does: editors add
	// them invisibly.
	if t := strings.TrimRight(p, " "); strings.HasSuffix(t, `\`) && len(t) < len(p) {
		p = t + " "
	} else {
		p = t
	}
	if p == "" || strings.HasPrefix(p, "#") {
		return ignoreRule{}, false, nil
	}
	if rest, found := strings.CutPrefix(p, "!"); found {
		rule.negate, p = true, rest
	}
	if rest, found := strings.CutSuffix(p, "/"); found {
		rule.dirOnly, p = true, rest
	}
	anchored := strings.Contains(p, "/")
	for s := range strings.SplitSeq(strings.TrimPrefix(p, "/"), "/") {
		if s == "" {
			continue
		}
		if _, err := path.Match(s, ""); err != nil {
			return ignoreRule{}, false, fmt.Errorf("bad pattern %q: %w", line, err)
		}
		rule.segments = append(rule.segments, s)
	}
	if len(rule.segments) == 0 {
		return ignoreRule{}, false, nil
	}
	if !anchored {
		rule.segments = append([]string{"**"}, rule.segments...)
	}
	return rule, true, nil
}

// ignored reports whether name (slash-separated, relative to the root) is
// excluded. Callers must not descend into excluded directories: as with git,
// a file inside an excluded directory cannot be re-included.
func (rs ignoreRules) ignored(name string, isDir bool) bool {
	segs := strings.Split(name, "/")
	ignored := false
	for _, r := range rs {
		if r.negate != ignored || (r.dirOnly && !isDir) {
			continue // cannot change the outcome
		}
		if matchSegments(r.segments, segs) {
			ignored = !r.negate
		}
	}
	return ignored
}

func matchSegments(pattern, name []string) bool {
	for len(pattern) > 0 {
		if pattern[0] == "**" {
			if len(pattern) == 1 {
				return len(name) > 0
			}
			for i := range len(name) + 1 {
				if matchSegments(pattern[1:], name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, _ := path.Match(pattern[0], name[0]); !ok {
			return false
		}
		pattern, name = pattern[1:], name[1:]
	}
	return len(name) == 0
}

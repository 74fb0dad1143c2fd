// Package interp resolves language interpreters to their real binaries.
//
// The program found on PATH may be a version-manager shim (pyenv, asdf) that
// costs seconds per start; instances must exec the real binary, so the
// interpreter is asked for its own path once and the answer is cached.
package interp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Resolver finds an interpreter of a wanted version and caches its real path.
// It is safe for concurrent use; a failed resolution is retried on the next
// call (the interpreter may be installed later).
type Resolver struct {
	// Candidates are the program names looked up on PATH, in order.
	Candidates []string
	// Probe are the arguments that make the interpreter print its real
	// executable path on the first line and its version on the second.
	Probe []string
	// Version is the version the runtime needs; the printed version must equal
	// it or start with it followed by a dot ("3.11" accepts "3.11.7").
	Version string

	mu   sync.Mutex
	path string
}

// Resolve returns the absolute path of the interpreter binary.
func (r *Resolver) Resolve(ctx context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.path != "" {
		return r.path, nil
	}
	var problems []string
	for _, name := range r.Candidates {
		found, err := exec.LookPath(name)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: not found on PATH", name))
			continue
		}
		path, version, err := r.probe(ctx, found)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", found, err))
			continue
		}
		if version != r.Version && !strings.HasPrefix(version, r.Version+".") {
			problems = append(problems, fmt.Sprintf("%s is version %s", path, version))
			continue
		}
		r.path = path
		return path, nil
	}
	return "", fmt.Errorf("no interpreter of version %s found (%s)", r.Version, strings.Join(problems, "; "))
}

func (r *Resolver) probe(ctx context.Context, program string) (path, version string, err error) {
	// A shim may be slow the first time; a broken one must not hang start-up.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, program, r.Probe...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("asking for its version: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 || lines[0] == "" {
		return "", "", errors.New("unexpected answer to the version probe")
	}
	return strings.TrimSpace(lines[0]), strings.TrimSpace(lines[1]), nil
}

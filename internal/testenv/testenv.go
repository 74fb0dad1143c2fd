// Package testenv gives tests real services (PostgreSQL, RabbitMQ, an S3
// server) and decides what happens when one is missing.
//
// The rule: `go test ./...` on a fresh machine passes, skipping the tests
// whose service is missing, with a message naming SLESS_REQUIRE_SERVICES.
// With SLESS_REQUIRE_SERVICES=1 (CI) a missing service fails the test
// instead, so a broken environment cannot pass as green.
//
// Every helper gives the calling test its own isolated resource (a schema, a
// server) and removes it with t.Cleanup. The helpers are safe to call from
// parallel tests.
package testenv

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// EnvRequireServices names the variable that turns missing services from
// skips into failures.
const EnvRequireServices = "SLESS_REQUIRE_SERVICES"

// ModulePath is the module RepoRoot looks for.
const ModulePath = "sless.kube5s.ru/sless"

// Required reports whether missing services are failures: whether
// SLESS_REQUIRE_SERVICES is set to a true value ("1", "true", ...). Any other
// non-empty value than a boolean fails t, so that a typo in CI does not
// silently turn failures into skips.
func Required(t testing.TB) bool {
	t.Helper()
	v := os.Getenv(EnvRequireServices)
	if v == "" {
		return false
	}
	required, err := strconv.ParseBool(v)
	if err != nil {
		t.Fatalf("%s=%q: want 1 or 0", EnvRequireServices, v)
	}
	return required
}

// Unavailable ends t because a service it needs is missing: t.Fatalf when
// services are required (see Required), t.Skipf otherwise, with the
// formatted reason.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if Required(t) {
		t.Fatalf(format+" (a failure because %s is set)", append(args, EnvRequireServices)...)
	} else {
		t.Skipf(format+" (set %s=1 to make this a failure)", append(args, EnvRequireServices)...)
	}
}

// RepoRoot returns the repository root: the nearest directory at or above
// the working directory whose go.mod declares ModulePath. Tests run in their
// package's directory, so this finds hack/ scripts and shared test data.
func RepoRoot(t testing.TB) string {
	t.Helper()
	root, err := FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// FindRepoRoot is RepoRoot for code that has no test to end, such as
// TestMain.
func FindRepoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repository root: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && modulePath(data) == ModulePath {
			return dir, nil
		}
		if dir == filepath.Dir(dir) {
			return "", fmt.Errorf("find repository root: no go.mod of module %s at or above %s", ModulePath, wd)
		}
	}
}

// ErrToolNotBuilt means hack/tools.sh --cached found no build of a tool.
var ErrToolNotBuilt = errors.New("not built")

// Tool returns what `hack/tools.sh NAME` prints in the repository at root:
// the path of the tool's binary, or of its directory. With build set it
// builds the tool when it is not cached (minutes); without, it fails with
// an error wrapping ErrToolNotBuilt, which names the command that builds
// it.
func Tool(root, name string, build bool) (string, error) {
	args := []string{"--cached", name}
	if build {
		args = args[1:]
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(root, "hack", "tools.sh"), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	if !build && errors.As(err, &exitErr) && exitErr.ExitCode() == 3 { // --cached: not built
		return "", fmt.Errorf("%s is %w; run hack/tools.sh %s", name, ErrToolNotBuilt, name)
	}
	if err != nil {
		return "", fmt.Errorf("hack/tools.sh %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return strings.TrimSpace(stdout.String()), nil
}

// modulePath returns the module path declared in go.mod content, or "".
func modulePath(gomod []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "module" {
			return strings.Trim(fields[1], "\"`")
		}
	}
	return ""
}

// randomHex returns 2n random lower-case hex digits, for names and secrets.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand since Go 1.24)
	return hex.EncodeToString(b)
}

// Eventually polls cond until it holds and ends t when it does not within
// timeout, naming what it waited for.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

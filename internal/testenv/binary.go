package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// RunWithBinary builds the sless binary from pkg (a path relative to the
// test's package, such as "../cmd/sless") into a temporary directory, points
// *binary at it, runs m and exits with its code. It is a TestMain body for
// the packages that test the real binary; a failed build ends the run.
func RunWithBinary(m *testing.M, pkg string, binary *string) {
	dir, err := os.MkdirTemp("", "sless-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*binary = filepath.Join(dir, "sless")
	build := exec.Command("go", "build", "-o", *binary, pkg)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building sless:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

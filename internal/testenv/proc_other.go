//go:build !linux

package testenv

import "os/exec"

// setParentDeathSignal does nothing: only Linux has a parent-death signal, so
// elsewhere a test binary that dies without running its cleanups leaves its
// servers running.
func setParentDeathSignal(*exec.Cmd) {}

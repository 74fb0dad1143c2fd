package local

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"sless.kube5s.ru/sless/internal/tempdir"
	"sless.kube5s.ru/sless/modules/runtime/sandbox"
)

// removeDeadTempDirs removes the directories in tmp (the system's temp
// directory when empty) of servers that no longer run, because they were
// killed before their Stop (see tempdir.Make), and returns how many it
// removed. The memory cgroups of dead servers are removed by
// newMemoryLimiter.
func removeDeadTempDirs(tmp string) int {
	if tmp == "" {
		tmp = os.TempDir()
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return 0
	}
	removed := 0
	for _, e := range entries {
		if !e.IsDir() || !ownerDead(e.Name(), tempdir.Prefix) {
			continue
		}
		dir := filepath.Join(tmp, e.Name())
		sandbox.UnmountUnder(dir)
		if os.RemoveAll(dir) == nil {
			removed++
		}
	}
	return removed
}

// ownerDead reports whether name is prefix, a pid and a dash followed by
// anything, and that process no longer runs.
func ownerDead(name, prefix string) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	pidText, _, ok2 := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(pidText)
	return ok && ok2 && err == nil && pid > 0 && !processAlive(pid)
}

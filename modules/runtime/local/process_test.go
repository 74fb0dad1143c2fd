package local

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestWaitingHoldsNoThreadPerProcess: the exit watchers of many running
// processes park on the poller (a server with a thousand warm instances
// would otherwise hold a thousand OS threads in waitid), and each still
// gets its process's exit status.
func TestWaitingHoldsNoThreadPerProcess(t *testing.T) {
	const n = 64
	before := threads(t)
	type exit struct {
		ws  syscall.WaitStatus
		err error
	}
	exits := make(chan exit, n)
	var cmds []*exec.Cmd
	for range n {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
		go func() {
			ws, err := started{cmd}.wait()
			exits <- exit{ws, err}
		}()
	}
	defer func() {
		for _, cmd := range cmds {
			cmd.Process.Kill()
		}
	}()
	// Long enough for every watcher to wait: a blocked waitid would show
	// as one more thread each.
	time.Sleep(500 * time.Millisecond)
	if grew := threads(t) - before; grew >= n/2 {
		t.Errorf("%d waiting watchers added %d threads", n, grew)
	}
	for _, cmd := range cmds {
		cmd.Process.Signal(syscall.SIGTERM)
	}
	for range n {
		if e := <-exits; !e.ws.Signaled() || e.ws.Signal() != syscall.SIGTERM {
			t.Errorf("exit status %v (%v); want killed by SIGTERM", e.ws, e.err)
		}
	}
}

// threads returns the number of threads of the test process.
func threads(t *testing.T) int {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := bytes.Cut(status, []byte("\nThreads:"))
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	n, err := strconv.Atoi(string(bytes.TrimSpace(line)))
	if err != nil {
		t.Fatalf("no thread count in /proc/self/status: %v", err)
	}
	return n
}

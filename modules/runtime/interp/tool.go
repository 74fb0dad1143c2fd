package interp

import (
	"errors"
	"fmt"
	"io"
	"os/exec"
	"syscall"
	"time"

	"sless.kube5s.ru/sless/internal/tail"
)

// toolErrorLines is how many trailing output lines of a failed tool are
// quoted in its error.
const toolErrorLines = 8

// RunTool runs a dependency tool (pip, npm) built with exec.CommandContext,
// streaming its combined output to out. The tool runs in its own process
// group so that cancelling the context kills its children too. A failure is
// returned with the last lines of the tool's output quoted, so that a build
// status can show users what went wrong.
func RunTool(cmd *exec.Cmd, out io.Writer) error {
	tb := &tail.Buffer{Max: 16 << 10}
	w := io.MultiWriter(out, tb)
	cmd.Stdout, cmd.Stderr = w, w
	// Pdeathsig: a server killed mid-build takes the tool with it; the build
	// runs again after the next start.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if err == nil {
		return nil
	}
	name := cmd.Args[0]
	if len(cmd.Args) > 2 && cmd.Args[1] == "-m" {
		name = cmd.Args[2] // python -m pip
	}
	var exitErr *exec.ExitError
	switch {
	case errors.Is(err, exec.ErrWaitDelay):
		err = errors.New("left processes running after it exited")
	case errors.As(err, &exitErr) && exitErr.ExitCode() >= 0:
		err = fmt.Errorf("exited with status %d", exitErr.ExitCode())
	}
	if quote := tb.LastLines(toolErrorLines); quote != "" {
		return fmt.Errorf("%s %w:\n%s", name, err, quote)
	}
	return fmt.Errorf("%s: %w", name, err)
}

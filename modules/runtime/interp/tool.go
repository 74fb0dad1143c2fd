package interp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"sless.kube5s.ru/sless/internal/tail"
	"sless.kube5s.ru/sless/modules/runtime"
)

// toolErrorLines is how many trailing output lines of a failed tool are
// quoted in its error.
const toolErrorLines = 8

// toolEnvNames are the variables of the server's environment a dependency
// tool gets: where programs are, the home directory (unconfined), the
// locale and the proxies that reach the package indexes.
var toolEnvNames = []string{"PATH", "HOME", "LANG", "TMPDIR", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
	"http_proxy", "https_proxy", "no_proxy"}

// ToolEnv returns the environment of a dependency tool: the variables of
// toolEnvNames the server has, then extra ("K=V"). Nothing else of the
// server's environment (its SLESS_ settings, credentials) reaches user code
// that installs run.
func ToolEnv(extra ...string) []string {
	var env []string
	for _, k := range toolEnvNames {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return append(env, extra...)
}

// RunTool runs a dependency tool (pip, npm) built with exec.CommandContext,
// streaming its combined output to out, confined by ctx's runtime.Confiner
// when it has one. The tool runs in its own process group (confined: its own
// pid namespace) so that cancelling the context kills its children too. A
// failure is returned with the last lines of the tool's output quoted, so
// that a build status can show users what went wrong.
func RunTool(ctx context.Context, cmd *exec.Cmd, out io.Writer) error {
	tb := &tail.Buffer{Max: 16 << 10}
	w := io.MultiWriter(out, tb)
	cmd.Stdout, cmd.Stderr = w, w
	// Pdeathsig: a server killed mid-build takes the tool with it; the build
	// runs again after the next start.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	name := cmd.Args[0]
	if len(cmd.Args) > 2 && cmd.Args[1] == "-m" {
		name = cmd.Args[2] // python -m pip
	}
	if c := runtime.ConfinerFrom(ctx); c != nil {
		release, err := c.Confine(cmd, cmd.Dir)
		if err != nil {
			return fmt.Errorf("confining %s: %w", name, err)
		}
		defer release()
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if err == nil {
		return nil
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

package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// shBlock returns the lines of the first ```sh block after heading in the
// README, without comments and blank lines.
func shBlock(t *testing.T, readme, heading string) []string {
	t.Helper()
	_, after, ok := strings.Cut(readme, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("README has no %q section", heading)
	}
	_, block, ok := strings.Cut(after, "```sh\n")
	if !ok {
		t.Fatalf("README's %q section has no sh block", heading)
	}
	block, _, _ = strings.Cut(block, "```")
	var lines []string
	for line := range strings.SplitSeq(block, "\n") {
		if i := strings.Index(line, " # "); i >= 0 {
			line = line[:i]
		}
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			lines = append(lines, line)
		}
	}
	return lines
}

// The README's path from its first command to the end of the Quickstart
// works when followed literally: the Quickstart uses the server that the
// first command started, and each of its commands succeeds and returns.
func TestReadmeQuickstart(t *testing.T) {
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	if first := shBlock(t, readme, "## The two commands"); len(first) == 0 || first[0] != "go run ./cmd/sless server" {
		t.Fatalf("the README's first command is %q, want the server", first)
	}
	// s stands for the first command's server; its address for 127.0.0.1:8080.
	s := startServer(t, serverOptions{})
	_, err = exec.LookPath("curl")
	haveCurl := err == nil
	for _, line := range shBlock(t, readme, "## Quickstart (two minutes)") {
		switch {
		case strings.HasPrefix(line, "go build -o sless "):
			continue // binary is that build
		case strings.HasPrefix(line, "curl ") && !haveCurl:
			t.Logf("curl is not installed: skipping %q", line)
			continue
		case strings.Contains(line, "sless server"):
			t.Errorf("the Quickstart starts a second server (%q) while the first command's one holds 127.0.0.1:8080 and the data directory", line)
			continue
		}
		cmdLine := strings.ReplaceAll(strings.ReplaceAll(line, "./sless ", binary+" "), "http://127.0.0.1:8080", s.endpoint)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, "sh", "-c", cmdLine)
		cmd.Dir = ".."
		cmd.Env = append(cleanEnv(), "SLESS_DATA_DIR="+s.opts.dataDir)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.WaitDelay = 5 * time.Second // a command that sh left running holds the output open
		err := cmd.Run()
		cancel()
		if err != nil {
			t.Errorf("README Quickstart %q: %v (%v)\n%s", line, err, ctx.Err(), out.String())
		}
	}
}

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/dirhash"

	"terraform-provider-sless/internal/acctest"
)

func TestMain(m *testing.M) { acctest.Main(m) }

const mirrorVersion = "0.1.0"

// The way a user installs the provider: hack/tf-mirror.sh lays out a
// release and a mirror, `terraform init` installs from the mirror with no
// network, and plan, apply and destroy work against a real server.
func TestAccInstallFromMirror(t *testing.T) {
	tf := acctest.PreCheck(t)
	root := acctest.RepoRoot(t)
	srv := acctest.StartServer(t)
	out := t.TempDir()
	target := runtime.GOOS + "_" + runtime.GOARCH

	args := []string{"--platforms", target}
	gnupg, key := gpgKey(t)
	if key != "" {
		args = append(args, "--gpg-key", key)
	}
	cmd := exec.Command(filepath.Join(root, "hack", "tf-mirror.sh"), append(args, mirrorVersion, out)...)
	cmd.Env = append(os.Environ(), "GNUPGHOME="+gnupg)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/tf-mirror.sh: %v\n%s", err, msg)
	}

	zipName := fmt.Sprintf("terraform-provider-sless_%s_%s.zip", mirrorVersion, target)
	zipSum := fileSHA256(t, filepath.Join(out, "release", zipName))
	sums, err := os.ReadFile(filepath.Join(out, "release", "terraform-provider-sless_"+mirrorVersion+"_SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(sums), zipSum+"  "+zipName+"\n") {
		t.Errorf("SHA256SUMS does not list %s with its SHA-256 %s:\n%s", zipName, zipSum, sums)
	}
	if key != "" {
		verify := exec.Command("gpg", "--batch", "--verify", filepath.Join(out, "release", "terraform-provider-sless_"+mirrorVersion+"_SHA256SUMS.sig"),
			filepath.Join(out, "release", "terraform-provider-sless_"+mirrorVersion+"_SHA256SUMS"))
		verify.Env = append(os.Environ(), "GNUPGHOME="+gnupg)
		if msg, err := verify.CombinedOutput(); err != nil {
			t.Errorf("gpg --verify of the SHA256SUMS signature: %v\n%s", err, msg)
		}
	}
	if mirrored := fileSHA256(t, filepath.Join(out, "mirror", "registry.terraform.io", "naeel", "sless", zipName)); mirrored != zipSum {
		t.Errorf("the mirror's zip differs from the release's")
	}

	work := t.TempDir()
	code := filepath.Join(work, "code")
	writeFile(t, filepath.Join(code, "handler.py"), "def handle(event, context):\n    return {\"message\": \"from the mirror\"}\n")
	writeFile(t, filepath.Join(work, "main.tf"), fmt.Sprintf(`
terraform {
  required_providers {
    sless = {
      source  = "naeel/sless"
      version = %q
    }
  }
}

provider "sless" {
  endpoint = %q
  token    = %q
}

resource "sless_function" "hello" {
  name       = "hello"
  runtime    = "python3.11"
  source_dir = "${path.module}/code"
}

resource "sless_trigger" "hello" {
  name     = "hello"
  function = sless_function.hello.name
  type     = "http"
}

resource "sless_trigger" "hourly" {
  name     = "hourly"
  function = sless_function.hello.name
  type     = "cron"
  schedule = "@hourly"
}

resource "sless_job" "once" {
  name     = "once"
  function = sless_function.hello.name
  run_id   = 1
}
`, mirrorVersion, srv.Endpoint, srv.Token))
	cliConfig := filepath.Join(work, "cli.tfrc")
	writeFile(t, cliConfig, fmt.Sprintf("provider_installation {\n  filesystem_mirror {\n    path = %q\n  }\n}\n", filepath.Join(out, "mirror")))

	run := func(args ...string) (string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, tf, args...)
		cmd.Dir = work
		cmd.Env = append(cleanEnv(), "TF_CLI_CONFIG_FILE="+cliConfig, "CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1")
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		err := cmd.Run()
		return buf.String(), err
	}
	mustRun := func(args ...string) string {
		t.Helper()
		out, err := run(args...)
		if err != nil {
			t.Fatalf("terraform %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	mustRun("init", "-input=false")
	lock, err := os.ReadFile(filepath.Join(work, ".terraform.lock.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	// A mirror's package is recorded by the hash of its contents (h1, the
	// dirhash of the zip), which must be that of the zip laid out.
	h1, err := dirhash.HashZip(filepath.Join(out, "release", zipName), dirhash.Hash1)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(lock), `"`+h1+`"`) || !strings.Contains(string(lock), `version     = "`+mirrorVersion+`"`) {
		t.Errorf("the lock file does not record version %s with the zip's hash %s:\n%s", mirrorVersion, h1, lock)
	}
	mustRun("plan", "-input=false", "-out=tfplan")
	mustRun("apply", "-input=false", "tfplan")
	fnAnswers(t, srv.Endpoint+"/fn/default/hello", "from the mirror")
	if out, err := run("plan", "-input=false", "-detailed-exitcode"); err != nil {
		t.Errorf("second plan is not empty (%v):\n%s", err, out)
	}
	// A code edit is one in-place update.
	writeFile(t, filepath.Join(code, "handler.py"), "def handle(event, context):\n    return {\"message\": \"edited\"}\n")
	if plan := mustRun("plan", "-input=false", "-out=tfplan"); !strings.Contains(plan, "0 to add, 1 to change, 0 to destroy") {
		t.Errorf("plan after a code edit, want one change:\n%s", plan)
	}
	mustRun("apply", "-input=false", "tfplan")
	fnAnswers(t, srv.Endpoint+"/fn/default/hello", "edited")
	mustRun("destroy", "-input=false", "-auto-approve")
	c := srv.Client()
	fns, err := c.ListFunctions(context.Background(), "default")
	if err != nil || len(fns) != 0 {
		t.Errorf("after destroy: %d functions (%v); want none", len(fns), err)
	}
	trs, err := c.ListTriggers(context.Background(), "default")
	if err != nil || len(trs) != 0 {
		t.Errorf("after destroy: %d triggers (%v); want none", len(trs), err)
	}
	jobs, err := c.ListJobs(context.Background(), "default")
	if err != nil || len(jobs) != 0 {
		t.Errorf("after destroy: %d jobs (%v); want none", len(jobs), err)
	}
}

// fnAnswers checks that url answers 200 with a body containing want.
func fnAnswers(t *testing.T, url, want string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
		t.Errorf("GET %s: HTTP %d %s; want 200 with %q", url, resp.StatusCode, body, want)
	}
}

// gpgKey makes a signing key in a new GNUPGHOME, or returns no key when gpg
// is not installed (the signature is optional; the rest is still tested).
func gpgKey(t *testing.T) (home, key string) {
	home, err := os.MkdirTemp("", "sless-gnupg-") // short: gpg-agent's socket path is limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		exec.Command("gpgconf", "--kill", "gpg-agent").Run()
		os.RemoveAll(home)
	})
	if _, err := exec.LookPath("gpg"); err != nil {
		t.Logf("gpg is not installed: the release is not signed in this test")
		return home, ""
	}
	key = "sless-test@example.com"
	cmd := exec.Command("gpg", "--batch", "--passphrase", "", "--quick-gen-key", key, "ed25519", "sign", "never")
	cmd.Env = append(os.Environ(), "GNUPGHOME="+home)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gpg --quick-gen-key: %v\n%s", err, msg)
	}
	return home, key
}

// cleanEnv is the environment without the machine's Terraform and sless
// settings.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TF_") && !strings.HasPrefix(kv, "SLESS_") {
			env = append(env, kv)
		}
	}
	return env
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

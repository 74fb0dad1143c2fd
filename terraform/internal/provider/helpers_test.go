package provider_test

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"sless.kube5s.ru/sless/client"
	"sless.kube5s.ru/sless/modules/functions"

	"terraform-provider-sless/internal/acctest"
	"terraform-provider-sless/internal/provider"
)

func TestMain(m *testing.M) { acctest.Main(m) }

// factories serve the provider in-process: terraform-plugin-testing runs
// the Terraform CLI with it as an unmanaged provider, fully offline.
var factories = map[string]func() (tfprotov6.ProviderServer, error){
	"sless": providerserver.NewProtocol6WithError(provider.New("test")()),
}

// env is one acceptance test's server and a client of it.
type env struct {
	t   *testing.T
	srv *acctest.Server
	c   *client.Client
}

// setup skips t unless TF_ACC is set, and starts a sless server for it.
// The tests run in parallel: each has a server of its own.
func setup(t *testing.T) *env {
	t.Helper()
	acctest.PreCheck(t)
	t.Parallel()
	srv := acctest.StartServer(t)
	return &env{t: t, srv: srv, c: srv.Client()}
}

// requiredProviders names the provider as users do.
const requiredProviders = `terraform {
  required_providers {
    sless = { source = "naeel/sless" }
  }
}
`

// config is the provider's block for the test's server followed by body.
func (e *env) config(body string) string {
	return fmt.Sprintf("%s\nprovider \"sless\" {\n  endpoint = %q\n  token    = %q\n}\n\n%s", requiredProviders, e.srv.Endpoint, e.srv.Token, body)
}

// test runs steps against e's server and checks that destroy left no
// function, trigger or job behind.
func (e *env) test(steps ...resource.TestStep) {
	e.t.Helper()
	resource.Test(e.t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy:             e.nothingLeft,
		Steps:                    steps,
	})
}

// nothingLeft checks that the namespace default holds no function, trigger
// or job.
func (e *env) nothingLeft(*terraform.State) error {
	ctx := context.Background()
	fns, err := e.c.ListFunctions(ctx, "default")
	if err != nil {
		return err
	}
	trs, err := e.c.ListTriggers(ctx, "default")
	if err != nil {
		return err
	}
	jobs, err := e.c.ListJobs(ctx, "default")
	if err != nil {
		return err
	}
	if len(fns)+len(trs)+len(jobs) > 0 {
		return fmt.Errorf("after destroy: %d functions, %d triggers, %d jobs remain", len(fns), len(trs), len(jobs))
	}
	return nil
}

// writeFiles writes files (name: content) into dir, creating it.
func writeFiles(t *testing.T, dir string, files map[string]string) string {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// greeter is a Python handler answering {"message": "<greeting>, <name>!"}.
func greeter(greeting string) string {
	return fmt.Sprintf("def handle(event, context):\n    return {\"message\": \"%s, \" + (event or {}).get(\"name\", \"world\") + \"!\"}\n", greeting)
}

// zipSHA is the change key of dir: the SHA-256 of its ZipDir zip.
func zipSHA(t *testing.T, dir string) string {
	t.Helper()
	_, sum, err := client.ZipDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// zipFile writes a zip of files to path.
func zipFile(t *testing.T, path string, files map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	for name, content := range files {
		f, err := w.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(f, content)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// invokes checks that invoking function name through the API answers a
// body containing want.
func (e *env) invokes(name, want string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		res, err := e.c.Invoke(context.Background(), "default", name, []byte(`{"name": "tf"}`))
		if err != nil {
			return err
		}
		if res.StatusCode != 200 || !strings.Contains(string(res.Body), want) {
			return fmt.Errorf("invoking %s: HTTP %d %s; want 200 with %q", name, res.StatusCode, res.Body, want)
		}
		return nil
	}
}

// fnAnswers checks that GET /fn/default/name answers status code.
func (e *env) fnAnswers(name string, code int) resource.TestCheckFunc {
	return func(*terraform.State) error {
		url := e.c.InvokeURL("default", name)
		// An http trigger's change is applied once the apply returned;
		// allow the server's /fn routing a moment to follow under load.
		deadline := time.Now().Add(5 * time.Second)
		for {
			resp, err := http.Post(url, "application/json", strings.NewReader(`{"name": "fn"}`))
			if err != nil {
				return err
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == code {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("POST %s: HTTP %d %s; want %d", url, resp.StatusCode, body, code)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// function checks the server's function name with check.
func (e *env) function(name string, check func(*functions.Function) error) resource.TestCheckFunc {
	return func(*terraform.State) error {
		fn, err := e.c.GetFunction(context.Background(), "default", name)
		if err != nil {
			return err
		}
		return check(fn)
	}
}

// must runs an API call outside Terraform in a PreConfig, failing the test
// when it fails.
func (e *env) must(what string, call func(ctx context.Context, c *client.Client) error) func() {
	return func() {
		if err := call(context.Background(), e.c); err != nil {
			e.t.Fatalf("%s: %v", what, err)
		}
	}
}

// expect plans action for each of addresses before the apply.
func expect(action plancheck.ResourceActionType, addresses ...string) resource.ConfigPlanChecks {
	var checks []plancheck.PlanCheck
	for _, a := range addresses {
		checks = append(checks, plancheck.ExpectResourceAction(a, action))
	}
	return resource.ConfigPlanChecks{PreApply: checks}
}

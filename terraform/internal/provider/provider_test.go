package provider_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"

	"terraform-provider-sless/internal/acctest"
)

const fnBody = `
resource "sless_function" "f" {
  name       = "f"
  runtime    = "python3.11"
  source_dir = "."
}
`

// A refused token and an unreachable server are one clear diagnostic each.
func TestAccProviderErrors(t *testing.T) {
	e := setup(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	for _, tc := range []struct{ endpoint, token, want string }{
		{e.srv.Endpoint, "sless_0000000000000000000000000000wrong", words("The sless server refused the API token") + `.*` + words("The server at "+e.srv.Endpoint+" refused the provider's token: invalid API token")},
		{closed, "token-of-no-server-at-all", words("Cannot reach the sless server") + `.*` + words("no sless server is listening at "+closed)},
		{"ftp://" + l.Addr().String(), "t", words(`endpoint "ftp://` + l.Addr().String() + `" is not a server address`)},
	} {
		t.Run(tc.want, func(t *testing.T) {
			resource.Test(t, resource.TestCase{
				ProtoV6ProviderFactories: factories,
				Steps: []resource.TestStep{{
					Config:      fmt.Sprintf("%s\nprovider \"sless\" {\n  endpoint = %q\n  token = %q\n}\n%s", requiredProviders, tc.endpoint, tc.token, fnBody),
					ExpectError: regexp.MustCompile(tc.want),
				}},
			})
		})
	}
}

// words matches text in Terraform's output, which wraps long lines.
func words(text string) string {
	return `(?s)` + strings.Join(strings.Fields(regexp.QuoteMeta(text)), `\s+`)
}

// exampleConfig returns the configuration of terraform/examples/NAME with
// the provider block pointed at e's server and the paths made absolute;
// replace rewrites more (old, new, old, new...).
func exampleConfig(t *testing.T, e *env, name string, replace ...string) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(data)
	if !strings.Contains(cfg, "provider \"sless\" {}") {
		t.Fatalf("examples/%s/main.tf has no `provider \"sless\" {}`", name)
	}
	cfg = strings.Replace(cfg, "provider \"sless\" {}", fmt.Sprintf("provider \"sless\" {\n  endpoint = %q\n  token    = %q\n}", e.srv.Endpoint, e.srv.Token), 1)
	cfg = strings.NewReplacer(replace...).Replace(cfg)
	return strings.ReplaceAll(cfg, "${path.module}", dir)
}

// The test of done: the quickstart example (a function from
// source_dir, http triggers, a cron trigger and a job) applies against a
// fresh server, /fn answers, the second plan is empty, a code edit applies
// in place, and destroy leaves nothing.
func TestAccQuickstartExample(t *testing.T) {
	e := setup(t)
	src, err := os.ReadFile(filepath.Join(acctest.RepoRoot(t), "examples", "hello-python", "handler.py"))
	if err != nil {
		t.Fatal(err)
	}
	code := writeFiles(t, t.TempDir(), map[string]string{"handler.py": string(src)})
	cfg := exampleConfig(t, e, "quickstart", "${path.module}/../../../examples/hello-python", code, "${path.module}/../../../examples", filepath.Join(acctest.RepoRoot(t), "examples"))
	e.test(
		resource.TestStep{
			Config: cfg,
			Check: resource.ComposeAggregateTestCheckFunc(
				e.fnAnswers("hello", 200),
				e.fnAnswers("hello-node", 200),
				resource.TestCheckResourceAttr("sless_job.greet", "phase", "Succeeded"),
				resource.TestCheckResourceAttr("sless_job.greet", "result", `{"message":"Hello, job!"}`),
				resource.TestCheckResourceAttr("data.sless_invocations.greet", "invocations.#", "1"),
				resource.TestCheckResourceAttr("data.sless_invocations.greet", "invocations.0.trigger_name", "greet"),
				resource.TestCheckResourceAttr("data.sless_invocations.greet", "invocations.0.status_code", "200"),
				resource.TestCheckResourceAttrSet("sless_trigger.nightly", "next_fire_at"),
				resource.TestCheckResourceAttr("data.sless_function.hello", "phase", "Ready"),
				resource.TestCheckResourceAttr("data.sless_function.hello", "runtime", "python3.11"),
				resource.TestCheckResourceAttrPair("data.sless_function.hello", "code_sha256", "sless_function.hello", "code_sha256"),
				resource.TestCheckResourceAttrPair("data.sless_function.hello", "invoke_url", "sless_function.hello", "invoke_url"),
			),
		},
		resource.TestStep{ // a code edit: one in-place update, the rest untouched
			PreConfig: func() {
				writeFiles(t, code, map[string]string{"handler.py": strings.Replace(string(src), "Hello", "Hallo", 1)})
			},
			Config: cfg,
			ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
				plancheck.ExpectResourceAction("sless_function.hello", plancheck.ResourceActionUpdate),
				plancheck.ExpectResourceAction("sless_function.hello_node", plancheck.ResourceActionNoop),
				plancheck.ExpectResourceAction("sless_trigger.hello", plancheck.ResourceActionNoop),
				plancheck.ExpectResourceAction("sless_trigger.nightly", plancheck.ResourceActionNoop),
				plancheck.ExpectResourceAction("sless_job.greet", plancheck.ResourceActionNoop),
			}},
			Check: e.invokes("hello", "Hallo, tf!"),
		},
	)
}

// The PostgreSQL example plans (its build needs psycopg from PyPI, which
// this machine cannot reach, so it is not applied here).
func TestAccPostgresExamplePlans(t *testing.T) {
	e := setup(t)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{{
			Config:             exampleConfig(t, e, "postgres", "sensitive   = true", "sensitive   = true\n  default     = \"postgresql://postgres@127.0.0.1:5432/test\""),
			PlanOnly:           true,
			ExpectNonEmptyPlan: true,
		}},
	})
}

package provider_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"sless.kube5s.ru/sless/client"
	"sless.kube5s.ru/sless/modules/functions"
)

func functionConfig(name, dir string, memory int, greeting string) string {
	return fmt.Sprintf(`
resource "sless_function" "hello" {
  name       = %q
  runtime    = "python3.11"
  source_dir = %q
  memory_mb  = %d
  env        = { GREETING = %q }
  secret_env = { API_KEY = "s3cret" }
}
`, name, dir, memory, greeting)
}

func TestAccFunction(t *testing.T) {
	e := setup(t)
	dir := writeFiles(t, t.TempDir(), map[string]string{"handler.py": greeter("Hello"), "notes.txt": "left out", ".slessignore": "notes.txt\n"})
	cfg := e.config(functionConfig("hello", dir, 128, "hi"))
	updated := e.config(functionConfig("hello", dir, 256, "hey"))
	var firstSHA string
	e.test(
		resource.TestStep{ // create and read back
			Config: cfg,
			Check: resource.ComposeAggregateTestCheckFunc(
				resource.TestCheckResourceAttr("sless_function.hello", "id", "default/hello"),
				resource.TestCheckResourceAttr("sless_function.hello", "namespace", "default"),
				resource.TestCheckResourceAttr("sless_function.hello", "phase", "Ready"),
				resource.TestCheckResourceAttr("sless_function.hello", "handler", "handler.handle"),
				resource.TestCheckResourceAttr("sless_function.hello", "max_instances", "10"),
				resource.TestCheckResourceAttr("sless_function.hello", "timeout_seconds", "30"),
				resource.TestCheckResourceAttr("sless_function.hello", "egress", "all"),
				resource.TestCheckResourceAttr("sless_function.hello", "invoke_url", e.srv.Endpoint+"/fn/default/hello"),
				resource.TestCheckResourceAttrWith("sless_function.hello", "code_sha256", func(v string) error {
					firstSHA = v
					if want := zipSHA(t, dir); v != want {
						return fmt.Errorf("code_sha256 %s, want the ZipDir hash %s", v, want)
					}
					return nil
				}),
				e.function("hello", func(fn *functions.Function) error {
					if fn.MemoryMB != 128 || fn.Env["GREETING"] != "hi" || fn.Env["API_KEY"] != "s3cret" {
						return fmt.Errorf("server has memory %d env %v; want 128 with GREETING and API_KEY", fn.MemoryMB, fn.Env)
					}
					return nil
				}),
				e.invokes("hello", "Hello, tf!"),
			),
		},
		resource.TestStep{ // an untouched directory with new timestamps plans nothing
			PreConfig: func() {
				future := time.Now().Add(time.Hour)
				os.Chtimes(filepath.Join(dir, "handler.py"), future, future)
				os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("ignored edit"), 0o644)
			},
			Config:   cfg,
			PlanOnly: true,
		},
		resource.TestStep{ // update in place
			Config:           updated,
			ConfigPlanChecks: expect(plancheck.ResourceActionUpdate, "sless_function.hello"),
			Check: e.function("hello", func(fn *functions.Function) error {
				if fn.MemoryMB != 256 || fn.Env["GREETING"] != "hey" {
					return fmt.Errorf("server has memory %d env %v; want 256 and GREETING=hey", fn.MemoryMB, fn.Env)
				}
				return nil
			}),
		},
		resource.TestStep{ // one changed byte of code: an in-place update that deploys it
			PreConfig:        func() { writeFiles(t, dir, map[string]string{"handler.py": greeter("Hellp")}) },
			Config:           updated,
			ConfigPlanChecks: expect(plancheck.ResourceActionUpdate, "sless_function.hello"),
			Check: resource.ComposeAggregateTestCheckFunc(
				resource.TestCheckResourceAttrWith("sless_function.hello", "code_sha256", func(v string) error {
					if v == firstSHA || v != zipSHA(t, dir) {
						return fmt.Errorf("code_sha256 %s after the edit; want the new ZipDir hash %s", v, zipSHA(t, dir))
					}
					return nil
				}),
				e.invokes("hello", "Hellp, tf!"),
			),
		},
		resource.TestStep{ // import by namespace/name
			ResourceName:      "sless_function.hello",
			ImportState:       true,
			ImportStateId:     "default/hello",
			ImportStateVerify: true,
			// What only the configuration knows: the code's source, and
			// which variables are secret (imported into env).
			ImportStateVerifyIgnore: []string{"source_dir", "env", "secret_env"},
		},
		resource.TestStep{ // changed outside Terraform: the plan puts it back
			PreConfig: e.must("changing the function outside Terraform", func(ctx context.Context, c *client.Client) error {
				fn, err := c.GetFunction(ctx, "default", "hello")
				if err != nil {
					return err
				}
				fn.MemoryMB = 512
				fn.Env = map[string]string{"OTHER": "x"}
				fn.Egress = "public"
				_, err = c.UpdateFunction(ctx, fn)
				return err
			}),
			Config:           updated,
			ConfigPlanChecks: expect(plancheck.ResourceActionUpdate, "sless_function.hello"),
			Check: e.function("hello", func(fn *functions.Function) error {
				if fn.MemoryMB != 256 || fn.Env["GREETING"] != "hey" || fn.Env["API_KEY"] != "s3cret" || len(fn.Env) != 2 || fn.Egress != "all" {
					return fmt.Errorf("server has memory %d env %v egress %q after the apply; want the configuration's", fn.MemoryMB, fn.Env, fn.Egress)
				}
				return nil
			}),
		},
		resource.TestStep{ // code uploaded outside Terraform: the plan uploads the directory again
			PreConfig: e.must("uploading other code outside Terraform", func(ctx context.Context, c *client.Client) error {
				other := writeFiles(t, t.TempDir(), map[string]string{"handler.py": greeter("Other")})
				zip, _, err := client.ZipDir(other)
				if err != nil {
					return err
				}
				fn, err := c.UploadCode(ctx, "default", "hello", zip)
				if err != nil {
					return err
				}
				_, err = c.WaitSettled(ctx, "default", "hello", fn.Generation, nil)
				return err
			}),
			Config:           updated,
			ConfigPlanChecks: expect(plancheck.ResourceActionUpdate, "sless_function.hello"),
			Check:            e.invokes("hello", "Hellp, tf!"),
		},
		resource.TestStep{ // deleted outside Terraform: planned for creation
			PreConfig: e.must("deleting the function outside Terraform", func(ctx context.Context, c *client.Client) error {
				_, err := c.DeleteFunction(ctx, "default", "hello")
				return err
			}),
			Config:           updated,
			ConfigPlanChecks: expect(plancheck.ResourceActionCreate, "sless_function.hello"),
			Check:            e.invokes("hello", "Hellp, tf!"),
		},
		resource.TestStep{ // a new name replaces the function
			Config:           e.config(functionConfig("hello-two", dir, 256, "hey")),
			ConfigPlanChecks: expect(plancheck.ResourceActionReplace, "sless_function.hello"),
			Check: resource.ComposeAggregateTestCheckFunc(
				e.invokes("hello-two", "Hellp, tf!"),
				func(*terraform.State) error {
					if _, err := e.c.GetFunction(context.Background(), "default", "hello"); !client.IsNotFound(err) {
						return fmt.Errorf("the replaced function hello: got %v, want it gone", err)
					}
					return nil
				},
			),
		},
	)
}

func TestAccFunctionZipFile(t *testing.T) {
	e := setup(t)
	zipPath := filepath.Join(t.TempDir(), "code.zip")
	zipFile(t, zipPath, map[string]string{"handler.js": "exports.handle = async (event) => ({ message: `Hi, ${event.name}!` });\n"})
	cfg := e.config(fmt.Sprintf(`
resource "sless_function" "node" {
  name     = "node"
  runtime  = "nodejs20"
  zip_file = %q
}
`, zipPath))
	e.test(
		resource.TestStep{Config: cfg, Check: e.invokes("node", "Hi, tf!")},
		resource.TestStep{
			PreConfig: func() {
				zipFile(t, zipPath, map[string]string{"handler.js": "exports.handle = async (event) => ({ message: `Yo, ${event.name}!` });\n"})
			},
			Config:           cfg,
			ConfigPlanChecks: expect(plancheck.ResourceActionUpdate, "sless_function.node"),
			Check:            e.invokes("node", "Yo, tf!"),
		},
	)
}

// A failed build fails the apply with the build log, and the change stays
// pending until a build succeeds.
func TestAccFunctionFailedBuild(t *testing.T) {
	e := setup(t)
	dir := writeFiles(t, t.TempDir(), map[string]string{"handler.py": greeter("Hello")})
	cfg := e.config(fmt.Sprintf(`
resource "sless_function" "dep" {
  name       = "dep"
  runtime    = "python3.11"
  source_dir = %q
}
`, dir))
	e.test(
		resource.TestStep{Config: cfg, Check: e.invokes("dep", "Hello, tf!")},
		resource.TestStep{
			// pip refuses this line at once, without any index.
			PreConfig: func() {
				writeFiles(t, dir, map[string]string{"requirements.txt": "this is !! not a requirement\n", "handler.py": greeter("Broken")})
			},
			Config:      cfg,
			ExpectError: regexp.MustCompile(`(?s)the build of function default/dep failed.*Build log:.*Invalid requirement`),
		},
		resource.TestStep{ // the failed change is still planned
			Config:             cfg,
			PlanOnly:           true,
			ExpectNonEmptyPlan: true,
		},
		resource.TestStep{
			PreConfig: func() { os.Remove(filepath.Join(dir, "requirements.txt")) },
			Config:    cfg,
			Check: resource.ComposeAggregateTestCheckFunc(
				resource.TestCheckResourceAttr("sless_function.dep", "phase", "Ready"),
				e.invokes("dep", "Broken, tf!"),
			),
		},
	)
}

// A function whose first build failed exists, tainted: the next apply
// replaces it.
func TestAccFunctionFirstBuildFails(t *testing.T) {
	e := setup(t)
	dir := writeFiles(t, t.TempDir(), map[string]string{"handler.py": greeter("Hello"), "requirements.txt": "this is !! not a requirement\n"})
	cfg := e.config(fmt.Sprintf(`
resource "sless_function" "first" {
  name       = "first"
  runtime    = "python3.11"
  source_dir = %q
}
`, dir))
	e.test(
		resource.TestStep{
			Config:      cfg,
			ExpectError: regexp.MustCompile(`(?s)the build of function default/first failed.*Invalid requirement`),
		},
		resource.TestStep{
			PreConfig:        func() { os.Remove(filepath.Join(dir, "requirements.txt")) },
			Config:           cfg,
			ConfigPlanChecks: expect(plancheck.ResourceActionReplace, "sless_function.first"),
			Check:            e.invokes("first", "Hello, tf!"),
		},
	)
}

func TestAccFunctionPlanErrors(t *testing.T) {
	e := setup(t)
	dir := writeFiles(t, t.TempDir(), map[string]string{"handler.py": greeter("Hello")})
	for _, tc := range []struct{ body, want string }{
		{`runtime = "python3.11"`, `Set source_dir or zip_file`},
		{fmt.Sprintf(`runtime = "cobol"
  source_dir = %q`, dir), `runtime "cobol" is not one of the server's: nodejs20, python3.11`},
		{fmt.Sprintf(`runtime = "python3.11"
  source_dir = %q
  memory_mb = 8`, dir), `memory_mb is 8; it must be 32 to 16384`},
		{fmt.Sprintf(`runtime = "python3.11"
  source_dir = %q
  env = { SLESS_X = "1" }`, dir), `reserved for the platform`},
		{fmt.Sprintf(`runtime = "python3.11"
  source_dir = %q`, filepath.Join(dir, "missing")), `Cannot read the function's code`},
	} {
		t.Run(tc.want, func(t *testing.T) {
			resource.Test(t, resource.TestCase{
				ProtoV6ProviderFactories: factories,
				Steps: []resource.TestStep{{
					Config:      e.config("resource \"sless_function\" \"f\" {\n  name = \"f\"\n  " + tc.body + "\n}\n"),
					PlanOnly:    true,
					ExpectError: regexp.MustCompile(regexp.QuoteMeta(tc.want)),
				}},
			})
		})
	}
}

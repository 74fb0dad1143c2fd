package provider_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"

	"sless.kube5s.ru/sless/client"
)

// echo answers its event.
const echo = "def handle(event, context):\n    if (event or {}).get(\"fail\"):\n        raise ValueError(\"asked to fail\")\n    return {\"got\": event}\n"

func jobConfig(e *env, dir string, runID int, payload string) string {
	return e.config(fmt.Sprintf(`
resource "sless_function" "echo" {
  name       = "echo"
  runtime    = "python3.11"
  source_dir = %q
}

resource "sless_job" "once" {
  name     = "once"
  function = sless_function.echo.name
  payload  = jsonencode(%s)
  run_id   = %d
}
`, dir, payload, runID))
}

func TestAccJob(t *testing.T) {
	e := setup(t)
	dir := writeFiles(t, t.TempDir(), map[string]string{"handler.py": echo})
	var firstInvocation string
	e.test(
		resource.TestStep{ // run_id 0: created, not run
			Config: jobConfig(e, dir, 0, "{ n = 1 }"),
			Check: resource.ComposeAggregateTestCheckFunc(
				resource.TestCheckResourceAttr("sless_job.once", "run_id", "0"),
				resource.TestCheckResourceAttr("sless_job.once", "invocation_id", ""),
			),
		},
		resource.TestStep{ // raising run_id runs it, in place
			Config:           jobConfig(e, dir, 1, "{ n = 1 }"),
			ConfigPlanChecks: expect(plancheck.ResourceActionUpdate, "sless_job.once"),
			Check: resource.ComposeAggregateTestCheckFunc(
				resource.TestCheckResourceAttr("sless_job.once", "phase", "Succeeded"),
				resource.TestCheckResourceAttr("sless_job.once", "status_code", "200"),
				resource.TestCheckResourceAttr("sless_job.once", "result", `{"got":{"n":1}}`),
				resource.TestCheckResourceAttrWith("sless_job.once", "invocation_id", func(v string) error {
					firstInvocation = v
					if v == "" {
						return fmt.Errorf("no invocation id")
					}
					return nil
				}),
			),
		},
		resource.TestStep{ // a new payload and run: runs once more
			Config:           jobConfig(e, dir, 2, "{ n = 2 }"),
			ConfigPlanChecks: expect(plancheck.ResourceActionUpdate, "sless_job.once"),
			Check: resource.ComposeAggregateTestCheckFunc(
				resource.TestCheckResourceAttr("sless_job.once", "result", `{"got":{"n":2}}`),
				resource.TestCheckResourceAttrWith("sless_job.once", "invocation_id", func(v string) error {
					if v == firstInvocation {
						return fmt.Errorf("run 2 has the invocation of run 1")
					}
					return nil
				}),
			),
		},
		resource.TestStep{
			Config:      jobConfig(e, dir, 1, "{ n = 2 }"),
			PlanOnly:    true,
			ExpectError: regexp.MustCompile(`run_id is 1, below the job's 2`),
		},
		resource.TestStep{
			ResourceName: "sless_job.once", ImportState: true, ImportStateId: "default/once", ImportStateVerify: true,
		},
		resource.TestStep{ // changed outside Terraform: the payload is put back, without a run
			PreConfig: e.must("changing the job outside Terraform", func(ctx context.Context, c *client.Client) error {
				j, err := c.GetJob(ctx, "default", "once")
				if err != nil {
					return err
				}
				j.Payload = []byte(`{"n":99}`)
				_, err = c.UpdateJob(ctx, j)
				return err
			}),
			Config:           jobConfig(e, dir, 2, "{ n = 2 }"),
			ConfigPlanChecks: expect(plancheck.ResourceActionUpdate, "sless_job.once"),
			Check:            resource.TestCheckResourceAttr("sless_job.once", "result", `{"got":{"n":2}}`),
		},
		resource.TestStep{ // deleted outside Terraform: created and run again
			PreConfig: e.must("deleting the job outside Terraform", func(ctx context.Context, c *client.Client) error {
				return c.DeleteJob(ctx, "default", "once")
			}),
			Config:           jobConfig(e, dir, 2, "{ n = 2 }"),
			ConfigPlanChecks: expect(plancheck.ResourceActionCreate, "sless_job.once"),
			Check:            resource.TestCheckResourceAttr("sless_job.once", "phase", "Succeeded"),
		},
		resource.TestStep{ // a new name replaces it
			Config:           strings.Replace(jobConfig(e, dir, 2, "{ n = 2 }"), `name     = "once"`, `name     = "twice"`, 1),
			ConfigPlanChecks: expect(plancheck.ResourceActionReplace, "sless_job.once"),
			Check:            resource.TestCheckResourceAttr("sless_job.once", "id", "default/twice"),
		},
	)
}

// A failed run fails the apply with the function's error.
func TestAccJobFailed(t *testing.T) {
	e := setup(t)
	dir := writeFiles(t, t.TempDir(), map[string]string{"handler.py": echo})
	e.test(
		resource.TestStep{
			Config:      jobConfig(e, dir, 1, "{ fail = true }"),
			ExpectError: regexp.MustCompile(`(?s)the run 1 of job default/once failed.*asked to fail`),
		},
		resource.TestStep{ // the failed job is tainted: the next apply replaces it and runs it again
			Config:           jobConfig(e, dir, 1, "{ fail = false }"),
			ConfigPlanChecks: expect(plancheck.ResourceActionReplace, "sless_job.once"),
			Check:            resource.TestCheckResourceAttr("sless_job.once", "phase", "Succeeded"),
		},
	)
}

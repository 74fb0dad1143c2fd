package provider_test

import (
	"context"
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"sless.kube5s.ru/sless/client"
)

// triggerConfig is a function hello with a trigger "web" whose body is
// given.
func triggerConfig(e *env, dir, trigger string) string {
	return e.config(fmt.Sprintf(`
resource "sless_function" "hello" {
  name       = "hello"
  runtime    = "python3.11"
  source_dir = %q
}

resource "sless_trigger" "web" {
  name     = "web"
  function = sless_function.hello.name
%s
}
`, dir, trigger))
}

func TestAccTrigger(t *testing.T) {
	e := setup(t)
	dir := writeFiles(t, t.TempDir(), map[string]string{"handler.py": greeter("Hello")})
	on := triggerConfig(e, dir, `  type = "http"`)
	off := triggerConfig(e, dir, "  type    = \"http\"\n  enabled = false")
	cron := triggerConfig(e, dir, "  type     = \"cron\"\n  schedule = \"@every 1h\"\n  payload  = jsonencode({ name = \"cron\" })")
	e.test(
		resource.TestStep{
			Config: on,
			Check: resource.ComposeAggregateTestCheckFunc(
				resource.TestCheckResourceAttr("sless_trigger.web", "id", "default/web"),
				resource.TestCheckResourceAttr("sless_trigger.web", "phase", "Active"),
				resource.TestCheckResourceAttr("sless_trigger.web", "enabled", "true"),
				resource.TestCheckResourceAttr("sless_trigger.web", "auth", "none"),
				resource.TestCheckNoResourceAttr("sless_trigger.web", "concurrency_policy"),
				e.fnAnswers("hello", 200),
			),
		},
		resource.TestStep{ // enabled toggles in place
			Config:           off,
			ConfigPlanChecks: expect(plancheck.ResourceActionUpdate, "sless_trigger.web"),
			Check: resource.ComposeAggregateTestCheckFunc(
				resource.TestCheckResourceAttr("sless_trigger.web", "phase", "Disabled"),
				e.fnAnswers("hello", 404),
			),
		},
		resource.TestStep{Config: on, ConfigPlanChecks: expect(plancheck.ResourceActionUpdate, "sless_trigger.web"), Check: e.fnAnswers("hello", 200)},
		resource.TestStep{ // changed outside Terraform
			PreConfig: e.must("disabling the trigger outside Terraform", func(ctx context.Context, c *client.Client) error {
				tr, err := c.GetTrigger(ctx, "default", "web")
				if err != nil {
					return err
				}
				off := false
				tr.Enabled = &off
				_, err = c.UpdateTrigger(ctx, tr)
				return err
			}),
			Config:           on,
			ConfigPlanChecks: expect(plancheck.ResourceActionUpdate, "sless_trigger.web"),
			Check:            e.fnAnswers("hello", 200),
		},
		resource.TestStep{ // deleted outside Terraform
			PreConfig: e.must("deleting the trigger outside Terraform", func(ctx context.Context, c *client.Client) error {
				return c.DeleteTrigger(ctx, "default", "web")
			}),
			Config:           on,
			ConfigPlanChecks: expect(plancheck.ResourceActionCreate, "sless_trigger.web"),
			Check:            e.fnAnswers("hello", 200),
		},
		resource.TestStep{
			ResourceName: "sless_trigger.web", ImportState: true, ImportStateId: "default/web", ImportStateVerify: true,
		},
		resource.TestStep{ // another type replaces the trigger; destroy waited for the old one
			Config:           cron,
			ConfigPlanChecks: expect(plancheck.ResourceActionReplace, "sless_trigger.web"),
			Check: resource.ComposeAggregateTestCheckFunc(
				resource.TestCheckResourceAttr("sless_trigger.web", "type", "cron"),
				resource.TestCheckResourceAttr("sless_trigger.web", "concurrency_policy", "Allow"),
				resource.TestCheckNoResourceAttr("sless_trigger.web", "auth"),
				resource.TestCheckResourceAttrSet("sless_trigger.web", "next_fire_at"),
				e.fnAnswers("hello", 404),
			),
		},
		resource.TestStep{
			ResourceName: "sless_trigger.web", ImportState: true, ImportStateId: "default/web", ImportStateVerify: true,
		},
	)
}

// A rabbitmq trigger keeps its URL with the password although the server
// shows it redacted.
func TestAccTriggerRabbitMQ(t *testing.T) {
	e := setup(t)
	dir := writeFiles(t, t.TempDir(), map[string]string{"handler.py": greeter("Hello")})
	cfg := triggerConfig(e, dir, `  type  = "rabbitmq"
  url   = "amqp://guest:guest@127.0.0.1:5672/"
  queue = "sless-tf-test"`)
	e.test(
		resource.TestStep{
			Config: cfg,
			Check: resource.ComposeAggregateTestCheckFunc(
				resource.TestCheckResourceAttr("sless_trigger.web", "url", "amqp://guest:guest@127.0.0.1:5672/"),
				resource.TestCheckResourceAttr("sless_trigger.web", "prefetch", "10"),
				resource.TestCheckResourceAttr("sless_trigger.web", "max_retries", "3"),
				func(*terraform.State) error {
					tr, err := e.c.GetTrigger(context.Background(), "default", "web")
					if err != nil {
						return err
					}
					if tr.URL != "amqp://guest:***@127.0.0.1:5672/" {
						return fmt.Errorf("server shows url %q; want it redacted", tr.URL)
					}
					return nil
				},
			),
		},
	)
}

// A field of another type is an error at plan time, before anything is
// created.
// TestAccTriggerIngressNeedsTheKubernetesMode: the embedded server
// refuses an http trigger's ingress, with a message that names the mode it
// needs.
func TestAccTriggerIngressNeedsTheKubernetesMode(t *testing.T) {
	e := setup(t)
	dir := writeFiles(t, t.TempDir(), map[string]string{"handler.py": greeter("Hello")})
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{{
			Config:      triggerConfig(e, dir, "  type = \"http\"\n  ingress = { host = \"hello.example.com\", class_name = \"nginx\" }"),
			ExpectError: regexp.MustCompile(regexp.QuoteMeta("needs the kubernetes mode")),
		}},
	})
}

func TestAccTriggerPlanErrors(t *testing.T) {
	e := setup(t)
	dir := writeFiles(t, t.TempDir(), map[string]string{"handler.py": greeter("Hello")})
	for _, tc := range []struct{ body, want string }{
		{"  type = \"http\"\n  schedule = \"@hourly\"", "schedule is a field of cron triggers, not of http triggers"},
		{"  type = \"cron\"\n  schedule = \"@hourly\"\n  auth = \"token\"", "auth is a field of http triggers, not of cron triggers"},
		{"  type = \"cron\"\n  schedule = \"@hourly\"\n  queue = \"q\"", "queue is a field of rabbitmq triggers, not of cron triggers"},
		{"  type = \"cron\"\n  schedule = \"@hourly\"\n  ingress = { host = \"hello.example.com\" }", "ingress is a field of http triggers, not of cron triggers"},
		{"  type = \"cron\"", "schedule is required for cron triggers"},
		{"  type = \"rabbitmq\"\n  queue = \"q\"", "url is required for rabbitmq triggers"},
		{"  type = \"ftp\"", `type "ftp" is not one of http, cron, rabbitmq`},
		{"  type = \"cron\"\n  schedule = \"@hourly\"\n  payload = \"{not json\"", "payload must be JSON"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			resource.Test(t, resource.TestCase{
				ProtoV6ProviderFactories: factories,
				Steps: []resource.TestStep{{
					Config:      triggerConfig(e, dir, tc.body),
					PlanOnly:    true,
					ExpectError: regexp.MustCompile(regexp.QuoteMeta(tc.want)),
				}},
			})
		})
	}
}

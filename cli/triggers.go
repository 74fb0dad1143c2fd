package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"sless.kube5s.ru/sless/client"
	"sless.kube5s.ru/sless/modules/triggers"
	"sless.kube5s.ru/sless/modules/triggers/rabbitmq"
)

func newTriggerCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "trigger", Short: "Create and manage http, cron and rabbitmq triggers"}
	cmd.AddCommand(newTriggerCreateCmd(g),
		&cobra.Command{
			Use: "list", Short: "List the triggers of the namespace", Args: cobra.NoArgs,
			RunE: g.withClient(func(cmd *cobra.Command, _ []string, c *client.Client, ns string) error {
				ts, err := c.ListTriggers(cmd.Context(), ns)
				if err != nil {
					return err
				}
				if g.output == "json" {
					return printJSON(cmd.OutOrStdout(), ts)
				}
				t := newTable(cmd.OutOrStdout())
				fmt.Fprintln(t, "NAME\tTYPE\tFUNCTION\tENABLED\tPHASE\tFIRED\tFAILED\tLAST FIRED")
				for _, tr := range ts {
					fmt.Fprintf(t, "%s\t%s\t%s\t%t\t%s\t%d\t%d\t%s\n", tr.Name, tr.Type, tr.Function, tr.IsEnabled(), tr.Status.Phase,
						tr.Status.Fired, tr.Status.Failed, ago(tr.Status.LastFiredAt))
				}
				return t.Flush()
			}),
		},
		&cobra.Command{
			Use: "get NAME", Short: "Show a trigger with its status", Args: cobra.ExactArgs(1),
			RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client.Client, ns string) error {
				t, err := c.GetTrigger(cmd.Context(), ns, args[0])
				if err != nil {
					return err
				}
				return printJSON(cmd.OutOrStdout(), t)
			}),
		},
		&cobra.Command{
			Use: "delete NAME", Short: "Delete a trigger", Args: cobra.ExactArgs(1),
			RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client.Client, ns string) error {
				if err := c.DeleteTrigger(cmd.Context(), ns, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "deleted trigger %s/%s\n", ns, args[0])
				return nil
			}),
		},
		newTriggerEnableCmd(g, true), newTriggerEnableCmd(g, false),
	)
	return cmd
}

// defaultApplyWait is how long trigger commands wait for the server to apply
// a change by default.
const defaultApplyWait = time.Minute

// addApplyWaitFlag registers --wait on a command that changes a trigger.
func addApplyWaitFlag(cmd *cobra.Command, wait *time.Duration) {
	cmd.Flags().DurationVar(wait, "wait", defaultApplyWait,
		"how long to wait until the server applied the change (/fn answers accordingly, the schedule or consumer runs); 0: do not wait")
}

// waitApplied waits up to wait until the server applied t's generation and
// returns the trigger as applied, warning when it ended in the Error phase (a
// broker that cannot be reached, a missing function: the server keeps
// retrying). A wait of 0 returns t at once.
func waitApplied(ctx context.Context, c *client.Client, stderr io.Writer, t *triggers.Trigger, wait time.Duration) (*triggers.Trigger, error) {
	if wait <= 0 {
		return t, nil
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	applied, err := c.WaitTriggerApplied(ctx, t.Namespace, t.Name, t.Generation)
	if err != nil {
		return nil, err
	}
	if applied.Status.Phase == triggers.PhaseError {
		fmt.Fprintf(stderr, "warning: trigger %s/%s is in phase Error: %s\n", t.Namespace, t.Name, applied.Status.Message)
	}
	return applied, nil
}

func newTriggerEnableCmd(g *globals, enable bool) *cobra.Command {
	verb, short := "enable", "Enable a trigger"
	if !enable {
		verb, short = "disable", "Disable a trigger (once none of its http triggers is enabled, a function answers 404 on /fn and scales to zero)"
	}
	var wait time.Duration
	cmd := &cobra.Command{
		Use: verb + " NAME", Short: short,
		Args: cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client.Client, ns string) error {
			t, err := c.GetTrigger(cmd.Context(), ns, args[0])
			if err != nil {
				return err
			}
			t.Enabled = &enable
			updated, err := c.UpdateTrigger(cmd.Context(), t)
			if err != nil {
				return err
			}
			if _, err := waitApplied(cmd.Context(), c, cmd.ErrOrStderr(), updated, wait); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%sd trigger %s/%s\n", verb, ns, args[0])
			return nil
		}),
	}
	addApplyWaitFlag(cmd, &wait)
	return cmd
}

func newTriggerCreateCmd(g *globals) *cobra.Command {
	var (
		t          triggers.Trigger
		payload    string
		maxRetries int
		disabled   bool
		ingress    triggers.IngressSpec
		wait       time.Duration
	)
	cmd := &cobra.Command{
		Use:   "create NAME --function F --type http|cron|rabbitmq [type flags]",
		Short: "Create a trigger",
		Example: `  sless trigger create web --function hello --type http
  sless trigger create web --function hello --type http --auth token   # /fn asks for a token of the namespace
  sless trigger create web --function hello --type http --ingress-host hello.example.com   # kubernetes mode: an Ingress
  sless trigger create nightly --function report --type cron --schedule "0 3 * * *" --timezone Europe/Berlin --payload '{"full": true}'
  sless trigger create orders --function order --type rabbitmq --url amqp://guest:guest@localhost:5672/ --queue orders --max-retries 5 --dead-letter-queue orders-failed`,
		Args: cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client.Client, ns string) error {
			t.Name, t.Namespace = args[0], ns
			if payload != "" {
				t.Payload = json.RawMessage(payload)
			}
			if cmd.Flags().Changed("max-retries") {
				t.MaxRetries = &maxRetries
			}
			if disabled {
				off := false
				t.Enabled = &off
			}
			if ingress != (triggers.IngressSpec{}) {
				t.Ingress = &ingress
			}
			created, err := c.CreateTrigger(cmd.Context(), &t)
			if err != nil {
				return err
			}
			if created, err = waitApplied(cmd.Context(), c, cmd.ErrOrStderr(), created, wait); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "created %s trigger %s/%s for function %s\n", created.Type, ns, created.Name, created.Function)
			if g.output == "json" {
				return printJSON(cmd.OutOrStdout(), created)
			}
			return nil
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&t.Function, "function", "", "function to invoke (required)")
	fl.StringVar(&t.Type, "type", "", "http, cron or rabbitmq (required)")
	fl.BoolVar(&disabled, "disabled", false, "create it disabled")
	fl.StringVar(&t.Auth, "auth", "", "http: none (default: public) or token (callers need a token of the namespace, or an invoker token of the function)")
	fl.StringVar(&ingress.Host, "ingress-host", "", "http, kubernetes mode: serve the function's /fn path on this host through an Ingress")
	fl.StringVar(&ingress.ClassName, "ingress-class", "", "http, kubernetes mode: IngressClass of the Ingress (default: the cluster's default class)")
	fl.StringVar(&ingress.TLSSecret, "ingress-tls-secret", "", "http, kubernetes mode: TLS Secret of the host, in the sless server's namespace")
	fl.StringVar(&t.Schedule, "schedule", "", "cron: 5-field expression, @hourly-style descriptor or @every <duration>")
	fl.StringVar(&t.Timezone, "timezone", "", "cron: IANA time zone (default UTC)")
	fl.StringVar(&payload, "payload", "", "cron: JSON event of every run")
	fl.StringVar(&t.ConcurrencyPolicy, "concurrency-policy", "", fmt.Sprintf("cron: %s (default), %s or %s", triggers.PolicyAllow, triggers.PolicyForbid, triggers.PolicyReplace))
	fl.IntVar(&t.PrewarmSeconds, "prewarm-seconds", 0, "cron: start an instance this long before each run")
	fl.StringVar(&t.URL, "url", "", "rabbitmq: amqp://user:password@host:5672/vhost")
	fl.StringVar(&t.Queue, "queue", "", "rabbitmq: queue to consume")
	fl.StringVar(&t.Exchange, "exchange", "", "rabbitmq: exchange to bind the queue to")
	fl.StringVar(&t.RoutingKey, "routing-key", "", "rabbitmq: routing key of the binding")
	fl.IntVar(&t.Prefetch, "prefetch", 0, fmt.Sprintf("rabbitmq: messages in flight (default %d)", rabbitmq.DefaultPrefetch))
	fl.IntVar(&maxRetries, "max-retries", 0, fmt.Sprintf("rabbitmq: retries of a failed message before it is dead-lettered (default %d)", rabbitmq.DefaultMaxRetries))
	fl.StringVar(&t.DeadLetterExchange, "dead-letter-exchange", "", "rabbitmq: exchange for messages that failed every retry")
	fl.StringVar(&t.DeadLetterQueue, "dead-letter-queue", "", "rabbitmq: queue for messages that failed every retry")
	addApplyWaitFlag(cmd, &wait)
	cmd.MarkFlagRequired("function")
	cmd.MarkFlagRequired("type")
	return cmd
}

func newJobCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "job", Short: "Run functions once as jobs"}
	var (
		function, payload string
		wait              time.Duration
	)
	run := &cobra.Command{
		Use:   "run NAME --function F [--payload JSON]",
		Short: "Run a job once more (creating it when missing) and wait for its result",
		Long: `Create the job, or raise its run_id, so that its function runs once with the
payload; wait for the run and print its result. Running the same run_id again never
runs the function twice.`,
		Args: cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client.Client, ns string) error {
			j, err := runJob(cmd.Context(), c, ns, args[0], function, payload)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "started run %d of job %s/%s\n", j.RunID, ns, j.Name)
			ctx, cancel := context.WithTimeout(cmd.Context(), wait)
			defer cancel()
			done, err := c.WaitJob(ctx, ns, j.Name, j.RunID)
			if err != nil {
				return err
			}
			return printJobResult(g, cmd.OutOrStdout(), cmd.ErrOrStderr(), done)
		}),
	}
	run.Flags().StringVar(&function, "function", "", "function to run (required when the job does not exist)")
	run.Flags().StringVar(&payload, "payload", "", "JSON event of the run")
	run.Flags().DurationVar(&wait, "wait", 15*time.Minute, "how long to wait for the run")
	cmd.AddCommand(run,
		&cobra.Command{
			Use: "get NAME", Short: "Show a job and its last run", Args: cobra.ExactArgs(1),
			RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client.Client, ns string) error {
				j, err := c.GetJob(cmd.Context(), ns, args[0])
				if err != nil {
					return err
				}
				return printJSON(cmd.OutOrStdout(), j)
			}),
		},
		&cobra.Command{
			Use: "list", Short: "List the jobs of the namespace", Args: cobra.NoArgs,
			RunE: g.withClient(func(cmd *cobra.Command, _ []string, c *client.Client, ns string) error {
				js, err := c.ListJobs(cmd.Context(), ns)
				if err != nil {
					return err
				}
				if g.output == "json" {
					return printJSON(cmd.OutOrStdout(), js)
				}
				t := newTable(cmd.OutOrStdout())
				fmt.Fprintln(t, "NAME\tFUNCTION\tRUN\tPHASE\tSTATUS\tFINISHED")
				for _, j := range js {
					fmt.Fprintf(t, "%s\t%s\t%d\t%s\t%d\t%s\n", j.Name, j.Function, j.Status.RunID, j.Status.Phase, j.Status.StatusCode, ago(j.Status.FinishedAt))
				}
				return t.Flush()
			}),
		},
	)
	return cmd
}

// runJob creates the job with run_id 1, or raises the run_id of the
// existing one (optionally changing its function and payload).
func runJob(ctx context.Context, c *client.Client, ns, name, function, payload string) (*triggers.Job, error) {
	j, err := c.GetJob(ctx, ns, name)
	if client.IsNotFound(err) {
		if function == "" {
			return nil, fmt.Errorf("job %q does not exist; give --function to create it", name)
		}
		return c.CreateJob(ctx, &triggers.Job{Name: name, Namespace: ns,
			JobSpec: triggers.JobSpec{Function: function, Payload: json.RawMessage(payload), RunID: 1}})
	}
	if err != nil {
		return nil, err
	}
	if function != "" {
		j.Function = function
	}
	if payload != "" {
		j.Payload = json.RawMessage(payload)
	}
	j.RunID = max(j.RunID, j.Status.RunID) + 1
	return c.UpdateJob(ctx, j)
}

func printJobResult(g *globals, out, errOut io.Writer, j *triggers.Job) error {
	if g.output == "json" {
		if err := printJSON(out, j); err != nil {
			return err
		}
	} else if j.Status.Result != "" {
		fmt.Fprintln(out, j.Status.Result)
	}
	fmt.Fprintf(errOut, "run %d %s: HTTP %d, invocation %s\n", j.Status.RunID, j.Status.Phase, j.Status.StatusCode, j.Status.InvocationID)
	if j.Status.Phase == triggers.JobFailed {
		return fmt.Errorf("job %s run %d failed: %s", j.Name, j.Status.RunID, j.Status.Error)
	}
	return nil
}

// ago says how long ago t was, "" for no time.
func ago(t *time.Time) string {
	if t == nil {
		return ""
	}
	return humanize.Time(*t)
}

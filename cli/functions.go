package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"sless.kube5s.ru/sless/client"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/triggers"
)

type deployFlags struct {
	name   string
	env    []string
	spec   functions.Spec
	wait   time.Duration
	noWait bool
	http   bool
}

func newDeployCmd(g *globals) *cobra.Command {
	var f deployFlags
	cmd := &cobra.Command{
		Use:   "deploy DIR --name NAME --runtime RUNTIME",
		Short: "Zip a directory, create or update the function, upload and wait until it is ready",
		Long: `Zip DIR (honouring a .slessignore file there), create the function or replace
its settings with the ones given here, upload the code and wait until it is built.
The function's settings are exactly the flags of this command: a setting left out
takes its default, also when the function had another value before.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return deploy(cmd.Context(), g, &f, args[0], cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.name, "name", "", "function name (required)")
	fl.StringVar(&f.spec.Runtime, "runtime", "", "runtime, e.g. python3.11 or nodejs20 (required)")
	fl.StringVar(&f.spec.Handler, "handler", "", "handler as <file>.<function> (default: the runtime's, handler.handle)")
	fl.StringArrayVar(&f.env, "env", nil, "environment variable K=V (repeatable)")
	fl.IntVar(&f.spec.TimeoutSeconds, "timeout", 0, fmt.Sprintf("invocation timeout in seconds (default %d)", functions.DefaultTimeoutSeconds))
	fl.IntVar(&f.spec.MemoryMB, "memory", 0, fmt.Sprintf("memory limit per instance in MiB (default %d)", functions.DefaultMemoryMB))
	fl.IntVar(&f.spec.MinInstances, "min-instances", 0, "instances kept warm")
	fl.IntVar(&f.spec.MaxInstances, "max-instances", 0, fmt.Sprintf("most instances (default %d)", functions.DefaultMaxInstances))
	fl.IntVar(&f.spec.Concurrency, "concurrency", 0, fmt.Sprintf("concurrent invocations per instance (default %d)", functions.DefaultConcurrency))
	fl.StringVar(&f.spec.Egress, "egress", "", "what instances may reach over the network: all (default) or public (no loopback or private ranges)")
	fl.DurationVar(&f.wait, "wait", 10*time.Minute, "how long to wait for the build")
	fl.BoolVar(&f.noWait, "no-wait", false, "return after the upload without waiting for the build")
	fl.BoolVar(&f.http, "http", true, "expose the function on /fn with an http trigger of the same name, unless it has one")
	cmd.MarkFlagRequired("name")
	cmd.MarkFlagRequired("runtime")
	return cmd
}

func deploy(ctx context.Context, g *globals, f *deployFlags, dir string, stdout, stderr io.Writer) error {
	env, err := parseEnv(f.env)
	if err != nil {
		return err
	}
	f.spec.Env = env
	start := time.Now()
	zip, sum, err := client.ZipDir(dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "packaged %s: %s (sha256 %s)\n", dir, humanize.IBytes(uint64(len(zip))), sum[:12])

	c, ns, err := g.connect(ctx)
	if err != nil {
		return err
	}
	fn := &functions.Function{Name: f.name, Namespace: ns, Spec: f.spec}
	if _, err := c.GetFunction(ctx, ns, f.name); client.IsNotFound(err) {
		if _, err := c.CreateFunction(ctx, fn); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "created function %s/%s\n", ns, f.name)
	} else if err != nil {
		return err
	} else {
		if _, err := c.UpdateFunction(ctx, fn); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "updated function %s/%s\n", ns, f.name)
	}
	trigger, exposed, err := exposeHTTP(ctx, c, ns, f.name, f.http, stderr)
	if err != nil {
		return err
	}
	uploaded, err := c.UploadCode(ctx, ns, f.name, zip)
	if err != nil {
		return err
	}
	fmt.Fprintln(stderr, "uploaded code")
	if f.noWait {
		return printFunctionResult(g, stdout, uploaded, c, exposed)
	}

	waitCtx, cancel := context.WithTimeout(ctx, f.wait)
	defer cancel()
	settled, err := c.WaitSettled(waitCtx, ns, f.name, uploaded.Generation, func(fn *functions.Function) {
		if fn.Status.ObservedGeneration >= uploaded.Generation && fn.Status.Phase == functions.PhaseBuilding {
			fmt.Fprintf(stderr, "building (%s)\n", since(start))
		}
	})
	if err != nil {
		return err
	}
	if settled.Status.Phase == functions.PhaseFailed {
		if settled.Status.BuildLog != "" {
			fmt.Fprintf(stderr, "--- build log ---\n%s\n--- end of build log ---\n", strings.TrimRight(settled.Status.BuildLog, "\n"))
		}
		return fmt.Errorf("function %s/%s failed: %s", ns, f.name, settled.Status.Message)
	}
	if trigger != nil {
		// The printed URL answers when deploy returns.
		if _, err := c.WaitTriggerApplied(waitCtx, ns, trigger.Name, trigger.Generation); err != nil {
			return err
		}
	}
	fmt.Fprintf(stderr, "ready in %s\n", since(start))
	return printFunctionResult(g, stdout, settled, c, exposed)
}

// exposeHTTP reports whether the function is exposed on /fn (it has an
// enabled http trigger) and, when it has no http trigger and create is set,
// creates one named after it and returns that trigger.
func exposeHTTP(ctx context.Context, c *client.Client, ns, name string, create bool, stderr io.Writer) (created *triggers.Trigger, exposed bool, err error) {
	ts, err := c.ListTriggers(ctx, ns)
	if err != nil {
		return nil, false, err
	}
	found := false
	for _, t := range ts {
		if t.Function == name && t.Type == triggers.TypeHTTP {
			found = true
			exposed = exposed || t.IsEnabled()
		}
	}
	if found || !create {
		return nil, exposed, nil
	}
	t, err := c.CreateTrigger(ctx, &triggers.Trigger{Name: name, Namespace: ns,
		Spec: triggers.Spec{Function: name, Type: triggers.TypeHTTP}})
	if err != nil {
		return nil, false, fmt.Errorf("exposing the function on /fn: %w", err)
	}
	fmt.Fprintf(stderr, "created http trigger %s/%s\n", ns, name)
	return t, true, nil
}

func since(t time.Time) string { return time.Since(t).Round(time.Millisecond).String() }

// printFunctionResult prints what deploy made: the function as JSON, else
// how to invoke it.
func printFunctionResult(g *globals, w io.Writer, fn *functions.Function, c *client.Client, exposed bool) error {
	if g.output == "json" {
		return printJSON(w, fn)
	}
	_, err := fmt.Fprintln(w, howToInvoke(g, c, fn, exposed))
	return err
}

// howToInvoke returns the /fn URL of fn when it is exposed there, else the
// CLI command that invokes it.
func howToInvoke(g *globals, c *client.Client, fn *functions.Function, exposed bool) string {
	if exposed {
		return c.InvokeURL(fn.Namespace, fn.Name)
	}
	how := "sless invoke " + fn.Name
	if g.namespace != "" {
		how += " -n " + fn.Namespace
	}
	return how + "    # not exposed on /fn: it has no enabled http trigger"
}

func parseEnv(pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	env := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--env %q: use NAME=VALUE", p)
		}
		env[k] = v
	}
	return env, nil
}

func newFnCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "fn", Short: "List, show and delete functions"}
	cmd.AddCommand(
		&cobra.Command{
			Use: "list", Short: "List the functions of the namespace", Args: cobra.NoArgs,
			RunE: g.withClient(func(cmd *cobra.Command, _ []string, c *client.Client, ns string) error {
				fns, err := c.ListFunctions(cmd.Context(), ns)
				if err != nil {
					return err
				}
				if g.output == "json" {
					return printJSON(cmd.OutOrStdout(), fns)
				}
				return printFunctionTable(cmd.OutOrStdout(), fns)
			}),
		},
		&cobra.Command{
			Use: "get NAME", Short: "Show one function with its status", Args: cobra.ExactArgs(1),
			RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client.Client, ns string) error {
				fn, err := c.GetFunction(cmd.Context(), ns, args[0])
				if err != nil {
					return err
				}
				if g.output == "json" {
					return printJSON(cmd.OutOrStdout(), fn)
				}
				_, exposed, err := exposeHTTP(cmd.Context(), c, ns, fn.Name, false, io.Discard)
				if err != nil {
					return err
				}
				return printFunctionDetail(cmd.OutOrStdout(), fn, howToInvoke(g, c, fn, exposed))
			}),
		},
		&cobra.Command{
			Use: "delete NAME", Short: "Delete a function with its triggers and jobs", Args: cobra.ExactArgs(1),
			RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client.Client, ns string) error {
				d, err := c.DeleteFunction(cmd.Context(), ns, args[0])
				if err != nil {
					return err
				}
				if g.output == "json" {
					return printJSON(cmd.OutOrStdout(), d)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "deleted function %s/%s%s\n", ns, args[0], describeDeleted(d.Deleted))
				return nil
			}),
		},
	)
	return cmd
}

// describeDeleted says what was deleted with a function: "" when nothing,
// else " and its triggers a, b and jobs c".
func describeDeleted(deleted map[string][]string) string {
	var parts []string
	for _, kind := range []string{"triggers", "jobs"} {
		names := deleted[kind]
		if len(names) == 0 {
			continue
		}
		if len(names) == 1 {
			kind = strings.TrimSuffix(kind, "s")
		}
		parts = append(parts, kind+" "+strings.Join(names, ", "))
	}
	if len(parts) == 0 {
		return ""
	}
	return " and its " + strings.Join(parts, " and ")
}

func printFunctionTable(w io.Writer, fns []*functions.Function) error {
	t := newTable(w)
	fmt.Fprintln(t, "NAME\tRUNTIME\tPHASE\tCODE\tUPDATED")
	for _, fn := range fns {
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\n", fn.Name, fn.Runtime, fn.Status.Phase, short(fn.Status.CodeSHA256), humanize.Time(fn.UpdatedAt))
	}
	return t.Flush()
}

// printFunctionDetail prints fn and how to invoke it.
func printFunctionDetail(w io.Writer, fn *functions.Function, invoke string) error {
	t := newTable(w)
	row := func(k string, v any) { fmt.Fprintf(t, "%s:\t%v\n", k, v) }
	row("Name", fn.Namespace+"/"+fn.Name)
	row("Runtime", fn.Runtime)
	row("Handler", fn.Handler)
	row("Phase", fn.Status.Phase)
	if fn.Status.Message != "" {
		row("Message", fn.Status.Message)
	}
	row("Code", fn.CodeSHA256)
	row("Serving code", fn.Status.CodeSHA256)
	row("Timeout", fmt.Sprintf("%ds", fn.TimeoutSeconds))
	row("Memory", fmt.Sprintf("%d MiB", fn.MemoryMB))
	row("Instances", fmt.Sprintf("%d..%d, %d concurrent each", fn.MinInstances, fn.MaxInstances, fn.Concurrency))
	row("Egress", fn.Egress)
	for _, k := range slices.Sorted(maps.Keys(fn.Env)) {
		row("Env "+k, fn.Env[k])
	}
	row("Generation", fmt.Sprintf("%d (observed %d)", fn.Generation, fn.Status.ObservedGeneration))
	row("Invoke", invoke)
	if err := t.Flush(); err != nil {
		return err
	}
	if fn.Status.Phase == functions.PhaseFailed && fn.Status.BuildLog != "" {
		_, err := fmt.Fprintf(w, "\nBuild log:\n%s\n", fn.Status.BuildLog)
		return err
	}
	return nil
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"sless.kube5s.ru/sless/client"
	"sless.kube5s.ru/sless/internal/validation"
	"sless.kube5s.ru/sless/modules/invoke"
)

func newInvokeCmd(g *globals) *cobra.Command {
	var data string
	cmd := &cobra.Command{
		Use:   "invoke NAME",
		Short: "Invoke a function once and print its response",
		Long: `Invoke a function with a JSON event and print the response body. The event is
-d '{"name": "x"}', -d @file.json, or -d @- for standard input. The invocation id,
status and timings go to standard error; a status of 400 or more exits with 1.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body, err := readData(data, cmd.InOrStdin())
			if err != nil {
				return err
			}
			c, ns, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			res, err := c.Invoke(cmd.Context(), ns, args[0], body)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			out.Write(res.Body)
			if len(res.Body) > 0 && res.Body[len(res.Body)-1] != '\n' {
				fmt.Fprintln(out)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "invocation %s: HTTP %d (%s)\n", res.InvocationID, res.StatusCode, res.Header.Get("Server-Timing"))
			if res.StatusCode >= 400 {
				return fmt.Errorf("the function answered HTTP %d; `sless logs %s --invocation %s` shows its logs", res.StatusCode, args[0], res.InvocationID)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&data, "data", "d", "", "event: JSON, @file, or @- for standard input")
	return cmd
}

func readData(data string, stdin io.Reader) ([]byte, error) {
	switch {
	case data == "@-":
		return io.ReadAll(stdin)
	case strings.HasPrefix(data, "@"):
		return os.ReadFile(data[1:])
	}
	return []byte(data), nil
}

func newInvocationsCmd(g *globals) *cobra.Command {
	var q invoke.Query
	cmd := &cobra.Command{
		Use:   "invocations NAME",
		Short: "List a function's invocations, newest first",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client.Client, ns string) error {
			items, more, err := c.ListInvocations(cmd.Context(), ns, args[0], q)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(cmd.OutOrStdout(), map[string]any{"items": items, "continue": more})
			}
			t := newTable(cmd.OutOrStdout())
			fmt.Fprintln(t, "ID\tSTARTED\tDURATION\tSTATUS\tTRIGGER\tCOLD\tERROR")
			for _, r := range items {
				cold := ""
				if r.ColdStart {
					cold = fmt.Sprintf("%.1fms", r.ColdStartMS)
				}
				fmt.Fprintf(t, "%s\t%s\t%.1fms\t%d\t%s\t%s\t%s\n", r.ID, humanize.Time(r.StartedAt), r.DurationMS, r.StatusCode,
					triggerLabel(r), cold, oneLine(r.Error, 60))
			}
			if err := t.Flush(); err != nil {
				return err
			}
			if more != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "more: --continue %s\n", more)
			}
			return nil
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&q.Status, "status", "", "success, error, or a status code")
	fl.StringVar(&q.TriggerKind, "trigger-kind", "", "http, cron, rabbitmq, job or cli")
	fl.StringVar(&q.TriggerName, "trigger", "", "name of the trigger or job")
	fl.IntVar(&q.Limit, "limit", 20, "page size")
	fl.StringVar(&q.Continue, "continue", "", "continue token of the next page (printed after a full page)")
	return cmd
}

func triggerLabel(r *invoke.Record) string {
	if r.TriggerName != "" {
		return r.TriggerKind + "/" + r.TriggerName
	}
	return r.TriggerKind
}

// oneLine joins s onto one line of at most n bytes before an ellipsis,
// cutting at a character boundary.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	cut := n - 1
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func newLogsCmd(g *globals) *cobra.Command {
	var (
		id     string
		follow bool
		limit  int
	)
	cmd := &cobra.Command{
		Use:   "logs NAME",
		Short: "Print what a function's recent invocations printed",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client.Client, ns string) error {
			out := cmd.OutOrStdout()
			if id != "" {
				rec, err := c.GetInvocation(cmd.Context(), ns, id)
				if err != nil {
					return err
				}
				printLogs(out, rec)
				return nil
			}
			last, err := printRecent(cmd.Context(), c, ns, args[0], "", limit, out)
			if err != nil || !follow {
				return err
			}
			for {
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(time.Second):
				}
				if last, err = printRecent(cmd.Context(), c, ns, args[0], last, validation.MaxPageSize, out); err != nil {
					return err
				}
			}
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&id, "invocation", "", "print one invocation's logs")
	fl.BoolVarP(&follow, "follow", "f", false, "keep printing new invocations' logs")
	fl.IntVar(&limit, "limit", 10, "how many recent invocations to print")
	return cmd
}

// printRecent prints the logs of the newest invocations after the id since
// (all of the newest limit when since is empty), oldest first, and returns
// the newest id printed (or since).
func printRecent(ctx context.Context, c *client.Client, ns, name, since string, limit int, out io.Writer) (string, error) {
	items, _, err := c.ListInvocations(ctx, ns, name, invoke.Query{Limit: limit})
	if err != nil {
		return since, err
	}
	// UUIDv7 ids sort by start time.
	items = slices.DeleteFunc(items, func(r *invoke.Record) bool { return since != "" && r.ID <= since })
	slices.Reverse(items)
	for _, r := range items {
		rec, err := c.GetInvocation(ctx, ns, r.ID)
		if err != nil {
			return since, err
		}
		printLogs(out, rec)
		since = r.ID
	}
	return since, nil
}

func printLogs(w io.Writer, r *invoke.Record) {
	fmt.Fprintf(w, "--- %s %s HTTP %d %.1fms %s\n", r.StartedAt.Local().Format(time.DateTime), r.ID, r.StatusCode, r.DurationMS, triggerLabel(r))
	if r.Logs != "" {
		fmt.Fprint(w, r.Logs)
		if !strings.HasSuffix(r.Logs, "\n") {
			fmt.Fprintln(w)
		}
	}
	if r.Error != "" && !strings.Contains(r.Logs, r.Error) {
		fmt.Fprintf(w, "error: %s\n", r.Error)
	}
}

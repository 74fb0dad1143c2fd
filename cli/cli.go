// Package cli is the sless command line: `sless server` runs the server,
// every other command talks to a server through the REST API.
package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"go.uber.org/fx"

	"sless.kube5s.ru/sless/client"
)

// Version is the release version, set at build time with
// -ldflags "-X sless.kube5s.ru/sless/cli.Version=v1.2.3".
var Version = "dev"

// Main runs the command line with args (without the program name) and
// returns the exit code. plugins are fx modules added to `sless server`.
func Main(args []string, plugins ...fx.Option) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRoot(plugins)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1
	}
	return 0
}

// globals are the flags every client command shares.
type globals struct {
	namespace string
	output    string
	plugins   []fx.Option
}

func newRoot(plugins []fx.Option) *cobra.Command {
	g := &globals{plugins: plugins}
	root := &cobra.Command{
		Use:           "sless",
		Short:         "sless runs Python and Node.js functions on HTTP calls, schedules, messages and jobs",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if g.output != "table" && g.output != "json" {
				return fmt.Errorf("--output must be table or json, not %q", g.output)
			}
			return nil
		},
	}
	pf := root.PersistentFlags()
	pf.StringVarP(&g.namespace, "namespace", "n", "", "namespace (default: SLESS_NAMESPACE, else the token's own namespace)")
	pf.StringVarP(&g.output, "output", "o", "table", "output format: table or json")
	root.AddCommand(
		newServerCmd(g),
		newDeployCmd(g),
		newFnCmd(g),
		newInvokeCmd(g),
		newInvocationsCmd(g),
		newLogsCmd(g),
		newTriggerCmd(g),
		newJobCmd(g),
		newTokenCmd(g),
		newTopCmd(g),
		newImageCmd(),
		newVersionCmd(),
	)
	return root
}

// connect returns an API client and the namespace to act in.
func (g *globals) connect(ctx context.Context) (*client.Client, string, error) {
	c, err := client.FromEnv()
	if err != nil {
		return nil, "", err
	}
	ns := g.namespace
	if ns == "" {
		ns = os.Getenv("SLESS_NAMESPACE")
	}
	if ns == "" {
		if ns, err = c.Whoami(ctx); err != nil {
			return nil, "", err
		}
	}
	return c, ns, nil
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newTable returns a tab writer for aligned columns; call Flush.
func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			rev := ""
			if bi, ok := debug.ReadBuildInfo(); ok {
				for _, s := range bi.Settings {
					if s.Key == "vcs.revision" {
						rev = " " + s.Value
					}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "sless %s (%s%s)\n", Version, bi.GoVersion, rev)
				return
			}
			fmt.Fprintf(cmd.OutOrStdout(), "sless %s\n", Version)
		},
	}
}

// withClient adapts a command that talks to the API: it connects first and
// passes the client and the namespace to act in.
func (g *globals) withClient(run func(cmd *cobra.Command, args []string, c *client.Client, ns string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, ns, err := g.connect(cmd.Context())
		if err != nil {
			return err
		}
		return run(cmd, args, c, ns)
	}
}

package cli

import (
	"cmp"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"sless.kube5s.ru/sless/client"
	"sless.kube5s.ru/sless/modules/auth"
)

func newTokenCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Make, list and revoke tenant tokens (with the server's admin token)"}
	cmd.AddCommand(newTokenCreateCmd(g),
		&cobra.Command{
			Use: "list", Short: "List the tenant tokens (never their secrets)", Args: cobra.NoArgs,
			RunE: withPlainClient(func(cmd *cobra.Command, _ []string, c *client.Client) error {
				ts, err := c.ListTokens(cmd.Context())
				if err != nil {
					return err
				}
				if g.output == "json" {
					return printJSON(cmd.OutOrStdout(), ts)
				}
				t := newTable(cmd.OutOrStdout())
				fmt.Fprintln(t, "ID\tNAMESPACE\tFUNCTION\tEXPIRES\tCREATED\tDESCRIPTION")
				now := time.Now()
				for _, tok := range ts {
					expires := "never"
					if tok.ExpiresAt != nil {
						expires = tok.ExpiresAt.Local().Format(time.DateTime)
						if tok.Expired(now) {
							expires += " (expired)"
						}
					}
					fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\n", tok.ID, tok.Namespace, cmp.Or(tok.Function, "-"), expires,
						ago(&tok.CreatedAt), tok.Description)
				}
				return t.Flush()
			}),
		},
		&cobra.Command{
			Use: "revoke ID", Short: "Revoke a token: it fails from the next request on", Args: cobra.ExactArgs(1),
			RunE: withPlainClient(func(cmd *cobra.Command, args []string, c *client.Client) error {
				if err := c.RevokeToken(cmd.Context(), args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "revoked token %s\n", args[0])
				return nil
			}),
		},
	)
	return cmd
}

func newTokenCreateCmd(g *globals) *cobra.Command {
	var req auth.TokenRequest
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "create --namespace NS [--ttl 720h] [--description TEXT] [--function NAME]",
		Short: "Make a token that acts only in one namespace; its secret is printed once",
		Long: `Make a token that acts only in the namespace given with --namespace: it can
read, change, upload to and invoke that namespace's functions, triggers and jobs,
and nothing of any other namespace. With --function it only invokes that function
on /fn (for a private function's callers). The secret is printed on stdout once;
the server keeps only its hash.`,
		Args: cobra.NoArgs,
		RunE: withPlainClient(func(cmd *cobra.Command, _ []string, c *client.Client) error {
			if g.namespace == "" {
				return fmt.Errorf("--namespace is required: the namespace the token acts in")
			}
			if ttl < 0 {
				return fmt.Errorf("--ttl must not be negative")
			}
			req.Namespace, req.TTLSeconds = g.namespace, int64(ttl.Round(time.Second)/time.Second)
			created, err := c.CreateToken(cmd.Context(), req)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(cmd.OutOrStdout(), created)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "created token %s for namespace %s; store it now, it is not shown again\n", created.ID, created.Namespace)
			fmt.Fprintln(cmd.OutOrStdout(), created.Secret)
			return nil
		}),
	}
	fl := cmd.Flags()
	fl.DurationVar(&ttl, "ttl", 0, "how long the token works, e.g. 720h (default: until revoked)")
	fl.StringVar(&req.Description, "description", "", "what the token is for, shown by token list")
	fl.StringVar(&req.Function, "function", "", "make an invoker token: it only invokes this function of the namespace on /fn")
	return cmd
}

// withPlainClient adapts a command that talks to the API without acting in
// a namespace (token management).
func withPlainClient(run func(cmd *cobra.Command, args []string, c *client.Client) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, err := client.FromEnv()
		if err != nil {
			return err
		}
		return run(cmd, args, c)
	}
}

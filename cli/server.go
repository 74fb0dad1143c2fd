package cli

import (
	"os"

	"github.com/spf13/cobra"

	"sless.kube5s.ru/sless/app"
)

func newServerCmd(g *globals) *cobra.Command {
	var cfg app.Config
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the sless server (embedded mode: SQLite, files, local processes)",
		Long: `Run the sless server. Every setting can be given as a flag, as an environment
variable (SLESS_ and the flag name in upper case with '_' for '-') or as a key of
the YAML file named by --config, in that order of precedence.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := app.Resolve(cmd.Flags(), &cfg, os.Getenv); err != nil {
				return err
			}
			log := app.NewLogger(cfg, os.Stderr)
			return app.Run(cfg, log, g.plugins...)
		},
	}
	app.AddFlags(cmd.Flags(), &cfg)
	return cmd
}

package fullcli

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/cmd/internal/cli"
	"github.com/gpurun/gpurun/cmd/internal/docgen"
	"github.com/gpurun/gpurun/internal/version"
)

// newGenDocsCmd is the hidden `__gendocs`: it writes the man pages,
// completion scripts, default config file and docs/config.md the packages
// ship, for the whole command tree of root.
func newGenDocsCmd(root *cobra.Command) *cobra.Command {
	var o docgen.RunOptions
	cmd := &cobra.Command{
		Use:    "__gendocs",
		Short:  cli.GenDocsShort,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			o.Version, o.Getenv = version.String(), os.Getenv
			return docgen.Run(root, o)
		},
	}
	cmd.Flags().StringVar(&o.Out, "out", "", "directory for man/man1/*.1.gz, completion/ and config.toml")
	cmd.Flags().StringVar(&o.ConfigMD, "config-md", "", "write the configuration reference (docs/config.md) here")
	return cmd
}

//go:build !gpurun_lean

package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/internal/atomicfile"
	"github.com/gpurun/gpurun/internal/docgen"
	"github.com/gpurun/gpurun/internal/version"
)

// newGenDocsCmd is the hidden `__gendocs`: it writes the man pages,
// completion scripts, default config file and docs/config.md the packages
// ship, for the whole command tree of root.
func newGenDocsCmd(root *cobra.Command) *cobra.Command {
	var out, configMD string
	cmd := &cobra.Command{
		Use:    "__gendocs",
		Short:  genDocsShort,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" && configMD == "" {
				return &exitError{2, fmt.Errorf("__gendocs: give --out DIR and/or --config-md FILE")}
			}
			if out != "" {
				date, err := docgen.SourceDate(os.Getenv)
				if err != nil {
					return &exitError{2, err}
				}
				if err := docgen.Generate(root, out, docgen.ManOptions{Version: version.String(), Date: date}); err != nil {
					return &exitError{1, err}
				}
			}
			if configMD != "" {
				md, err := docgen.ConfigMarkdown()
				if err != nil {
					return &exitError{1, err}
				}
				if err := os.MkdirAll(filepath.Dir(configMD), 0o755); err != nil {
					return &exitError{1, err}
				}
				if err := atomicfile.Write(configMD, md, 0o644); err != nil {
					return &exitError{1, err}
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "directory for man/man1/*.1.gz, completion/ and config.toml")
	cmd.Flags().StringVar(&configMD, "config-md", "", "write the configuration reference (docs/config.md) here")
	return cmd
}

package docgen

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/internal/atomicfile"
	"github.com/gpurun/gpurun/internal/exitcode"
)

// RunOptions are gpurun __gendocs's.
type RunOptions struct {
	// Out is the directory for man/man1/*.1.gz, completion/ and
	// config.toml ("" for none).
	Out string
	// ConfigMD is where the configuration reference (docs/config.md) goes
	// ("" for none).
	ConfigMD string
	// Version is the version the man pages name.
	Version string
	// Getenv reads SOURCE_DATE_EPOCH (os.Getenv).
	Getenv func(string) string
}

// Run is gpurun __gendocs: it writes the man pages, completion scripts and
// default config file the packages ship for the command tree of root
// (Generate), and the configuration reference. Its errors carry the exit
// status (exitcode): 2 for bad options, 1 for what could not be written.
func Run(root *cobra.Command, o RunOptions) error {
	if o.Out == "" && o.ConfigMD == "" {
		return exitcode.New(2, errors.New("__gendocs: give --out DIR and/or --config-md FILE"))
	}
	if o.Out != "" {
		date, err := SourceDate(o.Getenv)
		if err != nil {
			return exitcode.New(2, err)
		}
		if err := Generate(root, o.Out, ManOptions{Version: o.Version, Date: date}); err != nil {
			return exitcode.New(1, err)
		}
	}
	if o.ConfigMD == "" {
		return nil
	}
	md, err := ConfigMarkdown()
	if err != nil {
		return exitcode.New(1, err)
	}
	if err := os.MkdirAll(filepath.Dir(o.ConfigMD), 0o755); err != nil {
		return exitcode.New(1, fmt.Errorf("__gendocs: %w", err))
	}
	if err := atomicfile.Write(o.ConfigMD, md, 0o644); err != nil {
		return exitcode.New(1, err)
	}
	return nil
}

package docgen

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/gpurun/gpurun/internal/atomicfile"
)

// ManOptions stamp the man pages.
type ManOptions struct {
	// Version goes into each page's footer ("gpurun v1.2.3").
	Version string
	// Date is the pages' date; a fixed one (the last commit's) keeps
	// packages reproducible.
	Date time.Time
}

// ManPages writes a gzipped section 1 man page for root and every command
// under it that is not hidden (gpurun.1.gz, gpurun-run.1.gz,
// gpurun-install-docker.1.gz, ...) and one for gpurun-runtime, into dir.
// It returns the file names, sorted.
func ManPages(root *cobra.Command, dir string, opt ManOptions) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("man pages: %w", err)
	}
	var names []string
	var walk func(c *cobra.Command) error
	walk = func(c *cobra.Command) error {
		for _, sub := range c.Commands() {
			if !sub.IsAvailableCommand() || sub.IsAdditionalHelpTopicCommand() {
				continue
			}
			if err := walk(sub); err != nil {
				return err
			}
		}
		name := strings.ReplaceAll(c.CommandPath(), " ", "-") + ".1.gz"
		if err := writeMan(c, filepath.Join(dir, name), opt); err != nil {
			return err
		}
		names = append(names, name)
		return nil
	}
	root.DisableAutoGenTag = true
	if err := walk(root); err != nil {
		return nil, err
	}
	rt := runtimeCommand()
	if err := writeMan(rt, filepath.Join(dir, rt.Name()+".1.gz"), opt); err != nil {
		return nil, err
	}
	names = append(names, rt.Name()+".1.gz")
	slices.Sort(names)
	return names, nil
}

func writeMan(c *cobra.Command, path string, opt ManOptions) error {
	date := opt.Date
	c.DisableAutoGenTag = true
	h := &doc.GenManHeader{
		Section: "1",
		Date:    &date,
		Source:  strings.TrimSpace("gpurun " + opt.Version),
		Manual:  "gpurun manual",
	}
	var page bytes.Buffer
	if err := doc.GenMan(c, h, &page); err != nil {
		return fmt.Errorf("man page for %q: %w", c.CommandPath(), err)
	}
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return err
	}
	// No name and no time in the gzip header: the same input gives the
	// same bytes (gzip -n).
	if _, err := zw.Write(page.Bytes()); err != nil {
		return fmt.Errorf("compress %s: %w", path, err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("compress %s: %w", path, err)
	}
	return atomicfile.Write(path, gz.Bytes(), 0o644)
}

// runtimeCommand describes gpurun-runtime for its man page. The shim takes
// runc's command line and has no cobra tree of its own.
func runtimeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "gpurun-runtime [RUNC GLOBAL OPTIONS] COMMAND [ARG...]",
		Short: "OCI runtime shim: a right-sized /dev/shm for GPU containers, then runc",
		Long: `gpurun-runtime is an OCI runtime for dockerd and containerd. It takes runc's
command line unchanged. On "create" and "run" it reads the bundle's
config.json, decides what /dev/shm the container should get under gpurun's
policy (the same decision "gpurun plan" prints), rewrites config.json
atomically (keeping every field it does not know) or grows the pod's shared
/dev/shm tmpfs on the host, and then execs the low-level runtime ("runtime"
in the policy; runc by default) with the same command line. Every other
command goes straight to the low-level runtime. Its stdout is the low-level
runtime's.

On any internal error it logs and passes the container through unchanged
(fail-open), unless the policy sets fail_closed = true.

The policy file is $GPURUN_CONFIG, else /etc/gpurun/config.toml; the log is
the policy's log_file (JSON lines). Register the shim with an engine with
"gpurun install docker" or "gpurun install containerd".`,
		Example: `  # what dockerd runs, once registered as the runtime "gpurun":
  gpurun-runtime --root /var/run/docker/runtime-runc/moby --log log.json --log-format json create --bundle BUNDLE --pid-file BUNDLE/init.pid ID

  sudo gpurun install docker --set-as-default --reload
  docker run --runtime gpurun --rm -e NVIDIA_VISIBLE_DEVICES=all busybox df -h /dev/shm`,
		DisableFlagsInUseLine: true,
		Run:                   func(*cobra.Command, []string) {},
	}
}

// Completions writes the completion scripts for bash (gpurun.bash), zsh
// (_gpurun) and fish (gpurun.fish) into dir and returns their names.
func Completions(root *cobra.Command, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("completions: %w", err)
	}
	name := root.Name()
	gens := []struct {
		file string
		gen  func(*bytes.Buffer) error
	}{
		{name + ".bash", func(b *bytes.Buffer) error { return root.GenBashCompletionV2(b, true) }},
		{"_" + name, func(b *bytes.Buffer) error { return root.GenZshCompletion(b) }},
		{name + ".fish", func(b *bytes.Buffer) error { return root.GenFishCompletion(b, true) }},
	}
	var names []string
	for _, g := range gens {
		var b bytes.Buffer
		if err := g.gen(&b); err != nil {
			return nil, fmt.Errorf("completion %s: %w", g.file, err)
		}
		if err := atomicfile.Write(filepath.Join(dir, g.file), b.Bytes(), 0o644); err != nil {
			return nil, err
		}
		names = append(names, g.file)
	}
	return names, nil
}

// Generate writes everything the packages ship into dir: man/man1/*.1.gz,
// completion/{gpurun.bash,_gpurun,gpurun.fish} and config.toml.
func Generate(root *cobra.Command, dir string, opt ManOptions) error {
	if _, err := ManPages(root, filepath.Join(dir, "man", "man1"), opt); err != nil {
		return err
	}
	if _, err := Completions(root, filepath.Join(dir, "completion")); err != nil {
		return err
	}
	cfg, err := DefaultConfig()
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, "config.toml"), cfg, 0o644)
}

// SourceDate is the time SOURCE_DATE_EPOCH (seconds since 1970, the
// reproducible-builds convention) names, else now.
func SourceDate(getenv func(string) string) (time.Time, error) {
	v := getenv("SOURCE_DATE_EPOCH")
	if v == "" {
		return time.Now().UTC(), nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: not a number of seconds", v)
	}
	return time.Unix(n, 0).UTC(), nil
}

package fullcli

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/cmd/internal/cli"
	"github.com/gpurun/gpurun/cmd/internal/docgen"
	"github.com/gpurun/gpurun/docker/launch"
)

// availableCommands walks gpurun's command tree as `gpurun --help` shows
// it: no hidden commands, no help.
func availableCommands() []*cobra.Command {
	var cmds []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		cmds = append(cmds, c)
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() && !sub.IsAdditionalHelpTopicCommand() {
				walk(sub)
			}
		}
	}
	walk(cli.NewRoot(&cli.Globals{}, AddCommands))
	return cmds
}

// TestGenDocs: `gpurun __gendocs` writes a man page for every command
// `gpurun --help` shows, the completion scripts and the default config.
func TestGenDocs(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1767225600")
	dir := t.TempDir()
	md := filepath.Join(dir, "docs", "config.md")
	if _, stderr, code := execute(t, "__gendocs", "--out", dir, "--config-md", md); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var want []string
	for _, c := range availableCommands() {
		want = append(want, strings.ReplaceAll(c.CommandPath(), " ", "-")+".1.gz")
	}
	want = append(want, "gpurun-runtime.1.gz")
	slices.Sort(want)
	entries, err := os.ReadDir(filepath.Join(dir, "man", "man1"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if !slices.Equal(got, want) {
		t.Errorf("man pages\n%v\nwant one per command\n%v", got, want)
	}
	for _, must := range []string{"gpurun-install-docker-cli-plugin.1.gz", "gpurun-completion-bash.1.gz", "gpurun-run.1.gz"} {
		if !slices.Contains(got, must) {
			t.Errorf("no %s", must)
		}
	}
	for _, hidden := range []string{"gpurun-__gendocs.1.gz", "gpurun-help.1.gz"} {
		if slices.Contains(got, hidden) {
			t.Errorf("%s should not have a page", hidden)
		}
	}

	cfg, err := docgen.DefaultConfig()
	if err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "config.toml")); err != nil || !bytes.Equal(data, cfg) {
		t.Errorf("config.toml: %v", err)
	}
	wantMD, err := docgen.ConfigMarkdown()
	if err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(md); err != nil || !bytes.Equal(data, wantMD) {
		t.Errorf("config.md: %v", err)
	}
	// Completion scripts know gpurun's commands through `gpurun __complete`.
	bash, err := os.ReadFile(filepath.Join(dir, "completion", "gpurun.bash"))
	if err != nil || !bytes.Contains(bash, []byte("__complete")) {
		t.Errorf("gpurun.bash: %v", err)
	}

	if _, stderr, code := execute(t, "__gendocs"); code != 2 || !strings.Contains(stderr, "--out") {
		t.Errorf("no flags: exit %d %q", code, stderr)
	}
}

// TestCompletion: `gpurun completion bash|zsh|fish` prints a script, and
// main's dispatch leaves completion to cobra rather than docker run.
func TestCompletion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		stdout, stderr, code := execute(t, "completion", sh)
		if code != 0 || !strings.Contains(stdout, "gpurun") || !strings.Contains(stdout, "__complete") {
			t.Errorf("completion %s: exit %d, %d bytes, %s", sh, code, len(stdout), stderr)
		}
	}
	root := cli.NewRoot(&cli.Globals{}, AddCommands)
	for _, args := range [][]string{{"completion", "bash"}, {"__complete", "inst"}, {"__completeNoDesc", "run", ""}, {"-v", "completion", "zsh"}} {
		o := &launch.Options{}
		rest, err := launch.ParseOptions(args, o, launch.OSEnv())
		if err != nil {
			t.Fatal(err)
		}
		if _, isRun, _ := launch.ParseCommand(rest, *o, cli.IsSubcommand(root)); isRun {
			t.Errorf("%q would be a docker run", args)
		}
	}
	stdout, _, code := execute(t, "__complete", "inst")
	if code != 0 || !strings.Contains(stdout, "install\t") {
		t.Errorf("__complete inst: %d %q", code, stdout)
	}
	stdout, _, _ = execute(t, "__complete", "install", "")
	if !strings.Contains(stdout, "docker-cli-plugin\t") {
		t.Errorf("__complete install: %q", stdout)
	}
}

// TestExamples: every command `gpurun --help` shows has examples, and each
// example line that runs gpurun names a command that exists.
func TestExamples(t *testing.T) {
	root := cli.NewRoot(&cli.Globals{}, AddCommands)
	for _, c := range availableCommands() {
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%q has no Example", c.CommandPath())
		}
		for _, line := range strings.Split(c.Example, "\n") {
			f := strings.Fields(line)
			for len(f) > 0 && (f[0] == "sudo" || strings.Contains(f[0], "=")) {
				f = f[1:]
			}
			if len(f) < 2 || f[0] != "gpurun" || strings.HasPrefix(f[1], "-") {
				continue
			}
			if f[1] == "__complete" {
				continue
			}
			if found, _, err := root.Find(f[1:]); err != nil || found == root {
				// "gpurun IMAGE ..." is a docker run; only subcommand-looking
				// words are checked.
				if _, isRun, _ := launch.ParseCommand(f[1:], launch.Options{}, cli.IsSubcommand(root)); !isRun {
					t.Errorf("%q example %q: no such command", c.CommandPath(), line)
				}
			}
		}
	}
}

package cli

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/docker/launch"
	"github.com/gpurun/gpurun/internal/exitcode"
)

// executeIn runs the lean gpurun's command tree with args and stdin, and
// returns its output and exit status (an error is appended to stderr, as
// Main prints it).
func executeIn(t *testing.T, stdin io.Reader, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	root := NewRoot(&Globals{}, Lean().AddCommands)
	var out, errOut bytes.Buffer
	root.SetIn(stdin)
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		code = exitcode.Of(err)
		errOut.WriteString(err.Error())
	}
	return out.String(), errOut.String(), code
}

// execute runs the lean gpurun's command tree with args and no standard
// input.
func execute(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return executeIn(t, nil, args...)
}

func TestVersion(t *testing.T) {
	stdout, _, code := execute(t, "version")
	if code != 0 || !strings.HasPrefix(stdout, "gpurun ") {
		t.Errorf("version: %d %q", code, stdout)
	}
}

// TestIsSubcommand: the words that name a command of the tree, and no
// others; a docker run's image is never taken for one.
func TestIsSubcommand(t *testing.T) {
	root := NewRoot(&Globals{}, Lean().AddCommands)
	root.AddCommand(&cobra.Command{Use: "aliased", Aliases: []string{"al"}})
	is := IsSubcommand(root)
	for _, tc := range []struct {
		word string
		want bool
	}{
		{"run", true}, {"install", true}, {"plan", true}, {"__gendocs", true}, {"al", true},
		{"busybox", false}, {"ps", false}, {"", false}, {"-it", false},
	} {
		if got := is(tc.word); got != tc.want {
			t.Errorf("IsSubcommand(%q) = %v, want %v", tc.word, got, tc.want)
		}
	}
}

// TestRunDispatch: main's dispatch of a command line: a docker run to the
// docker door, docker's options before one of gpurun's commands an error
// (exit 2), a command the binary hands elsewhere to its dispatch, the rest
// to the command tree.
func TestRunDispatch(t *testing.T) {
	t.Setenv("GPURUN_CONFIG", "")
	t.Setenv(launch.DockerEnv, "/usr/local/bin/docker")
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string // the docker door's stdout (a dry run)
		handed   bool   // to the binary's dispatch, which handles it
		tree     string // the command tree's stdout
	}{
		{"a dry docker run", []string{"--dry-run", "run", "--rm", "busybox"}, 0, "/usr/local/bin/docker run --rm busybox\n# unchanged", false, ""},
		{"the short form", []string{"--dry-run", "-it", "busybox"}, 0, "/usr/local/bin/docker run -it busybox\n", false, ""},
		{"docker's options before version", []string{"-H", "unix:///x", "version"}, 2, "", false, ""},
		{"a docker command gpurun does not wrap", []string{"ps"}, 2, "", false, ""},
		{"handed to gpurun-full", []string{"plan", "--spec", "x"}, 0, "", true, ""},
		{"the command tree", []string{"version"}, 0, "", false, "gpurun "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut, tree bytes.Buffer
			env := launch.OSEnv()
			env.Stdout, env.Stderr = &out, &errOut
			env.Exec = func(string, []string, []string) error { t.Error("exec in a dry run"); return nil }
			handed := false
			b := Binary{
				AddCommands: Lean().AddCommands,
				Dispatch: func(args, rest []string) ([]string, bool, error) {
					handed = delegated(rest)
					return args, handed, nil
				},
			}
			g := &Globals{}
			root := NewRoot(g, b.AddCommands)
			root.SetOut(&tree)
			err := run(root, g, b, tc.args, env)
			if got := exitcode.Of(err); got != tc.wantCode {
				t.Errorf("exit %d (%v), want %d", got, err, tc.wantCode)
			}
			if !strings.HasPrefix(out.String(), tc.wantOut) || (tc.wantOut == "") != (out.Len() == 0) {
				t.Errorf("docker door printed %q, want %q", out.String(), tc.wantOut)
			}
			if handed != tc.handed {
				t.Errorf("handed to the binary's dispatch: %v, want %v", handed, tc.handed)
			}
			if !strings.HasPrefix(tree.String(), tc.tree) || (tc.tree == "") != (tree.Len() == 0) {
				t.Errorf("command tree printed %q, want %q", tree.String(), tc.tree)
			}
		})
	}
}

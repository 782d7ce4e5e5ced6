package fullcli

import (
	"bytes"
	"io"
	"testing"

	"github.com/gpurun/gpurun/cmd/internal/cli"
	"github.com/gpurun/gpurun/internal/exitcode"
)

// executeIn runs gpurun-full's command tree with args and stdin, and
// returns its output and exit status (an error is appended to stderr, as
// cli.Main prints it).
func executeIn(t *testing.T, stdin io.Reader, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	root := cli.NewRoot(&cli.Globals{}, AddCommands)
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

// execute runs gpurun-full's command tree with args and no standard input.
func execute(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return executeIn(t, nil, args...)
}

// TestStubsMatchFull: every command of gpurun-full's table exists in the
// full tree with the description and visibility gpurun's stub shows, and
// every command of the full tree is either in gpurun itself or in the
// table.
func TestStubsMatchFull(t *testing.T) {
	root := cli.NewRoot(&cli.Globals{}, AddCommands)
	lean := cli.NewRoot(&cli.Globals{}, cli.Lean().AddCommands)
	stubs := map[string]bool{}
	for _, s := range cli.StubCmds() {
		stubs[s.Name()] = true
		c, _, err := root.Find([]string{s.Name()})
		if err != nil || c == root {
			t.Errorf("stub %s: no such command in gpurun-full", s.Name())
			continue
		}
		if c.Short != s.Short || c.Hidden != s.Hidden {
			t.Errorf("stub %s: Short %q hidden %v; gpurun-full's: %q %v", s.Name(), s.Short, s.Hidden, c.Short, c.Hidden)
		}
	}
	if len(stubs) != len(cli.FullCommands()) {
		t.Errorf("FullCommands names a command twice: %v", cli.FullCommands())
	}
	for _, name := range []string{"run", "create", "hook", "install", "version", "completion", "explain", "shm-probe"} {
		if stubs[name] {
			t.Errorf("%s is on the fast path and must run in gpurun itself, not in %s", name, cli.FullBinary)
		}
	}
	for _, c := range root.Commands() {
		if l, _, err := lean.Find([]string{c.Name()}); err != nil || l == lean {
			t.Errorf("gpurun-full's %s is neither in gpurun nor a stub there", c.Name())
		}
	}
}

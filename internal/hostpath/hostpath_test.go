package hostpath

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestResolve follows links as the node would, under a host root: an
// absolute target stays under the root, a relative one is taken from the
// link's directory.
func TestResolve(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"mnt/real/docker", "var/lib", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"var/lib/docker": "/mnt/real/docker",  // absolute: under the root, not this process's /mnt
		"var/lib/rel":    "../../mnt/real",    // relative
		"var/lib/chain":  "/var/lib/docker",   // a link to a link
		"var/lib/loop":   "/var/lib/loop",     // itself
		"var/lib/gone":   "/mnt/real/missing", // dangling
		"etc/up":         "../../../../mnt",   // .. past the root stays at the root
	}
	for l, target := range links {
		if err := os.Symlink(target, filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		path, want string
		err        error
	}{
		{path: "/mnt/real/docker", want: "/mnt/real/docker"},
		{path: "/var/lib/docker", want: "/mnt/real/docker"},
		{path: "/var/lib/docker/", want: "/mnt/real/docker"},
		{path: "/var/lib/rel/docker", want: "/mnt/real/docker"},
		{path: "/var/lib/chain", want: "/mnt/real/docker"},
		{path: "/etc/up/real", want: "/mnt/real"},
		{path: "/var/lib/gone", err: fs.ErrNotExist},
		{path: "/var/lib/nothing", err: fs.ErrNotExist},
		{path: "/var/lib/loop"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			got, err := Resolve(root, tt.path)
			switch {
			case tt.want == "" && err == nil:
				t.Fatalf("Resolve(%s) = %q, want an error", tt.path, got)
			case tt.err != nil && !errors.Is(err, tt.err):
				t.Fatalf("Resolve(%s) = %v, want %v", tt.path, err, tt.err)
			case tt.want != "" && (err != nil || got != tt.want):
				t.Fatalf("Resolve(%s) = %q, %v; want %q", tt.path, got, err, tt.want)
			}
			if tt.want == "" {
				return
			}
			fi, err := Stat(root, tt.path)
			if err != nil || !fi.IsDir() {
				t.Errorf("Stat(%s) = %v, %v; want the directory %s", tt.path, fi, err, tt.want)
			}
		})
	}
}

func TestJoin(t *testing.T) {
	tests := []struct{ root, p, want string }{
		{"", "/etc/passwd", "/etc/passwd"},
		{"/", "/etc/passwd", "/etc/passwd"},
		{"/host", "/etc/passwd", "/host/etc/passwd"},
	}
	for _, tt := range tests {
		if got := Join(tt.root, tt.p); got != tt.want {
			t.Errorf("Join(%q, %q) = %q, want %q", tt.root, tt.p, got, tt.want)
		}
	}
}

// TestCommand: a node's program runs in /, chrooted into the host root
// with the node's PATH; on this host, as it is.
func TestCommand(t *testing.T) {
	tests := []struct {
		root   string
		chroot string
		env    bool // a PATH of its own
	}{
		{"", "", false},
		{"/", "", false},
		{"/host", "/host", true},
	}
	for _, tt := range tests {
		cmd := Command(context.Background(), tt.root, "/usr/bin/containerd", "--version")
		chroot := ""
		if cmd.SysProcAttr != nil {
			chroot = cmd.SysProcAttr.Chroot
		}
		if cmd.Dir != "/" || chroot != tt.chroot || (len(cmd.Env) > 0) != tt.env || !slices.Equal(cmd.Args, []string{"/usr/bin/containerd", "--version"}) {
			t.Errorf("Command(%q) = dir %q, chroot %q, env %q, args %q", tt.root, cmd.Dir, chroot, cmd.Env, cmd.Args)
		}
		if tt.env && !slices.Contains(cmd.Env, nodePATH) {
			t.Errorf("Command(%q): env %q, want the node's PATH", tt.root, cmd.Env)
		}
	}
}

package harness

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
)

// TestNetNS: a harness namespace has only its own loopback, up; a server
// listening there is reached through DialContext and not from the test's
// namespace; and the cleanup leaves no mount behind.
func TestNetNS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("TestNetNS needs root (network namespaces)")
	}
	dir := t.TempDir()
	ns, err := newNetNS(dir + "/netns")
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := ns.Run(context.Background(), nil, "ip", "-o", "link", "show")
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1 || !strings.Contains(lines[0], " lo: ") || !strings.Contains(lines[0], "UP") {
		t.Fatalf("links in the namespace = %q, want lo alone, up", out)
	}

	var ln net.Listener
	if err := ns.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			_, _ = c.Write([]byte("hi"))
			c.Close()
		}
	}()
	conn, err := ns.DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial inside: %v", err)
	}
	buf := make([]byte, 2)
	if _, err := conn.Read(buf); err != nil || string(buf) != "hi" {
		t.Fatalf("read inside = %q, %v", buf, err)
	}
	conn.Close()
	if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Fatalf("%s answered from the test's own namespace", ln.Addr())
	}

	if err := ns.remove(); err != nil {
		t.Fatal(err)
	}
	mps, err := mountPoints(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(mps) != 0 {
		t.Fatalf("mounts left under %s: %v", dir, mps)
	}
}

package nodeagent

import (
	"context"
	"testing"
	"time"
)

// Two agents of one node (a rollout's old and new pod) take turns; an
// agent of another node (another host root) does not wait.
func TestLockNode(t *testing.T) {
	root := t.TempDir()
	old := &Agent{HostRoot: root}
	unlock, err := old.lockNode(context.Background())
	if err != nil {
		t.Fatal(err)
	}

	other := &Agent{HostRoot: t.TempDir()}
	u, err := other.lockNode(context.Background())
	if err != nil {
		t.Fatalf("another node's agent waited: %v", err)
	}
	u()

	next := &Agent{HostRoot: root}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := next.lockNode(ctx); err == nil {
		t.Fatal("the next agent took the lock the old one holds")
	}
	got := make(chan error, 1)
	go func() {
		u, err := next.lockNode(context.Background())
		if err == nil {
			u()
		}
		got <- err
	}()
	unlock()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the next agent did not get the lock once the old one let go")
	}
}

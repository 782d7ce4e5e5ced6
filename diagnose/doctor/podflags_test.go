package doctor

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParseObject: kubectl's TYPE/NAME, its kinds' names and short names;
// a Docker container's name and other kinds are not objects.
func TestParseObject(t *testing.T) {
	for _, tc := range []struct {
		arg, kind, name string
		ok              bool
	}{
		{"pod/train-0", "pod", "train-0", true},
		{"po/train-0", "pod", "train-0", true},
		{"pods/train-0", "pod", "train-0", true},
		{"job/train", "job", "train", true},
		{"jobs.batch/train", "job", "train", true},
		{"deploy/vllm", "deployment", "vllm", true},
		{"deployment.apps/vllm", "deployment", "vllm", true},
		{"sts/db", "statefulset", "db", true},
		{"ds/agent", "daemonset", "agent", true},
		{"rs/web-5d9c", "replicaset", "web-5d9c", true},
		{"cj/nightly", "cronjob", "nightly", true},
		{"Pod/x", "pod", "x", true},
		{"trainer", "", "", false},
		{"svc/web", "", "", false},
		{"pod/", "", "", false},
		{"pod/ns/x", "", "", false},
	} {
		kind, name, ok := ParseObject(tc.arg)
		if kind != tc.kind || name != tc.name || ok != tc.ok {
			t.Errorf("ParseObject(%q) = %q, %q, %v; want %q, %q, %v", tc.arg, kind, name, ok, tc.kind, tc.name, tc.ok)
		}
	}
}

// TestKubeObjectFlags: what names a Kubernetes object, and the flags that
// do not go with one, or without one, each refused naming the flag.
func TestKubeObjectFlags(t *testing.T) {
	for _, tc := range []struct {
		name     string
		o        RunOptions
		kind     string
		ok       bool
		errWords string
	}{
		{"--pod", RunOptions{Pod: "ml/train-0"}, "pod", true, ""},
		{"TYPE/NAME", RunOptions{Container: "job/train"}, "job", true, ""},
		{"--deployment", RunOptions{Deployment: "vllm"}, "deployment", true, ""},
		{"a Docker container", RunOptions{Container: "trainer"}, "", false, ""},
		{"nothing", RunOptions{}, "", false, ""},
		{"--pod and --job", RunOptions{Pod: "a", Job: "b"}, "", false, "--pod and --job: name one pod or owner"},
		{"--pod and TYPE/NAME", RunOptions{Pod: "a", Container: "pod/b"}, "", false, "--pod and pod/b"},
		{"--pod and CONTAINER", RunOptions{Pod: "a", Container: "trainer"}, "", false, "it does not go with CONTAINER"},
		{"--pod and --host", RunOptions{Pod: "a", Host: true}, "", false, "--pod looks at the cluster through its API"},
		{"--job and --cri", RunOptions{Job: "a", CRI: true}, "", false, "--job looks at the cluster"},
		{"TYPE/NAME and --probe", RunOptions{Container: "pod/a", Probe: "1g"}, "", false, "pod/a looks at the cluster"},
		{"-n alone", RunOptions{Kube: KubeOptions{Namespace: "ml"}}, "", false, "-n, --context, --kubeconfig"},
		{"-c NAME alone", RunOptions{PodContainer: "trainer"}, "", false, "go with --pod, --job, --deployment or TYPE/NAME"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind, _, ok, err := tc.o.kubeObject()
			if tc.errWords != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errWords) {
					t.Errorf("error %v, want one saying %q", err, tc.errWords)
				}
				return
			}
			if err != nil || kind != tc.kind || ok != tc.ok {
				t.Errorf("kubeObject() = %q, %v, %v; want %q, %v", kind, ok, err, tc.kind, tc.ok)
			}
		})
	}
}

// TestKubeconfig: doctor --pod reads the cluster with kubectl's loading
// rules: the kubeconfig's server and token (the fake API refuses requests
// without it), its context's namespace unless -n names another, and a
// context named with --context; a missing context or file is an error.
func TestKubeconfig(t *testing.T) {
	f := loadFakeAPI(t, filepath.Join("testdata", "pods", "webhook-sized"))
	f.token = "s3cret"
	url, ca := f.startTLS(t)
	dir := t.TempDir()
	kc := filepath.Join(dir, "config")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, certificate-authority-data: %s}}]
users: [{name: reader, user: {token: s3cret}}, {name: nobody, user: {token: wrong}}]
contexts:
- {name: ml, context: {cluster: test, user: reader, namespace: doctor-ml}}
- {name: bad, context: {cluster: test, user: nobody, namespace: doctor-ml}}
current-context: ml
`, url, base64.StdEncoding.EncodeToString(ca))
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		o         KubeOptions
		wantNS    string
		wantErr   string
		wantCheck Status
	}{
		{"the context's namespace", KubeOptions{Kubeconfig: kc}, "doctor-ml", "", OK},
		{"-n", KubeOptions{Kubeconfig: kc, Namespace: "other"}, "other", "", Error},
		{"--context with a wrong token", KubeOptions{Kubeconfig: kc, Context: "bad"}, "doctor-ml", "", Error},
		{"no such context", KubeOptions{Kubeconfig: kc, Context: "nope"}, "", `context "nope" does not exist`, OK},
		{"no such file", KubeOptions{Kubeconfig: filepath.Join(dir, "nope")}, "", "nope", OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, ns, err := NewKubeClient(tc.o)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || ns != tc.wantNS {
				t.Fatalf("namespace %q, %v; want %q", ns, err, tc.wantNS)
			}
			rep := PodReport(context.Background(), k, PodOptions{Kind: "pod", Namespace: ns, Name: "sized"})
			if c, _ := rep.Find("pod"); c.Status != tc.wantCheck {
				t.Errorf("pod check %s: %s, want %s", c.Status, c.Detail, tc.wantCheck)
			}
		})
	}
}

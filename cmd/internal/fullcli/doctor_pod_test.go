package fullcli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/diagnose/doctor"
)

// TestPodArgs: doctor's arguments and -c/--container, as kubectl's users
// give them: alone, --container still means doctor runs inside a
// container; with --pod or TYPE/NAME, -c NAME (however placed) is the
// pod's container.
func TestPodArgs(t *testing.T) {
	inside := containerFlag{set: true, name: insideContainer}
	named := containerFlag{set: true, name: "trainer"}
	for _, tc := range []struct {
		name          string
		o             doctor.RunOptions
		args          []string
		c             containerFlag
		wantContainer string
		wantPod       string
		wantInside    bool
		errWords      string
	}{
		{name: "--container alone: inside", c: inside, wantInside: true},
		{name: "a Docker container", args: []string{"trainer"}, wantContainer: "trainer"},
		{name: "pod/NAME -c NAME", args: []string{"pod/x", "trainer"}, c: inside, wantContainer: "pod/x", wantPod: "trainer"},
		{name: "-c NAME pod/NAME", args: []string{"trainer", "pod/x"}, c: inside, wantContainer: "pod/x", wantPod: "trainer"},
		{name: "--pod x -c NAME", o: doctor.RunOptions{Pod: "x"}, args: []string{"trainer"}, c: inside, wantPod: "trainer"},
		{name: "--container=NAME pod/NAME", args: []string{"pod/x"}, c: named, wantContainer: "pod/x", wantPod: "trainer"},
		{name: "--container=NAME without a pod", c: named, errWords: "--container=trainer names a container of --pod"},
		{name: "-c without its name", o: doctor.RunOptions{Pod: "x"}, c: inside, errWords: "-c/--container needs the name"},
		{name: "two objects", args: []string{"pod/x", "pod/y"}, errWords: "accepts at most 1 arg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			err := podArgs(&o, tc.args, tc.c)
			if tc.errWords != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errWords) {
					t.Errorf("error %v, want one saying %q", err, tc.errWords)
				}
				return
			}
			if err != nil || o.Container != tc.wantContainer || o.PodContainer != tc.wantPod || o.InContainer != tc.wantInside {
				t.Errorf("CONTAINER %q, pod container %q, inside %v, %v; want %q, %q, %v", o.Container, o.PodContainer, o.InContainer, err,
					tc.wantContainer, tc.wantPod, tc.wantInside)
			}
		})
	}
}

// TestDoctorPodFlags: the Kubernetes flags reach doctor: a kubeconfig
// that does not exist, a context it lacks, and flags that need a pod are
// each refused with exit 2, naming what is wrong.
func TestDoctorPodFlags(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "config")
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: https://127.0.0.1:1}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: a, context: {cluster: c, user: u}}]\ncurrent-context: a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"doctor", "--pod", "x", "--kubeconfig", filepath.Join(dir, "nope")}, "nope"},
		{[]string{"doctor", "pod/x", "--kubeconfig", kc, "--context", "other"}, `context "other" does not exist`},
		{[]string{"doctor", "-n", "ml"}, "-n, --context, --kubeconfig"},
		{[]string{"doctor", "--pod", "a/b", "-n", "c", "--kubeconfig", kc}, "--pod a/b names namespace a, -n c another"},
		{[]string{"doctor", "--pod", "x", "--host"}, "--pod looks at the cluster through its API"},
		{[]string{"doctor", "--job", "a", "--deployment", "b"}, "--job and --deployment: name one"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, stderr, code := execute(t, tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, %q; want 2 and %q", code, stderr, tc.want)
			}
		})
	}
}

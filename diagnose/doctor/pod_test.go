package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var updatePods = flag.Bool("update-pods", false, "rewrite diagnose/doctor/testdata/pods/*/report.golden")

// podCase is a recorded case of testdata/pods (objects and logs from the
// test cluster, integration/cluster_doctor_pod_test.go) and what doctor
// --pod must say of it.
type podCase struct {
	name string
	// dir is the recording under testdata/pods.
	dir string
	// forbid and allow are the API's refusals (fakeAPI's).
	forbid, allow []string
	// edit changes the recorded objects, for a variant of a recording.
	edit func(t *testing.T, f *fakeAPI)
	// kind and target name what is looked at (default: the recorded
	// pod); container is -c.
	kind, target, container string
	// golden says the text report is compared with DIR/NAME.golden.
	golden bool
	exit   int
	checks map[string]Status
	detail map[string]string
	fix    map[string]string
}

// caseMeta is a recording's case.json.
type caseMeta struct {
	Namespace, Pod, User string
}

func (tc podCase) run(t *testing.T) *Report {
	t.Helper()
	dir := filepath.Join("testdata", "pods", tc.dir)
	f := loadFakeAPI(t, dir)
	var meta caseMeta
	data, err := os.ReadFile(filepath.Join(dir, "case.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &meta); err != nil {
		t.Fatal(err)
	}
	if meta.User == "" {
		meta.User = "default"
	}
	f.forbid, f.allow, f.user = tc.forbid, tc.allow, "system:serviceaccount:"+meta.Namespace+":"+meta.User
	if tc.edit != nil {
		tc.edit(t, f)
	}
	kind, name := "pod", meta.Pod
	if tc.kind != "" {
		kind, name = tc.kind, tc.target
	}
	o := PodOptions{Kind: kind, Namespace: meta.Namespace, Name: name, Container: tc.container, Policy: PolicySource{Path: filepath.Join(t.TempDir(), "config.toml")}}
	return PodReport(context.Background(), f.serve(t), o)
}

// check asserts a report against the case.
func (tc podCase) check(t *testing.T, rep *Report) {
	t.Helper()
	if rep.ExitCode != tc.exit {
		t.Errorf("exit code %d, want %d", rep.ExitCode, tc.exit)
	}
	for name, want := range tc.checks {
		if c, ok := rep.Find(name); !ok || c.Status != want {
			t.Errorf("check %s: %s (%s), want %s", name, c.Status, c.Detail, want)
		}
	}
	for name, want := range tc.detail {
		if c, _ := rep.Find(name); !strings.Contains(c.Detail, want) {
			t.Errorf("check %s's detail lacks %q:\n%s", name, want, c.Detail)
		}
	}
	for name, want := range tc.fix {
		if c, _ := rep.Find(name); !strings.Contains(c.Fix, want) {
			t.Errorf("check %s's fix lacks %q:\n%s", name, want, c.Fix)
		}
	}
	for _, c := range rep.Checks {
		if c.Status == Problem && c.Fix == "" {
			t.Errorf("check %s is a problem without a fix: %s", c.Name, c.Detail)
		}
	}
}

// golden compares the text report with the case's golden file (go test
// -update-pods writes it).
func (tc podCase) goldenText(t *testing.T, rep *Report) {
	t.Helper()
	var buf bytes.Buffer
	if err := rep.WriteText(&buf, false); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "pods", tc.dir, goldenName(tc.name))
	if *updatePods {
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update-pods writes it)", err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("text report differs from %s (go test -update-pods rewrites it):\n%s", path, buf.String())
	}
}

// goldenName is a case's golden file: its name in letters, digits and
// dashes.
func goldenName(name string) string {
	return strings.Trim(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(name, "-"), "-") + ".golden"
}

// TestPodReport: doctor --pod on the recorded cases, each verdict and its
// fix; the text of the recorded ones against golden files.
func TestPodReport(t *testing.T) {
	for _, tc := range podCases() {
		t.Run(tc.name, func(t *testing.T) {
			rep := tc.run(t)
			tc.check(t, rep)
			if tc.golden {
				tc.goldenText(t, rep)
			}
			if t.Failed() || os.Getenv("SHOW") != "" {
				var buf bytes.Buffer
				_ = rep.WriteText(&buf, false)
				t.Logf("report:\n%s", buf.String())
			}
		})
	}
}

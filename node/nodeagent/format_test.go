package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/internal/version"
	"github.com/gpurun/gpurun/node/install"
)

// prevRelease is testdata/460d3b5: what gpurun 460d3b5 (a release from
// before the records had a format) left on a node whose containerd config
// was containerdTestdata's containerd-1.6.20-config-default.toml, made
// with that release's own binary:
//
//	gpurun-full node install --host-root ROOT --from IMG --policy-source SRC
//
// IMG holding this package's fake binaries (newNode's), SRC newNode's
// policy source; ROOT is @ROOT@ in install-state.json (gpurun install
// records host paths). containerd-config.toml and policy.toml are the
// node's config and policy after that install.
const prevRelease = "testdata/460d3b5/"

// prevNode is a fake node as prevRelease's install left it.
func prevNode(t *testing.T) *node {
	t.Helper()
	n := newNode(t, "containerd-1.6.20-config-default.toml")
	read := func(name string) string {
		data, err := os.ReadFile(prevRelease + name)
		if err != nil {
			t.Fatal(err)
		}
		return strings.ReplaceAll(string(data), "@ROOT@", n.root)
	}
	var st map[string]map[string]struct {
		Backup string `json:"backup"`
	}
	state := read("install-state.json")
	if err := json.Unmarshal([]byte(state), &st); err != nil {
		t.Fatal(err)
	}
	// install's backup of the config, at the host path it recorded.
	for _, recs := range st {
		for _, rec := range recs {
			if rec.Backup != "" {
				rel, err := filepath.Rel(n.root, rec.Backup)
				if err != nil || strings.HasPrefix(rel, "..") {
					t.Fatalf("backup %s is not below the node's root", rec.Backup)
				}
				n.write(t, "/"+rel, n.read(t, install.DefaultContainerdConfig), 0o600)
			}
		}
	}
	n.write(t, install.DefaultContainerdConfig, read("containerd-config.toml"), 0o644)
	n.write(t, install.DefaultStatePath, state, 0o644)
	n.write(t, DefaultStatePath, read("node-agent.json"), 0o644)
	n.write(t, "/etc/gpurun/config.toml", read("policy.toml"), 0o644)
	for _, b := range Binaries() {
		data, err := os.ReadFile(filepath.Join(n.image, b))
		if err != nil {
			t.Fatal(err)
		}
		n.write(t, filepath.Join(DefaultBinDir, b), string(data), 0o755)
	}
	return n
}

// TestRecordFormats: the node record of a release from before formats
// (none: format 1) and of this one are read; a newer format is refused,
// naming the file and the format; what this release writes is
// RecordFormat.
func TestRecordFormats(t *testing.T) {
	prev, err := os.ReadFile(prevRelease + "node-agent.json")
	if err != nil {
		t.Fatal(err)
	}
	withFormat := func(f int) string {
		var m map[string]any
		if err := json.Unmarshal(prev, &m); err != nil {
			t.Fatal(err)
		}
		m["format"] = f
		data, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	for _, tc := range []struct {
		name, data string
		refused    int // the format refused, 0: read
	}{
		{"460d3b5 (no format)", string(prev), 0},
		{"format 1", withFormat(1), 0},
		{"this release's", withFormat(RecordFormat), 0},
		{"the next format", withFormat(RecordFormat + 1), RecordFormat + 1},
		{"a far later one", withFormat(RecordFormat + 40), RecordFormat + 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "node-agent.json")
			if err := os.WriteFile(path, []byte(tc.data), 0o644); err != nil {
				t.Fatal(err)
			}
			rec, err := loadRecord(path)
			if tc.refused == 0 {
				if err != nil || rec == nil {
					t.Fatalf("loadRecord: %v", err)
				}
				if rec.BinDir != DefaultBinDir || len(rec.Binaries) != len(Binaries()) || rec.Containerd.Config != install.DefaultContainerdConfig {
					t.Errorf("read as %+v", rec)
				}
				if err := rec.save(path); err != nil {
					t.Fatal(err)
				}
				var saved struct{ Format *int }
				data, _ := os.ReadFile(path)
				if err := json.Unmarshal(data, &saved); err != nil || saved.Format == nil || *saved.Format != RecordFormat {
					t.Errorf("saved with format %v (%v), want %d:\n%s", saved.Format, err, RecordFormat, data)
				}
				return
			}
			var fe *install.FormatError
			if !errors.As(err, &fe) || fe.Format != tc.refused || fe.Newest != RecordFormat || fe.Path != path {
				t.Fatalf("loadRecord: %v (%#v), want a FormatError for %s, format %d", err, fe, path, tc.refused)
			}
			for _, want := range []string{path, "format " + itoa(tc.refused), "reads formats up to " + itoa(RecordFormat), version.String()} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal does not say %q: %v", want, err)
				}
			}
		})
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestRecordsOfAnEarlierRelease: on a node that release 460d3b5 set up,
// this release's agent reads the records: its status checks the files
// they name, its install takes over (the config left as it was, the
// binaries replaced, the records rewritten in this release's formats),
// and its uninstall — right away, or after that install — restores the
// node as it was before 460d3b5's install.
func TestRecordsOfAnEarlierRelease(t *testing.T) {
	for _, tc := range []struct {
		name    string
		install bool // this release's install first (an upgrade)
	}{
		{"uninstall", false},
		{"upgrade, then uninstall", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := prevNode(t)
			original, err := os.ReadFile(containerdTestdata + "containerd-1.6.20-config-default.toml")
			if err != nil {
				t.Fatal(err)
			}
			installed := n.read(t, install.DefaultContainerdConfig)
			a := n.agent(false)
			if st := a.Status(); st.Reason != "containerd is not running" || len(st.Problems) > 0 {
				t.Errorf("status of 460d3b5's install: %+v", st)
			}
			if tc.install {
				for _, b := range Binaries() {
					if err := os.WriteFile(filepath.Join(n.image, b), []byte("#!/bin/true "+b+" v2\n"), 0o755); err != nil {
						t.Fatal(err)
					}
				}
				if err := a.Install(context.Background()); err != nil {
					t.Fatalf("install over 460d3b5's: %v\n%s", err, n.log.String())
				}
				if got := n.read(t, install.DefaultContainerdConfig); got != installed {
					t.Errorf("this release's install changed 460d3b5's config:\n%s\nwant\n%s", got, installed)
				}
				if got := n.read(t, filepath.Join(DefaultBinDir, RuntimeBinary)); !strings.Contains(got, " v2") {
					t.Errorf("gpurun-runtime not replaced: %q", got)
				}
				// The node record is rewritten in this release's format;
				// install's state, whose record did not change, stays as
				// 460d3b5 wrote it (no format: 1).
				if got := n.read(t, DefaultStatePath); !strings.Contains(got, `"format": 1`) {
					t.Errorf("%s rewritten without format 1:\n%s", DefaultStatePath, got)
				}
				if rec, err := loadRecord(n.path(DefaultStatePath)); err != nil || rec.Version != version.String() || rec.Format != RecordFormat {
					t.Errorf("the record after the upgrade: %+v, %v", rec, err)
				}
			}
			if err := a.Uninstall(context.Background()); err != nil {
				t.Fatalf("uninstall: %v\n%s", err, n.log.String())
			}
			if got := n.read(t, install.DefaultContainerdConfig); got != string(original) {
				t.Errorf("config after the uninstall:\n%s\nwant it as before 460d3b5's install", got)
			}
			// Only the config and the fake /proc remain: the records, the
			// binaries, the policy, install's backup and the directories
			// the install created are gone.
			want := map[string]bool{"etc": true, "etc/containerd": true, "etc/containerd/config.toml": true}
			for p := range n.snapshot(t) {
				if !want[p] && p != "." && !strings.HasPrefix(p, "proc") {
					t.Errorf("left on the node: %s", p)
				}
			}
		})
	}
}

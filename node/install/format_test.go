package install

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// prevState is the state file gpurun 460d3b5 (a release from before the
// records had a format) wrote when its node agent registered gpurun with
// containerd 1.6's default config (see node/nodeagent's
// TestRecordsOfAnEarlierRelease, which shares the testdata): @ROOT@ is the
// host root it ran under, prevConfig the config it left.
const (
	prevDir    = "../nodeagent/testdata/460d3b5/"
	prevState  = prevDir + "install-state.json"
	prevConfig = prevDir + "containerd-config.toml"
	origConfig = "../../engine/containerd/testdata/containerd-1.6.20-config-default.toml"
)

// TestStateFormats: a state file of 460d3b5 (records without a format:
// format 1) and of this release are read; a record in a newer format is
// refused, naming the file and the format, even beside older ones; a save
// writes every record in StateFormat.
func TestStateFormats(t *testing.T) {
	prev := read(t, prevState)
	// withFormats sets the format of the 460d3b5 record, and adds a
	// docker record in format docker (0: none).
	withFormats := func(containerd, docker int) string {
		var st map[string]map[string]map[string]any
		if err := json.Unmarshal([]byte(prev), &st); err != nil {
			t.Fatal(err)
		}
		for _, rec := range st["containerd"] {
			rec["format"] = containerd
		}
		if docker != 0 {
			st["docker"] = map[string]map[string]any{"/etc/docker/daemon.json": {"format": docker, "change": map[string]any{}}}
		}
		data, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	for _, tc := range []struct {
		name, data string
		refused    int // the format refused, 0: read
	}{
		{"460d3b5 (no format)", prev, 0},
		{"format 1", withFormats(1, 0), 0},
		{"this release's, two engines", withFormats(StateFormat, StateFormat), 0},
		{"the next format", withFormats(StateFormat+1, 0), StateFormat + 1},
		{"a newer record beside an older one", withFormats(1, StateFormat+3), StateFormat + 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "install-state.json")
			write(t, path, tc.data)
			st, err := loadState(path)
			if tc.refused == 0 {
				if err != nil || len(st["containerd"]) != 1 {
					t.Fatalf("loadState: %v, %v", st, err)
				}
				if err := st.save(path); err != nil {
					t.Fatal(err)
				}
				var saved map[string]map[string]struct{ Format *int }
				if err := json.Unmarshal([]byte(read(t, path)), &saved); err != nil {
					t.Fatal(err)
				}
				for engine, recs := range saved {
					for p, rec := range recs {
						if rec.Format == nil || *rec.Format != StateFormat {
							t.Errorf("saved %s %s with format %v, want %d", engine, p, rec.Format, StateFormat)
						}
					}
				}
				return
			}
			var fe *FormatError
			if !errors.As(err, &fe) || fe.Format != tc.refused || fe.Path != path || fe.Newest != StateFormat {
				t.Fatalf("loadState: %v (%#v), want a FormatError for %s, format %d", err, fe, path, tc.refused)
			}
			for _, want := range []string{"install state " + path, fmt.Sprintf("is format %d", tc.refused), fmt.Sprintf("up to %d", StateFormat)} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal does not say %q: %v", want, err)
				}
			}
		})
	}
}

// TestUninstallOfAnEarlierRelease: this release's containerd uninstall
// undoes what 460d3b5 recorded, byte for byte; with a newer record it
// refuses and changes nothing.
func TestUninstallOfAnEarlierRelease(t *testing.T) {
	for _, tc := range []struct {
		name   string
		format int // set on the record; 0: as 460d3b5 wrote it
		refuse bool
	}{
		{"460d3b5's record", 0, false},
		{"a newer format", StateFormat + 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			var out bytes.Buffer
			o := opts(root, &out)
			o.StatePath = DefaultStatePath
			state := strings.ReplaceAll(read(t, prevState), "@ROOT@", root)
			if tc.format != 0 {
				state = strings.Replace(state, `"change"`, fmt.Sprintf(`"format": %d, "change"`, tc.format), 1)
			}
			var st map[string]map[string]struct{ Backup string }
			if err := json.Unmarshal([]byte(state), &st); err != nil {
				t.Fatal(err)
			}
			original := read(t, origConfig)
			for _, rec := range st["containerd"] {
				write(t, rec.Backup, original)
			}
			cfg := filepath.Join(root, DefaultContainerdConfig)
			installed := read(t, prevConfig)
			write(t, cfg, installed)
			write(t, filepath.Join(root, DefaultStatePath), state)
			err := Containerd{Options: o}.Uninstall()
			if tc.refuse {
				var fe *FormatError
				if !errors.As(err, &fe) {
					t.Fatalf("uninstall with a format %d record: %v, want a FormatError", tc.format, err)
				}
				if got := read(t, cfg); got != installed {
					t.Error("the refused uninstall changed the config")
				}
				return
			}
			if err != nil {
				t.Fatalf("uninstall: %v\n%s", err, out.String())
			}
			if got := read(t, cfg); got != original {
				t.Errorf("config after the uninstall:\n%s\nwant it as before 460d3b5's install", got)
			}
		})
	}
}

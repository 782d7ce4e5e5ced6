package nodeagent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/gpurun/gpurun/engine/containerd"
	"github.com/gpurun/gpurun/engine/nvidia"
	"github.com/gpurun/gpurun/internal/hostpath"
	"github.com/gpurun/gpurun/node/install"
	"github.com/gpurun/gpurun/policy"
)

// drift is what another tool that manages containerd's config (NVIDIA's
// toolkit, whose pod rewrites its drop-in and restarts containerd at each
// start and stop) did to gpurun's registration, as the files now say.
type drift struct {
	// problems keep gpurun from being in effect: the agent is not ready.
	problems []string
	// repairable says an install run again fixes every problem: gpurun's
	// drop-in is imported last again, carries the CRI section containerd
	// reads before it (containerd 1.x) and chains the default it stands
	// in for. An install in place cannot be read after another file.
	repairable bool
	// warnings do not keep gpurun from being in effect.
	warnings []string
}

// coexistence reads the record's config as containerd reads it and says
// what another tool changed that gpurun must repair or report.
func (a *Agent) coexistence(rec *Record) drift {
	var d drift
	c, err := containerd.Load(context.Background(), rec.Containerd.Config, containerd.LoadOptions{Root: a.HostRoot})
	if err != nil || rec.Containerd.Distribution.Templated() {
		return d
	}
	drop := dropInPath(rec)
	d.repairable = drop != ""
	defPath := []string{"plugins", c.RuntimePluginID(), "containerd", "default_runtime_name"}
	def := c.DefaultRuntime()
	if rec.Containerd.SetAsDefault && def != install.RuntimeName {
		file, line := c.Defines(defPath...)
		d.problems = append(d.problems, fmt.Sprintf("containerd's default runtime handler is %s, set in %s:%d, which containerd reads after gpurun's: pods of the default handler bypass gpurun-runtime", def, file, line))
	}
	for _, h := range c.HiddenRuntimes() {
		d.problems = append(d.problems, fmt.Sprintf("runtime handler %s, defined in %s, is hidden by the CRI section of %s (containerd 1.x replaces the whole section): its pods do not start", h.Name, h.File, h.By))
		// gpurun's own drop-in hides them (its copy is stale), or they are
		// gpurun's, hidden by a file read after its drop-in: installing
		// again copies the section anew and imports the drop-in last.
		d.repairable = d.repairable && (h.By == drop || h.File == drop)
	}
	pol := a.nodePolicy(rec)
	if rec.Containerd.SetAsDefault && def == install.RuntimeName && !nvidia.IsRuntime(pol.Runtime) {
		for _, f := range c.DefinedIn(defPath...) {
			fc, err := containerd.Load(context.Background(), f, containerd.LoadOptions{Root: a.HostRoot, Generation: c.Generation, Exclude: c.Files})
			if err != nil {
				continue
			}
			if rt, ok := c.Runtime(fc.DefaultRuntime()); ok && rt.Name != install.RuntimeName && nvidia.IsRuntime(rt.BinaryName) {
				d.problems = append(d.problems, fmt.Sprintf("%s makes NVIDIA's %s the default handler, but gpurun-runtime, the default containerd reads, hands over to %q: GPU pods lose the runtime that gives them their GPUs", f, rt.Name, pol.Runtime))
				break
			}
		}
	}
	if nvidia.IsRuntime(pol.Runtime) {
		config := nvidia.RuntimeConfig(a.HostRoot, pol.Runtime, nil)
		if listed, err := nvidia.LowLevel(a.HostRoot, config); err == nil {
			for _, r := range listed {
				if !strings.Contains(r, "/") {
					break // a name on PATH: runc or crun
				}
				if _, err := hostpath.Stat(a.HostRoot, r); err != nil {
					continue
				}
				if path.Base(r) == RuntimeBinary || r == rec.Containerd.RuntimePath {
					d.warnings = append(d.warnings, fmt.Sprintf("NVIDIA's runtime %s lists gpurun-runtime first among its low-level runtimes (%s): the two call each other, and gpurun-runtime, called back, runs runc itself; set %s=runc,crun in the toolkit's environment (GPU Operator: ClusterPolicy toolkit.env)", pol.Runtime, config, nvidia.RuntimesEnv))
				}
				break
			}
		}
	}
	if len(d.problems) == 0 {
		d.repairable = false
	}
	return d
}

// nodePolicy is the node's policy (the defaults where it cannot be read).
func (a *Agent) nodePolicy(rec *Record) *policy.Policy {
	p := rec.Containerd.Policy
	if p == "" {
		p = a.policyPath()
	}
	data, err := hostpath.ReadFile(a.HostRoot, p)
	if err != nil {
		return policy.Default()
	}
	pol, err := policy.Parse(p, data)
	if err != nil {
		return policy.Default()
	}
	return pol
}

// configKey identifies the content of every file containerd reads for
// the record's config, and the node's policy.
func (a *Agent) configKey(rec *Record) string {
	h := sha256.New()
	files := []string{rec.Containerd.Config, rec.Containerd.Policy}
	if c, err := containerd.Load(context.Background(), rec.Containerd.Config, containerd.LoadOptions{Root: a.HostRoot}); err == nil {
		files = append(files, c.Files...)
	}
	for _, f := range files {
		data, _ := hostpath.ReadFile(a.HostRoot, f)
		fmt.Fprintf(h, "%s %d\n", filepath.Clean(f), len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// repair installs gpurun's registration again where another tool changed
// containerd's config under it (Status.Repairable), and restarts
// containerd as the restart mode allows. It runs once per content of the
// files: a repair that does not help is not retried until they change,
// and the agent never restarts containerd for a change of its own — so
// the agent and NVIDIA's toolkit, which changes the files only when its
// pod starts or stops, cannot restart containerd in turn for ever.
func (a *Agent) repair(ctx context.Context, rec *Record, statePath string, st Status) {
	key := a.configKey(rec)
	if key == a.repaired {
		return
	}
	a.repaired = key
	a.log().Warn("containerd's configuration changed under gpurun; installing gpurun's registration again", "why", strings.Join(st.Problems, "; "))
	if err := a.containerd(rec, a.lineLog("repair")).Install(); err != nil {
		a.log().Error("cannot repair gpurun's registration", "err", err)
		return
	}
	a.repaired = a.configKey(rec)
	if err := a.applyRestart(ctx, rec, statePath); err != nil {
		a.log().Error("restart containerd after the repair", "err", err)
	}
}

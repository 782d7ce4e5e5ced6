package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/engine/crio"
	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/node/hook"
	"github.com/gpurun/gpurun/node/install"
	"github.com/gpurun/gpurun/policy"
)

func newHookCmd(g *Globals) *cobra.Command {
	var stage string
	cmd := &cobra.Command{
		Use:    "hook",
		Hidden: true, // run by OCI runtimes, not by people
		Short:  "OCI hook: size a GPU container's /dev/shm (run by runc/crun from hooks.d)",
		Long: `Hook is an OCI hook. Podman and CRI-O inject it from a hooks.d entry that
"gpurun install podman|crio" writes; any runtime runs it from config.json's
hooks. It reads the container's state (JSON) on stdin, loads the bundle's
config.json, plans /dev/shm exactly as gpurun-runtime does, and makes the
container's /dev/shm the planned size:

  - a bind of a tmpfs the engine mounted on the host (Podman/CRI-O
    userdata/shm, a CRI pod's sandbox shm) is grown on the host: only the
    one the engine named for this container, which the bundle path shows
    (<graph or run root>/overlay-containers/<id>/userdata, containerd's
    <state>/io.containerd.runtime.v2.task/<ns>/<id>), or, for a bundle of
    another layout, one under the policy's engine_roots;
  - the container's own tmpfs is grown inside its mount namespace, at
    <rootfs>/dev/shm (stages createRuntime, prestart, createContainer).

It prints nothing on stdout and exits 0 when there is nothing to do. On an
internal error it logs to the policy's log_file and lets the container start
unchanged, unless the policy sets fail_closed (then it exits 1 and the
runtime fails the start). Plans that need a different spec (mode "mount"
adding a tmpfs, mode "ipc-host") are beyond a hook: use gpurun-runtime.

"gpurun-runtime hook" is the same hook, with the same flags, from the small
binary: it starts in a fraction of gpurun's CPU time, which a hook adds to
every container start, so "gpurun install podman|crio" writes it where a
gpurun-runtime with the hook mode is installed beside gpurun.`,
		Example: `  # A hooks.d entry (what "gpurun install podman" writes):
  #   {"version": "1.0.0",
  #    "hook": {"path": "/usr/local/bin/gpurun-runtime",
  #             "args": ["gpurun-runtime", "hook", "--stage", "createRuntime"]},
  #    "when": {"always": true}, "stages": ["createRuntime"]}

  # By hand, with a state as a runtime passes it:
  echo '{"ociVersion":"1.0.2","id":"c1","pid":4242,"bundle":"/run/c1"}' | sudo gpurun hook --config /etc/gpurun/config.toml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h := hook.New(cmd.InOrStdin())
			h.ConfigPath = g.ConfigPath
			h.Stage = stage
			if err := h.Run(); err != nil {
				return exitcode.New(1, err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&stage, "stage", "", `the hook stage the runtime runs it in, for the log ("createContainer": look in the hook's own mount namespace first)`)
	return cmd
}

// hooksFlags are "gpurun install|uninstall podman|crio"'s flags.
type hooksFlags struct {
	h                         install.Hooks
	hostRoot, state, pol, ann string
}

// newInstallHooksCmd is "gpurun install|uninstall podman|crio": gpurun's OCI
// hook in a hooks.d directory.
func newInstallHooksCmd(g *Globals, engine string, uninstall bool) *cobra.Command {
	var f hooksFlags
	short, long, example := hooksHelp(engine)
	cmd := &cobra.Command{
		Use:     engine,
		Short:   short,
		Long:    long,
		Example: example,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h := f.h
			h.Engine = engine
			h.Options = install.Options{HostRoot: f.hostRoot, StatePath: f.state, DryRun: g.DryRun, Out: cmd.OutOrStdout()}
			h.PolicyPath, h.PassPolicy = f.pol, f.pol != ""
			if f.pol == "" {
				h.PolicyPath, _ = policy.ResolvePath("", os.Getenv)
			}
			if h.GPURunPath == "" {
				h.GPURunPath = install.DefaultHookPath(f.hostRoot, os.Executable, install.RunsHook)
			}
			if cmd.Flags().Changed("allow-shm-annotation") {
				h.ShmAnnotation = f.ann
			}
			return installOrUninstall(uninstall, h.Install, h.Uninstall)
		},
	}
	f.register(cmd, engine, uninstall)
	return cmd
}

func (f *hooksFlags) register(cmd *cobra.Command, engine string, uninstall bool) {
	fl := cmd.Flags()
	fl.StringVar(&f.h.HooksDir, "hooks-dir", "", fmt.Sprintf("the hooks.d directory (a path on the node; default: the last directory of hooks_dir in %s, else %s", engineConf(engine), hooksDir(engine))+map[bool]string{false: ")", true: "; uninstall: every directory recorded)"}[uninstall])
	fl.StringVar(&f.hostRoot, "host-root", "", `the node's root filesystem, when it is mounted elsewhere (a DaemonSet: "/host")`)
	fl.StringVar(&f.state, "state", install.DefaultStatePath, "where install records what it wrote, for uninstall")
	fl.StringVar(&f.pol, "policy", "", fmt.Sprintf("gpurun's policy file, passed to the hook as --config (default: none, the hook reads %s)", policy.DefaultConfigPath))
	if uninstall {
		return
	}
	fl.StringVar(&f.h.GPURunPath, "hook-path", "", "the hook's program, gpurun-runtime or gpurun, as the runtime will run it (a path on the node; default: the gpurun-runtime beside this gpurun if it has the hook mode, else this gpurun; with --host-root: /usr/local/bin/gpurun)")
	if engine == install.EngineCRIO {
		fl.StringVar(&f.ann, "allow-shm-annotation", "", fmt.Sprintf("also let pods size /dev/shm with CRI-O's annotation (--allow-shm-annotation alone: %s; =%s for older CRI-O): a drop-in %s/%s (restart CRI-O)",
			crio.ShmAnnotation, crio.ShmAnnotationV1, crio.DropInDir, crio.DropInName))
		fl.Lookup("allow-shm-annotation").NoOptDefVal = crio.ShmAnnotation
		fl.StringVar(&f.h.DropInDir, "crio-drop-in-dir", crio.DropInDir, "CRI-O's drop-in directory (a path on the node)")
	}
}

// hooksDir is an engine's default hooks.d directory.
func hooksDir(engine string) string {
	if engine == install.EngineCRIO {
		return install.DefaultCRIOHooksDir
	}
	return install.DefaultPodmanHooksDir
}

// engineConf names the configuration files where an engine sets hooks_dir.
func engineConf(engine string) string {
	if engine == install.EngineCRIO {
		return "crio.conf or its drop-ins"
	}
	return "containers.conf or its drop-ins"
}

// hooksHelp is the help of "gpurun install|uninstall podman|crio".
func hooksHelp(engine string) (short, long, example string) {
	name := map[string]string{install.EnginePodman: "Podman", install.EngineCRIO: "CRI-O"}[engine]
	short = name + ": gpurun's OCI hook in hooks.d (" + install.HookFileName + ")"
	example = fmt.Sprintf(`  gpurun install %[1]s --dry-run
  gpurun install %[1]s --policy /etc/gpurun/config.toml
  gpurun uninstall %[1]s`, engine)
	if engine == install.EngineCRIO {
		example += `
  gpurun install crio --allow-shm-annotation            # pods may set shm-size.crio.io
  gpurun install crio --allow-shm-annotation=io.kubernetes.cri-o.ShmSize   # CRI-O before the *.crio.io names`
	} else {
		example += `
  podman run --hooks-dir /etc/containers/oci/hooks.d ...   # where --hooks-dir is given, name the directory`
	}
	long = fmt.Sprintf(`Install writes %[1]s/%[2]s, a hooks.d entry (oci-hooks(5)),
or the same file in the last directory of hooks_dir where %[4]s
set one (%[3]s reads only those then); the entry makes %[3]s run gpurun's hook ("gpurun-runtime hook", the small
binary's hook mode, where it is installed beside gpurun; else "gpurun
hook") in the createRuntime stage of every container; the hook sizes
/dev/shm for the containers the policy picks (GPU evidence is often only in
the environment, which a hooks.d "when" cannot match). It records what it wrote in the install state, so that uninstall
removes exactly that; a second install changes nothing; --dry-run shows the
diff. Hooks.d entries are read at each container start (CRI-O watches the
directory if it existed when CRI-O started): no restart is needed.

The hook learns where %[3]s keeps a container's /dev/shm tmpfs from the
bundle path it is given (<root>/overlay-containers/<id>/userdata: Podman's
graph root, CRI-O's run root), wherever storage.conf puts the root. Install
warns when the hook would refuse it: a root through a symbolic link, or a
storage driver other than overlay.`, hooksDir(engine), install.HookFileName, name, engineConf(engine))
	return short, long, example
}

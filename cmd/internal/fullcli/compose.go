package fullcli

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/cmd/internal/cli"
	"github.com/gpurun/gpurun/compose"
)

func newComposeCmd(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "compose",
		Short: cli.ComposeShort,
		Long: `Compose holds the commands that work on Docker Compose projects. "gpurun
compose migrate" adds shm_size to every GPU service that lacks one, and
nothing else, so that the compose file itself carries the fix.`,
		Example: `  gpurun compose migrate --diff
  gpurun compose migrate --check .`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newComposeMigrateCmd(g))
	return cmd
}

const composeMigrateLong = `Migrate finds a project's compose files the way "docker compose" does (-f
files, else COMPOSE_FILE, else compose.yaml, compose.yml, docker-compose.yml
or docker-compose.yaml in the project directory or a parent, with its
override file), understands them with compose-go (overrides, extends,
include, profiles, ${VAR} interpolation with .env), and adds
"shm_size: <size>" to every GPU service that lacks one.

A GPU service has, after merging, deploy.resources.reservations.devices with
capability gpu or driver nvidia (or a CDI GPU), gpus:, runtime: nvidia,
NVIDIA_VISIBLE_DEVICES (not void or none) in its environment, or a
/dev/nvidia*, /dev/kfd, /dev/dri or /dev/accel device (with match = "all" in
the policy, every service is). It is left alone when
it already sets shm_size (at least the policy minimum), ipc: host,
ipc: service:X or container:X, or mounts something at /dev/shm.

The size is --size, else the policy's: half of the service's memory limit
(deploy.resources.limits.memory or mem_limit) when it has one, never below
min; without a limit, the policy's compose_default (8gb unless the config
says otherwise). It is written in compose's units ("8gb").

The line goes first in the service's mapping, right under its name, in the
file that defines the service's image or build (for a service extending
another, the extending one), indented like its keys; every other byte of
every file stays as it was: comments, blank lines, order, quoting, anchors,
merges, flow style, line endings. Every result is parsed again and compared
with the original before it is shown or written.

A GPU service whose mapping is shared (an anchor other services alias or
merge with "<<", a service others extend) gets the line in that shared
mapping. Services that are not GPU services and take their keys from it
inherit the larger ceiling (action inherit; they are named in the report):
harmless, since a tmpfs reserves no memory until something is written to
it. GPU services sharing it that need another size get a line of their own
(nearer, so it wins); GPU services of one mapping that need different sizes
get the largest. With --strict-shared, a GPU service whose line would reach
a service that is not a GPU service is skipped with a warning instead, for a
hand edit. A line that would reach a service that shares the host's or
another container's IPC namespace (ipc: host, service:X, container:X), or a
GPU service that keeps its own /dev/shm, is never added: the service is
skipped with a warning.

Modes: by default the migrated files go to stdout (with a "==> FILE <=="
line before each when there are several); --write replaces the files
atomically (same mode; --backup keeps FILE.bak); --diff prints a unified
diff; --check changes nothing and exits 1 when a file would change or a
GPU service is left for a hand edit (skip). --json prints a report per
service instead: file, line, service, gpu, evidence, action (none, keep,
add, raise, inherit, skip), size, shared_with (add: the services that are
not GPU services and inherit the line), inherits_from (inherit: the GPU
services whose line it takes), reason, warnings.

Several projects at once: each PATH is a compose file (a project of its own)
or a directory searched for projects (each directory's default project, and
every other compose*.y(a)ml and docker-compose*.y(a)ml file alone).

Exit status: 0 done (or nothing to change), 1 --check found files that would
change or services to edit by hand, 2 bad input (the message names the file, line and column) or a file
that could not be written (it stays as it was).`

func newComposeMigrateCmd(g *cli.Globals) *cobra.Command {
	var o compose.MigrateRun
	cmd := &cobra.Command{
		Use:   "migrate [-f FILE]... [--write [--backup] | --diff | --check] [--json] [PATH...]",
		Short: "Add shm_size to the GPU services of compose files, changing nothing else",
		Long:  composeMigrateLong,
		Example: `  # What would change in the project here, as a diff
  gpurun compose migrate --diff

  # Migrate a project with an override file, keeping backups
  gpurun compose migrate -f compose.yaml -f compose.gpu.yaml --write --backup

  # Every project under the repository, in CI or pre-commit (exit 1 = not migrated)
  gpurun compose migrate --check .

  # A fixed size, and a report per service
  gpurun compose migrate --size 16gb --json deploy/docker-compose.yml`,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Paths, o.Environ = args, os.Environ()
			o.DryRun, o.Verbose, o.LoadPolicy = g.DryRun, g.Verbose, g.Policy
			o.Out, o.Err = cmd.OutOrStdout(), cmd.ErrOrStderr()
			return compose.RunMigrate(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&o.Files, "file", "f", nil, "compose file, in override order (repeatable; default: the files docker compose finds)")
	f.StringVar(&o.ProjectDir, "project-directory", "", "project directory: base of relative paths and place of .env (default: the first file's directory)")
	f.StringArrayVar(&o.EnvFiles, "env-file", nil, "environment file for interpolation, instead of the project's .env (repeatable)")
	f.StringVar(&o.SizeFlag, "size", "", "shm_size for every GPU service that needs one, e.g. 16gb (default: the policy)")
	f.BoolVar(&o.EnforceMin, "enforce-min", false, "also raise an explicit shm_size below the policy minimum (or enforce_min in the config)")
	f.BoolVar(&o.StrictShared, "strict-shared", false, "skip (warn, for a hand edit) a GPU service whose mapping is shared with services that are not GPU services, instead of letting them inherit its shm_size")
	f.BoolVar(&o.Write, "write", false, "replace the files (atomically, same mode)")
	f.BoolVar(&o.Backup, "backup", false, "with --write, keep the original as FILE.bak")
	f.BoolVar(&o.Diff, "diff", false, "print a unified diff of the changes")
	f.BoolVar(&o.Check, "check", false, "change nothing; exit 1 when a file would change (for CI and pre-commit)")
	f.BoolVar(&o.JSON, "json", false, "print a JSON report per service instead of files or diffs")
	cmd.MarkFlagsMutuallyExclusive("write", "diff", "check")
	return cmd
}

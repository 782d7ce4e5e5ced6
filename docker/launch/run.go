package launch

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gpurun/gpurun/docker/runargs"
	"github.com/gpurun/gpurun/engine/dockerapi"
	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// daemonTimeout bounds what gpurun asks the daemon before handing over.
const daemonTimeout = 5 * time.Second

// Run is `gpurun run ARGS` (or create, container run, container create):
// it decides (Prepare, asking the daemon the docker CLI would ask), prints
// the warnings (and with o.Verbose the notes and the decision) on
// env.Stderr, then replaces the process with the docker CLI — $GPURUN_DOCKER,
// else docker on PATH — with docker's global options, the command and the
// decided arguments, so that TTY, signals and the exit status are docker's
// own. With o.DryRun it prints that command line and the decision on
// env.Stdout instead. It returns only then, or when docker cannot be run:
// exit status 2 for a policy that cannot be read, 127 for no docker CLI,
// 126 for one that cannot be executed.
func Run(inv Invocation, o Options, env Env) error {
	dockerPath := env.Getenv(DockerEnv)
	if dockerPath == "" {
		dockerPath = "docker"
	}
	resolved, lookErr := env.LookPath(dockerPath)

	pol, err := o.LoadPolicy(env.Getenv)
	if err != nil {
		return exitcode.New(2, err)
	}
	req := Request{Args: inv.Args, Policy: pol, LookupEnv: env.LookupEnv, ReadFile: env.ReadFile, LocalFacts: env.LocalFacts}
	closeDaemon := askDaemon(&req, o, env)
	defer closeDaemon()
	ctx, cancel := context.WithTimeout(context.Background(), daemonTimeout)
	res := Prepare(ctx, req)
	cancel()

	for _, w := range res.Warnings {
		fmt.Fprintf(env.Stderr, "gpurun: warning: %s\n", w)
	}
	if res.Skipped != "" {
		fmt.Fprintf(env.Stderr, "gpurun: not carried out: %s\n", res.Skipped)
	}
	if o.Verbose {
		for _, n := range res.Notes {
			fmt.Fprintf(env.Stderr, "gpurun: %s\n", n)
		}
		fmt.Fprintf(env.Stderr, "gpurun: %s\n", describe(res))
	}
	argv := make([]string, 0, 1+len(o.DockerGlobals)+len(inv.Command)+len(res.Args))
	argv = append(append(append(append(argv, dockerPath), o.DockerGlobals...), inv.Command...), res.Args...)
	if o.DryRun {
		fmt.Fprintln(env.Stdout, ShellQuote(argv))
		fmt.Fprintf(env.Stdout, "# %s\n", describe(res))
		return nil
	}
	if lookErr != nil {
		return exitcode.New(127, fmt.Errorf("docker CLI not found (set %s): %w", DockerEnv, lookErr))
	}
	argv[0] = resolved
	// Replace gpurun, so TTY, signals and the exit status are docker's own.
	if err := env.Exec(resolved, argv, env.Environ()); err != nil {
		return exitcode.New(126, fmt.Errorf("exec %s: %w", resolved, err))
	}
	return nil
}

// askDaemon sets req up to ask the daemon the docker CLI will ask (the one
// o.DockerGlobals, else the environment, names): whether it runs on this
// host, and a client with the shm cache. It returns the function that
// closes the client.
func askDaemon(req *Request, o Options, env Env) (closeDaemon func()) {
	getenv, files, err := dockerClientEnv(o.DockerGlobals, env.Getenv)
	if err != nil && o.Verbose {
		fmt.Fprintf(env.Stderr, "gpurun: docker options %q: %v; asking the daemon the environment names\n", o.DockerGlobals, err)
	}
	if ep, err := dockerapi.ResolveEndpoint(getenv); err == nil && strings.HasPrefix(ep.Host, "unix://") {
		var why string
		if req.DaemonLocal, why = dockerapi.OnThisHost(ep.Host); !req.DaemonLocal && o.Verbose {
			fmt.Fprintf(env.Stderr, "gpurun: %s: asking the daemon for its host's memory\n", why)
		}
	}
	d, err := dockerapi.NewAPIDaemon(getenv, files)
	if err != nil {
		if o.Verbose {
			fmt.Fprintf(env.Stderr, "gpurun: %v\n", err)
		}
		return func() {}
	}
	d.Local = req.DaemonLocal
	d.Cache = dockerapi.ShmCache{Path: dockerapi.DefaultShmCachePath(env.Getenv)}
	req.Daemon = d
	return func() { d.Close() }
}

// dockerClientEnv returns the environment and TLS files gpurun's own Docker
// client uses so that it asks the daemon the docker CLI will: the one the
// docker options (-H, --context, --config, --tls...) name, else the one the
// environment names. Options it cannot read (a newer docker's, given to the
// CLI plugin) leave the environment as it is, with the error.
func dockerClientEnv(opts []string, getenv func(string) string) (func(string) string, dockerapi.TLSFiles, error) {
	if len(opts) == 0 {
		return getenv, dockerapi.TLSFiles{}, nil
	}
	dg, err := runargs.ParseGlobals(opts, nil)
	if err != nil {
		return getenv, dockerapi.TLSFiles{}, err
	}
	env, err := dg.Env(getenv)
	if err != nil {
		return getenv, dockerapi.TLSFiles{}, err
	}
	return env, dockerapi.TLSFiles{CACert: dg.TLSCACert, Cert: dg.TLSCert, Key: dg.TLSKey}, nil
}

// describe is the one-line answer for people.
func describe(res Result) string {
	pl := res.Plan
	if res.Skipped != "" {
		return fmt.Sprintf("unchanged (the plan, %s to %s, is not docker run's to carry out): %s", pl.Action, policy.FormatSize(pl.Size), pl.Reason)
	}
	switch pl.Action {
	case oci.ActionNone:
		return "unchanged: " + pl.Reason
	case oci.ActionIPCHost:
		return "added --ipc=host: " + pl.Reason
	}
	return fmt.Sprintf("added %s (/dev/shm %s): %s", res.Added, policy.FormatSize(pl.Size), pl.Reason)
}

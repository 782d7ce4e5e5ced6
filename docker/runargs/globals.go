package runargs

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// globalFlagTable returns a fresh copy of the docker CLI's global options,
// the ones given before the command (`docker -H X run ...`): the union of
// docker CLI 20.10 through 29.x (cli/flags ClientOptions.InstallFlags, the
// root command's --version, and the hidden --help cli.SetupRootCommand
// adds, whose -h shorthand is deprecated but accepted). --config is in
// every release (20.10 registered it in cli/cobra.go). Types are the ones
// `docker --help` prints.
func globalFlagTable() []Flag {
	tbl := []Flag{
		{Name: "config", Type: "string"},
		{Name: "context", Shorthand: "c", Type: "string"},
		{Name: "debug", Shorthand: "D", Type: "bool"},
		{Name: "help", Shorthand: "h", Type: "bool", Hidden: true},
		{Name: "host", Shorthand: "H", Type: "list"},
		{Name: "log-level", Shorthand: "l", Type: "string"},
		{Name: "tls", Type: "bool"},
		{Name: "tlscacert", Type: "string"},
		{Name: "tlscert", Type: "string"},
		{Name: "tlskey", Type: "string"},
		{Name: "tlsverify", Type: "bool"},
		{Name: "version", Shorthand: "v", Type: "bool"},
	}
	for i := range tbl {
		tbl[i].TakesValue = tbl[i].Type != "bool"
	}
	return tbl
}

// GlobalFlags returns every global option of the docker CLI (see
// [Globals]), sorted by long name. The slice is a fresh copy.
func GlobalFlags() []Flag { return globalFlagTable() }

// Globals are the docker CLI's global options at the front of a command
// line, up to the command ("run", "container", ...), read the way docker
// reads them: pflag, not interspersed, so the first argument that is not an
// option is the command.
type Globals struct {
	// Args are the arguments as given, never modified.
	Args []string
	// Command is the index in Args of the first argument that is not an
	// option (the command), len(Args) when there is none.
	Command int
	// Occurrences lists every option given, in order. Options of the
	// caller's own (see ParseGlobals) are listed too, by their own names.
	Occurrences []Occurrence

	// Hosts are the -H/--host values, in order (docker refuses more than
	// one).
	Hosts []string
	// Context is the last -c/--context; ConfigDir the last --config.
	Context, ConfigDir string
	// TLS and TLSVerify are the final values of --tls and --tlsverify;
	// TLSVerifySet says --tlsverify was given at all (docker then uses TLS
	// whatever its value).
	TLS, TLSVerify, TLSVerifySet bool
	// TLSCACert, TLSCert and TLSKey are the last --tlscacert, --tlscert and
	// --tlskey.
	TLSCACert, TLSCert, TLSKey string
}

// Spans returns, for each occurrence, the index range [from, to) in Args of
// the arguments it takes: the option and, when separate, its value.
func (g *Globals) Spans() [][2]int {
	spans := make([][2]int, len(g.Occurrences))
	for i, o := range g.Occurrences {
		end := g.Command
		if i+1 < len(g.Occurrences) {
			end = g.Occurrences[i+1].Index
		}
		spans[i] = [2]int{o.Index, max(end, o.Index+1)}
	}
	return spans
}

// ParseGlobals reads the docker CLI's global options at the front of args.
// own are options of the caller's that may be mixed with docker's
// (gpurun's --dry-run, -v): one of them replaces a docker option of the same
// long name, and takes the shorthand from a docker option that has it
// (gpurun's -v is --verbose, not docker's --version). Their values land only
// in Occurrences. Errors are *FlagError, as for Parse.
func ParseGlobals(args []string, own []Flag) (*Globals, error) {
	args = slices.Clone(args)
	g := &Globals{Args: args}
	tbl := globalFlagTable()
	for _, o := range own {
		tbl = slices.DeleteFunc(tbl, func(f Flag) bool { return f.Name == o.Name })
		for i := range tbl {
			if o.Shorthand != "" && tbl[i].Shorthand == o.Shorthand {
				tbl[i].Shorthand = ""
			}
		}
		o.TakesValue = o.Type != "bool"
		tbl = append(tbl, o)
	}
	fs := pflag.NewFlagSet("docker", pflag.ContinueOnError)
	fs.SetInterspersed(false)
	addFlags(fs, tbl, map[string]any{
		"host": &g.Hosts, "context": &g.Context, "config": &g.ConfigDir,
		"tls": &g.TLS, "tlsverify": &g.TLSVerify,
		"tlscacert": &g.TLSCACert, "tlscert": &g.TLSCert, "tlskey": &g.TLSKey,
	})
	occs, cmd, err := scan(fs, args)
	g.Occurrences, g.Command = occs, cmd
	if err != nil {
		return g, err
	}
	g.TLSVerifySet = fs.Changed("tlsverify")
	return g, nil
}

// Env returns what the options mean for a Docker API client that resolves
// its endpoint from the environment as the docker CLI does: getenv with
// DOCKER_HOST, DOCKER_CONTEXT, DOCKER_CONFIG, DOCKER_TLS and
// DOCKER_TLS_VERIFY as the options set them. A context named on the command
// line wins over DOCKER_HOST, as in docker; -H with --context is an error
// there, and here too.
func (g *Globals) Env(getenv func(string) string) (func(string) string, error) {
	if len(g.Hosts) > 1 {
		return nil, fmt.Errorf("-H/--host: docker takes only one host, got %d", len(g.Hosts))
	}
	if len(g.Hosts) == 1 && g.Context != "" {
		return nil, fmt.Errorf("--context %q and -H/--host %q: docker takes either, not both", g.Context, g.Hosts[0])
	}
	set := map[string]string{}
	unset := map[string]bool{}
	if len(g.Hosts) == 1 {
		set["DOCKER_HOST"] = g.Hosts[0]
	}
	if g.Context != "" {
		set["DOCKER_CONTEXT"] = g.Context
		unset["DOCKER_HOST"] = true
	}
	if g.ConfigDir != "" {
		set["DOCKER_CONFIG"] = g.ConfigDir
	}
	if g.TLSVerifySet {
		if g.TLSVerify {
			set["DOCKER_TLS_VERIFY"] = "1"
		} else {
			unset["DOCKER_TLS_VERIFY"] = true
			set["DOCKER_TLS"] = "1"
		}
	}
	if g.TLS {
		set["DOCKER_TLS"] = "1"
	}
	return func(k string) string {
		if v, ok := set[k]; ok {
			return v
		}
		if unset[k] {
			return ""
		}
		return getenv(k)
	}, nil
}

// LookupGlobalFlag finds one of the docker CLI's global options by its long
// name ("host" or "--host") or its shorthand ("-H").
func LookupGlobalFlag(name string) (Flag, bool) {
	for _, f := range globalFlagTable() {
		if "--"+f.Name == name || f.Name == name || (f.Shorthand != "" && "-"+f.Shorthand == name) {
			return f, true
		}
	}
	return Flag{}, false
}

// IsContainerCommand reports whether the words after docker's global
// options start one of the commands that create a container with `docker
// run`'s flags: "run", "create", "container run" or "container create". It
// returns the number of words the command takes (1 or 2) and its verb.
func IsContainerCommand(words []string) (n int, verb string, ok bool) {
	if len(words) == 0 {
		return 0, "", false
	}
	switch words[0] {
	case "run", "create":
		return 1, words[0], true
	case "container":
		if len(words) > 1 && (words[1] == "run" || words[1] == "create") {
			return 2, words[1], true
		}
	}
	return 0, "", false
}

// dockerCommands are the docker CLI's top-level commands (docker 20.10 to
// 29, the plugins docker ships — buildx, compose — and the hidden ones).
const dockerCommands = `attach build builder buildx checkpoint commit compose config container
	context cp create debug diff engine events exec export history image images import info init inspect
	kill load login logout logs manifest network node pause plugin port ps pull push rename restart rm rmi
	run save sbom scan scout search secret service stack start stats stop swarm system tag top trust
	unpause update version volume wait`

// IsDockerCommand reports whether word is one of the docker CLI's
// top-level commands ("ps", "container", "exec").
func IsDockerCommand(word string) bool {
	return word != "" && slices.Contains(strings.Fields(dockerCommands), word)
}

package runargs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The tests in this file run the real docker CLI. `docker run --help` and
// docker's flag parser need no daemon; DOCKER_HOST points at a socket that
// does not exist, so a command line that parses fails only when the CLI
// tries to connect. They fail, not skip, when no docker CLI is installed.

// dockerCLI is one docker binary found on this machine.
type dockerCLI struct {
	path    string
	version [2]int // major, minor
}

func (d dockerCLI) String() string {
	return fmt.Sprintf("%s (%d.%d)", d.path, d.version[0], d.version[1])
}

var dockerVersionRE = regexp.MustCompile(`Docker version (\d+)\.(\d+)`)

// dockerCLIs returns every distinct docker binary among /usr/bin/docker,
// /usr/local/bin/docker and the one on PATH, failing the test when there is
// none.
func dockerCLIs(t *testing.T) []dockerCLI {
	t.Helper()
	candidates := []string{"/usr/bin/docker", "/usr/local/bin/docker"}
	if p, err := exec.LookPath("docker"); err == nil {
		candidates = append(candidates, p)
	}
	seen := map[string]bool{}
	var clis []dockerCLI
	for _, c := range candidates {
		real, err := filepath.EvalSymlinks(c)
		if err != nil || seen[real] {
			continue
		}
		seen[real] = true
		if fi, err := os.Stat(real); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			continue
		}
		out, _ := runDocker(t, dockerCLI{path: real}, "--version")
		m := dockerVersionRE.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("%s --version: unexpected output %q", real, out)
		}
		major, _ := strconv.Atoi(m[1])
		minor, _ := strconv.Atoi(m[2])
		clis = append(clis, dockerCLI{path: real, version: [2]int{major, minor}})
	}
	if len(clis) == 0 {
		t.Fatal("no docker CLI found (looked at /usr/bin/docker, /usr/local/bin/docker and PATH); install docker.io")
	}
	return clis
}

// runDocker runs the docker CLI with args, isolated from the user's docker
// configuration and from any daemon, and returns its combined output.
func runDocker(t *testing.T, d dockerCLI, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.path, args...)
	dir := t.TempDir()
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "DOCKER_") {
			env = append(env, e)
		}
	}
	cmd.Env = append(env,
		"DOCKER_HOST=unix://"+filepath.Join(dir, "no-daemon.sock"),
		"DOCKER_CONFIG="+dir,
		"DOCKER_CLI_HINTS=false",
	)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %q: %v", d.path, args, ctx.Err())
	}
	return string(out), err
}

// helpFlag is one flag line of `docker run --help`.
type helpFlag struct {
	long, short, typ string
}

// helpFlagRE matches a flag line of pflag's usage: "  -e, --env list   Set
// ..." or "      --rm    Automatically ...". Continuation lines of the
// descriptions are indented much deeper.
var helpFlagRE = regexp.MustCompile(`^ {2,6}(?:-([^-\s]), )?--([a-z0-9][a-z0-9-]*)(?: ([a-z0-9-]+))?(?: {2,}|$)`)

// parseHelp returns the flags listed in the Options section of help.
func parseHelp(help string) []helpFlag {
	var flags []helpFlag
	inOptions := false
	for _, line := range strings.Split(help, "\n") {
		switch {
		case strings.HasSuffix(line, "Options:") && !strings.HasPrefix(line, " "):
			inOptions = true
			continue
		case line != "" && !strings.HasPrefix(line, " "):
			inOptions = false
		}
		if !inOptions {
			continue
		}
		if m := helpFlagRE.FindStringSubmatch(line); m != nil {
			flags = append(flags, helpFlag{short: m[1], long: m[2], typ: m[3]})
		}
	}
	return flags
}

// TestFlagTableMatchesDockerHelp checks that every flag `docker run --help`
// lists, for every docker CLI installed, is in the table with the same
// shorthand and arity (help prints a type word after flags taking a value).
func TestFlagTableMatchesDockerHelp(t *testing.T) {
	for _, d := range dockerCLIs(t) {
		t.Run(d.String(), func(t *testing.T) {
			out, err := runDocker(t, d, "run", "--help")
			if err != nil {
				t.Fatalf("docker run --help: %v\n%s", err, out)
			}
			listed := parseHelp(out)
			if len(listed) < 90 {
				t.Fatalf("found only %d flags in docker run --help; parser out of date?\n%s", len(listed), out)
			}
			for _, h := range listed {
				f, ok := LookupFlag(h.long)
				if !ok {
					t.Errorf("--%s (%q) listed by docker run --help is not in the table", h.long, h.typ)
					continue
				}
				if f.Shorthand != h.short {
					t.Errorf("--%s: table shorthand %q, docker has %q", h.long, f.Shorthand, h.short)
				}
				if f.TakesValue != (h.typ != "") {
					t.Errorf("--%s: table TakesValue=%v, docker help type %q", h.long, f.TakesValue, h.typ)
				}
				if want := cmp.Or(h.typ, "bool"); f.Type != want {
					t.Errorf("--%s: table type %q, docker help type %q", h.long, f.Type, want)
				}
				if f.Hidden {
					t.Errorf("--%s: marked Hidden but listed by docker run --help", h.long)
				}
				if !versionAtLeast(d.version, f.Since) {
					t.Errorf("--%s: table says since %s, but docker %d.%d has it", h.long, f.Since, d.version[0], d.version[1])
				}
			}
			t.Logf("%d flags listed, all in the table", len(listed))
		})
	}
}

// TestFlagTableAcceptedByDocker asks every installed docker CLI about every
// flag in the table, hidden ones included: "docker run --flag" and
// "docker run -x" with nothing after them fail with "flag needs an
// argument" for flags taking a value and with "requires at least 1
// argument" for booleans; a CLI older than the flag's Since rejects it as
// unknown.
func TestFlagTableAcceptedByDocker(t *testing.T) {
	for _, d := range dockerCLIs(t) {
		t.Run(d.String(), func(t *testing.T) {
			for _, f := range Flags() {
				spellings := []string{"--" + f.Name}
				if f.Shorthand != "" {
					spellings = append(spellings, "-"+f.Shorthand)
				}
				for _, s := range spellings {
					t.Run(s, func(t *testing.T) {
						t.Parallel()
						out, _ := runDocker(t, d, "run", s)
						var want string
						switch {
						case !versionAtLeast(d.version, f.Since):
							want = "unknown"
						case f.Name == "help":
							want = "Usage:"
						case f.TakesValue:
							want = "flag needs an argument"
						default:
							want = "requires at least 1 argument"
						}
						if !strings.Contains(out, want) {
							t.Errorf("docker run %s: want output containing %q, got:\n%s", s, want, out)
						}
					})
				}
			}
		})
	}
}

// outcome classifies how a `docker run` command line fares in the docker
// CLI's argument parsing.
type outcome string

const (
	outcomeOK        outcome = "parses"
	outcomeFlagError outcome = "flag error"
	outcomeNoImage   outcome = "no image"
	outcomeHelp      outcome = "help"
)

func dockerOutcome(out string) outcome {
	switch {
	case strings.Contains(out, "unknown flag"),
		strings.Contains(out, "unknown shorthand flag"),
		strings.Contains(out, "flag needs an argument"),
		strings.Contains(out, "bad flag syntax"),
		strings.Contains(out, "invalid argument"):
		return outcomeFlagError
	case strings.Contains(out, "requires at least 1 argument"):
		return outcomeNoImage
	case strings.Contains(out, "Usage:  docker run"):
		return outcomeHelp
	}
	return outcomeOK
}

// TestParseMatchesDocker runs tricky command lines through Parse and every
// installed docker CLI and checks both agree on whether they parse, and on
// the image docker then complains about when it does.
func TestParseMatchesDocker(t *testing.T) {
	cases := [][]string{
		{"alpine"},
		{"-it", "alpine", "sh"},
		{"-itd", "alpine"},
		{"-dit", "--rm", "alpine"},
		{"-e", "-x", "alpine"},
		{"-e", "--x", "alpine"},
		{"-e=X", "alpine"},
		{"-eFOO=1", "alpine"},
		{"-e=", "alpine"},
		{"-e", "=x", "alpine"},
		{"--env-file", "/nonexistent/f", "alpine"},
		{"--", "alpine", "-c", "x"},
		{"--"},
		{"--entrypoint", "--foo", "alpine"},
		{"--gpus", "all", "alpine"},
		{"--gpus", `"device=0,1"`, "alpine"},
		{"--gpus"},
		{"--runtime=nvidia", "alpine"},
		{"--shm-size", "256m", "--shm-size", "256m", "alpine"},
		{"--ipc=host", "alpine"},
		{"--mount", "type=tmpfs,destination=/dev/shm", "alpine"},
		{"-v", "/x:/dev/shm:ro", "alpine"},
		{"--tmpfs", "/dev/shm:size=1g", "alpine"},
		{"--memory=2g", "-m", "2g", "alpine"},
		{"-m2g", "alpine"},
		{"--rm=false", "alpine"},
		{"--rm", "false"},
		{"--rm=yes", "alpine"},
		{"--init=", "alpine"},
		{"-d=false", "alpine"},
		{"-d=", "alpine"},
		{"-t=0", "-i=T", "alpine"},
		{"--detach-keys", "ctrl-p,ctrl-q", "alpine"},
		{"-p", "8080:80", "-p8443:443", "alpine"},
		{"-dp8080:80", "alpine"},
		{"--add-host", "a:1.2.3.4", "alpine"},
		{"--sig-proxy=false", "alpine"},
		{"--init", "-w", "/x", "alpine"},
		{"-h", "box", "alpine"},
		{"--net", "host", "alpine"},
		{"--dns-opt", "ndots:1", "alpine"},
		{"--cpu-rt-runtime", "950000", "--kernel-memory", "1g", "--link-local-ip", "169.254.1.1", "alpine"},
		{"--security-opt", "seccomp=unconfined", "--platform", "linux/amd64", "--pull", "never", "alpine"},
		{"--cgroupns", "host", "--disable-content-trust", "alpine"},
		{"--cpu-count", "1", "--io-maxiops", "1", "alpine"},
		{"-q", "alpine"},
		{"--annotation", "a=b", "alpine"},
		{"--use-api-socket", "alpine"},
		{"--health-start-interval", "1s", "alpine"},
		{"-test.v", "alpine"},
		{"-itest.v", "alpine"},
		{"-D", "alpine"},
		{"-H", "x", "alpine"},
		{"--ENV", "x", "alpine"},
		{"--nope", "alpine"},
		{"---x", "alpine"},
		{"--=x", "alpine"},
		{"-itx", "alpine"},
		{"--help"},
		{"--help=false"},
		{"--help", "--nope"},
		{"-"},
		{"alpine", "--nope", "-D"},
		{"-c0x10", "--stop-timeout=-1", "--blkio-weight", "500", "--health-interval", "1m30s", "alpine"},
		{"--memory-swappiness=-1", "--pids-limit", "-1", "--cpu-count", "1", "--io-maxiops", "10", "alpine"},
		{"--cpu-shares", "x", "alpine"},
		{"-dc1.5", "alpine"},
		{"--blkio-weight=70000", "alpine"},
		{"--io-maxiops", "-1", "alpine"},
		{"--health-interval", "5", "alpine"},
		{"--stop-timeout=", "alpine"},
		{"--network", "a", "--net=b", "--dns-opt", "x", "--dns-option", "y", "alpine"},
	}
	for _, d := range dockerCLIs(t) {
		t.Run(d.String(), func(t *testing.T) {
			for _, args := range cases {
				t.Run(strings.Join(args, " "), func(t *testing.T) {
					t.Parallel()
					r, err := parse(args)
					var fe *FlagError
					want := outcomeOK
					switch {
					case errors.As(err, &fe):
						want = outcomeFlagError
					case errors.Is(err, ErrNoImage):
						want = outcomeNoImage
					case err != nil:
						t.Fatalf("Parse(%q): unexpected error %v", args, err)
					case r.Help:
						want = outcomeHelp
					}
					// A CLI older than a flag rejects it.
					for _, o := range r.Occurrences {
						f, _ := LookupFlag(o.Given)
						if !versionAtLeast(d.version, f.Since) {
							want = outcomeFlagError
						}
					}
					out, _ := runDocker(t, d, append([]string{"run"}, args...)...)
					if got := dockerOutcome(out); got != want {
						t.Errorf("docker run %q: docker: %s, want %s (Parse error: %v)\n%s", args, got, want, err, out)
					}
				})
			}
		})
	}
}

// versionAtLeast reports whether v is since ("major.minor") or later; an
// empty since is always met.
func versionAtLeast(v [2]int, since string) bool {
	if since == "" {
		return true
	}
	maj, mnr, _ := strings.Cut(since, ".")
	sMajor, _ := strconv.Atoi(maj)
	sMinor, _ := strconv.Atoi(mnr)
	return v[0] > sMajor || v[0] == sMajor && v[1] >= sMinor
}

func TestParseHelp(t *testing.T) {
	help := `
Usage:  docker run [OPTIONS] IMAGE [COMMAND] [ARG...]

Options:
      --add-host list                  Add a custom host-to-IP mapping
                                       (host:ip)
  -a, --attach list                    Attach to STDIN, STDOUT or STDERR
      --cgroupns string                Cgroup namespace to use
                                       '':        Use the cgroup
                                                  default-cgroupns-mode
      --pids-limit int                 Tune container pids limit (set
                                       -1 for unlimited)
  -d, --detach                         Run container in background
      --the-longest-flag-name duration  x
      --rm
`
	got := parseHelp(help)
	want := []helpFlag{
		{long: "add-host", typ: "list"}, {long: "attach", short: "a", typ: "list"},
		{long: "cgroupns", typ: "string"}, {long: "pids-limit", typ: "int"},
		{long: "detach", short: "d"}, {long: "the-longest-flag-name", typ: "duration"}, {long: "rm"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("parseHelp =\n%v\nwant\n%v", got, want)
	}
}

//go:build integration

package integration

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// cmdResult runs a command and returns its stdout, stderr and exit status;
// a command that cannot start fails the test.
func cmdResult(t *testing.T, env []string, name string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s %q: %v", name, args, err)
	}
	return out.String(), errOut.String(), code
}

// mustRun runs a command that must succeed and returns its stdout.
func mustRun(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	out, errOut, code := cmdResult(t, env, name, args...)
	if code != 0 {
		t.Fatalf("%s %q: exit %d\n%s%s", name, args, code, out, errOut)
	}
	return out
}

func requireTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (apt-get install make dpkg rpm; .ci/run installs them): %v", tool, err)
		}
	}
}

// distVersion is what the test builds: a release candidate tag, which the
// Makefile maps to a package version that sorts before the release.
const distVersion = "v1.2.3-rc.1"

// makeVar asks the Makefile for the value of one of its variables.
func makeVar(t *testing.T, name string, vars ...string) string {
	t.Helper()
	args := append([]string{"-s", "--no-print-directory", "-C", "..", "--eval", "print-var: ; @echo $(" + name + ")", "print-var"}, vars...)
	return strings.TrimSpace(mustRun(t, os.Environ(), "make", args...))
}

// TestDistPackageVersion: the Makefile's package versions sort as the git
// versions they come from, for dpkg and for rpm.
func TestDistPackageVersion(t *testing.T) {
	requireTools(t, "make", "dpkg", "rpm")
	// In release order.
	gitVersions := []string{"0123abc-dirty", "v1.2.3-rc.1", "v1.2.3-rc.2", "v1.2.3", "v1.2.3-4-g0123abc", "v1.2.3-4-g0123abc-dirty", "v1.2.4-rc.1", "v1.10.0"}
	var pkg []string
	for _, v := range gitVersions {
		p := makeVar(t, "PKG_VERSION", "VERSION="+v)
		if p == "" || p[0] < '0' || p[0] > '9' || strings.Contains(p, "-") {
			t.Fatalf("VERSION=%s: package version %q must start with a digit and have no '-'", v, p)
		}
		pkg = append(pkg, p)
	}
	for i := 1; i < len(pkg); i++ {
		a, b := pkg[i-1], pkg[i]
		if _, _, code := cmdResult(t, os.Environ(), "dpkg", "--compare-versions", a, "lt", b); code != 0 {
			t.Errorf("dpkg: %s (%s) does not sort before %s (%s)", a, gitVersions[i-1], b, gitVersions[i])
		}
		out := mustRun(t, os.Environ(), "rpm", "--eval", `%{lua: print(rpm.vercmp("`+a+`", "`+b+`"))}`)
		if strings.TrimSpace(out) != "-1" {
			t.Errorf("rpm: vercmp(%s, %s) = %s, want -1", a, b, out)
		}
	}
}

// distFiles are the files (not directories) every package holds, but the
// man pages and the per-family files.
var distFiles = []string{
	"/usr/bin/gpurun",
	"/usr/bin/gpurun-full",
	"/usr/bin/gpurun-runtime",
	"/usr/libexec/docker/cli-plugins/docker-gpurun",
	"/usr/bin/kubectl-gpurun",
	"/usr/bin/kubectl_complete-gpurun",
	"/etc/gpurun/config.toml",
	"/usr/share/bash-completion/completions/gpurun",
	"/usr/share/fish/vendor_completions.d/gpurun.fish",
	"/usr/share/doc/gpurun/README.md",
	"/usr/share/doc/gpurun/config.md",
}

// rpmArch is nfpm's (and rpm's) name for a Go architecture.
var rpmArch = map[string]string{"amd64": "x86_64", "arm64": "aarch64"}

// elfMachine is the ELF machine of a Go architecture.
var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// TestDist builds the packages with `make dist`, checks what each holds,
// then installs the .deb of this machine's architecture with dpkg, runs what
// it installed, and removes and purges it again, in a private mount
// namespace over the machine's /etc, /usr and /var (privateRoot).
// distBinaries are the static binaries make dist builds for each
// architecture.
func distBinaries() []string { return []string{"gpurun", "gpurun-full", "gpurun-runtime"} }

func TestDist(t *testing.T) {
	requireTools(t, "make", "dpkg", "dpkg-deb", "dpkg-query", "rpm")
	if out, _, code := cmdResult(t, os.Environ(), "dpkg-query", "-W", "-f", "${Status}", "gpurun"); code == 0 && !strings.Contains(out, "not-installed") {
		t.Fatalf("a gpurun package is on this machine (%s): the test installs and purges its own; dpkg -P gpurun first", out)
	}
	dist := filepath.Join(t.TempDir(), "dist")
	pkgVersion := makeVar(t, "PKG_VERSION", "VERSION="+distVersion)
	arches := strings.Fields(makeVar(t, "DIST_ARCHES"))
	if !slices.Contains(arches, "amd64") || !slices.Contains(arches, "arm64") {
		t.Fatalf("DIST_ARCHES = %v, want amd64 and arm64", arches)
	}
	mustRun(t, os.Environ(), "make", "-s", "--no-print-directory", "-C", "..", "dist", "DIST="+dist, "VERSION="+distVersion)

	// The man pages gpurun __gendocs wrote: one per command (docgen's and
	// cmd/internal/fullcli's unit tests check that against the command tree).
	manDir := filepath.Join(dist, "share", "man", "man1")
	pages, err := filepath.Glob(filepath.Join(manDir, "*.1.gz"))
	if err != nil || len(pages) == 0 {
		t.Fatalf("no man pages in %s: %v", manDir, err)
	}
	var manFiles []string
	for _, p := range pages {
		manFiles = append(manFiles, "/usr/share/man/man1/"+filepath.Base(p))
	}
	for _, must := range []string{"gpurun.1.gz", "gpurun-run.1.gz", "gpurun-install-docker-cli-plugin.1.gz", "gpurun-completion-bash.1.gz", "gpurun-runtime.1.gz"} {
		if !slices.Contains(manFiles, "/usr/share/man/man1/"+must) {
			t.Errorf("no man page %s in %v", must, manFiles)
		}
	}

	for _, arch := range arches {
		t.Run(arch, func(t *testing.T) {
			// The static binaries, for this architecture.
			for _, name := range distBinaries() {
				p := filepath.Join(dist, "gpurun_linux_"+arch, name)
				f, err := elf.Open(p)
				if err != nil {
					t.Fatalf("%s: %v", p, err)
				}
				if f.Machine != elfMachine[arch] {
					t.Errorf("%s: machine %v, want %v", p, f.Machine, elfMachine[arch])
				}
				for _, prog := range f.Progs {
					if prog.Type == elf.PT_INTERP {
						t.Errorf("%s has an ELF interpreter: not static", p)
					}
				}
				if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
					t.Errorf("%s needs %v: not static", p, libs)
				}
				f.Close()
			}

			deb := filepath.Join(dist, "gpurun_"+pkgVersion+"-1_"+arch+".deb")
			checkDeb(t, deb, arch, pkgVersion, dist, manFiles)
			rpm := filepath.Join(dist, "gpurun-"+pkgVersion+"-1."+rpmArch[arch]+".rpm")
			checkRPM(t, rpm, arch, pkgVersion, manFiles)
			for _, p := range []string{deb, rpm} {
				if fi, err := os.Stat(p); err == nil {
					t.Logf("%s: %d bytes", filepath.Base(p), fi.Size())
				}
			}
		})
	}

	sums := mustRun(t, os.Environ(), "sh", "-c", "cd "+dist+" && sha256sum -c SHA256SUMS")
	// Each architecture's binaries, its deb and its rpm.
	if want := len(arches) * (len(distBinaries()) + 2); strings.Count(sums, ": OK") != want {
		t.Errorf("SHA256SUMS checks %d files, want %d:\n%s", strings.Count(sums, ": OK"), want, sums)
	}

	t.Run("dpkg", func(t *testing.T) {
		if !slices.Contains(arches, runtime.GOARCH) {
			t.Fatalf("no package for this machine's %s", runtime.GOARCH)
		}
		deb := filepath.Join(dist, "gpurun_"+pkgVersion+"-1_"+runtime.GOARCH+".deb")
		testDpkg(t, deb, filepath.Join(dist, "share"))
	})
}

// checkDeb checks a .deb's control fields, conffiles, file list, modes and
// that it holds exactly the binaries make dist built.
func checkDeb(t *testing.T, deb, arch, pkgVersion, dist string, manFiles []string) {
	t.Helper()
	env := os.Environ()
	fields := map[string]string{"Package": "gpurun", "Version": pkgVersion + "-1", "Architecture": arch}
	for k, want := range fields {
		if got := strings.TrimSpace(mustRun(t, env, "dpkg-deb", "-f", deb, k)); got != want {
			t.Errorf("%s: %s = %q, want %q", filepath.Base(deb), k, got, want)
		}
	}
	if dep := strings.TrimSpace(mustRun(t, env, "dpkg-deb", "-f", deb, "Depends")); dep != "" {
		t.Errorf("Depends: %q, want none (static binaries)", dep)
	}
	ctrl := t.TempDir()
	mustRun(t, env, "dpkg-deb", "-e", deb, ctrl)
	conffiles, err := os.ReadFile(filepath.Join(ctrl, "conffiles"))
	if err != nil || strings.TrimSpace(string(conffiles)) != "/etc/gpurun/config.toml" {
		t.Errorf("conffiles = %q (%v), want /etc/gpurun/config.toml", conffiles, err)
	}

	// dpkg-deb -c: "-rwxr-xr-x root/root 123 2026-01-01 00:00 ./usr/bin/gpurun".
	want := slices.Concat(distFiles, manFiles, []string{"/usr/share/zsh/vendor-completions/_gpurun", "/usr/share/doc/gpurun/copyright"})
	var got []string
	modes := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(mustRun(t, env, "dpkg-deb", "-c", deb)), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || strings.HasPrefix(f[0], "d") {
			continue
		}
		name := strings.TrimPrefix(f[5], ".")
		got = append(got, name)
		modes[name] = f[0] + " " + f[1]
		if f[1] != "root/root" {
			t.Errorf("%s owned by %s", name, f[1])
		}
		if strings.HasPrefix(f[0], "l") && (len(f) < 8 || f[6] != "->" || f[7] != "/usr/bin/gpurun") {
			t.Errorf("link %q does not point at /usr/bin/gpurun", line)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s holds\n%s\nwant\n%s", filepath.Base(deb), strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for name, mode := range map[string]string{
		"/usr/bin/gpurun":                               "-rwxr-xr-x root/root",
		"/usr/bin/gpurun-full":                          "-rwxr-xr-x root/root",
		"/usr/bin/gpurun-runtime":                       "-rwxr-xr-x root/root",
		"/etc/gpurun/config.toml":                       "-rw-r--r-- root/root",
		"/usr/libexec/docker/cli-plugins/docker-gpurun": "lrwxrwxrwx root/root",
		"/usr/bin/kubectl-gpurun":                       "lrwxrwxrwx root/root",
		"/usr/bin/kubectl_complete-gpurun":              "lrwxrwxrwx root/root",
	} {
		if modes[name] != mode {
			t.Errorf("%s: %q, want %q", name, modes[name], mode)
		}
	}
	// The binaries in the package are the ones make dist built.
	x := t.TempDir()
	mustRun(t, env, "dpkg-deb", "-x", deb, x)
	for _, name := range distBinaries() {
		if a, b := sha256File(t, filepath.Join(x, "usr/bin", name)), sha256File(t, filepath.Join(dist, "gpurun_linux_"+arch, name)); a != b {
			t.Errorf("%s in the .deb differs from %s's build", name, arch)
		}
	}
}

// checkRPM checks an .rpm's header, config files and file list with rpm.
func checkRPM(t *testing.T, path, arch, pkgVersion string, manFiles []string) {
	t.Helper()
	env := os.Environ()
	info := mustRun(t, env, "rpm", "-qp", "--qf", "%{NAME} %{VERSION} %{RELEASE} %{ARCH} %{LICENSE}", path)
	if want := "gpurun " + pkgVersion + " 1 " + rpmArch[arch] + " Apache-2.0"; info != want {
		t.Errorf("%s: %q, want %q", filepath.Base(path), info, want)
	}
	if cfg := strings.TrimSpace(mustRun(t, env, "rpm", "-qp", "--configfiles", path)); cfg != "/etc/gpurun/config.toml" {
		t.Errorf("config files: %q", cfg)
	}
	// %config(noreplace): FILEFLAGS has RPMFILE_CONFIG (1) and RPMFILE_NOREPLACE (16).
	var got []string
	want := slices.Concat(distFiles, manFiles, []string{"/usr/share/zsh/site-functions/_gpurun", "/usr/share/licenses/gpurun/LICENSE"})
	out := mustRun(t, env, "rpm", "-qp", "--qf", `[%{FILENAMES} %{FILEMODES:perms} %{FILEFLAGS} %{FILELINKTOS}\n]`, path)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || strings.HasPrefix(f[1], "d") {
			continue
		}
		got = append(got, f[0])
		switch f[0] {
		case "/usr/bin/gpurun", "/usr/bin/gpurun-full", "/usr/bin/gpurun-runtime":
			if f[1] != "-rwxr-xr-x" {
				t.Errorf("%s: mode %s", f[0], f[1])
			}
		case "/etc/gpurun/config.toml":
			if f[2] != "17" {
				t.Errorf("config.toml file flags %s, want 17 (config, noreplace)", f[2])
			}
		case "/usr/libexec/docker/cli-plugins/docker-gpurun", "/usr/bin/kubectl-gpurun", "/usr/bin/kubectl_complete-gpurun":
			if len(f) < 4 || f[3] != "/usr/bin/gpurun" {
				t.Errorf("plugin link: %q", line)
			}
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s holds\n%s\nwant\n%s", filepath.Base(path), strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// privateRoot is a mount namespace in which /etc, /usr and /var are
// writable overlays of the machine's, their changes kept in a directory
// of the test: a package installed there (dpkg's database, its lock and
// log, the files, the triggers' caches) never reaches the machine, and
// the machine's own apt and dpkg are not kept waiting. A process holds
// the namespace; commands run in it through nsenter and its files are
// read through /proc/PID/root.
type privateRoot struct{ pid int }

func newPrivateRoot(t *testing.T) *privateRoot {
	t.Helper()
	requireTools(t, "unshare", "nsenter")
	script := `set -e
for d in etc usr var; do
	mkdir -p "$0/$d.upper" "$0/$d.work"
	mount -t overlay overlay -o "lowerdir=/$d,upperdir=$0/$d.upper,workdir=$0/$d.work" "/$d"
done
echo ready
exec sleep 3600`
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, t.TempDir())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("unshare: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line := make([]byte, len("ready\n"))
	if _, err := io.ReadFull(stdout, line); err != nil || string(line) != "ready\n" {
		t.Fatalf("overlays of /etc, /usr and /var in a private mount namespace: %q %v: %s", line, err, stderr.String())
	}
	return &privateRoot{pid: cmd.Process.Pid}
}

// path is p as it is in the namespace.
func (r *privateRoot) path(p string) string {
	return fmt.Sprintf("/proc/%d/root%s", r.pid, p)
}

// argv returns the command line that runs name with args in the namespace.
func (r *privateRoot) argv(name string, args ...string) (string, []string) {
	return "nsenter", append([]string{"--target", strconv.Itoa(r.pid), "--mount", "--", name}, args...)
}

// testDpkg installs the .deb, checks what it installed works, then removes
// it (the conffile stays, as Debian's rules say) and purges it — all in a
// privateRoot: the machine's /etc, /usr and /var stay as they are.
func testDpkg(t *testing.T, deb, share string) {
	const conf = "/etc/gpurun/config.toml"
	root := newPrivateRoot(t)
	// No daemon is needed: nothing may reach the machine's.
	env := append(os.Environ(), "DOCKER_HOST=unix:///nonexistent/docker.sock")
	run := func(name string, args ...string) (string, string, int) {
		t.Helper()
		n, a := root.argv(name, args...)
		return cmdResult(t, env, n, a...)
	}
	must := func(env []string, name string, args ...string) string {
		t.Helper()
		n, a := root.argv(name, args...)
		return mustRun(t, env, n, a...)
	}
	// A config file the machine has is not the package's.
	if err := os.Remove(root.path(conf)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	status := func() string {
		out, _, _ := run("dpkg-query", "-W", "-f", "${Status}", "gpurun")
		return strings.TrimSpace(out)
	}
	must(env, "dpkg", "-i", deb)
	if s := status(); s != "install ok installed" {
		t.Fatalf("after dpkg -i: %q", s)
	}
	if _, err := os.Stat("/usr/bin/gpurun"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the package reached the machine's /usr/bin/gpurun: %v", err)
	}

	// Working binaries: gpurun says the version it was built as.
	if out := must(env, "/usr/bin/gpurun", "version"); out != "gpurun "+distVersion+"\n" {
		t.Errorf("gpurun version: %q, want %q", out, "gpurun "+distVersion+"\n")
	}
	// gpurun-runtime hands a non-create command to runc unchanged.
	noLog := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(noLog, []byte("log_file = \"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runcVersion := mustRun(t, env, "runc", "--version")
	if out := must(append(env, "GPURUN_CONFIG="+noLog), "/usr/bin/gpurun-runtime", "--version"); out != runcVersion {
		t.Errorf("gpurun-runtime --version: %q, want runc's %q", out, runcVersion)
	}

	// The default policy file is the generated one, and it is valid.
	shipped, err := os.ReadFile(filepath.Join(share, "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(root.path(conf)); err != nil || !bytes.Equal(got, shipped) {
		t.Errorf("%s: %v, not the generated file", conf, err)
	}
	spec, err := filepath.Abs(filepath.Join("..", "oci", "testdata", "fixtures", "docker-20.10-env-nvidia-all.json"))
	if err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := run("/usr/bin/gpurun", "--config", conf, "plan", "--spec", spec, "--host-memory", "64g"); code != 0 {
		t.Errorf("plan with the shipped config: exit %d %s%s", code, out, errOut)
	}

	// Man pages and completion are where man and the shells look.
	if page := gunzipFile(t, root.path("/usr/share/man/man1/gpurun-run.1.gz")); !strings.Contains(page, ".TH \"GPURUN-RUN\" \"1\"") {
		t.Errorf("gpurun-run.1: %.200q", page)
	}
	if out := must(env, "bash", "-c", "source /usr/share/bash-completion/completions/gpurun && complete -p gpurun"); !strings.Contains(out, "gpurun") {
		t.Errorf("bash completion: %q", out)
	}
	// The packaged plugin link: `docker gpurun` with an empty ~/.docker.
	for _, docker := range dockerCLIs(t) {
		out := must(append(env, "DOCKER_CONFIG="+t.TempDir()), docker, "gpurun", "version")
		if out != "gpurun "+distVersion+"\n" {
			t.Errorf("%s gpurun version: %q", docker, out)
		}
	}

	// An edited config survives reinstalling the package.
	edited := append(bytes.Clone(shipped), []byte("min = \"2g\"\n")...)
	if err := os.WriteFile(root.path(conf), edited, 0o644); err != nil {
		t.Fatal(err)
	}
	must(env, "dpkg", "-i", deb)
	if got, _ := os.ReadFile(root.path(conf)); !bytes.Equal(got, edited) {
		t.Errorf("reinstall replaced the edited %s", conf)
	}

	// dpkg -r removes the programs and keeps the conffile; dpkg -P purges it.
	must(env, "dpkg", "-r", "gpurun")
	for _, p := range []string{"/usr/bin/gpurun", "/usr/bin/gpurun-full", "/usr/bin/gpurun-runtime", "/usr/libexec/docker/cli-plugins/docker-gpurun", "/usr/share/man/man1/gpurun.1.gz"} {
		if _, err := os.Lstat(root.path(p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after dpkg -r, %s: %v", p, err)
		}
	}
	if got, err := os.ReadFile(root.path(conf)); err != nil || !bytes.Equal(got, edited) {
		t.Errorf("after dpkg -r, %s should stay (a conffile): %v", conf, err)
	}
	if s := status(); s != "deinstall ok config-files" {
		t.Errorf("after dpkg -r: status %q, want \"deinstall ok config-files\"", s)
	}
	must(env, "dpkg", "-P", "gpurun")
	if _, err := os.Stat(root.path(conf)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after dpkg -P, %s: %v", conf, err)
	}
	if s := status(); s != "" && !strings.Contains(s, "not-installed") {
		t.Errorf("after dpkg -P: status %q", s)
	}
}

func gunzipFile(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return string(data)
}

// dockerCLIs are the docker CLIs on this machine: Debian's 20.10 and, where
// there is one, a newer one in /usr/local/bin. At least one must exist.
func dockerCLIs(t *testing.T) []string {
	t.Helper()
	var found []string
	for _, p := range []string{"/usr/local/bin/docker", "/usr/bin/docker"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			found = append(found, p)
		}
	}
	if len(found) == 0 {
		t.Fatal("no docker CLI in /usr/local/bin or /usr/bin (apt-get install docker.io)")
	}
	return found
}

package harness

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// BusyboxRef is the image BusyboxImage builds.
const BusyboxRef = "gpurun-test/busybox:latest"

// baseApplets returns the busybox applets every test image links, whatever
// `busybox --list` says.
func baseApplets() []string {
	return []string{
		"sh", "df", "stat", "sleep", "cat", "echo", "mount", "umount", "ls", "grep", "awk", "head",
		"tail", "true", "false", "env", "id", "test", "dd", "mkdir", "rm", "touch", "wc", "sed",
		"tr", "cut", "ps", "kill", "printf", "readlink", "nproc", "timeout", "fallocate", "truncate",
	}
}

// imagePath is PATH inside the test images.
const imagePath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// staticBusybox returns the path of a statically linked busybox or fails the
// test: images are built FROM scratch, so a dynamically linked one would not
// run inside them.
func staticBusybox(t testing.TB) string {
	t.Helper()
	candidates := []string{"/bin/busybox", "/usr/bin/busybox"}
	if p, err := exec.LookPath("busybox"); err == nil {
		candidates = append(candidates, p)
	}
	for _, p := range candidates {
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		static := true
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				static = false
			}
		}
		f.Close()
		if static {
			return p
		}
	}
	t.Fatalf("harness: prerequisite missing: no statically linked busybox in %v (apt-get install -y busybox-static)", candidates)
	return ""
}

// BusyboxImage builds gpurun-test/busybox:latest (FROM scratch, a static
// /bin/busybox and `busybox --install -s /bin`, CMD /bin/sh) in d with the
// classic builder (DOCKER_BUILDKIT=0, --network none) and returns its
// reference. It builds once per daemon; later calls return the same ref.
func BusyboxImage(t testing.TB, d *Dockerd) string {
	t.Helper()
	d.shared.mu.Lock()
	defer d.shared.mu.Unlock()
	if d.shared.busybox != "" {
		return d.shared.busybox
	}
	bb := staticBusybox(t)
	ctx := filepath.Join(d.Dir, "build-busybox")
	if err := os.MkdirAll(ctx, 0o755); err != nil {
		t.Fatalf("harness: %v", err)
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatalf("harness: read %s: %v", bb, err)
	}
	if err := os.WriteFile(filepath.Join(ctx, "busybox"), data, 0o755); err != nil {
		t.Fatalf("harness: %v", err)
	}
	dockerfile := "FROM scratch\n" +
		"COPY busybox /bin/busybox\n" +
		"RUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\n" +
		"ENV " + imagePath + "\n" +
		"CMD [\"/bin/sh\"]\n"
	if err := os.WriteFile(filepath.Join(ctx, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		t.Fatalf("harness: %v", err)
	}
	begin := time.Now()
	cmd := d.DockerCmd("build", "--network", "none", "-t", BusyboxRef, ctx)
	cmd.Env = append(cmd.Env, "DOCKER_BUILDKIT=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("harness: docker build %s: %v\n%s\n--- dockerd log tail ---\n%s", BusyboxRef, err, out, d.LogTail(20))
	}
	t.Logf("harness: built %s in %s", BusyboxRef, time.Since(begin).Round(time.Millisecond))
	d.shared.busybox = BusyboxRef
	return BusyboxRef
}

// StaticBinaryImage builds ref in d: FROM scratch, the statically linked
// executable binary as /<name>, its ENTRYPOINT (classic builder, --network
// none), and returns ref. A dynamically linked binary fails the test: it
// could not run in an image without a libc.
func StaticBinaryImage(t testing.TB, d *Dockerd, ref, binary string) string {
	t.Helper()
	f, err := elf.Open(binary)
	if err != nil {
		t.Fatalf("harness: %s: %v", binary, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			f.Close()
			t.Fatalf("harness: %s is dynamically linked; a FROM-scratch image needs CGO_ENABLED=0", binary)
		}
	}
	f.Close()
	name := filepath.Base(binary)
	ctx, err := os.MkdirTemp(d.Dir, "build-")
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	data, err := os.ReadFile(binary)
	if err != nil {
		t.Fatalf("harness: read %s: %v", binary, err)
	}
	if err := os.WriteFile(filepath.Join(ctx, name), data, 0o755); err != nil {
		t.Fatalf("harness: %v", err)
	}
	dockerfile := fmt.Sprintf("FROM scratch\nCOPY %s /%s\nENTRYPOINT [\"/%s\"]\n", name, name, name)
	if err := os.WriteFile(filepath.Join(ctx, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		t.Fatalf("harness: %v", err)
	}
	cmd := d.DockerCmd("build", "--network", "none", "-t", ref, ctx)
	cmd.Env = append(cmd.Env, "DOCKER_BUILDKIT=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("harness: docker build %s: %v\n%s\n--- dockerd log tail ---\n%s", ref, err, out, d.LogTail(20))
	}
	return ref
}

// ImageTar writes a `docker save`-format archive (manifest.json, an image
// config, one uncompressed layer) of a busybox image tagged ref whose
// default command is cmd, into dir, and returns its path. The layer holds a
// static /bin/busybox, a symlink in /bin for each of its applets, /etc/passwd,
// /etc/group and the usual empty directories. It needs no engine: use it with
// `ctr images import`, `docker load` or `podman load`. A ref without a tag
// gets ":latest".
func ImageTar(t testing.TB, dir, ref string, cmd []string) string {
	t.Helper()
	bb := staticBusybox(t)
	busybox, err := os.ReadFile(bb)
	if err != nil {
		t.Fatalf("harness: read %s: %v", bb, err)
	}
	applets := baseApplets()
	if out, err := exec.Command(bb, "--list").Output(); err == nil {
		applets = append(applets, strings.Fields(string(out))...)
	}
	ref = withTag(ref)
	data, err := buildImageTar(ref, cmd, busybox, applets)
	if err != nil {
		t.Fatalf("harness: build image tar %s: %v", ref, err)
	}
	name := strings.NewReplacer("/", "_", ":", "_", "@", "_").Replace(ref) + ".tar"
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatalf("harness: write %s: %v", path, err)
	}
	return path
}

// withTag appends ":latest" to a reference without tag or digest.
func withTag(ref string) string {
	last := ref[strings.LastIndex(ref, "/")+1:]
	if strings.ContainsAny(last, ":@") {
		return ref
	}
	return ref + ":latest"
}

// epoch is the timestamp of every file and of the image itself, so that the
// same inputs give the same archive.
func epoch() time.Time { return time.Unix(0, 0).UTC() }

// buildImageTar assembles the docker-save archive of the busybox image in
// memory.
func buildImageTar(ref string, cmd []string, busybox []byte, applets []string) ([]byte, error) {
	layer, err := buildLayer(busybox, applets)
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	var buf bytes.Buffer
	err = writeImageArchive(&buf, ref, map[string]any{"Env": []string{imagePath}, "Cmd": cmd},
		layerSource{data: layer}, "gpurun integration harness: static busybox")
	if err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// buildLayer returns the uncompressed layer tar of the busybox image.
func buildLayer(busybox []byte, applets []string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := func(h *tar.Header) error {
		h.ModTime = epoch()
		h.Format = tar.FormatPAX
		return tw.WriteHeader(h)
	}
	for _, d := range []struct {
		name string
		mode int64
	}{
		{"bin/", 0o755}, {"dev/", 0o755}, {"etc/", 0o755}, {"proc/", 0o555}, {"root/", 0o700},
		{"run/", 0o755}, {"sbin/", 0o755}, {"sys/", 0o555}, {"tmp/", 0o1777}, {"usr/", 0o755},
		{"usr/bin/", 0o755}, {"usr/sbin/", 0o755}, {"var/", 0o755}, {"var/tmp/", 0o1777},
	} {
		if err := hdr(&tar.Header{Name: d.name, Mode: d.mode, Typeflag: tar.TypeDir}); err != nil {
			return nil, err
		}
	}
	files := []struct {
		name string
		mode int64
		data []byte
	}{
		{"bin/busybox", 0o755, busybox},
		{"etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")},
		{"etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n")},
	}
	for _, f := range files {
		if err := hdr(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	seen := map[string]bool{"busybox": true}
	var names []string
	for _, a := range applets {
		if a == "" || strings.Contains(a, "/") || seen[a] {
			continue
		}
		seen[a] = true
		names = append(names, a)
	}
	sort.Strings(names)
	for _, a := range names {
		if err := hdr(&tar.Header{Name: "bin/" + a, Linkname: "busybox", Mode: 0o777, Typeflag: tar.TypeSymlink}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

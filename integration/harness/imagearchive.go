package harness

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"
)

// layerSource is one uncompressed layer tar: in memory, or a file (read
// twice, for its digest and then into the archive, so that a large root
// filesystem is never held in memory).
type layerSource struct {
	data []byte
	path string
}

// digest returns the layer's sha256 (hex) and size.
func (l layerSource) digest() (string, int64, error) {
	if l.path == "" {
		sum := sha256.Sum256(l.data)
		return hex.EncodeToString(sum[:]), int64(len(l.data)), nil
	}
	f, err := os.Open(l.path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", l.path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// copyTo writes the layer to w.
func (l layerSource) copyTo(w io.Writer) error {
	if l.path == "" {
		_, err := w.Write(l.data)
		return err
	}
	f, err := os.Open(l.path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, bufio.NewReaderSize(f, 1<<20))
	return err
}

// writeImageArchive writes a `docker save`-format archive (the layer, an
// image config whose "config" is runConfig, manifest.json) of one image
// tagged ref to w. Everything is stamped with epoch, so the same inputs
// give the same bytes.
func writeImageArchive(w io.Writer, ref string, runConfig map[string]any, layer layerSource, createdBy string) error {
	layerHex, layerSize, err := layer.digest()
	if err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	config := map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      epoch().Format(time.RFC3339),
		"config":       runConfig,
		"rootfs": map[string]any{
			"type":     "layers",
			"diff_ids": []string{"sha256:" + layerHex},
		},
		"history": []map[string]any{{
			"created":    epoch().Format(time.RFC3339),
			"created_by": createdBy,
		}},
	}
	configJSON, err := json.Marshal(config)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	configSum := sha256.Sum256(configJSON)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	layerName := layerHex + "/layer.tar"
	manifest, err := json.Marshal([]map[string]any{{
		"Config":   configName,
		"RepoTags": []string{ref},
		"Layers":   []string{layerName},
	}})
	if err != nil {
		return fmt.Errorf("manifest: %w", err)
	}

	tw := tar.NewWriter(w)
	file := func(name string, size int64) error {
		return tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: epoch(), Typeflag: tar.TypeReg, Format: tar.FormatPAX})
	}
	if err := tw.WriteHeader(&tar.Header{Name: layerHex + "/", Mode: 0o755, ModTime: epoch(), Typeflag: tar.TypeDir, Format: tar.FormatPAX}); err != nil {
		return err
	}
	if err := file(layerName, layerSize); err != nil {
		return err
	}
	if err := layer.copyTo(tw); err != nil {
		return fmt.Errorf("write %s: %w", layerName, err)
	}
	for _, f := range []struct {
		name string
		data []byte
	}{
		{configName, configJSON},
		{"manifest.json", manifest},
	} {
		if err := file(f.name, int64(len(f.data))); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return fmt.Errorf("write %s: %w", f.name, err)
		}
	}
	return tw.Close()
}

// writeArchiveFile writes the archive of writeImageArchive to dir and
// returns its path.
func writeArchiveFile(dir, ref string, runConfig map[string]any, layer layerSource, createdBy string) (string, error) {
	name := strings.NewReplacer("/", "_", ":", "_", "@", "_").Replace(ref) + ".tar"
	p := filepath.Join(dir, name)
	f, err := os.Create(p)
	if err != nil {
		return "", err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := writeImageArchive(bw, ref, runConfig, layer, createdBy); err != nil {
		f.Close()
		return "", fmt.Errorf("image %s: %w", ref, err)
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return "", err
	}
	return p, f.Close()
}

// RootfsImageTar writes a docker-save archive of an image tagged ref whose
// one layer is the root filesystem tar rootfs (as `docker import` makes an
// image of it) with the run configuration cmd and env, into dir, and
// returns its path. The root filesystem is streamed, never held in memory.
func RootfsImageTar(t testing.TB, dir, ref, rootfs string, cmd, env []string) string {
	t.Helper()
	runConfig := map[string]any{"Cmd": cmd}
	if len(env) > 0 {
		runConfig["Env"] = env
	}
	p, err := writeArchiveFile(dir, withTag(ref), runConfig, layerSource{path: rootfs}, "gpurun integration harness: "+filepath.Base(rootfs))
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	return p
}

// DockerfileImageTar builds the image a FROM-scratch Dockerfile describes
// over the build context dir contextDir, with buildArgs (ARG values;
// TARGETARCH defaults to this machine's GOARCH, as BuildKit sets it),
// tagged ref, as a docker-save archive in dir, and returns its path. Only
// what a FROM-scratch image of files needs is understood — FROM scratch,
// ARG, LABEL, ENV, COPY (files of the context into a directory), USER,
// WORKDIR, ENTRYPOINT and CMD in their JSON form — and anything else fails
// the test: the image is the Dockerfile's, not a look-alike.
func DockerfileImageTar(t testing.TB, dir, ref, dockerfile, contextDir string, buildArgs map[string]string) string {
	t.Helper()
	text, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	args := map[string]string{"TARGETARCH": runtime.GOARCH, "TARGETOS": "linux"}
	for k, v := range buildArgs {
		args[k] = v
	}
	img, err := interpretDockerfile(string(text), contextDir, args)
	if err != nil {
		t.Fatalf("harness: %s: %v", dockerfile, err)
	}
	layer, err := img.layer()
	if err != nil {
		t.Fatalf("harness: %s: %v", dockerfile, err)
	}
	p, err := writeArchiveFile(dir, withTag(ref), img.runConfig, layerSource{data: layer}, "gpurun integration harness: "+dockerfile)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	return p
}

// dockerfileImage is what interpretDockerfile found.
type dockerfileImage struct {
	runConfig map[string]any
	files     map[string]string // path in the image (no leading /) -> file in the context
}

// dockerfileInstructions splits a Dockerfile into instructions: comments
// and blank lines dropped, backslash continuations joined.
func dockerfileInstructions(text string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() > 0 && strings.HasPrefix(trimmed, "#") {
			continue // a comment inside a continued instruction
		}
		if rest, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur.WriteString(rest + " ")
			continue
		}
		cur.WriteString(trimmed)
		out = append(out, cur.String())
		cur.Reset()
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// shellWords splits s into words, honouring double quotes.
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			quoted = !quoted
			inWord = true
		case c == '\\' && quoted && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case (c == ' ' || c == '\t') && !quoted:
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("unterminated quote in %q", s)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// interpretDockerfile runs the instructions of a FROM-scratch Dockerfile.
func interpretDockerfile(text, contextDir string, args map[string]string) (*dockerfileImage, error) {
	img := &dockerfileImage{runConfig: map[string]any{}, files: map[string]string{}}
	declared := map[string]string{}
	expand := func(s string) string {
		return os.Expand(s, func(k string) string { return declared[k] })
	}
	labels := map[string]string{}
	var env []string
	from := false
	for _, ins := range dockerfileInstructions(text) {
		op, rest, _ := strings.Cut(ins, " ")
		rest = strings.TrimSpace(rest)
		op = strings.ToUpper(op)
		if !from && op != "FROM" && op != "ARG" {
			return nil, fmt.Errorf("%s before FROM", op)
		}
		switch op {
		case "FROM":
			if rest != "scratch" {
				return nil, fmt.Errorf("FROM %s: only FROM scratch is understood", rest)
			}
			from = true
		case "ARG":
			name, def, _ := strings.Cut(rest, "=")
			if v, ok := args[name]; ok {
				declared[name] = v
			} else {
				declared[name] = strings.Trim(def, `"`)
			}
		case "LABEL", "ENV":
			words, err := shellWords(expand(rest))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", op, err)
			}
			for _, w := range words {
				k, v, ok := strings.Cut(w, "=")
				if !ok {
					return nil, fmt.Errorf("%s %q: want key=value", op, w)
				}
				if op == "LABEL" {
					labels[k] = v
				} else {
					env = append(env, k+"="+v)
				}
			}
		case "COPY":
			words, err := shellWords(expand(rest))
			if err != nil || len(words) < 2 {
				return nil, fmt.Errorf("COPY %s: want sources and a destination", rest)
			}
			if strings.HasPrefix(words[0], "--") {
				return nil, fmt.Errorf("COPY %s: flags are not understood", rest)
			}
			dest := words[len(words)-1]
			srcs := words[:len(words)-1]
			if len(srcs) > 1 && !strings.HasSuffix(dest, "/") {
				return nil, fmt.Errorf("COPY %s: several sources need a directory destination", rest)
			}
			for _, src := range srcs {
				from := filepath.Join(contextDir, filepath.FromSlash(src))
				fi, err := os.Stat(from)
				if err != nil {
					return nil, fmt.Errorf("COPY %s: %w", src, err)
				}
				if !fi.Mode().IsRegular() {
					return nil, fmt.Errorf("COPY %s: only regular files are understood", src)
				}
				to := dest
				if strings.HasSuffix(dest, "/") {
					to = path.Join(dest, path.Base(src))
				}
				img.files[strings.TrimPrefix(path.Clean(to), "/")] = from
			}
		case "USER":
			img.runConfig["User"] = expand(rest)
		case "WORKDIR":
			img.runConfig["WorkingDir"] = expand(rest)
		case "ENTRYPOINT", "CMD":
			var v []string
			if err := json.Unmarshal([]byte(rest), &v); err != nil {
				return nil, fmt.Errorf("%s %s: only the JSON form is understood: %w", op, rest, err)
			}
			key := "Entrypoint"
			if op == "CMD" {
				key = "Cmd"
			}
			img.runConfig[key] = v
		default:
			return nil, fmt.Errorf("instruction %s is not understood", op)
		}
	}
	if !from {
		return nil, fmt.Errorf("no FROM")
	}
	if len(labels) > 0 {
		img.runConfig["Labels"] = labels
	}
	if len(env) > 0 {
		img.runConfig["Env"] = env
	}
	return img, nil
}

// layer returns the layer tar of the image's files, with their parent
// directories (0755, as COPY makes them).
func (img *dockerfileImage) layer() ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	names := make([]string, 0, len(img.files))
	for n := range img.files {
		names = append(names, n)
	}
	sort.Strings(names)
	dirs := map[string]bool{}
	for _, n := range names {
		var parents []string
		for d := path.Dir(n); d != "." && !dirs[d]; d = path.Dir(d) {
			parents = append(parents, d)
			dirs[d] = true
		}
		for i := len(parents) - 1; i >= 0; i-- {
			if err := tw.WriteHeader(&tar.Header{Name: parents[i] + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: epoch(), Format: tar.FormatPAX}); err != nil {
				return nil, err
			}
		}
		data, err := os.ReadFile(img.files[n])
		if err != nil {
			return nil, err
		}
		fi, err := os.Stat(img.files[n])
		if err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: int64(fi.Mode().Perm()), Size: int64(len(data)), Typeflag: tar.TypeReg, ModTime: epoch(), Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

package containerd

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
)

// release runs `containerd --version` and returns the release it prints
// ("containerd github.com/containerd/containerd 1.6.20~ds1 ..." gives
// "1.6.20~ds1").
func release(ctx context.Context, o LoadOptions) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, dumpTimeout)
	defer cancel()
	cmd := o.command(ctx, "--version")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w: %s", o.Containerd, err, lastLine(stderr.String()))
	}
	return ParseRelease(string(out))
}

// ParseRelease returns the release in the output of containerd --version.
func ParseRelease(out string) (string, error) {
	f := strings.Fields(out)
	if len(f) < 3 || f[0] != "containerd" {
		return "", fmt.Errorf("containerd --version printed %q", strings.TrimSpace(out))
	}
	return strings.TrimPrefix(f[2], "v"), nil
}

// releaseNumbers returns the major, minor and patch numbers of a release
// ("1.6.20~ds1" gives 1, 6, 20); ok is false when it has none.
func releaseNumbers(r string) (major, minor, patch int, ok bool) {
	parts := strings.SplitN(r, ".", 3)
	if len(parts) < 3 {
		return 0, 0, 0, false
	}
	end := strings.IndexFunc(parts[2], func(c rune) bool { return c < '0' || c > '9' })
	if end >= 0 {
		parts[2] = parts[2][:end]
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil {
			return 0, 0, 0, false
		}
		n[i] = v
	}
	return n[0], n[1], n[2], true
}

// generationOf is the generation of a release (InferGeneration when it
// cannot tell).
func generationOf(r string) Generation {
	major, _, _, ok := releaseNumbers(r)
	switch {
	case !ok:
		return InferGeneration
	case major <= 1:
		return Containerd1
	}
	return Containerd2
}

// globFromWorkDir reports whether a release matches a relative glob in
// imports against its working directory: releases before 1.6.29 and
// 1.7.16 (containerd pull requests 9835 and 9834, "Fix config import
// relative path glob").
func globFromWorkDir(r string) bool {
	major, minor, patch, ok := releaseNumbers(r)
	if !ok || major != 1 {
		return false
	}
	switch {
	case minor < 6:
		return true
	case minor == 6:
		return patch < 29
	case minor == 7:
		return patch < 16
	}
	return false
}

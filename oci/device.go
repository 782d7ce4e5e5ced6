package oci

import (
	"path"
	"strings"
)

// Device is what one device path, or one CDI device name, gives a
// container: the single answer every front door uses (docker run's
// --device, compose's devices, docker inspect, a spec's linux.devices,
// NRI's devices, the device nodes doctor sees).
type Device struct {
	// GPU is true for a GPU or accelerator.
	GPU bool
	// Count is how many GPUs it stands for: 1 for one device, 0 where it
	// cannot be told (a directory of devices, AMD's /dev/kfd, a CDI "all").
	Count int
	// Family groups devices that count the same GPUs ("nvidia", "render",
	// "accel", "kfd", "cdi"): a container's GPU count is the largest of its
	// families' sums, so /dev/kfd next to two render nodes is two GPUs.
	Family string
}

// ClassifyDevice says what a device gives a container, by its path inside
// the container (path.Clean'ed) or its CDI name:
//
//   - /dev/nvidia<N>: one NVIDIA GPU. /dev/nvidiactl, /dev/nvidia-uvm,
//     /dev/nvidia-uvm-tools, /dev/nvidia-modeset and /dev/nvidia-caps/* are
//     the driver's control nodes, which every NVIDIA container gets next to
//     its GPUs: alone they give no GPU.
//   - /dev/dri: the directory; the engines expand it to every node under
//     it, the render nodes included: GPUs, count unknown.
//   - /dev/dri/renderD<N>: one GPU's render node (compute, VA-API, ROCm).
//     /dev/dri/card<N> is a display (KMS) node: no GPU by itself.
//   - /dev/kfd: AMD's compute interface; the render nodes beside it say
//     how many GPUs.
//   - /dev/accel (the directory), /dev/accel/accel<N>, /dev/accel<N>:
//     compute accelerators (Habana, Intel NPU, and the kernel's accel class).
//   - a CDI name vendor/class=name: a GPU when the class is "gpu" or
//     "accel", or the vendor is habana.ai; name "all" counts as unknown.
//
// Anything else is no GPU.
func ClassifyDevice(p string) Device {
	if vendor, class, name, ok := cdiName(p); ok {
		if class == "gpu" || class == "accel" || vendor == "habana.ai" {
			n := 1
			if name == "all" {
				n = 0
			}
			return Device{GPU: true, Count: n, Family: "cdi"}
		}
		return Device{}
	}
	if !strings.HasPrefix(p, "/") {
		return Device{}
	}
	p = path.Clean(p)
	switch {
	case p == "/dev/kfd":
		return Device{GPU: true, Family: "kfd"}
	case p == "/dev/dri":
		return Device{GPU: true, Family: "render"}
	case p == "/dev/accel":
		return Device{GPU: true, Family: "accel"}
	case numbered(p, "/dev/nvidia"):
		return Device{GPU: true, Count: 1, Family: "nvidia"}
	case numbered(p, "/dev/dri/renderD"):
		return Device{GPU: true, Count: 1, Family: "render"}
	case numbered(p, "/dev/accel/accel"), numbered(p, "/dev/accel"):
		return Device{GPU: true, Count: 1, Family: "accel"}
	}
	return Device{}
}

// numbered reports whether p is prefix followed by one or more digits.
func numbered(p, prefix string) bool {
	rest, ok := strings.CutPrefix(p, prefix)
	if !ok || rest == "" {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if rest[i] < '0' || rest[i] > '9' {
			return false
		}
	}
	return true
}

// cdiName parses a fully qualified CDI device name, vendor/class=name, with
// the character rules of tags.cncf.io/container-device-interface's
// IsQualifiedName (the way the docker CLI tells CDI names from paths).
func cdiName(s string) (vendor, class, name string, ok bool) {
	if s == "" || s[0] == '/' {
		return "", "", "", false
	}
	kind, name, found := strings.Cut(s, "=")
	if !found || kind == "" || name == "" {
		return "", "", "", false
	}
	vendor, class, found = strings.Cut(kind, "/")
	if !found || !validCDIVendorOrClass(vendor) || !validCDIVendorOrClass(class) || !validCDIDeviceName(name) {
		return "", "", "", false
	}
	return vendor, class, name, true
}

// IsCDIName reports whether s is a fully qualified CDI device name
// (vendor/class=name) rather than a device path.
func IsCDIName(s string) bool {
	_, _, _, ok := cdiName(s)
	return ok
}

func isLetter(c byte) bool { return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' }

func isAlnum(c byte) bool { return isLetter(c) || '0' <= c && c <= '9' }

// validCDIVendorOrClass: a letter, then letters, digits, '_', '-', '.',
// ending with a letter or digit.
func validCDIVendorOrClass(s string) bool {
	if s == "" || !isLetter(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if c := s[i]; !isAlnum(c) && c != '_' && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

// validCDIDeviceName: starts and ends with a letter or digit; inside,
// letters, digits, '_', '-', '.', ':'.
func validCDIDeviceName(s string) bool {
	if s == "" || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if c := s[i]; !isAlnum(c) && c != '_' && c != '-' && c != '.' && c != ':' {
			return false
		}
	}
	return true
}

package oci

import (
	"path"
	"slices"
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

// DeviceNode is one row of the device-node part of the evidence table: a
// path inside the container that is a GPU (or a directory of GPUs).
type DeviceNode struct {
	// Path is the node's path, or with Numbered its prefix.
	Path string
	// Numbered says Path is followed by one or more digits (one device a
	// number: /dev/nvidia0).
	Numbered bool
	// Family groups the nodes that count the same GPUs (see Device).
	Family string
	// Count is how many GPUs it stands for: 1, or 0 where it cannot be
	// told (a directory, AMD's /dev/kfd).
	Count int
}

// DeviceNodes are the device nodes that give a container GPUs, by their
// path inside the container:
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
func DeviceNodes() []DeviceNode {
	return []DeviceNode{
		{Path: "/dev/kfd", Family: "kfd"},
		{Path: "/dev/dri", Family: "render"},
		{Path: "/dev/accel", Family: "accel"},
		{Path: "/dev/nvidia", Numbered: true, Family: "nvidia", Count: 1},
		{Path: "/dev/dri/renderD", Numbered: true, Family: "render", Count: 1},
		{Path: "/dev/accel/accel", Numbered: true, Family: "accel", Count: 1},
		{Path: "/dev/accel", Numbered: true, Family: "accel", Count: 1},
	}
}

// CDIKinds say which CDI devices (vendor/class=name) are GPUs: those of a
// class or of a vendor listed.
type CDIKinds struct {
	Classes, Vendors []string
}

// GPUCDIKinds are the CDI devices that are GPUs: classes "gpu" (NVIDIA's
// nvidia.com/gpu, AMD's amd.com/gpu, Intel's intel.com/gpu) and "accel",
// and every device of vendor habana.ai (its classes are the chips' names).
func GPUCDIKinds() CDIKinds {
	return CDIKinds{Classes: []string{"gpu", "accel"}, Vendors: []string{"habana.ai"}}
}

// Device says what a device gives a container, by its path inside the
// container (path.Clean'ed; a row of DeviceNodes) or its CDI name (a GPU
// of CDIKinds; name "all" counts as unknown). Anything else is no GPU.
func (ev Evidence) Device(p string) Device {
	if vendor, class, name, ok := cdiName(p); ok {
		if slices.Contains(ev.CDIKinds.Classes, class) || slices.Contains(ev.CDIKinds.Vendors, vendor) {
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
	for _, n := range ev.DeviceNodes {
		if (!n.Numbered && p == n.Path) || (n.Numbered && numbered(p, n.Path)) {
			return Device{GPU: true, Count: n.Count, Family: n.Family}
		}
	}
	return Device{}
}

// ClassifyDevice is Evidence.Device with the built-in device table (the
// policy changes no part of it): for what a host's /dev shows.
func ClassifyDevice(p string) Device {
	return Evidence{DeviceNodes: DeviceNodes(), CDIKinds: GPUCDIKinds()}.Device(p)
}

// DeviceDirs are the directories that hold DeviceNodes ("/dev",
// "/dev/dri", "/dev/accel"), for those that list a host's or a
// container's GPUs.
func DeviceDirs() []string {
	var dirs []string
	for _, n := range DeviceNodes() {
		if d := path.Dir(n.Path); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// MayBeDeviceNode reports whether name, an entry of one of DeviceDirs,
// can be one of DeviceNodes: a cheap filter before a path is built and
// the node is looked at (most of /dev is not).
func MayBeDeviceNode(name string) bool {
	for _, n := range DeviceNodes() {
		if base := path.Base(n.Path); name == base || (n.Numbered && strings.HasPrefix(name, base)) {
			return true
		}
	}
	return false
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

// Package crio knows CRI-O's configuration as far as gpurun changes it:
// the pod annotations that size a pod's /dev/shm and the drop-in that
// allows them.
package crio

import (
	"fmt"
	"strconv"
)

// CRI-O's pod annotations that set the size of a pod's /dev/shm. CRI-O
// honours one only where its configuration allows it (allowed_annotations
// of the runtime handler or of an activated workload), and refuses to start
// with a name it does not know: releases before the "*.crio.io" annotation
// names know only ShmAnnotationV1.
const (
	ShmAnnotation   = "shm-size.crio.io"
	ShmAnnotationV1 = "io.kubernetes.cri-o.ShmSize"
)

// CRI-O's drop-in configuration directory, and the file gpurun writes there.
const (
	DropInDir  = "/etc/crio/crio.conf.d"
	DropInName = "99-gpurun.conf"
)

// Workload is the CRI-O workload gpurun's drop-in defines.
const Workload = "gpurun-shm-size"

// ShmDropIn returns a CRI-O drop-in (crio.conf(5), TOML) that lets a
// pod size its /dev/shm with the annotation: a workload that the annotation
// itself activates and that allows it. It defines only that workload's
// table, so the runtime handlers and every other setting stay as the
// node's configuration has them (a drop-in's [crio.runtime.runtimes.X]
// table would replace the whole handler X).
func ShmDropIn(annotation string) ([]byte, error) {
	if annotation != ShmAnnotation && annotation != ShmAnnotationV1 {
		return nil, fmt.Errorf("CRI-O shm annotation %q: want %q (current CRI-O) or %q (older releases)", annotation, ShmAnnotation, ShmAnnotationV1)
	}
	q := strconv.Quote(annotation)
	return []byte(`# Written by "gpurun install crio": pods may size their /dev/shm with the
# ` + annotation + ` annotation (a Kubernetes quantity, e.g. "8Gi").
# "gpurun uninstall crio" removes this file. CRI-O reads it when it starts.
[crio.runtime.workloads.` + Workload + `]
activation_annotation = ` + q + `
allowed_annotations = [` + q + `]
`), nil
}

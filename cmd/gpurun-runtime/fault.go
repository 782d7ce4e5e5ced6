//go:build gpurunfault

package main

import (
	"github.com/gpurun/gpurun/node/shim"
	"github.com/gpurun/gpurun/oci"
)

// newShim is the shim of a binary built for the integration tests only
// (go build -tags gpurunfault): reading the host's facts panics inside the
// enforcer, so that the tests show a panic on create fails open, or closed
// with fail_closed, under a real engine. Release builds have no such path.
func newShim() *shim.Shim {
	s := shim.New()
	s.Facts = func() (oci.Facts, error) { panic("injected fault (gpurun-runtime built with -tags gpurunfault)") }
	return s
}

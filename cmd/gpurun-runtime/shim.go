//go:build !gpurunfault

package main

import "github.com/gpurun/gpurun/node/shim"

// newShim is the shim of this process.
func newShim() *shim.Shim { return shim.New() }

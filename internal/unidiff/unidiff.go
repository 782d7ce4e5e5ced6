// Package unidiff shows an edit of a file as a unified diff.
package unidiff

import (
	"bytes"

	udiff "github.com/aymanbagabas/go-udiff"
)

// Unified returns a unified diff (three lines of context) from before
// to after, both headers naming name, or "" when they are equal.
func Unified(name string, before, after []byte) string {
	if bytes.Equal(before, after) {
		return ""
	}
	return udiff.Unified(name, name, string(before), string(after))
}

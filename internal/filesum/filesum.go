// Package filesum hashes files. It is apart from atomicfile, which every
// container start links (gpurun-runtime, the OCI hook), so that they do
// not link crypto/sha256 and its FIPS module.
package filesum

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"github.com/gpurun/gpurun/internal/atomicfile"
)

// SHA256 returns the hex SHA-256 of path's content, read in small pieces
// (a binary is tens of MiB, and its reader may run in a small memory
// limit) from a file OpenFile opens. A file that cannot be opened gives
// OpenFile's *fs.PathError (fs.ErrNotExist for a missing one).
func SHA256(path string) (string, error) {
	f, err := atomicfile.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

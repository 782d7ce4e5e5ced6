// Package engineconf writes container engines' hook configuration for
// gpurun: the OCI hook definition Podman and CRI-O read from hooks.d, and
// CRI-O's drop-in that lets pods size /dev/shm; and shows edits as unified
// diffs. Its sub-packages edit the engines' own configuration files, each
// keeping every setting it does not own, idempotent, and able to undo
// exactly what it did: docker (dockerd's daemon.json) and containerd
// (containerd's config.toml), on top of tomledit (lossless TOML editing)
// and cfgtree (decoded documents, and the check that an edit changed only
// what it meant to). The functions are pure (bytes in, bytes out);
// writing, backups and reloading the engine are the caller's.
package engineconf

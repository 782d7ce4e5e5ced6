// Package engineconf edits container engines' configuration files to
// register gpurun-runtime: Docker's daemon.json and containerd's
// config.toml (versions 2 and 3, with drop-ins). Every editor keeps every
// setting it does not own, is idempotent, and can undo exactly what it did.
// The functions here are pure (bytes in, bytes out); writing, backups and
// reloading the engine are the caller's.
package engineconf

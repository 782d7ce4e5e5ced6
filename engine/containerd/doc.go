// Package containerd reads containerd's configuration the way
// containerd does: the main config.toml and the files it imports (globs,
// paths relative to the importing file, imports of imports), merged by the
// rules of the containerd that reads them, for config versions 2, 3 and 4.
// It answers what gpurun needs to know: the CRI plugin ids, root and state,
// the gRPC socket, the runtime handlers and the default one, the CNI
// directories, NRI and the sandbox image. With a containerd binary at hand
// it can also ask containerd itself (containerd config dump) and read that.
//
// It also registers gpurun-runtime as a runtime handler in containerd's
// config.toml (Install, DropIn, Uninstall): versions 2 (containerd 1.x), 3
// and 4 (containerd 2.x), in place or in a drop-in the main config imports.
// The handler copies the settings of the runtime it stands in for (the
// default handler, which may be NVIDIA's runtime: gpurun-runtime then
// chains to it), can be made the default, and uninstall undoes exactly
// what install did. Every other byte of the files is kept (package
// tomledit does the editing), and every edit is checked, re-parsed, to
// change nothing but gpurun's settings. The editing functions are pure
// (bytes in, bytes out); writing, backups and restarting containerd are
// the caller's.
package containerd

// Package containerd reads containerd's configuration the way
// containerd does: the main config.toml and the files it imports (globs,
// paths relative to the importing file, imports of imports), merged by the
// rules of the containerd that reads them, for config versions 2, 3 and 4.
// It answers what gpurun needs to know: the CRI plugin ids, root and state,
// the gRPC socket, the runtime handlers and the default one, the CNI
// directories, NRI and the sandbox image. With a containerd binary at hand
// it can also ask containerd itself (containerd config dump) and read that.
package containerd

package containerd

// Plugin ids of the sections gpurun reads. Versions 3 and 4 (containerd
// 2.x) split containerd 1.x's CRI plugin (version 2) into a runtime and an
// images plugin, and version 4 moved the server settings ([grpc] and the
// rest) into server plugins.
const (
	// CRIPluginV2 is the CRI plugin of a version 2 config: its containerd
	// table holds the runtime handlers, and it has cni, sandbox_image and
	// the image settings.
	CRIPluginV2 = "io.containerd.grpc.v1.cri"
	// CRIRuntimePlugin holds the runtime handlers and cni in versions 3
	// and 4.
	CRIRuntimePlugin = "io.containerd.cri.v1.runtime"
	// CRIImagesPlugin holds the image settings (pinned_images.sandbox, the
	// sandbox image) in versions 3 and 4.
	CRIImagesPlugin = "io.containerd.cri.v1.images"
	// GRPCServerPlugin holds the gRPC socket's address in version 4.
	GRPCServerPlugin = "io.containerd.server.v1.grpc"
	// TTRPCServerPlugin, DebugServerPlugin, MetricsServerPlugin and
	// GRPCTCPServerPlugin hold the other server settings in version 4.
	TTRPCServerPlugin   = "io.containerd.server.v1.ttrpc"
	DebugServerPlugin   = "io.containerd.server.v1.debug"
	MetricsServerPlugin = "io.containerd.server.v1.metrics"
	GRPCTCPServerPlugin = "io.containerd.server.v1.grpc-tcp"
	// NRIPlugin is the NRI plugin (containerd 1.7 and 2.x).
	NRIPlugin = "io.containerd.nri.v1.nri"
)

// RuncV2 is the runtime_type of runc-compatible runtime handlers: the
// shim that runs options.BinaryName (runc by default; gpurun-runtime).
const RuncV2 = "io.containerd.runc.v2"

// RuntimePluginID is the plugin whose containerd table holds the runtime
// handlers (runtimes, default_runtime_name) in a config of the version.
func RuntimePluginID(version int) string {
	if version <= 2 {
		return CRIPluginV2
	}
	return CRIRuntimePlugin
}

// ImagesPluginID is the plugin that holds the sandbox image in a config of
// the version.
func ImagesPluginID(version int) string {
	if version <= 2 {
		return CRIPluginV2
	}
	return CRIImagesPlugin
}

// CRIPluginIDs lists the plugin ids of the CRI plugin in a config of the
// version: the one plugin of version 2, the runtime and images plugins of
// versions 3 and 4.
func CRIPluginIDs(version int) []string {
	if version <= 2 {
		return []string{CRIPluginV2}
	}
	return []string{CRIRuntimePlugin, CRIImagesPlugin}
}

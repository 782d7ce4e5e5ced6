package harness

import (
	"context"
	"strings"
	"time"
)

// ConfigureDocker runs `nvidia-ctk runtime configure --runtime=docker`
// on daemonJSON (a dockerd's daemon.json, or a copy), as an administrator
// sets up a Docker GPU host: the toolkit's nvidia-container-runtime
// registered as runtime "nvidia", and made the default when setDefault.
// NVIDIA's runtime reads the config RuntimeConfig wrote through the
// daemon's environment (RuntimeEnv). It does not reload dockerd. It
// returns nvidia-ctk's output, failing the test on an error.
func (n *NVIDIA) ConfigureDocker(daemonJSON string, setDefault bool) string {
	n.t.Helper()
	args := []string{"runtime", "configure", "--runtime=docker", "--config=" + daemonJSON,
		"--nvidia-runtime-path=" + n.Bin("nvidia-container-runtime")}
	if setDefault {
		args = append(args, "--set-as-default")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, errOut, err := runCmd(ctx, nil, n.Bin("nvidia-ctk"), args...)
	if err != nil {
		n.t.Fatalf("harness: nvidia-ctk %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return out + errOut
}

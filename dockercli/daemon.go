package dockercli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
)

// Endpoint is where the docker CLI would connect, resolved as it does:
// DOCKER_HOST, else the context named by DOCKER_CONTEXT, else the config
// file's currentContext, else the default socket.
type Endpoint struct {
	Host string
	// TLSDir holds ca.pem, cert.pem and key.pem of a context, if it has them.
	TLSDir string
	// Context is the context's name, "" for DOCKER_HOST or the default.
	Context string
}

// ResolveEndpoint resolves the daemon endpoint from the environment and the
// docker CLI's configuration directory ($DOCKER_CONFIG, else ~/.docker).
func ResolveEndpoint(getenv func(string) string) (Endpoint, error) {
	if h := getenv("DOCKER_HOST"); h != "" {
		return Endpoint{Host: h}, nil
	}
	dir := getenv("DOCKER_CONFIG")
	if dir == "" {
		home := getenv("HOME")
		if home == "" {
			home, _ = os.UserHomeDir()
		}
		dir = filepath.Join(home, ".docker")
	}
	name := getenv("DOCKER_CONTEXT")
	if name == "" {
		var cfg struct {
			CurrentContext string `json:"currentContext"`
		}
		if data, err := os.ReadFile(filepath.Join(dir, "config.json")); err == nil {
			if err := json.Unmarshal(data, &cfg); err != nil {
				return Endpoint{}, fmt.Errorf("read %s: %w", filepath.Join(dir, "config.json"), err)
			}
			name = cfg.CurrentContext
		}
	}
	if name == "" || name == "default" {
		return Endpoint{Host: client.DefaultDockerHost}, nil
	}
	sum := sha256.Sum256([]byte(name))
	id := hex.EncodeToString(sum[:])
	metaPath := filepath.Join(dir, "contexts", "meta", id, "meta.json")
	data, err := os.ReadFile(metaPath)
	if err != nil {
		return Endpoint{}, fmt.Errorf("docker context %q: %w", name, err)
	}
	var meta struct {
		Endpoints map[string]struct {
			Host string `json:"Host"`
		} `json:"Endpoints"`
	}
	if err := json.Unmarshal(data, &meta); err != nil {
		return Endpoint{}, fmt.Errorf("docker context %q: %s: %w", name, metaPath, err)
	}
	ep := Endpoint{Host: meta.Endpoints["docker"].Host, Context: name}
	if ep.Host == "" {
		return Endpoint{}, fmt.Errorf("docker context %q has no docker endpoint", name)
	}
	tlsDir := filepath.Join(dir, "contexts", "tls", id, "docker")
	if _, err := os.Stat(filepath.Join(tlsDir, "ca.pem")); err == nil {
		ep.TLSDir = tlsDir
	}
	return ep, nil
}

// APIDaemon asks the Docker Engine API, with the official client.
type APIDaemon struct {
	c *client.Client
}

// NewAPIDaemon connects (lazily) to the endpoint the docker CLI would use.
// The TLS variables (DOCKER_TLS_VERIFY, DOCKER_CERT_PATH) and
// DOCKER_API_VERSION apply as they do for the CLI.
func NewAPIDaemon(getenv func(string) string) (*APIDaemon, error) {
	c, err := NewClient(getenv)
	if err != nil {
		return nil, err
	}
	return &APIDaemon{c: c}, nil
}

// NewClient returns a Docker Engine API client for the endpoint the docker
// CLI would use (see ResolveEndpoint), with API version negotiation. The
// TLS variables (DOCKER_TLS_VERIFY, DOCKER_CERT_PATH) and
// DOCKER_API_VERSION apply as they do for the CLI.
func NewClient(getenv func(string) string) (*client.Client, error) {
	ep, err := ResolveEndpoint(getenv)
	if err != nil {
		return nil, err
	}
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation(), client.WithHost(ep.Host)}
	if ep.TLSDir != "" {
		opts = append(opts, client.WithTLSClientConfig(
			filepath.Join(ep.TLSDir, "ca.pem"), filepath.Join(ep.TLSDir, "cert.pem"), filepath.Join(ep.TLSDir, "key.pem")))
	}
	c, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker client for %s: %w", ep.Host, err)
	}
	return c, nil
}

// Close releases the client's connections.
func (d *APIDaemon) Close() error { return d.c.Close() }

// Facts implements Daemon.
func (d *APIDaemon) Facts(ctx context.Context) (Facts, error) {
	info, err := d.c.Info(ctx)
	if err != nil {
		return Facts{}, fmt.Errorf("docker info: %w", err)
	}
	return Facts{MemTotal: info.MemTotal}, nil
}

// ImageEnv implements Daemon.
func (d *APIDaemon) ImageEnv(ctx context.Context, image string) ([]string, error) {
	img, err := d.c.ImageInspect(ctx, image)
	if err != nil {
		return nil, fmt.Errorf("inspect image: %w", err)
	}
	if img.Config == nil {
		return nil, nil
	}
	return img.Config.Env, nil
}

// DefaultShmSize implements Daemon. The API does not report the daemon's
// default-shm-size, but the daemon fills it into every container it creates
// without one: create a throwaway container of the image (never started),
// read its ShmSize, and remove it.
func (d *APIDaemon) DefaultShmSize(ctx context.Context, image string) (int64, error) {
	created, err := d.c.ContainerCreate(ctx,
		&container.Config{Image: image, Cmd: []string{"true"}, Labels: map[string]string{"io.gpurun.probe": "default-shm-size"}},
		&container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		return 0, fmt.Errorf("probe container: %w", err)
	}
	defer func() {
		_ = d.c.ContainerRemove(context.WithoutCancel(ctx), created.ID, container.RemoveOptions{Force: true})
	}()
	inspected, err := d.c.ContainerInspect(ctx, created.ID)
	if err != nil {
		return 0, fmt.Errorf("probe container: %w", err)
	}
	if inspected.HostConfig == nil || inspected.HostConfig.ShmSize <= 0 {
		return 0, errors.New("probe container: no ShmSize")
	}
	return inspected.HostConfig.ShmSize, nil
}

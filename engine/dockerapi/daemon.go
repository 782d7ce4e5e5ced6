// Package dockerapi asks the Docker daemon what only it knows, over the
// Docker Engine API with the official client: the endpoint the docker CLI
// would use (DOCKER_HOST, contexts, TLS), the daemon host's memory, an
// image's environment, the default-shm-size it gives a container (learned
// once and cached), and whether the daemon runs on this host (OnThisHost).
// gpurun run, doctor, resize and stats use it.
package dockerapi

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/docker/go-connections/tlsconfig"
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
	dir := configDir(getenv)
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
	c    *client.Client
	host string
	info *infoOnce
	// Cache keeps the daemon's default-shm-size between runs (see
	// ShmCache); the zero value asks the daemon every time.
	Cache ShmCache
	// Local says the daemon runs on this host (OnThisHost): it is then
	// known by its socket and its clock is this host's, which spares
	// docker info. False asks the daemon.
	Local bool
}

// NewAPIDaemon connects (lazily) to the endpoint the docker CLI would use.
// The TLS variables (DOCKER_TLS, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH) and
// DOCKER_API_VERSION apply as they do for the CLI; files are the CLI's
// --tlscacert, --tlscert and --tlskey, when given.
func NewAPIDaemon(getenv func(string) string, files TLSFiles) (*APIDaemon, error) {
	c, err := newClient(getenv, files)
	if err != nil {
		return nil, err
	}
	return &APIDaemon{c: c, host: c.DaemonHost(), info: &infoOnce{}}, nil
}

// TLSFiles are the docker CLI's --tlscacert, --tlscert and --tlskey; ""
// for one not given.
type TLSFiles struct {
	CACert, Cert, Key string
}

// NewClient returns a Docker Engine API client for the endpoint the docker
// CLI would use (see ResolveEndpoint), with API version negotiation. The
// TLS variables (DOCKER_TLS, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH) and
// DOCKER_API_VERSION apply as they do for the CLI.
func NewClient(getenv func(string) string) (*client.Client, error) {
	return newClient(getenv, TLSFiles{})
}

func newClient(getenv func(string) string, files TLSFiles) (*client.Client, error) {
	ep, err := ResolveEndpoint(getenv)
	if err != nil {
		return nil, err
	}
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	switch cfg, err := cliTLS(getenv, files); {
	case err != nil:
		return nil, fmt.Errorf("docker client for %s: %w", ep.Host, err)
	case cfg != nil && ep.Context == "":
		opts = append(opts, client.WithHTTPClient(&http.Client{
			Transport: &http.Transport{TLSClientConfig: cfg}, CheckRedirect: client.CheckRedirect}))
	}
	opts = append(opts, client.WithHost(ep.Host))
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

// cliTLS is the TLS configuration the docker CLI uses for a host given by
// -H or DOCKER_HOST: none unless --tls (DOCKER_TLS) or --tlsverify
// (DOCKER_TLS_VERIFY) is set; then ca.pem, cert.pem and key.pem from
// DOCKER_CERT_PATH, else the configuration directory, each unless named
// by its flag (a default file that does not exist is left out), and the
// daemon's certificate verified only with --tlsverify.
func cliTLS(getenv func(string) string, files TLSFiles) (*tls.Config, error) {
	verify := getenv("DOCKER_TLS_VERIFY") != ""
	if !verify && getenv("DOCKER_TLS") == "" {
		return nil, nil
	}
	dir := getenv("DOCKER_CERT_PATH")
	if dir == "" {
		dir = configDir(getenv)
	}
	pick := func(given, name string) string {
		if given != "" {
			return given
		}
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil {
			return ""
		}
		return p
	}
	opts := tlsconfig.Options{
		CAFile:             pick(files.CACert, "ca.pem"),
		CertFile:           pick(files.Cert, "cert.pem"),
		KeyFile:            pick(files.Key, "key.pem"),
		InsecureSkipVerify: !verify,
	}
	if (opts.CertFile == "") != (opts.KeyFile == "") {
		// docker needs both or neither; without one, it uses neither.
		opts.CertFile, opts.KeyFile = "", ""
	}
	cfg, err := tlsconfig.Client(opts)
	if err != nil {
		return nil, fmt.Errorf("TLS: %w", err)
	}
	return cfg, nil
}

// configDir is the docker CLI's configuration directory: $DOCKER_CONFIG,
// else ~/.docker.
func configDir(getenv func(string) string) string {
	if dir := getenv("DOCKER_CONFIG"); dir != "" {
		return dir
	}
	home := getenv("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	return filepath.Join(home, ".docker")
}

// Close releases the client's connections.
func (d *APIDaemon) Close() error { return d.c.Close() }

// Facts are the daemon host's.
type Facts struct {
	MemTotal int64
}

// Facts returns the daemon host's memory (launch.Daemon).
func (d *APIDaemon) Facts(ctx context.Context) (Facts, error) {
	info, err := d.info.get(ctx, d)
	if err != nil {
		return Facts{}, err
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
// read its ShmSize, and remove it. The answer is kept in d.Cache, keyed by
// the daemon's identity (see identity), so later runs skip the probe while
// the daemon's event log shows no reload since.
func (d *APIDaemon) DefaultShmSize(ctx context.Context, image string) (int64, error) {
	key, now, err := d.identity(ctx)
	if err != nil {
		return d.probeShmSize(ctx, image)
	}
	if n, at, ok := d.Cache.Get(key); ok {
		reloaded, err := d.reloadedSince(ctx, at, now)
		if err == nil && !reloaded {
			return n, nil
		}
	}
	n, err := d.probeShmSize(ctx, image)
	if err == nil {
		_ = d.Cache.Put(key, n) // a cache that cannot be written only costs time
	}
	return n, err
}

// identity names this run of the daemon for the shm cache, and returns the
// daemon's clock now, for the end of its event log. A daemon on this host
// (d.Local): the socket's path and change time (a daemon that starts makes
// a new socket) and the API version name it, and the clocks are one; that
// costs no docker info, the daemon's slowest call (~10 ms). Any other
// daemon, a unix socket forwarded from elsewhere included: its ID and
// version, and its clock, from docker info.
func (d *APIDaemon) identity(ctx context.Context) (key, now string, err error) {
	if path, ok := strings.CutPrefix(d.host, "unix://"); ok && d.Local {
		if fi, err := os.Stat(path); err == nil {
			d.c.NegotiateAPIVersion(ctx)
			t := time.Now()
			key := d.host + "|" + fi.ModTime().UTC().Format(time.RFC3339Nano) + "|" + d.c.ClientVersion()
			return key, fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond()), nil
		}
	}
	info, err := d.info.get(ctx, d)
	if err != nil {
		return "", "", err
	}
	return info.ID + "|" + info.ServerVersion, info.SystemTime, nil
}

// reloadedSince reports whether the daemon reloaded its configuration
// (SIGHUP: default-shm-size is one of the options a reload changes) between
// t and now (the daemon's clock: an end in its future would hold the event
// stream open until then), from its event log.
func (d *APIDaemon) reloadedSince(ctx context.Context, t time.Time, now string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	msgs, errs := d.c.Events(ctx, events.ListOptions{
		Since:   strconv.FormatInt(t.Add(-time.Second).Unix(), 10),
		Until:   now,
		Filters: filters.NewArgs(filters.Arg("type", string(events.DaemonEventType)), filters.Arg("event", string(events.ActionReload))),
	})
	for {
		select {
		case <-msgs:
			return true, nil
		case err := <-errs:
			if errors.Is(err, io.EOF) {
				return false, nil
			}
			return false, fmt.Errorf("docker events: %w", err)
		}
	}
}

// probeShmSize learns the daemon's default-shm-size from a probe container.
func (d *APIDaemon) probeShmSize(ctx context.Context, image string) (int64, error) {
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

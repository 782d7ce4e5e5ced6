package shmstats

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/client"

	"github.com/gpurun/gpurun/docker/translate"
	"github.com/gpurun/gpurun/engine/dockerapi"
)

// DockerAPI is the part of the Docker Engine API client Collect uses.
type DockerAPI interface {
	ContainerList(ctx context.Context, o container.ListOptions) ([]container.Summary, error)
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
	Info(ctx context.Context) (system.Info, error)
}

// dockerMobyNamespace is the containerd namespace dockerd runs its
// containers in.
const dockerMobyNamespace = "moby"

// dockerClient returns the client for Options.Docker, and whether that
// endpoint was named explicitly (so that its silence is an error).
func (c *collector) dockerClient() (DockerAPI, bool, error) {
	if c.o.DockerClient != nil {
		return c.o.DockerClient, true, nil
	}
	getenv := os.Getenv
	explicit := c.o.Docker != "" || os.Getenv("DOCKER_HOST") != ""
	host := c.o.Docker
	if host == "" && os.Getenv("DOCKER_HOST") == "" && c.o.HostRoot != "" && c.o.HostRoot != "/" {
		host = "unix://" + c.host("/var/run/docker.sock")
	}
	if host != "" {
		getenv = func(k string) string {
			switch k {
			case "DOCKER_HOST":
				return host
			case "DOCKER_CONTEXT":
				return ""
			}
			return os.Getenv(k)
		}
	}
	cli, err := dockerapi.NewClient(getenv)
	if err != nil {
		return nil, explicit, err
	}
	return cli, explicit, nil
}

// docker lists dockerd's running containers and merges them with the
// bundles found in containerd's moby namespace: dockerd's name and its
// word for the IPC mode are added to the bundle's spec; a container whose
// bundle was not found gets a spec built from docker inspect.
func (c *collector) docker(ctx context.Context, all []found) ([]found, error) {
	if c.o.Docker == "none" {
		return all, nil
	}
	api, explicit, err := c.dockerClient()
	if err != nil {
		return all, err
	}
	if cl, ok := api.(*client.Client); ok {
		defer cl.Close()
	}
	list, err := api.ContainerList(ctx, container.ListOptions{})
	if err != nil {
		if !explicit && client.IsErrConnectionFailed(err) {
			return all, nil // no dockerd here
		}
		return all, fmt.Errorf("list containers: %w", err)
	}
	byID := map[string]int{}
	for i, f := range all {
		if f.c.Engine == EngineContainerd && f.c.Namespace == dockerMobyNamespace {
			byID[f.c.ID] = i
		}
	}
	var errs []error
	var info *system.Info
	made := map[string]int64{} // HostConfig.ShmSize by id
	for _, s := range list {
		ins, err := api.ContainerInspect(ctx, s.ID)
		if err != nil {
			if !cerrdefs.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("inspect %s: %w", s.ID, err))
			}
			continue
		}
		if ins.ContainerJSONBase == nil || ins.State == nil || !ins.State.Running {
			continue
		}
		name := strings.TrimPrefix(ins.Name, "/")
		if ins.HostConfig != nil {
			made[ins.ID] = ins.HostConfig.ShmSize
		}
		if i, ok := byID[ins.ID]; ok {
			all[i].c.Engine, all[i].c.Namespace, all[i].c.Name = EngineDocker, "", name
			continue
		}
		if info == nil {
			in, err := api.Info(ctx)
			if err != nil {
				errs = append(errs, fmt.Errorf("info: %w", err))
			}
			info = &in
		}
		var donor *container.InspectResponse
		if mode := ins.HostConfig.IpcMode; mode.IsContainer() {
			if d, err := api.ContainerInspect(ctx, mode.Container()); err == nil {
				donor = &d
			}
		}
		form, err := translate.FromInspect(ins, info.DockerRootDir, donor)
		if err != nil {
			errs = append(errs, fmt.Errorf("container %s: %w", name, err))
			continue
		}
		f := fromSpec(form.Spec)
		f.c.Engine, f.c.ID, f.c.Name, f.c.PID = EngineDocker, ins.ID, name, ins.State.Pid
		all = append(all, f)
	}
	setMade(all, made)
	return all, errors.Join(errs...)
}

// setMade gives each Docker container the /dev/shm size dockerd made for
// it (HostConfig.ShmSize): its own, or its IPC donor's for an --ipc
// container: peer, whose /dev/shm is the donor's.
func setMade(all []found, made map[string]int64) {
	for i, f := range all {
		if f.c.Engine != EngineDocker {
			continue
		}
		all[i].made = made[cmp.Or(f.owner, f.c.ID)]
	}
}

package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// maxPodsListed bounds the pods a check names.
const maxPodsListed = 5

// shortPod is a running GPU container whose pod still has the engine's
// default /dev/shm.
type shortPod struct {
	id, container, pod, handler string
	current, target             int64
}

// podsCheck looks at what every running container of the node got: a
// GPU container (by gpurun's policy) whose pod's /dev/shm is still the
// engine's 64 MiB, where the policy would grow it, is a problem whatever
// the configuration says — a runtime handler that does not run
// gpurun-runtime (NVIDIA's nvidia handler, a default another file set), a
// NRI plugin that is not connected, a containerd that did not read its
// config. A size other than 64 MiB was chosen by someone (gpurun under
// another policy, the user) and is left alone, as gpurun leaves it. name
// is the runtime handler gpurun-runtime is registered as ("" for none).
func podsCheck(ctx context.Context, sys *System, o HostOptions, pol *policy.Policy, name string) (Check, bool) {
	if o.CRI == nil {
		return Check{}, false
	}
	c := Check{Name: "containerd.pods", Status: OK}
	ctx, cancel := context.WithTimeout(ctx, criCallTimeout)
	defer cancel()
	resp, err := o.CRI.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}}})
	if err != nil {
		c.Status = Warn
		c.Detail = fmt.Sprintf("cannot list containerd's running containers at %s: %v", o.CRIEndpoint, err)
		return c, true
	}
	hostMem, _ := sys.MemTotal()
	handlers := map[string]string{}
	var short []shortPod
	gpu := 0
	for _, ctr := range resp.GetContainers() {
		st, err := o.CRI.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctr.GetId(), Verbose: true})
		if err != nil {
			continue // gone since the list
		}
		var info criInfo
		if raw, ok := st.GetInfo()["info"]; !ok || json.Unmarshal([]byte(raw), &info) != nil || info.RuntimeSpec == nil {
			continue
		}
		pl := oci.Decide(oci.Input{Container: oci.FromSpec(info.RuntimeSpec), Policy: pol,
			Facts: oci.Facts{HostMemory: hostMem, TmpfsSize: sys.tmpfsSize}})
		if !pl.Applies {
			continue
		}
		gpu++
		if pl.Action == oci.ActionNone || !policy.IsEngineDefaultShm(pl.Current) || pl.Size <= pl.Current {
			continue
		}
		sandbox := ctr.GetPodSandboxId()
		h, ok := handlers[sandbox]
		if !ok {
			if ps, err := o.CRI.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sandbox}); err == nil {
				h = ps.GetStatus().GetRuntimeHandler()
			}
			handlers[sandbox] = h
		}
		p := oci.CRIPod(info.RuntimeSpec)
		short = append(short, shortPod{id: ctr.GetId(), container: ctr.GetMetadata().GetName(), pod: p.Namespace + "/" + p.Name,
			handler: h, current: pl.Current, target: pl.Size})
	}
	c.Data = map[string]any{"gpu_containers": gpu, "at_engine_default": len(short)}
	if len(short) == 0 {
		c.Detail = fmt.Sprintf("%d running GPU container(s); none has the engine's 64MiB /dev/shm where the policy gives more", gpu)
		return c, true
	}
	sort.Slice(short, func(i, j int) bool { return short[i].pod < short[j].pod })
	var names []string
	bypass := map[string]bool{}
	for i, s := range short {
		h := s.handler
		if h == "" {
			h = "the default"
		}
		if h != name {
			bypass[h] = true
		}
		if i < maxPodsListed {
			names = append(names, fmt.Sprintf("%s container %s (%s, handler %s): %s, the policy gives %s", s.pod, s.container, shortID(s.id), h, policy.FormatSize(s.current), policy.FormatSize(s.target)))
		}
	}
	if len(short) > maxPodsListed {
		names = append(names, fmt.Sprintf("and %d more", len(short)-maxPodsListed))
	}
	c.Status = Problem
	c.Detail = fmt.Sprintf("%d running GPU container(s) have the engine's 64MiB /dev/shm: %s", len(short), strings.Join(names, "; "))
	var fixes []string
	if len(bypass) > 0 {
		hs := make([]string, 0, len(bypass))
		for h := range bypass {
			hs = append(hs, h)
		}
		sort.Strings(hs)
		fixes = append(fixes, fmt.Sprintf("their runtime handler (%s) does not run gpurun-runtime: give the pods runtimeClassName: %s, make gpurun the default (see the containerd checks above), or run gpurun's NRI plugin, which sizes pods of every handler (docs/nvidia.md)", strings.Join(hs, ", "), or(name, RuntimeName)))
	}
	fixes = append(fixes, fmt.Sprintf("grow a running one now: sudo gpurun resize --cri %s %s", shortID(short[0].id), policy.FormatSize(short[0].target)))
	c.Fix = strings.Join(fixes, "; ")
	return c, true
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

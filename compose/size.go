package compose

import (
	"fmt"

	"github.com/gpurun/gpurun/policy"
)

// Target returns the shm_size the policy gives a GPU service and how it
// was reached: the policy's rule over the service's memory limit when it
// has one (by default half of it, never below min, never above max);
// without a limit, per_gpu times the GPU count when both are known, else
// the policy's compose_default (8gb unless the config says otherwise),
// kept within min and max.
func Target(p *policy.Policy, memLimit int64, memWhat string, gpus int) (int64, string) {
	switch {
	case memLimit > 0:
		size, why := p.Target(policy.Request{MemoryLimit: memLimit, GPUs: gpus})
		if memWhat != "" {
			why += " (" + memWhat + ")"
		}
		return size, why
	case p.PerGPU > 0 && gpus > 0:
		return p.Target(policy.Request{GPUs: gpus})
	}
	size := p.ComposeDefault
	why := fmt.Sprintf("no memory limit, so the policy's compose default %s", policy.FormatSize(size))
	if size <= 0 {
		size, why = p.Min, "no memory limit and no compose default, so the policy minimum"
	}
	if p.Max > 0 && size > p.Max {
		size = p.Max
		why += fmt.Sprintf(", capped at max %s", policy.FormatSize(p.Max))
	}
	if size < p.Min {
		size = p.Min
		why += fmt.Sprintf(", raised to min %s", policy.FormatSize(p.Min))
	}
	return size, why
}

package policy

import "fmt"

// Request is what the policy needs to know about a container to size it.
type Request struct {
	// MemoryLimit is the container's memory limit in bytes, 0 for none.
	MemoryLimit int64
	// HostMemory is the host's total memory in bytes, 0 when unknown.
	HostMemory int64
	// GPUs is the container's GPU count, 0 when it cannot be told.
	GPUs int
	// Portable says the size is written into a file that runs on hosts not
	// known now (a compose file): with no memory to go by, the target is
	// the policy's ComposeDefault rather than its minimum.
	Portable bool
}

// Target returns the /dev/shm size the policy gives a container and a
// sentence saying how it was reached. The result is never above Max where
// Max is set, and never below Min — except that it always leaves the
// container's processes the memory_reserve of the memory it may use
// (Ceiling): tmpfs pages count against the memory limit, and a /dev/shm
// that can take all of it turns a Bus error into an OOM kill, no better.
func (p *Policy) Target(r Request) (int64, string) {
	var size int64
	var why string
	memory, memWhat := r.MemoryLimit, "memory limit"
	if memory <= 0 {
		memory, memWhat = r.HostMemory, "host's memory"
	}
	switch {
	case p.PerGPU > 0 && r.GPUs > 0:
		size = mulCapped(p.PerGPU, int64(r.GPUs))
		why = fmt.Sprintf("%s per GPU x %d GPUs = %s", FormatSize(p.PerGPU), r.GPUs, FormatSize(size))
	case p.Absolute > 0:
		size = p.Absolute
		why = fmt.Sprintf("policy size %s", FormatSize(size))
	case memory > 0:
		size = int64(float64(memory) * p.Percent / 100)
		size -= size % MiB // whole MiB: whole pages, and readable
		why = fmt.Sprintf("%s%% of the %s %s = %s", formatPercent(p.Percent), FormatSize(memory), memWhat, FormatSize(size))
	case r.Portable && p.ComposeDefault > 0:
		size = p.ComposeDefault
		why = fmt.Sprintf("no memory limit, so the policy's compose default %s", FormatSize(size))
	case r.Portable:
		size = p.Min
		why = "no memory limit and no compose default, so the policy minimum"
	default:
		size = p.Min
		why = "memory unknown, so the policy minimum"
	}
	if p.Max > 0 && size > p.Max {
		size = p.Max
		why += fmt.Sprintf(", capped at max %s", FormatSize(p.Max))
	}
	if size < p.Min {
		size = p.Min
		why += fmt.Sprintf(", raised to min %s", FormatSize(p.Min))
	}
	if ceiling, room := p.Ceiling(memory); memory > 0 && size > ceiling {
		size = ceiling
		why += fmt.Sprintf(", capped at %s to leave the processes %s of the %s %s (memory_reserve)", FormatSize(ceiling), room, FormatSize(memory), memWhat)
	}
	return size, why
}

// Ceiling returns the most /dev/shm the policy lets a container with
// memory bytes to use have: memory less memory_reserve, in whole MiB and
// never below the engines' 64 MiB; and the reserve in words ("25%",
// "2GiB"). memory 0 (unknown) gives no ceiling (0).
func (p *Policy) Ceiling(memory int64) (int64, string) {
	if memory <= 0 {
		return 0, ""
	}
	reserve, words := p.ReserveBytes, FormatSize(p.ReserveBytes)
	if p.ReserveBytes == 0 {
		reserve = int64(float64(memory) * p.ReservePercent / 100)
		words = formatPercent(p.ReservePercent) + "%"
	}
	ceiling := memory - reserve
	ceiling -= ceiling % MiB
	return max(ceiling, EngineDefaultShm), words
}

// CapRequest caps a size asked for by an annotation at AnnotationMax (or Max
// when AnnotationMax is unset) and says so when it did.
func (p *Policy) CapRequest(n int64) (int64, string) {
	limit := p.AnnotationMax
	if limit == 0 {
		limit = p.Max
	}
	if limit > 0 && n > limit {
		return limit, fmt.Sprintf(", capped at %s", FormatSize(limit))
	}
	return n, ""
}

func mulCapped(a, b int64) int64 {
	const maxInt64 = int64(^uint64(0) >> 1)
	if a != 0 && b > maxInt64/a {
		return maxInt64
	}
	return a * b
}

func formatPercent(v float64) string {
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d", int64(v))
	}
	return fmt.Sprintf("%g", v)
}

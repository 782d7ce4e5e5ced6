package oci

import (
	"fmt"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/policy"
)

// WarningKind names what a Warning is about; the values are stable (JSON,
// tests, the admission webhook's warnings).
type WarningKind string

// The values of WarningKind.
const (
	// WarnSizeIgnored: a /dev/shm size asked for where the engine ignores
	// it (the host's IPC namespace).
	WarnSizeIgnored WarningKind = "size-ignored"
	// WarnBelowMin: a size the user chose is below the policy's minimum.
	WarnBelowMin WarningKind = "below-min"
	// WarnAboveMemory: a size the user chose leaves the processes less
	// than the policy's memory_reserve of the memory limit (or is above
	// the limit itself): tmpfs pages count against the limit.
	WarnAboveMemory WarningKind = "above-memory-limit"
	// WarnNCCLShmDisabled: NCCL_SHM_DISABLE=1 is set while /dev/shm will
	// be big enough for NCCL's shared-memory transport.
	WarnNCCLShmDisabled WarningKind = "nccl-shm-disabled"
	// WarnClaimUnresolved: a DRA resource claim's object could not be
	// read when the container was decided; the policy's
	// unresolved_claims said how it counted.
	WarnClaimUnresolved WarningKind = "claim-unresolved"
)

// Warning is a one-line notice of a choice in the container that defeats
// its /dev/shm, worked out by the decision so that every front door says
// the same thing: gpurun run and compose migrate print it, gpurun plan
// shows it, the admission webhook returns it to kubectl, the node doors
// log it. Its Message quotes the user's own words where the front door
// handed them over (Container's ShmChoice, UserShm, HostIPC).
type Warning struct {
	Kind    WarningKind `json:"kind"`
	Message string      `json:"message"`
}

// explicit is a /dev/shm size the user chose, in their words.
type explicit struct {
	words string
	size  int64
}

// warnings are the Warnings of a plan: the resource claims that could not
// be read and how they counted, what the user asked for that the engine
// ignores (whatever the policy says), and, for a container the
// policy applies to, a size below the minimum or above what the memory
// limit allows, and NCCL's shared-memory transport turned off for
// nothing. enforceMin names how this front door's user turns enforce_min
// on ("" for the policy's key).
func warnings(c *Container, p *policy.Policy, pl Plan, enforceMin string) []Warning {
	s := c.Spec
	var out []Warning
	add := func(k WarningKind, format string, a ...any) {
		out = append(out, Warning{Kind: k, Message: fmt.Sprintf(format, a...)})
	}
	out = append(out, claimWarnings(c, p)...)
	if pl.Shm.Kind == ShmHost && c.ShmChoice != "" {
		add(WarnSizeIgnored, "%s has no effect with %s: the container uses the host's /dev/shm (Podman refuses the combination); keep one of them", c.ShmChoice, hostIPCWords(c))
	}
	if !pl.Applies || pl.Pod.Sandbox {
		return out
	}
	if e, ok := explicitSize(c, p, pl); ok {
		if w, ok := belowMin(e, p, pl, enforceMin); ok {
			out = append(out, w)
		}
		if w, ok := aboveMemory(e, p, MemoryLimit(s)); ok {
			out = append(out, w)
		}
	}
	if NCCLShmDisabled(envOf(s)) && (pl.Size >= p.Min || pl.Shm.Kind == ShmHost) {
		size := "the host's /dev/shm"
		if pl.Size > 0 {
			size = policy.FormatSize(pl.Size)
		}
		add(WarnNCCLShmDisabled, "NCCL_SHM_DISABLE=1 is set, but /dev/shm will be %s: NCCL's shared-memory transport would work; unset it to avoid the slower socket path", size)
	}
	return out
}

// explicitSize is the size the user chose for /dev/shm, if any: an allowed
// annotation's request (before the policy caps it), the user's own tmpfs
// with a size, or a size of the engine's own tmpfs that the user chose.
func explicitSize(c *Container, p *policy.Policy, pl Plan) (explicit, bool) {
	s, sh := c.Spec, pl.Shm
	if key, v, n, ok := annotationRequest(s, p); ok {
		return explicit{fmt.Sprintf("annotation %s=%s", key, v), n}, true
	}
	switch {
	case sh.Kind == ShmUser && sh.Type == "tmpfs" && sh.Size > 0:
		return explicit{userMountWords(c, sh), sh.Size}, true
	case sh.Kind == ShmPrivate && c.ShmChoice != "":
		return explicit{c.ShmChoice, sh.Size}, true
	case sh.Kind == ShmPrivate && sh.Size > 0 && !policy.IsEngineDefaultShm(sh.Size):
		return explicit{"the /dev/shm size " + policy.FormatSize(sh.Size) + " (--shm-size or the engine's default-shm-size)", sh.Size}, true
	}
	return explicit{}, false
}

// belowMin warns of an explicit size below the policy's minimum, saying
// what happens to it: raised (enforce_min), raised by hand (a mount of the
// user's own), or left to fail.
func belowMin(e explicit, p *policy.Policy, pl Plan, enforceMin string) (Warning, bool) {
	if e.size <= 0 || e.size >= p.Min {
		return Warning{}, false
	}
	min := policy.FormatSize(p.Min)
	var then string
	switch {
	case pl.Shm.Kind == ShmUser:
		// A mount of the user's own: only the node doors can rewrite it
		// (enforce_min), from the spec.
		then = "raise it to at least " + min + " by hand (enforce_min raises a tmpfs only under gpurun-runtime, the hook or NRI)"
	case pl.Action == ActionSetSize && pl.Size > e.size:
		then = "enforce_min raises it to " + policy.FormatSize(pl.Size)
	default:
		if enforceMin == "" {
			enforceMin = "enforce_min = true in gpurun's policy"
		}
		then = "DataLoader workers and NCCL may fail (Bus error, posix_fallocate failed); " + enforceMin + " raises it"
	}
	return Warning{Kind: WarnBelowMin, Message: fmt.Sprintf("%s is below the policy minimum %s; %s", e.words, min, then)}, true
}

// aboveMemory warns of an explicit size that leaves the processes less
// than the policy's memory_reserve of the memory limit.
func aboveMemory(e explicit, p *policy.Policy, limit int64) (Warning, bool) {
	ceiling, room := p.Ceiling(limit)
	if limit <= 0 || e.size <= ceiling {
		return Warning{}, false
	}
	lim := policy.FormatSize(limit)
	if e.size >= limit {
		return Warning{Kind: WarnAboveMemory, Message: fmt.Sprintf("%s is not below the %s memory limit, which /dev/shm counts against: filling it gets the container OOM-killed; at most %s leaves the processes %s", e.words, lim, policy.FormatSize(ceiling), room)}, true
	}
	return Warning{Kind: WarnAboveMemory, Message: fmt.Sprintf("%s leaves the processes less than %s of the %s memory limit, which /dev/shm counts against (an OOM kill when it fills); at most %s", e.words, room, lim, policy.FormatSize(ceiling))}, true
}

// hostIPCWords names the host's IPC namespace as the user asked for it.
func hostIPCWords(c *Container) string {
	if c.HostIPC != "" {
		return c.HostIPC
	}
	return "the host's IPC namespace"
}

func envOf(s *specs.Spec) []string {
	if s.Process == nil {
		return nil
	}
	return s.Process.Env
}

// NCCLShmDisabled reports whether an environment turns NCCL's
// shared-memory transport off: NCCL_SHM_DISABLE (its last entry, as a
// process sees it) read as NCCL reads it, a number after optional spaces
// that is 1.
func NCCLShmDisabled(env []string) bool {
	v, ok := LookupEnv(env, "NCCL_SHM_DISABLE")
	if !ok {
		return false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	return err == nil && n == 1
}

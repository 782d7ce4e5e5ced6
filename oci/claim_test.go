package oci

import (
	"strings"
	"testing"

	"github.com/gpurun/gpurun/policy"
)

func mustParse(t *testing.T, text string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("t.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEvidenceClaim: the table's answer for a resource claim, as a front
// door hands it over raw: its requests' device classes (and the drivers
// their classes select), counts and allocation modes, firstAvailable,
// the drivers it was allocated from, and a claim that could not be read,
// under the default policy and one that lists more.
func TestEvidenceClaim(t *testing.T) {
	def := EvidenceOf(nil)
	more := EvidenceOf(mustParse(t, "gpu_device_classes = [\"a100-80gb\"]\ngpu_dra_drivers = [\"driver.example.com\"]\n"))
	ignore := EvidenceOf(mustParse(t, `unresolved_claims = "ignore"`))
	req := func(class string, count int64) ClaimRequest {
		return ClaimRequest{Name: "gpu", DeviceClass: class, Count: count}
	}
	claim := func(rs ...ClaimRequest) Claim {
		return Claim{Words: "resources.claims gpu (resourceClaimTemplateName: t)", Name: "gpu", Requests: rs}
	}
	tests := []struct {
		name  string
		ev    Evidence
		claim Claim
		gpu   bool
		count int
		words string // a part of the evidence
	}{
		{"NVIDIA's GPU class, count left out", def, claim(req("gpu.nvidia.com", 0)), true, 1, "resources.claims gpu (resourceClaimTemplateName: t): request gpu: 1 of device class gpu.nvidia.com"},
		{"MIG", def, claim(req("mig.nvidia.com", 1)), true, 1, "mig.nvidia.com"},
		{"NVIDIA's VFIO GPUs, two", def, claim(req("vfio.gpu.nvidia.com", 2)), true, 2, "2 of device class vfio.gpu.nvidia.com"},
		{"AMD", def, claim(req("gpu.amd.com", 0)), true, 1, "gpu.amd.com"},
		{"Intel GPU", def, claim(req("gpu.intel.com", 4)), true, 4, ""},
		{"Intel Gaudi", def, claim(req("gaudi.intel.com", 8)), true, 8, ""},
		{"two requests add up", def, claim(req("gpu.nvidia.com", 2), ClaimRequest{Name: "mig", DeviceClass: "mig.nvidia.com"}), true, 3, "; request mig: 1 of device class mig.nvidia.com"},
		{"allocationMode All: the node's", def, claim(ClaimRequest{Name: "all", DeviceClass: "gpu.nvidia.com", AllocationMode: AllocationAll}), true, 0, "request all: every device of device class gpu.nvidia.com (allocationMode All)"},
		{"All beside a count: the node's", def, claim(req("gpu.nvidia.com", 1), ClaimRequest{Name: "all", DeviceClass: "gpu.amd.com", AllocationMode: AllocationAll}), true, 0, ""},
		{"an IMEX channel is no GPU", def, claim(req("compute-domain-default-channel.nvidia.com", 1)), false, 0, ""},
		{"a NIC is no GPU", def, claim(req("dranet", 1)), false, 0, ""},
		{"a GPU request beside a NIC", def, claim(req("dranet", 1), req("gpu.nvidia.com", 1)), true, 1, ""},
		{"a class of the policy's", more, claim(req("a100-80gb", 2)), true, 2, "2 of device class a100-80gb"},
		{"a class of another name that selects a GPU driver", def, claim(ClaimRequest{Name: "gpu", DeviceClass: "a100", ClassDrivers: []string{"gpu.nvidia.com"}}), true, 1, "device class a100 (driver gpu.nvidia.com)"},
		{"a class that selects the policy's driver", more, claim(ClaimRequest{Name: "gpu", DeviceClass: "example-device-class", ClassDrivers: []string{"driver.example.com"}}), true, 1, "(driver driver.example.com)"},
		{"the same, by default", def, claim(ClaimRequest{Name: "gpu", DeviceClass: "example-device-class", ClassDrivers: []string{"driver.example.com"}}), false, 0, ""},
		{"firstAvailable GPU or Gaudi", def, claim(ClaimRequest{Name: "accel", FirstAvailable: []ClaimRequest{req("gpu.intel.com", 1), req("gaudi.intel.com", 1)}}), true, 1, "request accel: the first available of gpu.intel.com, gaudi.intel.com"},
		{"firstAvailable of different counts", def, claim(ClaimRequest{Name: "accel", FirstAvailable: []ClaimRequest{req("gpu.nvidia.com", 2), req("mig.nvidia.com", 1)}}), true, 0, ""},
		{"firstAvailable without a GPU", def, claim(ClaimRequest{Name: "net", FirstAvailable: []ClaimRequest{req("dranet", 1)}}), false, 0, ""},
		{"allocated from a GPU driver", def, Claim{Words: "resources.claims shared", Name: "shared", Requests: []ClaimRequest{req("example", 1)}, Drivers: []string{"gpu.amd.com"}}, true, 0, "allocated from driver gpu.amd.com"},
		{"not resolved, counted", def, Claim{Words: "resources.claims gpu (resourceClaimTemplateName: t)", Name: "gpu", Unresolved: "ResourceClaimTemplate ml/t not found"}, true, 0, "resources.claims gpu (resourceClaimTemplateName: t), not resolved: counted as a GPU (unresolved_claims = \"gpu\")"},
		{"not resolved, ignored", ignore, Claim{Words: "resources.claims gpu", Name: "gpu", Unresolved: "not found"}, false, 0, ""},
		{"no requests", def, claim(), false, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gpu, n, words := tt.ev.Claim(tt.claim)
			if gpu != tt.gpu || n != tt.count || !strings.Contains(words, tt.words) || gpu != (words != "") {
				t.Errorf("Claim = %v, %d, %q; want %v, %d, with %q", gpu, n, words, tt.gpu, tt.count, tt.words)
			}
		})
	}
}

// TestEvidenceDRAResources: the extended resources the scheduler
// allocates through DRA (KEP-5004) are GPUs where their DeviceClass is.
func TestEvidenceDRAResources(t *testing.T) {
	def := EvidenceOf(nil)
	more := EvidenceOf(mustParse(t, `gpu_device_classes = ["a100-80gb"]`))
	for _, tt := range []struct {
		ev   Evidence
		name string
		want bool
	}{
		{def, "deviceclass.resource.kubernetes.io/gpu.intel.com", true},
		{def, "deviceclass.resource.kubernetes.io/gpu.nvidia.com", true},
		{def, "deviceclass.resource.kubernetes.io/dranet", false},
		{def, "deviceclass.resource.kubernetes.io/a100-80gb", false},
		{more, "deviceclass.resource.kubernetes.io/a100-80gb", true},
		{def, "intel.com/gpu", true},
		{def, "intel.com/gaudi", true},
		{def, "intel.com/qat", false},
	} {
		if got := tt.ev.Resource(tt.name); got != tt.want {
			t.Errorf("Resource(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestDecideClaims: a container's claims through the whole decision: its
// GPU count, the per_gpu size that follows, and the warning of a claim
// that could not be read, under both settings of unresolved_claims.
func TestDecideClaims(t *testing.T) {
	gpuClaim := func(n int64) Opt {
		return WithClaim(Claim{Words: "resources.claims gpu (resourceClaimTemplateName: single-gpu)", Name: "gpu",
			Requests: []ClaimRequest{{Name: "gpu", DeviceClass: "gpu.nvidia.com", Count: n}}})
	}
	unread := WithClaim(Claim{Words: "resources.claims gpu (resourceClaimTemplateName: later)", Name: "gpu", Unresolved: "ResourceClaimTemplate ml/later not found"})
	nic := WithClaim(Claim{Words: "resources.claims net (resourceClaimName: nic)", Name: "net", Requests: []ClaimRequest{{Name: "nic", DeviceClass: "dranet"}}})
	perGPU := `per_gpu = "2g"`
	tests := []struct {
		name    string
		opts    []Opt
		policy  string
		applies bool
		gpus    int
		size    int64
		warning string
	}{
		{"one GPU by claim", []Opt{gpuClaim(1)}, perGPU, true, 1, 2 * policy.GiB, ""},
		{"four GPUs by claim", []Opt{gpuClaim(4)}, perGPU, true, 4, 8 * policy.GiB, ""},
		{"a NIC claim alone", []Opt{nic}, perGPU, false, 0, policy.EngineDefaultShm, ""},
		{"a claim not read, counted", []Opt{unread}, "", true, 8, 0, `resources.claims gpu (resourceClaimTemplateName: later) could not be read (ResourceClaimTemplate ml/later not found): counted as a GPU (policy unresolved_claims = "gpu")`},
		{"a claim not read, ignored", []Opt{unread}, `unresolved_claims = "ignore"`, false, 0, policy.EngineDefaultShm, `not counted as a GPU (policy unresolved_claims = "ignore"); if it is one, create its object before the pod`},
		{"a claim not read beside a GPU resource", []Opt{unread, WithResource("resources.limits nvidia.com/gpu: 2", "nvidia.com/gpu", 2)}, `unresolved_claims = "ignore"`, true, 2, 0, "could not be read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewContainer(append(tt.opts, WithMemoryLimit(64*policy.GiB), WithPrivateShm(policy.EngineDefaultShm))...)
			if err != nil {
				t.Fatal(err)
			}
			pl := Decide(Input{Container: c, Policy: mustParse(t, tt.policy), Facts: Facts{HostMemory: 256 * policy.GiB, HostGPUs: 8}})
			if pl.Applies != tt.applies || pl.GPUs != tt.gpus || tt.size != 0 && pl.Size != tt.size {
				t.Errorf("applies %v, gpus %d, size %d (%s); want %v, %d, %d", pl.Applies, pl.GPUs, pl.Size, pl.Reason, tt.applies, tt.gpus, tt.size)
			}
			var got []string
			for _, w := range pl.Warnings {
				if w.Kind == WarnClaimUnresolved {
					got = append(got, w.Message)
				}
			}
			if tt.warning == "" && len(got) > 0 || tt.warning != "" && (len(got) != 1 || !strings.Contains(got[0], tt.warning)) {
				t.Errorf("claim warnings %q; want one with %q", got, tt.warning)
			}
		})
	}
	if _, err := NewContainer(WithClaim(Claim{Name: "gpu"})); err == nil {
		t.Error("a claim without its words is taken")
	}
}

package doctor

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestInsideWebhook: in a Kubernetes pod, a GPU container with the
// runtime's 64 MiB gets a webhook check saying what the webhook did (from
// the pod's annotation) or why it may not have seen the pod.
func TestInsideWebhook(t *testing.T) {
	lookup := func(ann map[string]string, err error) PodLookup {
		return func(context.Context) (string, string, map[string]string, error) {
			return "ml", "train-0", ann, err
		}
	}
	tests := []struct {
		name    string
		capture string
		env     map[string]string
		lookup  PodLookup
		status  Status // "-": no webhook check
		says    string
	}{
		{"not in a pod", "docker-default", map[string]string{"NVIDIA_VISIBLE_DEVICES": "all"}, lookup(nil, nil), "-", ""},
		{"no GPU", "docker-default", map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, lookup(nil, nil), "-", ""},
		{"sized already", "docker-shm-size-2g", map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "NVIDIA_VISIBLE_DEVICES": "all"}, lookup(nil, nil), "-", ""},
		{"never seen", "docker-default", map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "NVIDIA_VISIBLE_DEVICES": "all"}, lookup(map[string]string{"other": "x"}, nil), Warn, "pod ml/train-0 has no gpurun.io/shm-decision annotation, so the webhook never saw it: the webhook was down"},
		{"seen, opted out", "docker-default", map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "NVIDIA_VISIBLE_DEVICES": "all"}, lookup(map[string]string{"gpurun.io/shm-decision": "none: container c: annotation gpurun.io/opt-out=true: left alone"}, nil), Warn, `decided "none: container c: annotation gpurun.io/opt-out=true`},
		{"seen, sized, undone", "docker-default", map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "NVIDIA_VISIBLE_DEVICES": "all"}, lookup(map[string]string{"gpurun.io/shm-decision": "emptydir 8Gi: container c: ..."}, nil), Problem, "another webhook or controller removed the volume"},
		{"annotations unreadable", "docker-default", map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "NVIDIA_VISIBLE_DEVICES": "all"}, lookup(nil, errors.New("pods \"train-0\" is forbidden")), Warn, "cannot be read from here (pods \"train-0\" is forbidden): if kubectl get pod"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			f.loadCapture(tt.capture)
			f.namespaces(containerPIDNS, containerIPCNS)
			for k, v := range tt.env {
				f.env[k] = v
			}
			sys := f.system()
			r := Inside(context.Background(), sys, ContainerOptions{Policy: PolicySource{Path: f.root + "/etc/gpurun/config.toml"}, Where: Detect(sys), Pod: tt.lookup})
			c, ok := r.Find("webhook")
			if tt.status == "-" {
				if ok {
					t.Errorf("webhook check present: %+v", c)
				}
				return
			}
			if !ok || c.Status != tt.status || !strings.Contains(c.Detail, tt.says) || c.Fix == "" {
				t.Errorf("webhook check %+v; want %s saying %q, with a fix", c, tt.status, tt.says)
			}
		})
	}
}

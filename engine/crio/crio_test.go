package crio

import (
	"reflect"
	"testing"

	"github.com/pelletier/go-toml/v2"
)

func TestShmDropIn(t *testing.T) {
	for _, ann := range []string{ShmAnnotation, ShmAnnotationV1} {
		t.Run(ann, func(t *testing.T) {
			data, err := ShmDropIn(ann)
			if err != nil {
				t.Fatal(err)
			}
			var doc map[string]any
			if err := toml.Unmarshal(data, &doc); err != nil {
				t.Fatalf("not TOML: %v\n%s", err, data)
			}
			// Only crio.runtime.workloads.<ours>: nothing of the node's own
			// runtime handlers is redefined.
			want := map[string]any{"crio": map[string]any{"runtime": map[string]any{"workloads": map[string]any{
				Workload: map[string]any{"activation_annotation": ann, "allowed_annotations": []any{ann}},
			}}}}
			if !reflect.DeepEqual(doc, want) {
				t.Errorf("drop-in decodes to %v, want %v", doc, want)
			}
		})
	}
	if _, err := ShmDropIn("io.kubernetes.cri-o.Devices"); err == nil {
		t.Error("an annotation that is not a shm size was accepted")
	}
}

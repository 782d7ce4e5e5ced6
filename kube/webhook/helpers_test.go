package webhook

import "k8s.io/apimachinery/pkg/runtime"

func runtimeRaw(b []byte) runtime.RawExtension { return runtime.RawExtension{Raw: b} }

// Package kubernetes holds gpurun's Kubernetes manifests: a kustomize base
// (namespace, service account, the policy ConfigMap), components (the node
// agent DaemonSet with its RuntimeClass; the namespace, labels and the one
// image knob) and an overlay per mode: runtime-class, default-runtime and
// nri. Apply one with `kubectl apply -k deploy/kubernetes/overlays/<mode>`;
// see docs/install-kubernetes.md. The package's tests decode every manifest
// strictly with the Kubernetes API types, build every overlay with
// kustomize and check the rendered objects; components k3s and rke2 adapt
// any mode to those distributions. TestChartMatchesKustomize renders the
// Helm chart (deploy/helm/gpurun) with helm template and checks that it
// creates the same objects as the overlays for the same settings.
package kubernetes

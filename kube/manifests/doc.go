// Package manifests tests what an admin applies to a cluster: the kustomize
// base, components and overlays under deploy/kubernetes (one overlay per
// mode: runtime-class, default-runtime, nri, webhook; components k3s and
// rke2 adapt any mode to those distributions) and the Helm chart under
// deploy/helm/gpurun. The tests decode every manifest strictly with the
// Kubernetes API types, build every overlay with kustomize, check the
// rendered objects and the gpurun command lines they run, and render the
// chart with helm template to check that it creates the same objects as
// the overlays for the same settings (TestChartMatchesKustomize). See
// docs/install-kubernetes.md.
package manifests

#!/usr/bin/env bash
# build-kubernetes.sh: the Kubernetes binaries of the cluster integration
# tests (integration/cluster_test.go), built from the Go module proxy.
#
#   hack/build-kubernetes.sh            build (or reuse) and print the bin dir
#
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and
# kubectl at GPURUN_K8S_VERSION (default v1.37.2, the newest release the
# module proxy serves; since 1.35 a kubelet on cgroup v1 wants
# failCgroupV1: false in its configuration, which the harness gives it) into
# GPURUN_K8S_CACHE/<version>/bin (default /var/cache/gpurun-k8s). The
# directory only ever appears whole: the build happens in a temporary
# directory next to it, which is renamed when every binary is there, so an
# interrupted build leaves no half cache; a second run finds it and does
# nothing. Concurrent runs serialise on a lock in the cache directory
# (hack/lib/cachedir.sh).
#
# k8s.io/kubernetes cannot be built from its module zip alone: its go.mod
# replaces the k8s.io/* staging modules with ./staging/... directories the
# zip does not hold. So the build runs in a scratch module that requires
# k8s.io/kubernetes at the version and replaces each of those modules —
# the list is read from k8s.io/kubernetes' own go.mod — with its published
# release (v0.<minor>.<patch>). The binaries are static (CGO_ENABLED=0),
# built with -trimpath, the tags and version stamps of Kubernetes' own
# release builds (hack/lib/golang.sh, hack/lib/version.sh).
#
# Outside the cache it leaves only what any go build does: modules in the
# Go module cache and objects in the Go build cache.
#
# Timings go to stderr as "build-kubernetes: ..." lines.
set -euo pipefail

prog=build-kubernetes
# shellcheck source=lib/cachedir.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/cachedir.sh"

version=${GPURUN_K8S_VERSION:-v1.37.2}
cache=${GPURUN_K8S_CACHE:-/var/cache/gpurun-k8s}
bins=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)

[[ $version =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || die "GPURUN_K8S_VERSION=$version: want v1.MINOR.PATCH"
minor=${BASH_REMATCH[1]}
patch=${BASH_REMATCH[2]}
staging_version="v0.$minor.$patch"
dest="$cache/$version"

complete() {
	local b
	for b in "${bins[@]}"; do
		[ -x "$dest/bin/$b" ] || return 1
	done
}

cache_reuse "$dest/bin"
command -v go >/dev/null || die "go not found in PATH"
cache_lock "$dest/bin" "$version"

# A build of its own: no workspace, no vendor directory, this toolchain,
# go.mod and go.sum written as the build needs.
export GOWORK=off GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN=local CGO_ENABLED=0
unset GOOS GOARCH

log "reading k8s.io/kubernetes@$version's go.mod from the module proxy"
gomod=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
[ -f "$gomod" ] || die "go mod download k8s.io/kubernetes@$version gave no go.mod"
# Lines such as "k8s.io/api => ./staging/src/k8s.io/api", inside a replace
# block or as a replace directive of their own.
mapfile -t staging < <(sed -n -E 's#^[[:space:]]*(replace[[:space:]]+)?(k8s\.io/[^[:space:]]+)[[:space:]]+=>[[:space:]]+\./staging/.*#\2#p' "$gomod" | sort -u)
[ "${#staging[@]}" -gt 10 ] || die "found only ${#staging[@]} staging modules in $gomod"
log "${#staging[@]} staging modules replaced by their $staging_version releases"

{
	echo "module gpurun.invalid/k8s-build"
	echo
	echo "go $(sed -n -E 's/^go[[:space:]]+([0-9.]+).*/\1/p' "$gomod")"
	echo
	echo "require k8s.io/kubernetes $version"
	echo
	echo "replace ("
	for m in "${staging[@]}"; do
		echo "	$m => $m $staging_version"
	done
	echo ")"
} >"$work/go.mod"

pkgs=()
for b in "${bins[@]}"; do
	case $b in
	kubectl) pkgs+=("k8s.io/kubernetes/cmd/kubectl") ;;
	*) pkgs+=("k8s.io/kubernetes/cmd/$b") ;;
	esac
done
pkg=k8s.io/component-base/version
cpkg=k8s.io/client-go/pkg/version
stamp=""
for p in $pkg $cpkg; do
	stamp+=" -X $p.gitVersion=$version -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
	stamp+=" -X $p.buildDate=1970-01-01T00:00:00Z"
done

log "go build ${bins[*]} ($version)"
mkdir -p "$work/out/bin"
(
	cd "$work"
	go build -trimpath -tags selinux,notest,grpcnotrace -ldflags "-s -w$stamp" -o out/bin/ "${pkgs[@]}"
)
for b in "${bins[@]}"; do
	[ -x "$work/out/bin/$b" ] || die "go build made no $b"
done
"$work/out/bin/kubelet" --version >&2
cache_commit "$dest/bin"

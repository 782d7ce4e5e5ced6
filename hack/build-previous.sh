#!/usr/bin/env bash
# build-previous.sh: a previous release of gpurun, for the upgrade test
# (integration/cluster_upgrade_test.go): its image's build context and its
# Helm chart, built once from a commit of this repository and cached.
#
#   hack/build-previous.sh            build (or reuse) and print the cache dir
#
# GPURUN_PREV_COMMIT (default 460d3b5) is checked out with git archive from
# this checkout's history (a shallow clone lacks it: git fetch --unshallow)
# into a scratch directory; its own Makefile's image-context target builds
# its binaries as its release would (static, -trimpath, version stamped
# with the commit); then GPURUN_PREV_CACHE/<commit>/ (default
# /var/cache/gpurun-prev) gets:
#
#   image/linux-<arch>/{gpurun,gpurun-full,gpurun-runtime}   its image's build context
#   Dockerfile                                               its deploy/image/Dockerfile
#   chart/gpurun/                                            its deploy/helm/gpurun
#   commit                                                   the full commit id
#
# The test builds the image from the Dockerfile over that context, as
# `make image` would (harness.DockerfileImageTar). The directory only ever
# appears whole: the build happens in a temporary directory next to it,
# renamed into place at the end; a second run finds it and does nothing.
# Concurrent runs serialise on a lock in the cache directory
# (hack/lib/cachedir.sh). Outside the cache it leaves only what any go
# build does (the Go module and build caches).
#
# Timings go to stderr as "build-previous: ..." lines.
set -euo pipefail

prog=build-previous
# shellcheck source=lib/cachedir.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/cachedir.sh"

commit=${GPURUN_PREV_COMMIT:-460d3b5}
cache=${GPURUN_PREV_CACHE:-/var/cache/gpurun-prev}
repo=$(cd "$(dirname "$0")/.." && pwd)
dest="$cache/$commit"
arch=$(go env GOARCH)

[[ $commit =~ ^[0-9a-f]{7,40}$ ]] || die "GPURUN_PREV_COMMIT=$commit: want a commit id (hex)"

complete() {
	local b
	for b in gpurun gpurun-full gpurun-runtime; do
		[ -x "$dest/image/linux-$arch/$b" ] || return 1
	done
	[ -f "$dest/Dockerfile" ] && [ -f "$dest/chart/gpurun/Chart.yaml" ] && [ -f "$dest/commit" ]
}

cache_reuse "$dest"
command -v go >/dev/null || die "go not found in PATH"
full=$(git -C "$repo" rev-parse --verify --quiet "$commit^{commit}") ||
	die "commit $commit is not in $repo's history (a shallow clone? git fetch --unshallow)"
cache_lock "$dest" "$commit"
mkdir "$work/src" "$work/out"
git -C "$repo" archive --format=tar "$full" | tar -x -C "$work/src"

# Its own Makefile, its own go.mod; this toolchain, no workspace.
export GOWORK=off GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
unset GOOS GOARCH
make -s -C "$work/src" image-context VERSION="${commit}" IMAGE_ARCHS="$arch" >&2 ||
	die "make image-context of $commit failed"
log "built $commit's binaries in $(($(date +%s) - begin)) s"

mkdir -p "$work/out/chart"
cp -a "$work/src/bin/image" "$work/out/image"
cp "$work/src/deploy/image/Dockerfile" "$work/out/Dockerfile"
cp -a "$work/src/deploy/helm/gpurun" "$work/out/chart/gpurun"
echo "$full" >"$work/out/commit"
cache_commit "$dest"

#!/usr/bin/env bash
# build-torch-image.sh: a PyTorch image without a registry, for the end-to-end
# test (make e2e; see docs/e2e.md).
#
#   hack/build-torch-image.sh TAG        docker import the root filesystem as TAG
#                                        into the daemon DOCKER_HOST names
#   hack/build-torch-image.sh --tarball  only build (or reuse) the root
#                                        filesystem and print its path
#
# The root filesystem is Debian bookworm (minbase) with python3-torch (PyTorch
# 1.13), made by mmdebstrap from a Debian mirror. It is cached as an
# uncompressed tar in GPURUN_E2E_CACHE (default /var/cache/gpurun-e2e), under a
# name keyed by everything that decides its content (suite, variant, packages,
# mirror, dpkg path filters, this script's format version), next to a
# .manifest that lists the installed packages and their versions. A cached tar
# is reused until it is GPURUN_E2E_MAX_AGE_DAYS old (default 30; Debian stable
# gets security updates); GPURUN_E2E_REBUILD=1 rebuilds it now. Concurrent
# runs serialise on a lock in the cache directory; a build that fails leaves
# nothing behind.
#
# Other settings: GPURUN_E2E_MIRROR (default: the first Debian mirror in
# /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list that is not a
# security mirror, else http://deb.debian.org/debian).
#
# Timings go to stderr as "build-torch-image: ..." lines.
set -euo pipefail

prog=build-torch-image
log() { printf '%s: %s\n' "$prog" "$*" >&2; }
die() {
	log "$*"
	exit 1
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }

usage="usage: $0 TAG | --tarball"
[ $# -eq 1 ] || die "$usage"
case "$1" in
--tarball) tag= ;;
-*) die "$usage" ;;
*) tag=$1 ;;
esac

suite=bookworm
variant=minbase
packages=python3-torch
format=1 # bump when the way the tar is made changes
# Documentation and translations are not needed to run PyTorch (~90 MB);
# copyright files stay.
dpkgopts=(
	'path-exclude=/usr/share/doc/*'
	'path-include=/usr/share/doc/*/copyright'
	'path-exclude=/usr/share/man/*'
	'path-exclude=/usr/share/info/*'
	'path-exclude=/usr/share/locale/*'
)

# mirror prints the Debian mirror to build from.
mirror() {
	if [ -n "${GPURUN_E2E_MIRROR:-}" ]; then
		echo "$GPURUN_E2E_MIRROR"
		return
	fi
	local m
	m=$(
		{
			awk 'tolower($1) == "uris:" { for (i = 2; i <= NF; i++) print $i }' /etc/apt/sources.list.d/*.sources 2>/dev/null
			awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; break } }' /etc/apt/sources.list 2>/dev/null
		} | grep -v -e security -e '^cdrom:' | grep -e '/debian/\?$' | head -n 1
	) || true
	echo "${m:-http://deb.debian.org/debian}"
}

command -v flock >/dev/null || die "flock not found: apt-get install util-linux"
[ "$(id -u)" = 0 ] || die "must run as root (mmdebstrap's root mode, and the cache in /var/cache)"

mirror=$(mirror)
cache=${GPURUN_E2E_CACHE:-/var/cache/gpurun-e2e}
max_age_days=${GPURUN_E2E_MAX_AGE_DAYS:-30}
[[ $max_age_days =~ ^[0-9]+$ ]] || die "GPURUN_E2E_MAX_AGE_DAYS=$max_age_days: want a number of days"

key=$(printf '%s\n' "$format" "$suite" "$variant" "$packages" "$mirror" "${dpkgopts[@]}" | sha256sum | cut -c1-16)
name="torch-$suite-$key"
tar="$cache/$name.tar"
manifest="$cache/$name.manifest"

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

if [ -f "$tar" ] && [ -f "$manifest" ] && [ "${GPURUN_E2E_REBUILD:-}" != 1 ] &&
	[ -z "$(find "$tar" -mtime +"$max_age_days" -print)" ]; then
	log "cached $tar ($(du -h "$tar" | cut -f1), $(grep '^python3-torch ' "$manifest" || echo 'python3-torch ?'), built $(date -r "$tar" '+%F %T'))"
else
	command -v mmdebstrap >/dev/null || die "mmdebstrap not found: apt-get install mmdebstrap (.ci/run installs it)"
	tmp="$cache/.$name.tmp.$$"
	trap 'rm -f "$tmp.tar" "$tmp.manifest"' EXIT
	log "building $tar: mmdebstrap --variant=$variant --include=$packages $suite $mirror"
	start=$(now)
	args=(--variant="$variant" --include="$packages" --quiet)
	for o in "${dpkgopts[@]}"; do
		args+=(--dpkgopt="$o")
	done
	# The manifest is written from the finished chroot ("$1" in the hook).
	args+=(--customize-hook="chroot \"\$1\" dpkg-query -W -f='\${Package} \${Version}\n' > '$tmp.manifest'")
	if ! mmdebstrap "${args[@]}" "$suite" "$tmp.tar" "$mirror"; then
		die "mmdebstrap failed (mirror $mirror; set GPURUN_E2E_MIRROR to use another)"
	fi
	mv -f "$tmp.manifest" "$manifest"
	mv -f "$tmp.tar" "$tar"
	trap - EXIT
	# Older builds (another key) are not needed any more.
	find "$cache" -maxdepth 1 -name 'torch-*' ! -name "$name.*" -delete
	log "built $tar ($(du -h "$tar" | cut -f1), $(grep '^python3-torch ' "$manifest")) in $(since "$start")"
fi

if [ -z "$tag" ]; then
	echo "$tar"
	exit 0
fi

command -v docker >/dev/null || die "docker CLI not found: apt-get install docker.io"
if [ "$(docker image inspect -f '{{index .Config.Labels "io.gpurun.e2e.key"}}' "$tag" 2>/dev/null)" = "$key" ]; then
	log "image $tag already holds $name"
	exit 0
fi
start=$(now)
docker import \
	--change "LABEL io.gpurun.e2e.key=$key" \
	--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	--change 'CMD ["python3"]' \
	--message "$prog: $name" \
	"$tar" "$tag" >/dev/null
log "imported $tag into ${DOCKER_HOST:-the default daemon} in $(since "$start")"

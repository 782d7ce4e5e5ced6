#!/usr/bin/env bash
# Re-captures testdata/containers/*: what a process inside a real Docker
# container sees (/proc/self/mountinfo, /proc/self/cgroup, its cgroup's
# memory limit, df of /dev/shm), for each way Docker sets up /dev/shm.
# Runs a private dockerd under a temporary directory (root needed; Debian:
# apt-get install docker.io containerd runc busybox-static).
#   usage: sudo diagnose/doctor/testdata/capture.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$here/containers
D=$(mktemp -d /tmp/gpurun-capture-XXXXXX)
cleanup() {
  docker -H "unix://$D/docker.sock" rm -f $(docker -H "unix://$D/docker.sock" ps -aq) >/dev/null 2>&1 || true
  [ -f "$D/pid" ] && kill "$(cat "$D/pid")" 2>/dev/null || true
  sleep 2
  grep " $D" /proc/self/mountinfo | awk '{print $5}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  rm -rf "$D"
}
trap cleanup EXIT
echo '{"deprecated-key-path": "'"$D"'/key.json"}' >"$D/daemon.json"
dockerd -H "unix://$D/docker.sock" --data-root "$D/root" --exec-root "$D/exec" --pidfile "$D/pid" \
  --config-file "$D/daemon.json" --bridge=none --iptables=false >"$D/dockerd.log" 2>&1 &
for _ in $(seq 100); do [ -S "$D/docker.sock" ] && docker -H "unix://$D/docker.sock" info >/dev/null 2>&1 && break; sleep 0.2; done
dk() { docker -H "unix://$D/docker.sock" "$@"; }
mkdir -p "$D/ctx"
cp "$(command -v busybox)" "$D/ctx/busybox"
printf 'FROM scratch\nCOPY busybox /bin/busybox\nRUN ["/bin/busybox","--install","-s","/bin"]\nCMD ["/bin/sh"]\n' >"$D/ctx/Dockerfile"
DOCKER_BUILDKIT=0 dk build -q -t gpurun-capture/busybox "$D/ctx" >/dev/null
version=$(dk version --format '{{.Server.Version}}')
script='cat /proc/self/mountinfo >/out/mountinfo; cat /proc/self/cgroup >/out/cgroup
for f in /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory.max /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us /sys/fs/cgroup/cpu.max; do
  [ -f "$f" ] && { mkdir -p "/out/files$(dirname "$f")"; cat "$f" >"/out/files$f"; }
done
df -k /dev/shm >/out/df 2>&1 || true; [ -e /.dockerenv ] && touch /out/dockerenv; true'
capture() { # name, docker run args...
  local name=$1; shift
  rm -rf "${out:?}/$name"; mkdir -p "$out/$name"
  dk run --rm --network none -v "$out/$name:/out" "$@" gpurun-capture/busybox sh -c "$script"
  printf 'docker %s: docker run --rm --network none %s\n' "$version" "$*" >"$out/$name/README"
}
capture docker-default
capture docker-shm-size-2g --shm-size 2g
capture docker-memory-2g --memory 2g -e NVIDIA_VISIBLE_DEVICES=all
capture docker-ipc-host --ipc host
capture docker-ipc-none --ipc none
capture docker-ipc-shareable --ipc shareable
capture docker-tmpfs-devshm --tmpfs /dev/shm:size=1g
dk run -d --name donor --network none --ipc shareable gpurun-capture/busybox sleep 600 >/dev/null
capture docker-ipc-container --ipc container:donor
dk rm -f donor >/dev/null
echo "captured into $out"

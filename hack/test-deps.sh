#!/usr/bin/env bash
# What every test needs on the machine, installed when missing: the
# engines and tools from Debian's packages, staticcheck from the module
# proxy, and a Docker daemon that answers (the quick start and `gpurun run`
# talk to the system daemon; integration tests start private ones). Run by
# `make test` (make test-deps) and by .ci/run; on a machine that has it all
# it changes nothing and takes a second.
#
#   hack/test-deps.sh
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
	echo "make test: the integration tests start real engines and need root: run \`sudo make test\` (or \`make test-unit\`: no daemon, no root)" >&2
	exit 1
fi
log() { printf '==> %s\n' "$*"; }

export DEBIAN_FRONTEND=noninteractive
pkgs=(docker.io containerd runc busybox-static docker-compose containernetworking-plugins etcd-server podman iproute2 util-linux mmdebstrap rpm make)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	command -v apt-get >/dev/null || { echo "make test: missing ${missing[*]}, and no apt-get to install them: install them, then run make test again" >&2; exit 1; }
	log "apt-get install ${missing[*]}"
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

STATICCHECK_VERSION=v0.8.2
gobin=$(go env GOPATH)/bin
if ! command -v staticcheck >/dev/null 2>&1 && [ ! -x "$gobin/staticcheck" ]; then
	log "go install staticcheck@$STATICCHECK_VERSION"
	go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi

if ! docker info >/dev/null 2>&1; then
	log "starting dockerd (its log: /var/log/gpurun-dockerd.log)"
	mkdir -p /var/log
	nohup dockerd >/var/log/gpurun-dockerd.log 2>&1 &
	for _ in $(seq 1 60); do
		docker info >/dev/null 2>&1 && break
		sleep 1
	done
	docker info >/dev/null 2>&1 || { tail -50 /var/log/gpurun-dockerd.log >&2; echo "make test: dockerd did not answer within 60 s (its log above)" >&2; exit 1; }
fi

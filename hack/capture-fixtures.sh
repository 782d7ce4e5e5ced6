#!/usr/bin/env bash
# capture-fixtures.sh OUTDIR
#
# Captures the OCI config.json that real engines hand to their low-level
# runtime, as test fixtures for the planner (oci/testdata/fixtures). Nothing
# is hand-written: hack/capture-runtime, registered as an OCI runtime with each
# engine, copies <bundle>/config.json byte for byte on `create`, then execs
# runc. This script starts private instances of every engine, each on its own
# socket and state directories under one temporary directory, creates the
# containers, copies the captures to OUTDIR/<engine>-<version>-<case>.json,
# writes OUTDIR/README.md for people and OUTDIR/capture/index.json for tests
# (each fixture's engine, command argv, the host side of its /dev/shm bind,
# and for Docker the `docker inspect` of the container and of its image's
# env), copies the compose file it ran to OUTDIR/capture/compose.yaml, and
# removes everything it made.
#
# Engines (Debian bookworm packages): dockerd 20.10 (with its own containerd)
# driven by the docker CLI and by docker-compose 1.29, containerd 1.6 with
# its CRI plugin (driven by crictl, built from the Go module proxy), ctr 1.6,
# podman 4.3; and containerd 2.x CRI, built from the Go module proxy.
#
# dockerd registers its "nvidia" device driver (--gpus, compose's deploy
# devices) only when nvidia-container-runtime-hook is in its PATH. The
# captures that need it run against a second dockerd whose PATH holds a
# stand-in of that name (it reads the OCI state and exits 0): what dockerd
# writes into config.json is dockerd's own; the first dockerd records its
# refusal without one.
#
# Needs: root, docker.io, docker-compose, containerd, runc, podman, conmon,
# busybox-static, jq, util-linux, go (for crictl and containerd 2.x). No
# registry; the only network use is the Go module proxy. Takes about 60 s
# with warm Go caches, 2-3 minutes with cold ones.
#
# Every engine runs in a network namespace of the script's own, so that nothing it does
# to networks reaches the host's (a dockerd with --bridge=none in the host's
# namespace deletes docker0). Outside its temporary directory it only leaves
# what it cannot avoid:
# containerd shims (1.6 and 2.x) put their sockets in /run/containerd/s (removed
# when they exit; the directory too if it was not there before), and the
# container cgroups (/docker, /kubepods, /libpod_parent, /<ctr namespace>)
# are removed when empty and not there before.
#
# Environment:
#   CRICTL              use this crictl instead of building one
#   CRICTL_VERSION      cri-tools version to build (default v1.36.0)
#   SKIP_CONTAINERD2=1  skip the containerd 2.x captures
#   CONTAINERD2_BIN     directory with containerd, ctr, containerd-shim-runc-v2
#                       2.x to use instead of building them
#   CONTAINERD2_VERSION containerd version to build (default v2.4.2)
#   KEEP_TMP=1          keep the temporary directory (daemons are still stopped)
set -euo pipefail

usage() { echo "usage: $0 OUTDIR" >&2; exit 2; }
[ $# -eq 1 ] || usage
[ "$(id -u)" = 0 ] || { echo "$0: must run as root" >&2; exit 1; }

HERE=$(cd "$(dirname "$0")" && pwd)
CAPTURE_RUNTIME=$HERE/capture-runtime
mkdir -p "$1"
OUT=$(cd "$1" && pwd)
RUNC=$(command -v runc)
BUSYBOX=$(command -v busybox)
DOCKER_CLI=/usr/bin/docker # Debian's docker.io client, same version as dockerd
[ -x "$DOCKER_CLI" ] || DOCKER_CLI=$(command -v docker)
COMPOSE=$(command -v docker-compose || true)
for b in dockerd containerd ctr containerd-shim-runc-v2 podman conmon jq docker-compose "$RUNC" "$BUSYBOX"; do
	command -v "$b" >/dev/null || { echo "$0: missing $b" >&2; exit 1; }
done
[[ $(ldd "$BUSYBOX" 2>&1 || true) == *"not a dynamic executable"* ]] ||
	{ echo "$0: $BUSYBOX is not static (install busybox-static)" >&2; exit 1; }

START=$(date +%s)
T=$(mktemp -d /tmp/gpurun-capture.XXXXXX)
chmod 0755 "$T"
TAG=$(basename "$T" | tr '.' '-')
CAP=$T/captures
mkdir -p "$CAP" "$T/bin" "$T/tmp"
# Go's os.TempDir (containerd's temporary mounts), containers/image: not /tmp, /var/tmp
export TMPDIR=$T/tmp

log() { printf '%s [%3ss] %s\n' "capture:" "$(($(date +%s) - START))" "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }

# ---------------------------------------------------------------- cleanup ---
DAEMON_PIDS=()   # started by us, stopped in reverse order
CGROUP_TOPS=(docker libpod_parent kubepods "$TAG")
declare -A CGROUP_EXISTED=()
for top in "${CGROUP_TOPS[@]}"; do
	for h in /sys/fs/cgroup/*/; do
		[ -d "$h$top" ] && CGROUP_EXISTED["$h$top"]=1
	done
done

# containerd's shims (1.6 and 2.x) put their sockets in /run/containerd/s
# whatever the config says; they remove them on exit. Remove the directories
# afterwards too if they were not there before (rmdir: only when empty).
SYS_DIRS=(/run/containerd/s /run/containerd)
declare -A SYS_DIR_EXISTED=()
for d in "${SYS_DIRS[@]}"; do [ -e "$d" ] && SYS_DIR_EXISTED[$d]=1; done

stop_pid() { # stop_pid PID: TERM, wait up to 20 s, then KILL
	local pid=$1 i
	kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for i in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.2
	done
	kill -KILL "$pid" 2>/dev/null || true
}

# Processes whose command line names our temporary directory (containerd
# shims and conmon outlive the daemons that started them): by pid, never by name.
our_pids() {
	local p
	for p in /proc/[0-9]*; do
		[ "${p#/proc/}" = $$ ] && continue
		tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -qF -- "$T/" && echo "${p#/proc/}"
	done
	return 0
}

rm_cgroups() { # remove empty cgroup dirs we created, deepest first
	local top h
	for top in "${CGROUP_TOPS[@]}"; do
		for h in /sys/fs/cgroup/*/; do
			[ -d "$h$top" ] || continue
			[ -n "${CGROUP_EXISTED[$h$top]:-}" ] && continue
			find "$h$top" -depth -type d -exec rmdir {} \; 2>/dev/null || true
		done
	done
	return 0
}

cleanup() {
	local rc=$? i p m
	set +e
	trap - EXIT INT TERM
	log "cleaning up $T"
	if [ -S "$T/docker/docker.sock" ]; then
		for i in $(dk ps -aq 2>/dev/null); do dk rm -f "$i" >/dev/null 2>&1; done
		dk volume prune -f >/dev/null 2>&1
	fi
	if [ -n "${PODMAN_READY:-}" ]; then
		pm rm -af -t 0 >/dev/null 2>&1
		pm volume prune -f >/dev/null 2>&1
	fi
	for C in "$T/cri2" "$T/cri"; do
		[ -S "$C/containerd.sock" ] && [ -x "${CRICTL_BIN:-}" ] || continue
		for i in $(cri pods -q 2>/dev/null); do
			cri stopp "$i" >/dev/null 2>&1
			cri rmp "$i" >/dev/null 2>&1
		done
	done
	if [ -S "$C/containerd.sock" ]; then
		for i in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s KILL "$i" >/dev/null 2>&1; done
		sleep 0.5
		for i in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks rm -f "$i" >/dev/null 2>&1; done
		for i in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers rm "$i" >/dev/null 2>&1; done
	fi
	for ((i = ${#DAEMON_PIDS[@]} - 1; i >= 0; i--)); do stop_pid "${DAEMON_PIDS[$i]}"; done
	for p in $(our_pids); do stop_pid "$p"; done
	# unmount everything under $T, deepest first
	for i in 1 2 3; do
		m=$(awk -v t="$T/" 'index($5, t) == 1 || $5 == substr(t, 1, length(t) - 1) { print $5 }' /proc/self/mountinfo | sort -r)
		[ -z "$m" ] && break
		for p in $m; do umount -R "$p" 2>/dev/null || umount -l "$p" 2>/dev/null; done
	done
	rm_cgroups
	for p in "${SYS_DIRS[@]}"; do
		[ -n "${SYS_DIR_EXISTED[$p]:-}" ] || rmdir "$p" 2>/dev/null
	done
	if [ -n "${KEEP_TMP:-}" ]; then
		log "kept $T"
	else
		rm -rf "$T" 2>/dev/null || log "could not remove all of $T"
	fi
	log "done in $(($(date +%s) - START))s (exit $rc)"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Every engine runs in a network namespace of our own, held open by a bind
# mount at $T/netns (the cleanup unmounts it with everything under $T): a
# dockerd with --bridge=none in the host's namespace deletes the host's
# docker0, and the host's own docker run then fails until its dockerd
# restarts. The Go builds (module proxy) stay in the host's.
: >"$T/netns"
unshare --net="$T/netns" ip link set lo up || die "cannot create a network namespace at $T/netns"
# A command line prefix, not a function: "${INNET[@]}" dockerd ... & makes $!
# dockerd's pid (nsenter execs it), which the script signals.
INNET=(nsenter --net="$T/netns" --)

wait_for() { # wait_for SECONDS CMD...: until CMD succeeds, or the last daemon died
	local n=$(($1 * 5)); shift
	while ! "$@" >/dev/null 2>&1; do
		n=$((n - 1))
		[ $n -gt 0 ] || return 1
		kill -0 "${DAEMON_PIDS[-1]}" 2>/dev/null || return 1
		sleep 0.2
	done
}

# ------------------------------------------------- capture runtime wrapper ---
# Engines do not pass their environment to the runtime: a wrapper sets it.
cat >"$T/bin/capture" <<EOF
#!/bin/sh
GPURUN_CAPTURE_DIR=$CAP GPURUN_CAPTURE_RUNC=$RUNC exec $CAPTURE_RUNTIME "\$@"
EOF
chmod 0755 "$T/bin/capture"

# A fake NVIDIA GPU device node.
mknod "$T/nvidia0" c 195 0

# ----------------------------------------------------------- bookkeeping ---
ROWS=()     # README table rows
INPUTS=()   # README sections with the exact inputs
NOTES=()    # README lines on what could not be captured, and why
INDEX=$T/index # one JSON object per fixture (capture/index.json), in capture order
mkdir -p "$INDEX"
ARGV_JSON=null          # set before take: the command's argv, a JSON array
argv_json() { local a; for a in "$@"; do printf '%s' "$a" | jq -Rs .; done | jq -sc .; }
EXTRA_FILE=$T/extra.json # written before take: more members of the fixture's index entry

rel() { sed "s|$T|\$T|g"; }
shm_of() {
	jq -r '[.mounts[]? | select(.destination == "/dev/shm")
	        | "`\(.type)` `\(.source)` `\(.options // [] | join(","))`"]
	       | if length == 0 then "(no /dev/shm mount)" else join(" then ") end' "$1" | rel
}
ipc_of() {
	jq -r '[.linux.namespaces[]? | select(.type == "ipc") | (.path // "new")] |
	       if length == 0 then "host" else .[0] end' "$1" | rel
}

# host_of FILE: for each bind mount at /dev/shm, what is mounted at its source
# on the host right now (fstype and size), or "directory" when nothing is.
host_of() {
	local src info out=()
	while IFS= read -r src; do
		info=$(awk -v m="$src" '$5 == m { for (i = 7; i <= NF; i++) if ($i == "-") { t = $(i + 1); o = $(i + 3) } }
			END { if (t == "") print "directory"; else { n = split(o, a, ","); s = ""
				for (j = 1; j <= n; j++) if (a[j] ~ /^size=/) s = " " a[j]; print t s } }' /proc/self/mountinfo)
		out+=("$info")
	done < <(jq -r '.mounts[]? | select(.destination == "/dev/shm" and .type == "bind") | .source' "$1")
	[ ${#out[@]} -gt 0 ] || { echo "-"; return; }
	(IFS=';'; echo "${out[*]}" | sed 's/;/; /g')
}

# host_json FILE: host_of for machines: for each bind mount at /dev/shm,
# {source, fstype, size_bytes} of what is mounted at its source on the host
# now (fstype and size_bytes null for a plain directory).
host_json() {
	local src
	jq -r '.mounts[]? | select(.destination == "/dev/shm" and .type == "bind") | .source' "$1" |
		while IFS= read -r src; do
			awk -v m="$src" '$5 == m { for (i = 7; i <= NF; i++) if ($i == "-") { t = $(i + 1); o = $(i + 3) } }
				END { s = ""; n = split(o, a, ","); for (j = 1; j <= n; j++) if (a[j] ~ /^size=/) s = substr(a[j], 6)
					printf "%s\t%s\t%s\n", m, t, s }' /proc/self/mountinfo
		done |
		jq -R -s 'split("\n") | map(select(. != "") | split("\t") | {source: .[0], fstype: (if .[1] == "" then null else .[1] end),
			size_bytes: (if .[2] == "" then null elif (.[2] | endswith("k")) then (.[2] | rtrimstr("k") | tonumber * 1024) else (.[2] | tonumber) end)})'
}

# take ID NAME ENGINE COMMAND NOTE CHECK [HOST-CHECK]: move the capture of
# container ID to OUT/NAME.json after checking it is JSON, that jq -e CHECK
# holds and that host_of contains HOST-CHECK; add its README row and its
# index entry (ARGV_JSON and EXTRA_FILE, which it resets).
take() {
	local id=$1 name=$2 engine=$3 cmd=$4 note=$5 check=$6 hostcheck=${7:-} f host
	f=$CAP/$id.json
	[ -f "$f" ] || die "$name: the runtime got no create for $id"
	[ ! -e "$CAP/$id.2.json" ] || die "$name: more than one create for $id"
	jq -e . "$f" >/dev/null || die "$name: not JSON"
	jq -e "$check" "$f" >/dev/null || die "$name: check failed: $check"
	host=$(host_of "$f")
	[ -z "$hostcheck" ] || [[ $host == *"$hostcheck"* ]] || die "$name: host side is '$host', want '$hostcheck'"
	cp "$f" "$OUT/$name.json"
	[ -f "$EXTRA_FILE" ] || echo '{}' >"$EXTRA_FILE"
	jq -n --arg file "$name.json" --arg engine "$engine" --arg command "$cmd" --arg note "$note" \
		--argjson argv "$ARGV_JSON" --slurpfile host <(host_json "$f") --slurpfile extra "$EXTRA_FILE" \
		'{file: $file, engine: $engine, command: $command, argv: $argv, note: $note, host_shm: $host[0]} + $extra[0]' \
		>"$INDEX/$(printf '%03d' ${#ROWS[@]})-$name.json" || die "$name: index entry"
	ARGV_JSON=null
	rm -f "$EXTRA_FILE"
	note=$(printf '%s' "$note" | sed -E 's/([^ (]*<[^ ),;]*)/`\1`/g') # <placeholders> in code spans
	ROWS+=("| \`$name.json\` | $engine | \`$(printf '%s' "$cmd" | rel)\` | $(shm_of "$f") | $host | $(ipc_of "$f") | $note |")
	log "captured $name.json"
}

shmq='(.mounts[] | select(.destination == "/dev/shm"))'

# ================================================================ docker ===
D=$T/docker
mkdir -p "$D/containerd"
dk() { DOCKER_CONFIG=$D/client timeout 60 "$DOCKER_CLI" -H "unix://$D/docker.sock" "$@"; }

# dockerd's own containerd (not the system one at /run/containerd, which
# dockerd would otherwise pick up if it is running), without CRI.
cat >"$D/containerd/config.toml" <<EOF
version = 2
root = "$D/containerd/root"
state = "$D/containerd/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$D/containerd/containerd.sock"
[ttrpc]
  address = "$D/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$D/containerd/opt"
EOF
"${INNET[@]}" containerd --config "$D/containerd/config.toml" >"$D/containerd/log" 2>&1 &
DAEMON_PIDS+=($!)
wait_for 10 ctr -a "$D/containerd/containerd.sock" version || die "dockerd's containerd did not start"

docker_daemon_json() { # docker_daemon_json [EXTRA-JSON-MEMBERS]
	printf '{"runtimes": {"capture": {"path": "%s"}}, "deprecated-key-path": "%s"%s}\n' \
		"$T/bin/capture" "$D/key.json" "${1:+, $1}" >"$D/daemon.json"
}
docker_daemon_json
DOCKER_DEFAULT_SHM=67108864 # the daemon's default-shm-size, for the index
DOCKERD_ARGS=(-H "unix://$D/docker.sock" --data-root "$D/root" --exec-root "$D/exec"
	--pidfile "$D/dockerd.pid" --config-file "$D/daemon.json"
	--containerd "$D/containerd/containerd.sock"
	--bridge=none --iptables=false --ip6tables=false)
"${INNET[@]}" dockerd "${DOCKERD_ARGS[@]}" >"$D/dockerd.log" 2>&1 &
DOCKERD_PID=$!
DAEMON_PIDS+=($DOCKERD_PID)
wait_for 30 dk version || die "dockerd did not start; see $D/dockerd.log"
DOCKER_V=$(dk version -f '{{.Server.Version}}' | sed -E 's/^([0-9]+\.[0-9]+).*/\1/')
DOCKER_FULL=$(dk version -f '{{.Server.Version}}')
log "dockerd $DOCKER_FULL up"

# Test images without a registry: static busybox FROM scratch, and a "pause"
# image (busybox sleeping forever) for the CRI sandboxes.
mkdir -p "$T/ctx/busybox" "$T/ctx/pause"
cp "$BUSYBOX" "$T/ctx/busybox/busybox"
printf 'FROM scratch\nCOPY busybox /bin/busybox\nRUN ["/bin/busybox","--install","-s","/bin"]\nCMD ["/bin/sh"]\n' \
	>"$T/ctx/busybox/Dockerfile"
printf 'FROM gpurun-test/busybox:latest\nCMD ["/bin/sleep","infinity"]\n' >"$T/ctx/pause/Dockerfile"
DOCKER_BUILDKIT=0 dk build -q -t gpurun-test/busybox:latest "$T/ctx/busybox" >/dev/null
DOCKER_BUILDKIT=0 dk build -q -t gpurun-test/pause:latest "$T/ctx/pause" >/dev/null
dk save -o "$T/busybox.tar" gpurun-test/busybox:latest
dk save -o "$T/pause.tar" gpurun-test/pause:latest

IMG=gpurun-test/busybox:latest
DK_ENGINE="Docker $DOCKER_FULL (dockerd, docker CLI $(dk version -f '{{.Client.Version}}'), containerd $(containerd --version | awk '{print $3}'), runc $("$RUNC" --version | awk 'NR==1{print $3}'))"

# docker_extra ID [DONOR-FIXTURE]: the index's "docker" member for container
# ID: docker inspect of it, its image's env, the data root, the daemon's
# default-shm-size, and the fixture of the container whose IPC it joins.
docker_extra() {
	local img
	img=$(dk inspect -f '{{.Config.Image}}' "$1") || die "docker inspect $1"
	jq -n --slurpfile c <(dk inspect "$1") --slurpfile i <(dk image inspect "$img") \
		--arg root "$D/root" --argjson shm "$DOCKER_DEFAULT_SHM" --arg donor "${2:-}" \
		'{docker: {data_root: $root, default_shm_size: $shm, inspect: $c[0][0], image_env: ($i[0][0].Config.Env // []),
		  donor: (if $donor == "" then null else $donor end)}}' >"$EXTRA_FILE" || die "docker inspect $1"
}

# [HOSTCHECK=...] [DONORFX=FIXTURE] [MAYFAIL=1] dcap NAME NOTE CHECK
# DOCKER-RUN-ARGS...: docker run -d --runtime capture --network none ARGS
# IMAGE sleep 3600, then take the capture. With MAYFAIL, a container that
# runc cannot start on this host is taken all the same (config.json is
# dockerd's, captured before runc ran) and the note says why it failed.
dcap() {
	local name=docker-$DOCKER_V-$1 note=$2 check=$3 id err
	shift 3
	local args=(run -d --runtime capture --network none "$@" "$IMG" sleep 3600)
	if ! id=$(dk "${args[@]}" 2>"$T/dcap.err"); then
		err=$(tail -n 1 "$T/dcap.err" | rel)
		[ -n "${MAYFAIL:-}" ] || die "$name: docker ${args[*]}: $err"
		id=$(dk ps -alq --no-trunc) || die "$name: no container after docker ${args[*]}"
		note="$note; runc could not start it on the capture host ($err), after the capture"
	fi
	LAST_ID=$id
	ARGV_JSON=$(argv_json docker "${args[@]}")
	docker_extra "$id" "${DONORFX:-}"
	take "$id" "$name" "$DK_ENGINE" "docker ${args[*]}" "$note" "$check" "${HOSTCHECK:-}"
}
# has_dev PATH [JQ-CONDITION]: a jq test for a linux.devices entry.
has_dev() { echo "any(.linux.devices[]?; .path == \"$1\"${2:+ and $2})"; }

mkdir -p "$T/hostdir-devshm"
dcap default "IPC private (default): tmpfs mount with size=64 MiB in bytes" \
	"$shmq | .type == \"tmpfs\" and .source == \"shm\" and (.options | index(\"size=67108864\"))"
dcap shm-size-2g "--shm-size sets the size option of the same tmpfs mount" \
	"$shmq | .options | index(\"size=2147483648\")" --shm-size 2g
HOSTCHECK="tmpfs" dcap ipc-host "host IPC namespace; /dev/shm bind of the host's /dev/shm" \
	"$shmq | .type == \"bind\" and .source == \"/dev/shm\"" --ipc host
HOSTCHECK="tmpfs size=65536k" dcap ipc-shareable "donor: shm is a host tmpfs under <data-root>/containers/<id>/mounts/shm, bind-mounted" \
	"$shmq | .type == \"bind\" and (.source | endswith(\"/mounts/shm\"))" --ipc shareable
DONOR=$LAST_ID
HOSTCHECK="tmpfs size=65536k" DONORFX=docker-$DOCKER_V-ipc-shareable.json dcap ipc-container "peer of the shareable donor: binds the donor's shm path, joins its IPC namespace (/proc/<pid>/ns/ipc)" \
	"($shmq | .type == \"bind\" and (.source | contains(\"$DONOR\"))) and (.linux.namespaces[] | select(.type == \"ipc\") | .path | startswith(\"/proc/\"))" \
	--ipc "container:$DONOR"
dcap ipc-none "IPC none: no /dev/shm mount at all" \
	"[.mounts[] | select(.destination == \"/dev/shm\")] | length == 0" --ipc none
dcap ipc-private "explicit --ipc private: same as the default" \
	"$shmq | .type == \"tmpfs\" and (.options | index(\"size=67108864\"))" --ipc private
dcap tmpfs-devshm "--tmpfs /dev/shm:size=512m replaces the shm mount (docker keeps only the user's)" \
	"$shmq | .type == \"tmpfs\" and (.options | index(\"size=512m\"))" --tmpfs /dev/shm:size=512m
dcap volume-devshm "named volume at /dev/shm: bind of <data-root>/volumes/devshm/_data" \
	"$shmq | .type == \"bind\" and (.source | endswith(\"/volumes/devshm/_data\"))" -v devshm:/dev/shm
HOSTCHECK="directory" dcap bind-devshm "host directory bind-mounted at /dev/shm" \
	"$shmq | .type == \"bind\" and .source == \"$T/hostdir-devshm\"" -v "$T/hostdir-devshm:/dev/shm"
dcap memory-2g "memory limit 2 GiB; /dev/shm stays 64 MiB" \
	".linux.resources.memory.limit == 2147483648 and ($shmq | .options | index(\"size=67108864\"))" --memory 2g
dcap env-nvidia-all "GPU by env NVIDIA_VISIBLE_DEVICES=all" \
	".process.env | index(\"NVIDIA_VISIBLE_DEVICES=all\")" -e NVIDIA_VISIBLE_DEVICES=all
dcap env-nvidia-0-1 "GPU by env NVIDIA_VISIBLE_DEVICES=0,1" \
	".process.env | index(\"NVIDIA_VISIBLE_DEVICES=0,1\")" -e NVIDIA_VISIBLE_DEVICES=0,1
dcap env-nvidia-void "NVIDIA_VISIBLE_DEVICES=void: not a GPU container" \
	".process.env | index(\"NVIDIA_VISIBLE_DEVICES=void\")" -e NVIDIA_VISIBLE_DEVICES=void
dcap device-nvidia0 "GPU by device: linux.devices /dev/nvidia0 (c 195:0) and a devices cgroup rule" \
	"(.linux.devices[] | select(.path == \"/dev/nvidia0\") | .type == \"c\" and .major == 195 and .minor == 0)" \
	--device "$T/nvidia0:/dev/nvidia0"
dcap gpu-memory-4g "GPU by env with a 4 GiB memory limit" \
	"(.process.env | index(\"NVIDIA_VISIBLE_DEVICES=all\")) and .linux.resources.memory.limit == 4294967296" \
	-e NVIDIA_VISIBLE_DEVICES=all --memory 4g

# Device nodes: a directory of them, which dockerd expands into the nodes
# under it, and single nodes that give no GPU by themselves.
mkdir -p "$T/dri"
mknod "$T/dri/card0" c 226 0
mknod "$T/dri/renderD128" c 226 128
mknod "$T/nvidiactl" c 195 255
dcap device-dri-dir "--device <dir>:/dev/dri, which dockerd expands into the nodes under the directory (card0, renderD128); no /dev/dri entry" \
	"$(has_dev /dev/dri/card0 '.major == 226 and .minor == 0') and $(has_dev /dev/dri/renderD128 '.major == 226 and .minor == 128') and ($(has_dev /dev/dri) | not)" \
	--device "$T/dri:/dev/dri"
dcap device-nvidiactl "--device <node>:/dev/nvidiactl, the NVIDIA driver's control node, alone" \
	"$(has_dev /dev/nvidiactl '.major == 195 and .minor == 255') and ([.linux.devices[]] | length == 1)" \
	--device "$T/nvidiactl:/dev/nvidiactl"
dcap device-dri-card0 "--device <node>:/dev/dri/card0, a display (KMS) node, alone" \
	"$(has_dev /dev/dri/card0 '.major == 226 and .minor == 0') and ([.linux.devices[]] | length == 1)" \
	--device "$T/dri/card0:/dev/dri/card0"
MAYFAIL=1 dcap privileged "--privileged: every device node of the capture host in linux.devices (none of them a GPU there)" \
	"([.linux.devices[]] | length > 1) and (.process.capabilities.bounding | index(\"CAP_SYS_ADMIN\"))" --privileged

# GPU containers sharing IPC: the donor's host tmpfs (64 MiB, or --shm-size),
# and a peer whose own --shm-size dockerd ignores.
HOSTCHECK="tmpfs size=65536k" dcap gpu-ipc-shareable "GPU by env; IPC donor: a bind of the 64 MiB host tmpfs dockerd made" \
	"$shmq | .type == \"bind\" and (.source | endswith(\"/mounts/shm\"))" -e NVIDIA_VISIBLE_DEVICES=all --ipc shareable
GPU_DONOR=$LAST_ID
HOSTCHECK="tmpfs size=65536k" DONORFX=docker-$DOCKER_V-gpu-ipc-shareable.json dcap gpu-ipc-container "GPU by env; peer of that donor" \
	"$shmq | .type == \"bind\" and (.source | contains(\"$GPU_DONOR\"))" -e NVIDIA_VISIBLE_DEVICES=all --ipc "container:$GPU_DONOR"
HOSTCHECK="tmpfs size=2097152k" dcap gpu-ipc-shareable-shm-size-2g "GPU by env; IPC donor with --shm-size 2g: dockerd sizes the host tmpfs; config.json is like the 64 MiB donor's" \
	"$shmq | .type == \"bind\" and (.source | endswith(\"/mounts/shm\"))" -e NVIDIA_VISIBLE_DEVICES=all --ipc shareable --shm-size 2g
GPU_DONOR=$LAST_ID
HOSTCHECK="tmpfs size=2097152k" DONORFX=docker-$DOCKER_V-gpu-ipc-shareable-shm-size-2g.json dcap gpu-ipc-container-shm-size-1g "GPU by env; peer with --shm-size 1g, which dockerd ignores: it binds the donor's 2 GiB tmpfs" \
	"$shmq | .type == \"bind\" and (.source | contains(\"$GPU_DONOR\"))" -e NVIDIA_VISIBLE_DEVICES=all --ipc "container:$GPU_DONOR" --shm-size 1g
dcap gpu-shm-size-64m "GPU by env; an explicit --shm-size 64m: config.json is the default's" \
	"$shmq | .type == \"tmpfs\" and (.options | index(\"size=67108864\"))" -e NVIDIA_VISIBLE_DEVICES=all --shm-size 64m

# --gpus without NVIDIA's hook in dockerd's PATH: refused, nothing to capture.
GPUS_ARGS=(run -d --runtime capture --network none --gpus all "$IMG" sleep 3600)
if GPUS_ERR=$(dk "${GPUS_ARGS[@]}" 2>&1); then
	die "dockerd accepted --gpus all without nvidia-container-runtime-hook in its PATH"
fi
[[ $GPUS_ERR == *"could not select device driver"* ]] || die "docker ${GPUS_ARGS[*]}: unexpected error: $GPUS_ERR"
NOTES+=("- \`docker ${GPUS_ARGS[*]}\` against the first dockerd (no \`nvidia-container-runtime-hook\` in its PATH) gets no container started, so no config.json; docker says:" "" '```' "$(printf '%s\n' "$GPUS_ERR" | rel)" '```' "")

# daemon.json default-shm-size, reloaded with SIGHUP (no restart)
docker_daemon_json '"default-shm-size": "1g"'
INPUTS+=("daemon.json for docker-$DOCKER_V-default-shm-size-1g-daemon.json (applied with \`kill -HUP <dockerd>\`):" ""
	'```json' "$(rel <"$D/daemon.json")" '```' "")
kill -HUP "$DOCKERD_PID"
wait_for 10 grep -q 'default-shm-size[^0-9,]*1073741824' "$D/dockerd.log" || die "dockerd did not reload default-shm-size"
DOCKER_DEFAULT_SHM=1073741824
dcap default-shm-size-1g-daemon "daemon.json default-shm-size 1g (SIGHUP reload): size=1 GiB in bytes" \
	"$shmq | .type == \"tmpfs\" and (.options | index(\"size=1073741824\"))"
docker_daemon_json
DOCKER_DEFAULT_SHM=67108864
kill -HUP "$DOCKERD_PID"

INPUTS=("dockerd (\`$(printf '%s ' dockerd "${DOCKERD_ARGS[@]}" | rel)\`) daemon.json:" ""
	'```json' "$(rel <"$D/daemon.json")" '```' "" "${INPUTS[@]}")

for i in $(dk ps -aq); do dk rm -f "$i" >/dev/null; done
dk volume rm devshm >/dev/null
stop_pid "$DOCKERD_PID"

# ------------------------------- dockerd with NVIDIA's hook in its PATH ---
# dockerd registers its nvidia device driver (for --gpus and compose's
# deploy devices) only when nvidia-container-runtime-hook is in its PATH
# when it starts: a stand-in of that name makes it. The capture runtime is
# the default runtime (compose files name none) and also answers to the
# name "nvidia" (runtime: nvidia). dockerd starts with only PATH and TMPDIR
# in its environment: it copies its environment into NVIDIA's hook.
mkdir -p "$T/bin/nvidia"
printf '%s\n' '#!/bin/sh' \
	"# A stand-in for NVIDIA's hook (hack/capture-fixtures.sh): in dockerd's PATH" \
	"# it registers dockerd's nvidia device driver; run as a prestart hook, it" \
	"# reads the container's state and does nothing." \
	'cat >/dev/null' 'exit 0' >"$T/bin/nvidia/nvidia-container-runtime-hook"
chmod 0755 "$T/bin/nvidia/nvidia-container-runtime-hook"
printf '{"runtimes": {"capture": {"path": "%s"}, "nvidia": {"path": "%s"}}, "default-runtime": "capture", "deprecated-key-path": "%s"}\n' \
	"$T/bin/capture" "$T/bin/capture" "$D/key.json" >"$D/daemon.json"
DOCKERD_ENV=(PATH="$T/bin/nvidia:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" TMPDIR="$TMPDIR")
"${INNET[@]}" env -i "${DOCKERD_ENV[@]}" dockerd "${DOCKERD_ARGS[@]}" >"$D/dockerd2.log" 2>&1 &
DOCKERD_PID=$!
DAEMON_PIDS+=($DOCKERD_PID)
wait_for 30 dk version || die "dockerd (with the hook) did not start; see $D/dockerd2.log"
INPUTS+=("The second dockerd (\`env -i $(printf '%s ' "${DOCKERD_ENV[@]}" dockerd "${DOCKERD_ARGS[@]}" | rel)\`), for --gpus and docker-compose; daemon.json:" ""
	'```json' "$(rel <"$D/daemon.json")" '```' "" "\`\$T/bin/nvidia/nvidia-container-runtime-hook\`:" "" '```sh' "$(cat "$T/bin/nvidia/nvidia-container-runtime-hook")" '```' "")
nvhook="(.hooks.prestart[0] | (.path | endswith(\"/nvidia-container-runtime-hook\")) and .args == [\"nvidia-container-runtime-hook\", \"prestart\"])"
dcap gpus-all "--gpus all: dockerd adds NVIDIA_VISIBLE_DEVICES=all, NVIDIA_DRIVER_CAPABILITIES and NVIDIA's prestart hook (the stand-in)" \
	"(.process.env | index(\"NVIDIA_VISIBLE_DEVICES=all\")) and $nvhook" --gpus all
dcap gpus-2 "--gpus 2: NVIDIA_VISIBLE_DEVICES=0,1 and the prestart hook" \
	"(.process.env | index(\"NVIDIA_VISIBLE_DEVICES=0,1\")) and $nvhook" --gpus 2
log "docker done"

# ======================================================== docker-compose ===
# Debian's docker-compose 1.29 against the second dockerd: one project, a
# service per GPU shape; each service's container is one capture.
K=$T/compose
mkdir -p "$K/gpus"
COMPOSE_V=$("$COMPOSE" version --short)
COMPOSE_PROJECT=gpurun-capture
kc() { (cd "$K" && DOCKER_HOST="unix://$D/docker.sock" DOCKER_CONFIG=$D/client timeout 120 "$COMPOSE" -p "$COMPOSE_PROJECT" "$@"); }
svc() { # svc NAME KEY-LINES...: a service of the capture image
	printf '  %s:\n    image: %s\n    command: sleep 3600\n    network_mode: none\n' "$1" "$IMG"
	shift
	[ $# -eq 0 ] || printf '    %s\n' "$@"
}
gpuenv='environment: {NVIDIA_VISIBLE_DEVICES: all}'
{
	echo "# Run by hack/capture-fixtures.sh: docker-compose $COMPOSE_V -p $COMPOSE_PROJECT up -d,"
	echo "# against a private dockerd whose default runtime captures config.json."
	echo "services:"
	svc deploy-gpu 'deploy:' '  resources:' '    reservations:' '      devices:' '        - driver: nvidia' '          count: all' '          capabilities: [gpu]'
	svc deploy-gpu-mem-limit-4g 'mem_limit: 4g' 'deploy:' '  resources:' '    reservations:' '      devices:' '        - capabilities: [gpu]' '          count: 1'
	svc env-nvidia-all "$gpuenv"
	svc runtime-nvidia 'runtime: nvidia'
	svc devices-dri 'devices:' "  - $T/dri:/dev/dri"
	svc devices-nvidiactl 'devices:' "  - $T/nvidiactl:/dev/nvidiactl"
	svc shm-size-2g "$gpuenv" 'shm_size: 2g'
	svc shm-size-64m "$gpuenv" 'shm_size: 64m'
	svc ipc-host "$gpuenv" 'ipc: host'
	svc ipc-donor "$gpuenv" 'ipc: shareable' 'shm_size: 2g'
	svc ipc-peer "$gpuenv" 'ipc: service:ipc-donor'
	svc tmpfs-devshm "$gpuenv" 'tmpfs: /dev/shm:size=512m'
	svc plain
} >"$K/compose.yaml"
kc up -d >"$K/up.log" 2>&1 || die "docker-compose up; see $K/up.log: $(cat "$K/up.log")"
KC_ENGINE="docker-compose $COMPOSE_V with $DK_ENGINE"
KC_ARGV=$(argv_json docker-compose -p "$COMPOSE_PROJECT" up -d)
# [HOSTCHECK=...] [DONORFX=FIXTURE] kcap SERVICE NOTE CHECK: take the
# capture of the service's container.
kcap() {
	local name=docker-compose-${COMPOSE_V%.*}-$1 id
	id=$(kc ps -q "$1") && [ -n "$id" ] || die "$name: no container for service $1"
	LAST_ID=$id
	ARGV_JSON=$KC_ARGV
	docker_extra "$id" "${DONORFX:-}"
	jq --arg svc "$1" --arg v "$COMPOSE_V" --arg p "$COMPOSE_PROJECT" \
		'. + {compose: {file: "capture/compose.yaml", service: $svc, project: $p, version: $v}}' "$EXTRA_FILE" >"$EXTRA_FILE.new" &&
		mv "$EXTRA_FILE.new" "$EXTRA_FILE" || die "$name: index entry"
	take "$id" "$name" "$KC_ENGINE" "docker-compose -p $COMPOSE_PROJECT up -d (service $1 of capture/compose.yaml)" "$2" "$3" "${HOSTCHECK:-}"
}
kcap deploy-gpu "deploy.resources.reservations.devices driver nvidia, count all: what --gpus all gives" \
	"(.process.env | index(\"NVIDIA_VISIBLE_DEVICES=all\")) and $nvhook"
kcap deploy-gpu-mem-limit-4g "deploy devices count 1 and mem_limit 4g" \
	"(.process.env | index(\"NVIDIA_VISIBLE_DEVICES=0\")) and $nvhook and .linux.resources.memory.limit == 4294967296"
kcap env-nvidia-all "environment NVIDIA_VISIBLE_DEVICES: all" \
	".process.env | index(\"NVIDIA_VISIBLE_DEVICES=all\")"
kcap runtime-nvidia "runtime: nvidia (the capture runtime under that name): nothing in config.json says GPU; NVIDIA's runtime adds its hook itself, later" \
	"([.hooks.prestart[]?.args[0]] | index(\"nvidia-container-runtime-hook\")) == null and ([.process.env[] | select(startswith(\"NVIDIA_\"))] | length == 0)"
kcap devices-dri "devices <dir>:/dev/dri, expanded as for docker run" \
	"$(has_dev /dev/dri/card0) and $(has_dev /dev/dri/renderD128)"
kcap devices-nvidiactl "devices <node>:/dev/nvidiactl alone" \
	"$(has_dev /dev/nvidiactl) and ([.linux.devices[]] | length == 1)"
kcap shm-size-2g "shm_size: 2g" "$shmq | .options | index(\"size=2147483648\")"
kcap shm-size-64m "shm_size: 64m: config.json is the default's" "$shmq | .options | index(\"size=67108864\")"
HOSTCHECK="tmpfs" kcap ipc-host "ipc: host" "$shmq | .type == \"bind\" and .source == \"/dev/shm\""
HOSTCHECK="tmpfs size=2097152k" kcap ipc-donor "ipc: shareable with shm_size: 2g" \
	"$shmq | .type == \"bind\" and (.source | endswith(\"/mounts/shm\"))"
HOSTCHECK="tmpfs size=2097152k" DONORFX=docker-compose-${COMPOSE_V%.*}-ipc-donor.json kcap ipc-peer "ipc: service:ipc-donor: compose joins the donor's container" \
	"$shmq | .type == \"bind\" and (.source | contains(\"$LAST_ID\"))"
kcap tmpfs-devshm "tmpfs: /dev/shm:size=512m" "$shmq | .type == \"tmpfs\" and (.options | index(\"size=512m\"))"
kcap plain "no GPU" "$shmq | .options | index(\"size=67108864\")"
mkdir -p "$OUT/capture"
cp "$K/compose.yaml" "$OUT/capture/compose.yaml"
INPUTS+=("docker-compose $COMPOSE_V project \`$COMPOSE_PROJECT\` (\`capture/compose.yaml\`, run as \`docker-compose -p $COMPOSE_PROJECT up -d\` in its directory):" ""
	'```yaml' "$(rel <"$K/compose.yaml")" '```' "")

# gpus: is newer than docker-compose 1.29's schema.
{ echo "services:"; svc gpus 'gpus: all'; } >"$K/gpus/compose.yaml"
if GPUS_ERR=$(cd "$K/gpus" && DOCKER_HOST="unix://$D/docker.sock" timeout 60 "$COMPOSE" -p gpurun-gpus config 2>&1); then
	die "docker-compose $COMPOSE_V accepts gpus: now; capture it"
fi
NOTES+=("- \`gpus: all\` in a compose service cannot be captured with docker-compose $COMPOSE_V, whose schema predates the key:" "" '```yaml' "$(rel <"$K/gpus/compose.yaml")" '```' '```' "$(printf '%s\n' "$GPUS_ERR" | rel)" '```' "")
kc down -t 0 >/dev/null 2>&1 || true
for i in $(dk ps -aq); do dk rm -f "$i" >/dev/null; done
stop_pid "$DOCKERD_PID"
log "docker-compose done"

# =========================================================== containerd ===
C=$T/cri
mkdir -p "$C/net.d" "$C/pods"
CRI_INPUTS_AT=${#INPUTS[@]}
CTRD_V=$(containerd --version | awk '{print $3}' | sed -E 's/^v?([0-9]+\.[0-9]+).*/\1/')
CTRD_FULL=$(containerd --version | awk '{print $3}')
cat >"$C/config.toml" <<EOF
version = 2
root = "$C/root"
state = "$C/state"
[grpc]
  address = "$C/containerd.sock"
[ttrpc]
  address = "$C/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$C/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/gpurun-test/pause:latest"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "capture"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.capture]
      runtime_type = "io.containerd.runc.v2"
      pod_annotations = ["cdi.k8s.io/*", "gpurun.io/*"]
      container_annotations = ["cdi.k8s.io/*", "gpurun.io/*"]
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.capture.options]
        BinaryName = "$T/bin/capture"
        Root = "$C/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$C/net.d"
EOF
"${INNET[@]}" containerd --config "$C/config.toml" >"$C/containerd.log" 2>&1 &
DAEMON_PIDS+=($!)
ctr_() { timeout 60 ctr -a "$C/containerd.sock" -n "$TAG" "$@"; }
wait_for 10 ctr -a "$C/containerd.sock" version || die "containerd did not start; see $C/containerd.log"
log "containerd $CTRD_FULL (CRI) up"
ctr -a "$C/containerd.sock" -n k8s.io images import "$T/busybox.tar" >/dev/null
ctr -a "$C/containerd.sock" -n k8s.io images import "$T/pause.tar" >/dev/null

# crictl from the Go module proxy (sigs.k8s.io/cri-tools has no go install
# path the proxy accepts): build ./cmd/crictl from a copy of the module.
if [ -n "${CRICTL:-}" ]; then
	CRICTL_BIN=$CRICTL
else
	CRICTL_VERSION=${CRICTL_VERSION:-v1.36.0}
	log "building crictl $CRICTL_VERSION"
	moddir=$(cd "$T" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/cri-tools@$CRICTL_VERSION" | jq -r .Dir)
	[ -d "$moddir" ] || die "go mod download sigs.k8s.io/cri-tools@$CRICTL_VERSION"
	cp -r "$moddir" "$T/cri-tools"
	chmod -R u+w "$T/cri-tools"
	(cd "$T/cri-tools" && go build -buildvcs=false -o "$T/bin/crictl" \
		-ldflags "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" ./cmd/crictl) ||
		die "building crictl"
	CRICTL_BIN=$T/bin/crictl
fi
cat >"$C/crictl.yaml" <<EOF
runtime-endpoint: unix://$C/containerd.sock
image-endpoint: unix://$C/containerd.sock
timeout: 30
pull-image-on-create: false
EOF
cri() { timeout 60 "$CRICTL_BIN" --config "$C/crictl.yaml" "$@"; }
wait_for 10 cri info || die "CRI not ready"
log "crictl $("$CRICTL_BIN" --version | awk '{print $NF}') ready"

CRI_ENGINE="containerd $CTRD_FULL CRI plugin (crictl), runc $("$RUNC" --version | awk 'NR==1{print $3}')"
CRI_IMG=docker.io/gpurun-test/busybox:latest

# pod_json NAME QOS EXTRA-LINUX-SECURITY-CONTEXT EXTRA-TOP-LEVEL: a host-network
# pod (no CNI needed, so no hostname), cgroup parent as kubelet's cgroupfs
# driver makes it.
pod_json() {
	local name=$1 qos=$2 ns=$3 extra=$4 uid
	uid=$(cat /proc/sys/kernel/random/uuid)
	mkdir -p "$C/pods/$name"
	cat >"$C/pods/$name/pod.json" <<EOF
{
  "metadata": {"name": "$name", "namespace": "default", "uid": "$uid", "attempt": 0},
  "log_directory": "$C/pods/$name/logs",
  "linux": {
    "cgroup_parent": "/kubepods/$qos/pod$uid",
    "security_context": {"namespace_options": {"network": 2$ns}}
  }${extra:+,
  $extra}
}
EOF
}
ctr_json() { # ctr_json POD EXTRA-TOP-LEVEL [EXTRA-SECURITY-CONTEXT]
	cat >"$C/pods/$1/container.json" <<EOF
{
  "metadata": {"name": "app", "attempt": 0},
  "image": {"image": "$CRI_IMG"},
  "command": ["sleep", "3600"],
  "log_path": "app.log",
  "linux": {"security_context": {"namespace_options": {"network": 2$3}}$4}${2:+,
  $2}
}
EOF
}
# cri_pod NAME QOS NS EXTRA: runp, sets POD_ID
cri_pod() {
	CRI_POD=$1
	pod_json "$@"
	POD_ID=$(cri runp "$C/pods/$1/pod.json") || die "crictl runp $1"
}
# cri_ctr NAME EXTRA [EXTRA-SECURITY-CONTEXT [EXTRA-LINUX]]: create, sets CTR_ID
cri_ctr() {
	ctr_json "$1" "$2" "${3:-}" "${4:-}"
	CTR_ID=$(cri create "$POD_ID" "$C/pods/$1/container.json" "$C/pods/$1/pod.json") || die "crictl create in $1"
	cri start "$CTR_ID" >/dev/null || die "crictl start in $1"
}
# cri_meta sandbox|container: the argv and the "cri" member (pod.json,
# container.json) of the next take's index entry, for pod CRI_POD.
cri_meta() {
	local d=$C/pods/$CRI_POD
	if [ "$1" = sandbox ]; then
		ARGV_JSON='["crictl","runp","pod.json"]'
		jq -n --slurpfile p "$d/pod.json" '{cri: {pod: $p[0]}}' >"$EXTRA_FILE"
	else
		ARGV_JSON=$(jq -cn --arg pod "$POD_ID" '["crictl","create",$pod,"container.json","pod.json"]')
		jq -n --slurpfile p "$d/pod.json" --slurpfile c "$d/container.json" '{cri: {pod: $p[0], container: $c[0]}}' >"$EXTRA_FILE"
	fi
}
cri_inputs() { # cri_inputs POD-NAME: README section with the exact CRI configs
	INPUTS+=("Pod \`$1\` (\`crictl runp pod.json\`, then \`crictl create <pod> container.json pod.json\` and \`crictl start\`):" ""
		'pod.json:' '```json' "$(rel <"$C/pods/$1/pod.json")" '```')
	[ -f "$C/pods/$1/container.json" ] && INPUTS+=('container.json:' '```json' "$(rel <"$C/pods/$1/container.json")" '```')
	INPUTS+=("")
}
cname() { echo "containerd-$CTRD_V-cri-$1"; }
CRI_CMD="crictl runp pod.json; crictl create <pod> container.json pod.json"
sandq='(.annotations["io.kubernetes.cri.container-type"] == "sandbox")'
ctrq='(.annotations["io.kubernetes.cri.container-type"] == "container")'
podshm='(.source | test("/io.containerd.grpc.v1.cri/sandboxes/[0-9a-f]+/shm$"))'

cri_pod gpurun-default besteffort "" ""
cri_ctr gpurun-default ""
cri_meta sandbox
take "$POD_ID" "$(cname sandbox)" "$CRI_ENGINE" "crictl runp pod.json (pod gpurun-default)" \
	"pause container of a plain pod: /dev/shm tmpfs AND the pod's shm bind (read-only) on top" \
	"$sandq and ([.mounts[] | select(.destination == \"/dev/shm\")] | length >= 1)" "tmpfs size=65536k"
cri_meta container
take "$CTR_ID" "$(cname container)" "$CRI_ENGINE" "$CRI_CMD (pod gpurun-default)" \
	"app container: binds the pod's tmpfs <state>/io.containerd.grpc.v1.cri/sandboxes/<pod>/shm read-write" \
	"$ctrq and ($shmq | .type == \"bind\" and $podshm)" "tmpfs size=65536k"
cri_inputs gpurun-default

cri_pod gpurun-env-nvidia-all besteffort "" ""
cri_ctr gpurun-env-nvidia-all '"envs": [{"key": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]'
cri_meta container
take "$CTR_ID" "$(cname container-env-nvidia-all)" "$CRI_ENGINE" "$CRI_CMD (pod gpurun-env-nvidia-all)" \
	"GPU by env NVIDIA_VISIBLE_DEVICES=all" \
	"$ctrq and (.process.env | index(\"NVIDIA_VISIBLE_DEVICES=all\")) and ($shmq | $podshm)"
cri_inputs gpurun-env-nvidia-all

cri_pod gpurun-device-nvidia0 besteffort "" ""
cri_ctr gpurun-device-nvidia0 '"devices": [{"container_path": "/dev/nvidia0", "host_path": "'"$T"'/nvidia0", "permissions": "rwm"}]'
cri_meta container
take "$CTR_ID" "$(cname container-device-nvidia0)" "$CRI_ENGINE" "$CRI_CMD (pod gpurun-device-nvidia0)" \
	"GPU by device: linux.devices /dev/nvidia0 (c 195:0)" \
	"$ctrq and (.linux.devices[] | select(.path == \"/dev/nvidia0\") | .major == 195 and .minor == 0)"
cri_inputs gpurun-device-nvidia0

cri_pod gpurun-cdi-annotation besteffort "" '"annotations": {"cdi.k8s.io/gpu": "nvidia.com/gpu=0"}'
cri_ctr gpurun-cdi-annotation ""
cri_meta container
take "$CTR_ID" "$(cname container-cdi-annotation)" "$CRI_ENGINE" "$CRI_CMD (pod gpurun-cdi-annotation)" \
	"pod annotation cdi.k8s.io/gpu passed to the container spec by pod_annotations (1.6 has no CDI injection)" \
	"$ctrq and .annotations[\"cdi.k8s.io/gpu\"] == \"nvidia.com/gpu=0\""
cri_inputs gpurun-cdi-annotation

cri_pod gpurun-memory-2g burstable "" ""
cri_ctr gpurun-memory-2g "" "" ', "resources": {"memory_limit_in_bytes": 2147483648}'
cri_meta container
take "$CTR_ID" "$(cname container-memory-2g)" "$CRI_ENGINE" "$CRI_CMD (pod gpurun-memory-2g)" \
	"container memory limit 2 GiB; the pod's /dev/shm is still the 64 MiB sandbox tmpfs" \
	"$ctrq and .linux.resources.memory.limit == 2147483648 and ($shmq | $podshm)" "tmpfs size=65536k"
cri_inputs gpurun-memory-2g

cri_pod gpurun-hostipc besteffort ', "ipc": 2' ""
cri_ctr gpurun-hostipc "" ', "ipc": 2'
cri_meta sandbox
take "$POD_ID" "$(cname hostipc-sandbox)" "$CRI_ENGINE" "crictl runp pod.json (pod gpurun-hostipc)" \
	"hostIPC pause container: no ipc namespace, host /dev/shm bound" \
	"$sandq and ([.linux.namespaces[] | select(.type == \"ipc\")] | length == 0)"
cri_meta container
take "$CTR_ID" "$(cname hostipc-container)" "$CRI_ENGINE" "$CRI_CMD (pod gpurun-hostipc)" \
	"hostIPC app container: binds the host's /dev/shm; its ipc namespace is still a path (/proc/<pause-pid>/ns/ipc, which is the host's)" \
	"$ctrq and ($shmq | .type == \"bind\" and .source == \"/dev/shm\")"
cri_inputs gpurun-hostipc

# like a kubelet emptyDir with medium: Memory mounted at /dev/shm
mkdir -p "$C/emptydir-dshm"
mount -t tmpfs -o size=1g tmpfs "$C/emptydir-dshm"
cri_pod gpurun-shm-hostpath besteffort "" ""
cri_ctr gpurun-shm-hostpath '"mounts": [{"container_path": "/dev/shm", "host_path": "'"$C"'/emptydir-dshm"}]'
cri_meta container
take "$CTR_ID" "$(cname container-shm-hostpath)" "$CRI_ENGINE" "$CRI_CMD (pod gpurun-shm-hostpath; host tmpfs size=1g at \$T/cri/emptydir-dshm)" \
	"CRI mount of a host dir (a tmpfs, like an emptyDir medium: Memory) at /dev/shm replaces the pod's shm" \
	"$ctrq and ([.mounts[] | select(.destination == \"/dev/shm\")] | length == 1) and ($shmq | .source == \"$C/emptydir-dshm\")" "tmpfs size=1048576k"
cri_inputs gpurun-shm-hostpath

INPUTS=("${INPUTS[@]:0:CRI_INPUTS_AT}"
	"containerd $CTRD_FULL config (\`containerd --config config.toml\`):" "" '```toml' "$(rel <"$C/config.toml")" '```' ""
	"${INPUTS[@]:CRI_INPUTS_AT}")

for i in $(cri pods -q); do cri stopp "$i" >/dev/null; cri rmp "$i" >/dev/null; done
log "containerd CRI done"

# ========================================================= containerd 2.x ===
# Built from the Go module proxy (no Debian package); skip with SKIP_CONTAINERD2=1,
# or give a directory holding containerd, ctr and containerd-shim-runc-v2 in
# CONTAINERD2_BIN.
if [ -z "${SKIP_CONTAINERD2:-}" ]; then
	CRI16_C=$C
	C=$T/cri2
	mkdir -p "$C/net.d" "$C/pods" "$C/nri/plugins" "$C/nri/conf.d"
	if [ -n "${CONTAINERD2_BIN:-}" ]; then
		C2BIN=$CONTAINERD2_BIN
	else
		CONTAINERD2_VERSION=${CONTAINERD2_VERSION:-v2.4.2}
		log "building containerd $CONTAINERD2_VERSION"
		C2BIN=$C/bin
		m=github.com/containerd/containerd/v2/cmd
		(cd "$T" && GOBIN=$C2BIN GOFLAGS=-buildvcs=false go install "$m/containerd@$CONTAINERD2_VERSION" \
			"$m/ctr@$CONTAINERD2_VERSION" "$m/containerd-shim-runc-v2@$CONTAINERD2_VERSION") ||
			die "building containerd $CONTAINERD2_VERSION"
	fi
	CTRD2_FULL=$("$C2BIN/containerd" --version | awk '{print $3}')
	CTRD2_V=$(echo "$CTRD2_FULL" | sed -E 's/^v?([0-9]+\.[0-9]+).*/\1/')
	cat >"$C/config.toml" <<EOF
version = 3
root = "$C/root"
state = "$C/state"
temp = "$C/tmp"
imports = []
[grpc]
  address = "$C/containerd.sock"
[ttrpc]
  address = "$C/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$C/opt"
[plugins."io.containerd.image-verifier.v1.bindir"]
  bin_dir = "$C/image-verifier/bin"
[plugins."io.containerd.nri.v1.nri"]
  socket_path = "$C/nri/nri.sock"
  plugin_path = "$C/nri/plugins"
  plugin_config_path = "$C/nri/conf.d"
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "docker.io/gpurun-test/pause:latest"
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "capture"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.capture]
      runtime_type = "io.containerd.runc.v2"
      pod_annotations = ["cdi.k8s.io/*", "gpurun.io/*"]
      container_annotations = ["cdi.k8s.io/*", "gpurun.io/*"]
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.capture.options]
        BinaryName = "$T/bin/capture"
        Root = "$C/runc"
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$C/net.d"
EOF
	mkdir -p "$C/tmp"
	# its own shim first in PATH
	PATH=$C2BIN:$PATH "${INNET[@]}" "$C2BIN/containerd" --config "$C/config.toml" >"$C/containerd.log" 2>&1 &
	DAEMON_PIDS+=($!)
	wait_for 10 "$C2BIN/ctr" -a "$C/containerd.sock" version || die "containerd $CTRD2_FULL did not start; see $C/containerd.log"
	"$C2BIN/ctr" -a "$C/containerd.sock" -n k8s.io images import "$T/busybox.tar" >/dev/null
	"$C2BIN/ctr" -a "$C/containerd.sock" -n k8s.io images import "$T/pause.tar" >/dev/null
	cat >"$C/crictl.yaml" <<EOF
runtime-endpoint: unix://$C/containerd.sock
image-endpoint: unix://$C/containerd.sock
timeout: 30
pull-image-on-create: false
EOF
	wait_for 10 cri info || die "containerd $CTRD2_FULL: CRI not ready"
	log "containerd $CTRD2_FULL (CRI) up"
	CRI_ENGINE="containerd $CTRD2_FULL CRI plugin (crictl; built from the Go module proxy), runc $("$RUNC" --version | awk 'NR==1{print $3}')"
	cname() { echo "containerd-$CTRD2_V-cri-$1"; }
	CRI2_INPUTS_AT=${#INPUTS[@]}

	cri_pod gpurun-default besteffort "" ""
	cri_ctr gpurun-default ""
	cri_meta sandbox
	take "$POD_ID" "$(cname sandbox)" "$CRI_ENGINE" "crictl runp pod.json (pod gpurun-default)" \
		"pause container: only the pod's shm bind, read-only (no tmpfs under it as in 1.6)" \
		"$sandq and ($shmq | .type == \"bind\" and $podshm)" "tmpfs size=65536k"
	cri_meta container
	take "$CTR_ID" "$(cname container)" "$CRI_ENGINE" "$CRI_CMD (pod gpurun-default)" \
		"app container: binds the pod's tmpfs <state>/io.containerd.grpc.v1.cri/sandboxes/<pod>/shm read-write" \
		"$ctrq and ($shmq | .type == \"bind\" and $podshm)" "tmpfs size=65536k"
	cri_inputs gpurun-default

	cri_pod gpurun-env-nvidia-all besteffort "" ""
	cri_ctr gpurun-env-nvidia-all '"envs": [{"key": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]'
	cri_meta container
	take "$CTR_ID" "$(cname container-env-nvidia-all)" "$CRI_ENGINE" "$CRI_CMD (pod gpurun-env-nvidia-all)" \
		"GPU by env NVIDIA_VISIBLE_DEVICES=all" \
		"$ctrq and (.process.env | index(\"NVIDIA_VISIBLE_DEVICES=all\")) and ($shmq | $podshm)" "tmpfs size=65536k"
	cri_inputs gpurun-env-nvidia-all

	cri_pod gpurun-hostipc besteffort ', "ipc": 2' ""
	cri_ctr gpurun-hostipc "" ', "ipc": 2'
	cri_meta sandbox
	take "$POD_ID" "$(cname hostipc-sandbox)" "$CRI_ENGINE" "crictl runp pod.json (pod gpurun-hostipc)" \
		"hostIPC pause container: no ipc namespace, host /dev/shm bound" \
		"$sandq and ([.linux.namespaces[] | select(.type == \"ipc\")] | length == 0)"
	cri_meta container
	take "$CTR_ID" "$(cname hostipc-container)" "$CRI_ENGINE" "$CRI_CMD (pod gpurun-hostipc)" \
		"hostIPC app container: binds the host's /dev/shm" \
		"$ctrq and ($shmq | .type == \"bind\" and .source == \"/dev/shm\")"
	cri_inputs gpurun-hostipc

	INPUTS=("${INPUTS[@]:0:CRI2_INPUTS_AT}"
		"containerd $CTRD2_FULL config (\`PATH=<its bin>:\$PATH containerd --config config.toml\`):" "" '```toml' "$(rel <"$C/config.toml")" '```' ""
		"${INPUTS[@]:CRI2_INPUTS_AT}")
	for i in $(cri pods -q); do cri stopp "$i" >/dev/null; cri rmp "$i" >/dev/null; done
	log "containerd $CTRD2_FULL CRI done"
	C=$CRI16_C
fi

# =================================================================== ctr ===
ctr_ images import "$T/busybox.tar" >/dev/null
CTR_ARGS=(run --rm --runc-binary "$T/bin/capture" --runc-root "$C/runc-ctr" --fifo-dir "$C/fifo" "docker.io/$IMG" ctr-default df -k /dev/shm)
ctr_ "${CTR_ARGS[@]}" >/dev/null || die "ctr ${CTR_ARGS[*]}"
ARGV_JSON=$(argv_json ctr -n "$TAG" "${CTR_ARGS[@]}")
take ctr-default "ctr-$CTRD_V-default" "ctr $CTRD_FULL (containerd's own client, runtime io.containerd.runc.v2)" \
	"ctr -n $TAG $(printf '%q ' "${CTR_ARGS[@]}")" \
	"containerd's default spec: /dev/shm tmpfs size=65536k (not bytes)" \
	"$shmq | .type == \"tmpfs\""
log "ctr done"

# ================================================================ podman ===
P=$T/podman
mkdir -p "$P/tmp" "$P/net"
cat >"$P/storage.conf" <<EOF
[storage]
driver = "overlay"
runroot = "$P/runroot"
graphroot = "$P/root"
EOF
# podman puts RLIMIT_NOFILE 1048576 and RLIMIT_NPROC (its own hard limit,
# which it lowers to 32768 for itself) in the spec; without CAP_SYS_RESOURCE
# (as in some CI sandboxes) runc, started by podman's conmon, cannot raise
# them and every container fails in runc create. Then ask for limits it can set.
ULIMITS=
if ! capsh --has-p=cap_sys_resource 2>/dev/null; then
	nofile=$(ulimit -Hn) nproc=$(ulimit -Hu)
	[ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ] && nproc=32768
	ULIMITS="default_ulimits = [\"nofile=$nofile:$nofile\", \"nproc=$nproc:$nproc\"]"
fi
cat >"$P/containers.conf" <<EOF
[containers]
$ULIMITS
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$P/events.log"
tmp_dir = "$P/tmp"
image_copy_tmp_dir = "$P/tmp"
lock_type = "file"
volume_path = "$P/volumes"
static_dir = "$P/root/libpod"
[network]
network_config_dir = "$P/net"
EOF
PODMAN_V=$(podman --version | awk '{print $3}' | sed -E 's/^([0-9]+\.[0-9]+).*/\1/')
PODMAN_FULL=$(podman --version | awk '{print $3}')
PODMAN_GLOBAL=(--root "$P/root" --runroot "$P/runroot" --runtime "$T/bin/capture" --runtime-flag "root=$P/runc")
pm() {
	CONTAINERS_CONF=$P/containers.conf CONTAINERS_STORAGE_CONF=$P/storage.conf \
		timeout 60 "${INNET[@]}" podman "${PODMAN_GLOBAL[@]}" "$@"
}
PODMAN_READY=1
# podman 4.3 load writes containers/image's blob-info cache to
# /var/lib/containers/cache and takes /var/cache/containers/short-name-aliases.conf.lock
# whatever --root says: load in a private mount namespace with those hidden.
CONTAINERS_CONF=$P/containers.conf CONTAINERS_STORAGE_CONF=$P/storage.conf \
	timeout 60 "${INNET[@]}" unshare --mount --propagation private sh -ec \
	'mount -t tmpfs -o size=16m tmpfs /var/lib; mount -t tmpfs -o size=16m tmpfs /var/cache; exec "$@"' \
	sh podman "${PODMAN_GLOBAL[@]}" load -q -i "$T/busybox.tar" >/dev/null || die "podman load"
PM_ENGINE="podman $PODMAN_FULL (conmon $(conmon --version | awk 'NR==1{print $3}')), runc $("$RUNC" --version | awk 'NR==1{print $3}')"
pcap() { # pcap NAME NOTE CHECK HOST-CHECK PODMAN-RUN-ARGS...
	local name=podman-$PODMAN_V-$1 note=$2 check=$3 hostcheck=$4 id
	shift 4
	local args=(run -d --network none "$@" "localhost/$IMG" sleep 3600)
	id=$(pm "${args[@]}") || die "$name: podman ${args[*]}"
	ARGV_JSON=$(argv_json podman "${PODMAN_GLOBAL[@]}" "${args[@]}")
	take "$id" "$name" "$PM_ENGINE" "podman $(printf '%s ' "${PODMAN_GLOBAL[@]}")${args[*]}" "$note" "$check" "$hostcheck"
}
pcap default "podman mounts a tmpfs at <graphroot>/overlay-containers/<id>/userdata/shm and binds it; no size in config.json; the default \"65536k\" is read as decimal: 65,536,000 bytes = 64000k, not 64 MiB" \
	"$shmq | .type == \"bind\" and (.source | endswith(\"/userdata/shm\"))" "tmpfs size=64000k"
pcap shm-size-2g "--shm-size sizes that host tmpfs; config.json looks exactly like the default" \
	"$shmq | .type == \"bind\" and (.source | endswith(\"/userdata/shm\"))" "tmpfs size=2097152k" --shm-size 2g
pcap ipc-host "host IPC: binds the host's /dev/shm" \
	"$shmq | .source == \"/dev/shm\"" "" --ipc host
pcap env-nvidia-all "GPU by env NVIDIA_VISIBLE_DEVICES=all" \
	".process.env | index(\"NVIDIA_VISIBLE_DEVICES=all\")" "" -e NVIDIA_VISIBLE_DEVICES=all
INPUTS+=("podman: CONTAINERS_CONF=containers.conf CONTAINERS_STORAGE_CONF=storage.conf" ""
	'```toml' "$(rel <"$P/containers.conf")" '```' '```toml' "$(rel <"$P/storage.conf")" '```' "")
pm rm -af -t 0 >/dev/null
log "podman done"

# ================================================================ README ===
{
	cat <<EOF
# OCI config.json fixtures captured from real engines

Every \`*.json\` here is the exact \`config.json\` an engine handed to its OCI
runtime, byte for byte: \`hack/capture-runtime\` (registered as the engine's
runtime) copied \`<bundle>/config.json\` on \`create\`, then ran runc.
Nothing was written or edited by hand. Regenerate all of it, this file
included, with \`hack/capture-fixtures.sh oci/testdata/fixtures\`.

Captured on $(date -u +%Y-%m-%d) by \`hack/capture-fixtures.sh\` on Debian
$(cat /etc/debian_version), kernel $(uname -r), cgroup $(stat -fc %T /sys/fs/cgroup | sed 's/cgroup2fs/v2/; s/tmpfs/v1/').
\`\$T\` stands for the script's temporary directory (it was \`$T\`;
paths in the fixtures keep it). Every engine ran privately under \`\$T\`, with
its own socket and state directories. Image \`gpurun-test/busybox\` is static
busybox FROM scratch (\`CMD ["/bin/sh"]\`); the CRI sandbox image
\`gpurun-test/pause\` is the same with \`CMD ["/bin/sleep","infinity"]\`.

The /dev/shm column lists every mount at /dev/shm in order
(\`type\` \`source\` \`options\`); "host side" is what was mounted at a bind's
source on the host while the container existed (read from /proc/self/mountinfo);
IPC is the ipc namespace in the spec: new, a path to join, or host (none).

| file | engine | command | /dev/shm mounts in config.json | host side of a bind | IPC | notable |
|---|---|---|---|---|---|---|
EOF
	printf '%s\n' "${ROWS[@]}"
	cat <<'EOF'

## What the captures show (each is enforced by a check in the script)

- Docker (IPC private/default): `/dev/shm` is `{type: tmpfs, source: shm}` with
  `size=` in bytes (`size=67108864`; `--shm-size 2g` gives `size=2147483648`,
  daemon.json `default-shm-size` the same, applied by SIGHUP without a restart).
  containerd's own default spec (ctr, and the CRI 1.6 pause container) writes
  `size=65536k` instead.
- Docker `--tmpfs /dev/shm:size=512m` keeps the user's option text (`size=512m`,
  `source: tmpfs`) and drops the `shm` mount; `-v vol:/dev/shm` and
  `-v /dir:/dev/shm` are plain binds of a directory; `--ipc none` has no /dev/shm
  mount at all.
- Docker `--ipc shareable`: a bind of `<data-root>/containers/<id>/mounts/shm`, a
  tmpfs dockerd mounted on the host; a `--ipc container:<id>` peer binds the same
  path and joins `/proc/<donor pid>/ns/ipc`. `--ipc host`: bind of `/dev/shm`
  and no ipc namespace.
- containerd CRI: every app container binds
  `<state>/io.containerd.grpc.v1.cri/sandboxes/<sandbox id>/shm` (a 64 MiB tmpfs on
  the host) `rbind,rprivate,rw`, and joins the pause container's namespaces by
  `/proc/<pause pid>/ns/...` paths. In a hostIPC pod the app container still has
  an ipc namespace path (the pause's, which is the host's): hostIPC shows only as
  the bind source `/dev/shm` (and in the sandbox spec, which has no ipc
  namespace). 1.6's pause spec has a tmpfs at /dev/shm and the bind (ro) on top;
  2.4's has only the bind `rbind,ro,nosuid,nodev,noexec`.
- A CRI mount at /dev/shm replaces the pod's bind (one /dev/shm mount).
- podman: /dev/shm is always a bind of `<graphroot>/overlay-containers/<id>/userdata/shm`,
  a tmpfs podman mounts itself; its size never appears in config.json. The
  default is 64000k (containers.conf `shm_size = "65536k"` read as decimal
  kilobytes: 65,536,000 bytes), not 64 MiB.
- Devices: `--device <dir>:/dev/dri` (compose `devices:` alike) becomes one
  `linux.devices` entry per node under the directory (`/dev/dri/card0`,
  `/dev/dri/renderD128`) and none for `/dev/dri` itself; `docker inspect`
  keeps the user's `/dev/dri`. `--privileged` lists every device node of the
  host. A single `/dev/nvidiactl` or `/dev/dri/card0` is just that node.
- `--gpus all` (and compose's `deploy.resources.reservations.devices`) is
  dockerd's nvidia device driver: it needs `nvidia-container-runtime-hook` in
  dockerd's PATH at start (else dockerd refuses the container, see below),
  and writes `NVIDIA_VISIBLE_DEVICES=all` (`--gpus 2`: `0,1`; compose's
  `count: 1`: `0`), `NVIDIA_DRIVER_CAPABILITIES` and the hook as a prestart
  hook whose env is dockerd's own environment.
- `runtime: nvidia` (or `--runtime nvidia`) changes which runtime dockerd
  runs, not config.json: nothing in the bundle says GPU unless the image's env
  does (NVIDIA's runtime adds its hook itself, after this capture point).
- `--ipc shareable --shm-size 2g` sizes the host tmpfs (2 GiB) behind the
  same bind as a 64 MiB donor's; a `--ipc container:<donor>` peer's own
  `--shm-size` is ignored (it binds the donor's tmpfs). An explicit
  `--shm-size 64m` (compose `shm_size: 64m`) gives a config.json like the
  default's.
- docker-compose 1.29 lays services out as `docker run` does; `ipc:
  service:<name>` joins that service's container (`container:<id>`).
EOF
	echo
	echo "## What could not be captured here"
	echo
	printf '%s\n' "${NOTES[@]}"
	echo "## For tests: capture/index.json"
	echo
	echo "\`capture/index.json\` says the same for programs: per fixture (in capture"
	echo "order) its \`file\`, \`engine\`, \`command\`, \`argv\`, \`note\`, \`host_shm\` (the host"
	echo "side of each /dev/shm bind: \`source\`, \`fstype\`, \`size_bytes\`), and for"
	echo "Docker and docker-compose \`docker\`: the container's \`docker inspect\`, its"
	echo "image's env, the daemon's data root and default-shm-size, and the fixture"
	echo "of the container whose IPC it joins (\`donor\`); for docker-compose also"
	echo "\`compose\`: the file (\`capture/compose.yaml\`, byte for byte the one run) and"
	echo "the service. \`host\` is the capture host: its memory and GPU device nodes."
	echo
	echo "## Exact inputs"
	echo
	printf '%s\n' "${INPUTS[@]}"
} >"$OUT/README.md"

mkdir -p "$OUT/capture"
jq -n --arg date "$(date -u +%Y-%m-%d)" --arg tmp "$T" \
	--argjson mem "$(($(awk '/^MemTotal:/ { print $2 }' /proc/meminfo) * 1024))" \
	--argjson gpus "$(find /dev -maxdepth 2 \( -name 'nvidia[0-9]*' -o -name 'renderD*' -o -name 'accel[0-9]*' \) 2>/dev/null | sort | jq -R . | jq -s .)" \
	--slurpfile f <(cat "$INDEX"/*.json) \
	'{captured: $date, tmp: $tmp, host: {memory_bytes: $mem, gpu_device_nodes: $gpus}, fixtures: $f}' \
	>"$OUT/capture/index.json" || die "writing capture/index.json"
log "wrote ${#ROWS[@]} fixtures, README.md and capture/index.json to $OUT"

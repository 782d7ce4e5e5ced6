#!/usr/bin/env bash
# hack/gpu-check.sh — the users' failure on a real GPU (issue #29's bonus
# check; CI has no GPU, so nothing runs this there).
#
#   1. The seed failure: a PyTorch DataLoader with pin_memory and 4 workers
#      feeding a model on the GPU, under a 64 MiB /dev/shm: it dies
#      ("DataLoader worker ... is killed by signal: Bus error", or, as
#      PyTorch 2.11 says it, "unable to allocate shared memory(shm) for
#      file </torch_...>").
#   2. The same under gpurun: it finishes.
#   3. The GPU busy fraction (GPU time of the training steps / wall time)
#      with 4 workers against the num_workers=0 workaround.
#
# It needs root, an NVIDIA GPU, and either Docker with GPU access and a
# local image that has PyTorch with CUDA (GPURUN_GPU_IMAGE, else the first
# local image whose name mentions pytorch or torch), or PyTorch with CUDA
# for the host's python3. Nothing is downloaded. With Docker, step 1 is
# plain `docker run --gpus all` (Docker's 64 MiB) and step 2 is `gpurun
# run`. Without it, step 1 runs in a mount namespace of its own with a
# 64 MiB tmpfs at /dev/shm, and step 2 with a tmpfs of the size gpurun
# decides for a GPU container on this host (`gpurun --dry-run run --gpus
# all`), since there is no engine for gpurun to size: the failure and its
# fix are the same mechanism, but that path checks gpurun's decision, not
# a front door. It prints what it measured and fits in 10 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

STEPS=${GPURUN_GPU_STEPS:-60}     # training steps per measured run
BATCH=${GPURUN_GPU_BATCH:-64}     # 64 x 3x224x224 float32 = 38.5 MB a batch
TIMEOUT=${GPURUN_GPU_TIMEOUT:-150} # seconds a run may take

log() { printf '\n==> %s\n' "$*"; }
die() { echo "gpu-check: $*" >&2; exit 2; }

[ "$(id -u)" = 0 ] || die "run as root (mount namespaces, docker)"
command -v nvidia-smi >/dev/null 2>&1 || die "no nvidia-smi: no NVIDIA GPU driver here"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

# gpurun: bin/ as `make build` leaves it, else build it.
if [ ! -x bin/gpurun ] || [ ! -x bin/gpurun-full ]; then
	command -v go >/dev/null 2>&1 || die "no bin/gpurun and no go to build it: run make build first"
	make build >/dev/null
fi
GPURUN=$PWD/bin/gpurun

WORK=$(mktemp -d /tmp/gpurun-gpucheck-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cat >"$WORK/loader.py" <<'EOF'
# A DataLoader feeding a model on the GPU, as the field reports have it.
import os, sys, time, torch
from torch.utils.data import DataLoader, Dataset

workers, steps, batch = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])

class Images(Dataset):
    def __len__(self):
        return 1 << 20
    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(3, 224, 224, generator=g)
        # CPU work per sample, as decoding and augmenting an image costs.
        for _ in range(3):
            x = torch.fft.irfft2(torch.fft.rfft2(x), s=x.shape[-2:])
        return x, i % 1000

model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 64, 7, stride=2, padding=3), torch.nn.ReLU(),
    torch.nn.Conv2d(64, 128, 3, stride=2, padding=1), torch.nn.ReLU(),
    torch.nn.Conv2d(128, 256, 3, stride=2, padding=1), torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(256, 1000),
).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = torch.nn.CrossEntropyLoss()
kw = dict(batch_size=batch, num_workers=workers, pin_memory=True)
if workers:
    kw["prefetch_factor"] = 2
loader = DataLoader(Images(), **kw)
st = os.statvfs("/dev/shm")
print(f"/dev/shm {st.f_blocks * st.f_frsize // (1 << 20)} MiB, {workers} workers, batch {batch}", flush=True)
events, t0 = [], None
for step, (x, y) in enumerate(loader):
    if step == 2:  # after the workers' start-up
        torch.cuda.synchronize()
        t0 = time.perf_counter()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
    opt.zero_grad()
    loss_fn(model(x), y).backward()
    opt.step()
    end.record()
    if step >= 2:
        events.append((start, end))
    if step + 1 >= steps:
        break
torch.cuda.synchronize()
wall = time.perf_counter() - t0
gpu = sum(s.elapsed_time(e) for s, e in events) / 1000
print(f"RESULT workers={workers} steps={len(events)} wall={wall:.2f}s gpu={gpu:.2f}s busy={100 * gpu / wall:.1f}% batches/s={len(events) / wall:.2f}", flush=True)
os._exit(0)  # without waiting for the workers' shutdown
EOF

# runner: how to run loader.py at a given /dev/shm.
IMAGE=${GPURUN_GPU_IMAGE:-}
MODE=""
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
	if [ -z "$IMAGE" ]; then
		IMAGE=$(docker images --format '{{.Repository}}:{{.Tag}}' | grep -i -m1 -e pytorch -e torch || true)
	fi
	if [ -n "$IMAGE" ] && docker run --rm --gpus all "$IMAGE" python3 -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
		MODE=docker
	fi
fi
if [ -z "$MODE" ] && python3 -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
	MODE=host
fi
[ -n "$MODE" ] || die "no way to run PyTorch with CUDA offline: neither Docker with GPU access and a local PyTorch image (set GPURUN_GPU_IMAGE) nor torch with CUDA for python3"
echo "gpu-check: running PyTorch $([ "$MODE" = docker ] && echo "in image $IMAGE through Docker" || echo "of the host's python3 ($(python3 -c 'import torch; print(torch.__version__)'))")"

# run LABEL SHM WORKERS STEPS: SHM is "default" (Docker's, or a 64 MiB
# tmpfs) or "gpurun"; prints the loader's output, returns its status.
run() {
	local label=$1 shm=$2 workers=$3 steps=$4 status=0 name=gpurun-gpucheck-$$
	log "$label"
	# Output goes to a file: a killed run's DataLoader workers may keep a
	# pipe open.
	if [ "$MODE" = docker ]; then
		local -a cmd=(docker run --rm --name "$name" --gpus all -v "$WORK:/w:ro" "$IMAGE" python3 /w/loader.py "$workers" "$steps" "$BATCH")
		[ "$shm" = gpurun ] && cmd=("$GPURUN" -v run --rm --name "$name" --gpus all -v "$WORK:/w:ro" "$IMAGE" python3 /w/loader.py "$workers" "$steps" "$BATCH")
		timeout -k 5 "$TIMEOUT" "${cmd[@]}" >"$WORK/out" 2>&1 || status=$?
		docker rm -f "$name" >/dev/null 2>&1 || true
	else
		local size=64m
		if [ "$shm" = gpurun ]; then
			# The docker command line gpurun prints (not its comment line).
			size=$(DOCKER_HOST=unix:///nonexistent.sock "$GPURUN" --dry-run run --rm --gpus all image true 2>/dev/null | sed -n 's/^docker .*--shm-size=\([0-9]*\).*/\1/p' | head -1)
			[ -n "$size" ] || die "gpurun decided no --shm-size for a GPU container"
			echo "gpurun's size for a GPU container on this host: $size bytes"
		fi
		timeout -k 5 "$TIMEOUT" unshare --mount --propagation private sh -ec \
			'mount -t tmpfs -o size="$0",mode=1777 shm /dev/shm; exec python3 "$@"' "$size" \
			"$WORK/loader.py" "$workers" "$steps" "$BATCH" >"$WORK/out" 2>&1 || status=$?
	fi
	grep -E '/dev/shm|RESULT|Error|error|killed' "$WORK/out" | tail -n 6
	return "$status"
}

fail=0
if run "1. 4 workers, pin_memory, at a 64 MiB /dev/shm: the seed failure" default 4 "$STEPS"; then
	echo "gpu-check: the DataLoader did not die at 64 MiB (batch $BATCH); raise GPURUN_GPU_BATCH"; fail=1
else
	echo "gpu-check: it died, as in the field (exit status above)"
fi
out=$(run "2. the same under gpurun" gpurun 4 "$STEPS") || { echo "$out"; echo "gpu-check: it did not finish under gpurun"; fail=1; }
echo "$out"
four=$(echo "$out" | sed -n 's/.*busy=\([0-9.]*\)%.*/\1/p')
zero_out=$(run "3. num_workers=0, the usual workaround" gpurun 0 $((STEPS / 3))) || { echo "$zero_out"; fail=1; }
echo "$zero_out"
zero=$(echo "$zero_out" | sed -n 's/.*busy=\([0-9.]*\)%.*/\1/p')
log "summary"
echo "GPU busy: ${four:-?}% with 4 workers under gpurun, ${zero:-?}% with num_workers=0"
exit "$fail"

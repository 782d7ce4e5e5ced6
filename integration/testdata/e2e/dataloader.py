"""A PyTorch DataLoader workload for gpurun's end-to-end test.

integration/torch_test.go runs it in a container of the image that
hack/build-torch-image.sh builds (Debian's PyTorch 1.13). See docs/e2e.md.

  dataloader.py blocks  batches of --batch samples, each a float32 tensor of
                        --sample-mib MiB filled with its index, through
                        --workers workers: with 9 x 8 MiB a batch is larger
                        than Docker's 64 MiB /dev/shm, so the workers die
                        with "DataLoader worker (pid N) is killed by signal:
                        Bus error" there. Every sample is checked on arrival.
  dataloader.py images  image-sized samples (3x224x224 float32) through a
                        CPU-bound numpy transform, for throughput.

With --hold FILE (blocks), the main process takes no batch until FILE
exists: the workers fill their prefetch queues (prefetch x workers batches,
the most this DataLoader ever has in /dev/shm) and stay there, as behind a
slow first training step. Once /dev/shm holds them (or after 60 s) it prints
"HOLDING " and a JSON object: shm_used (the bytes in use in /dev/shm) and
in_flight (the bytes of the prefetched batches). integration/
cluster_torch_test.go holds the Job there until the node agent has sampled
that peak, then creates FILE.

The last line of a successful run is "RESULT " and a JSON object: shm_bytes
(the size of /dev/shm), samples, batches, seconds (from creating the
DataLoader's iterator to the last batch, worker start and any hold included),
samples_per_s and cpu_seconds (user and system time of this process and of
its workers, which the DataLoader has joined by then: cpu_seconds / seconds
is how many cores the run kept busy).
"""

import argparse
import json
import os
import resource
import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Blocks(Dataset):
    """Sample i is a float32 tensor of n elements, all equal to i."""

    def __init__(self, count, n):
        self.count = count
        self.n = n

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        return torch.full((self.n,), float(i), dtype=torch.float32)


class Images(Dataset):
    """Sample i is a deterministic 3x224x224 image after a CPU-bound
    augmentation in numpy (normalise, squash, blur, flip), single-threaded
    like the PIL/numpy transforms of a real input pipeline."""

    shape = (3, 224, 224)

    def __init__(self, count, rounds):
        self.count = count
        self.rounds = rounds

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        img = np.random.default_rng(i).random(self.shape, dtype=np.float32)
        for _ in range(self.rounds):
            mean = img.mean(axis=(1, 2), keepdims=True)
            std = img.std(axis=(1, 2), keepdims=True)
            img = np.tanh((img - mean) / (std + 1e-6))
            img = (img + np.roll(img, 1, axis=1) + np.roll(img, -1, axis=1)
                   + np.roll(img, 1, axis=2) + np.roll(img, -1, axis=2)) / 5
        if i % 2:
            img = img[:, :, ::-1]
        return torch.from_numpy(np.ascontiguousarray(img, dtype=np.float32)), i


def shm_bytes():
    st = os.statvfs("/dev/shm")
    return st.f_blocks * st.f_frsize


def shm_used():
    st = os.statvfs("/dev/shm")
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def hold(path, in_flight, fill_timeout=60, release_timeout=600):
    """Waits until /dev/shm holds in_flight bytes (or fill_timeout passes),
    says so, and waits for path to exist. A worker that dies meanwhile ends
    the run through the DataLoader's SIGCHLD handler."""
    deadline = time.monotonic() + fill_timeout
    while shm_used() < in_flight and time.monotonic() < deadline:
        time.sleep(0.1)
    print("HOLDING " + json.dumps({"shm_used": shm_used(), "in_flight": in_flight}), flush=True)
    deadline = time.monotonic() + release_timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            sys.exit(f"{path} did not appear within {release_timeout} s")
        time.sleep(0.1)


def cpu_seconds():
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        ru = resource.getrusage(who)
        total += ru.ru_utime + ru.ru_stime
    return total


def loader(dataset, args):
    kw = {"batch_size": args.batch, "num_workers": args.workers}
    if args.workers > 0:
        kw["prefetch_factor"] = args.prefetch
    return DataLoader(dataset, **kw)


def run_blocks(args):
    n = args.sample_mib * 1024 * 1024 // 4
    data = iter(loader(Blocks(args.samples, n), args))
    if args.hold:
        # The batches the workers prefetch before the first is taken: the
        # first prefetch x workers of them (each at most --batch samples;
        # none without workers).
        first = range(0, args.samples, args.batch)[:args.prefetch * args.workers]
        hold(args.hold, sum(min(args.batch, args.samples - i) for i in first) * n * 4)
    seen = batches = 0
    for batch in data:
        want = torch.arange(seen, seen + batch.shape[0], dtype=torch.float32)
        if batch.shape[1] != n or not (torch.equal(batch.amin(dim=1), want) and torch.equal(batch.amax(dim=1), want)):
            sys.exit(f"batch {batches}: samples {seen}.. arrived wrong (shape {tuple(batch.shape)})")
        seen += batch.shape[0]
        batches += 1
    return seen, batches


def run_images(args):
    data = loader(Images(args.samples, args.rounds), args)
    seen = batches = 0
    for images, idx in data:
        if images.shape[1:] != Images.shape or not torch.equal(idx, torch.arange(seen, seen + len(idx))):
            sys.exit(f"batch {batches}: samples {seen}.. arrived wrong")
        seen += len(idx)
        batches += 1
    return seen, batches


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["blocks", "images"])
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--prefetch", type=int, default=2)
    p.add_argument("--batch", type=int, default=9)
    p.add_argument("--samples", type=int, default=72)
    p.add_argument("--sample-mib", type=int, default=8, help="blocks: MiB per sample")
    p.add_argument("--rounds", type=int, default=4, help="images: transform rounds per sample")
    p.add_argument("--hold", metavar="FILE", help="blocks: hold the prefetched batches in /dev/shm until FILE exists")
    args = p.parse_args()

    print(f"/dev/shm {shm_bytes()} bytes; torch {torch.__version__}; {args.mode} workers={args.workers} "
          f"prefetch={args.prefetch} batch={args.batch} samples={args.samples}", flush=True)
    start, cpu = time.monotonic(), cpu_seconds()
    seen, batches = (run_blocks if args.mode == "blocks" else run_images)(args)
    seconds, cpu = time.monotonic() - start, cpu_seconds() - cpu
    if seen != args.samples:
        sys.exit(f"got {seen} samples, want {args.samples}")
    print("RESULT " + json.dumps({
        "shm_bytes": shm_bytes(),
        "samples": seen,
        "batches": batches,
        "seconds": seconds,
        "samples_per_s": seen / seconds,
        "cpu_seconds": cpu,
    }), flush=True)


if __name__ == "__main__":
    main()

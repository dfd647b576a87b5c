# Data-parallel training throughput, weft against PyTorch 1.13 in the same run: the MLP
# (784-512-256-10, SGD with momentum 0.9) at a global batch of 256, as one process with 2 threads
# and as 2 processes with 1 thread each, weft's DDP with its all-reduce overlapping backward and
# without, weft's ZeRO stages 1 to 3, PyTorch's DistributedDataParallel on the gloo backend (its
# CPU backend).
#
#   OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 bench/ddp_vs_pytorch.py build/weft
#
# weft trains on Fashion-MNIST (weft train; each step's samples/s from its metrics.jsonl, --log-every
# 1); PyTorch on random tensors already in memory, so it pays for no data loading at all.
# PyTorch gets 1 intra-op thread per rank (2 for the single process), OpenBLAS on one thread with
# its AVX-512 kernels, gradients bucketed as DDP's default (25 MiB). Both sides time the steps
# after a warm-up.
import json
import os
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

BATCH = 256
STEPS = int(os.environ.get("STEPS", "300"))
WARMUP = 20
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def weft_samples_per_s(weft, ranks, overlap=True, parallel=None):
    with tempfile.TemporaryDirectory() as out_dir:
        args = [weft, "train", "--model", "mlp", "--steps", str(WARMUP + STEPS), "--batch-size", str(BATCH),
                "--eval-every", "0", "--optimizer", "momentum", "--lr", "0.05", "--log-every", "1",
                "--threads", "2" if ranks == 1 else "1", "--out", out_dir + "/run"]
        if not overlap:
            args.append("--no-overlap")
        if parallel:
            args += ["--parallel", parallel]
        if ranks > 1:
            args = ["mpirun", "-np", str(ranks), "--bind-to", "none"] + args
        subprocess.run(args, check=True, capture_output=True, text=True, env={**os.environ, **MPI_ENV})
        with open(out_dir + "/run/metrics.jsonl") as f:
            records = [json.loads(line) for line in f]
    # The steps after the warm-up, each timed by the trainer (rank 0's, with the batch's samples).
    rates = [r["train/samples_per_s"] for r in records if "train/samples_per_s" in r and r["step"] > WARMUP]
    assert len(rates) == STEPS, f"expected {STEPS} per-step records after the warm-up, got {len(rates)}"
    return len(rates) * BATCH / sum(BATCH / rate for rate in rates)


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))


def torch_worker(rank, world, result):
    torch.set_num_threads(2 if world == 1 else 1)
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = mlp()
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    per_rank = BATCH // world
    x = torch.randn(WARMUP + STEPS, per_rank, 1, 28, 28)
    y = torch.randint(0, 10, (WARMUP + STEPS, per_rank))
    loss_fn = nn.CrossEntropyLoss()
    start = None
    for i in range(WARMUP + STEPS):
        if i == WARMUP:
            if world > 1:
                dist.barrier()
            start = time.perf_counter()
        opt.zero_grad()
        loss_fn(model(x[i]), y[i]).backward()
        opt.step()
    if world > 1:
        dist.barrier()
    if rank == 0:
        result.put(BATCH * STEPS / (time.perf_counter() - start))
    if world > 1:
        dist.destroy_process_group()


def torch_samples_per_s(world):
    ctx = mp.get_context("spawn")
    result = ctx.Queue()
    procs = [ctx.Process(target=torch_worker, args=(r, world, result)) for r in range(world)]
    for p in procs:
        p.start()
    rate = result.get()
    for p in procs:
        p.join()
    return rate


def main():
    weft = sys.argv[1] if len(sys.argv) > 1 else "build/weft"
    rows = [
        ("weft, 1 process x 2 threads", weft_samples_per_s(weft, 1)),
        ("weft DDP, 2 ranks x 1 thread, overlap", weft_samples_per_s(weft, 2)),
        ("weft DDP, 2 ranks x 1 thread, no overlap", weft_samples_per_s(weft, 2, overlap=False)),
        ("weft ZeRO-1, 2 ranks x 1 thread", weft_samples_per_s(weft, 2, parallel="zero1")),
        ("weft ZeRO-2, 2 ranks x 1 thread", weft_samples_per_s(weft, 2, parallel="zero2")),
        ("weft ZeRO-3, 2 ranks x 1 thread", weft_samples_per_s(weft, 2, parallel="zero3")),
        ("PyTorch, 1 process x 2 threads", torch_samples_per_s(1)),
        ("PyTorch DDP (gloo), 2 ranks x 1 thread", torch_samples_per_s(2)),
    ]
    print(f"MLP 784-512-256-10, SGD momentum 0.9, global batch {BATCH}, {STEPS} timed steps "
          f"(torch {torch.__version__})")
    for name, rate in rows:
        print(f"{name:44} {rate:10.0f} samples/s")
    rate = dict(rows)
    ddp = rate["weft DDP, 2 ranks x 1 thread, overlap"]
    print(f"weft DDP / PyTorch DDP:        {ddp / rate['PyTorch DDP (gloo), 2 ranks x 1 thread']:.2f}x (target >= 1.5x)")
    print(f"weft DDP / weft 1 x 2 threads: {ddp / rate['weft, 1 process x 2 threads']:.2f}x (target >= 0.85x)")
    print(f"overlap / no overlap:          {ddp / rate['weft DDP, 2 ranks x 1 thread, no overlap']:.2f}x (target > 1)")


if __name__ == "__main__":
    main()

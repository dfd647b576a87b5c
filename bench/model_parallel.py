# The GPT trained each way weft splits it, side by side in one run: one process with 2 threads,
# then 2 ranks with 1 thread each as data parallel (DDP), tensor parallel (--tp 2) and pipeline
# parallel (--pp 2, GPipe and 1F1B over 8 micro-batches). Per mode: tokens/s (weft's own count of the
# training steps), the validation loss (every mode should reach the same one), the allocator's peak
# on rank 0, the bytes each rank hands its groups per step, and for the pipelines the time the
# stages waited on each other beside the bubble formula (p - 1) / (m + p - 1).
#
#   python3 bench/model_parallel.py build/weft          (STEPS=100 by default)
#
# Given two binaries, it compares them instead on the data-parallel replicas of a split model: 4
# ranks, 2 replicas of 2 pipeline stages (--parallel dp,pp and zero1,pp, 4 micro-batches), the
# binaries in turn, RUNS=2 rounds (this machine is shared: the rounds show the spread):
#
#   python3 bench/model_parallel.py build/weft OTHER/weft
#
# These two cores are few: what matters is that each mode's cost is explained by what it
# communicates and by its bubble, not that it is fast.
import json
import os
import subprocess
import sys

STEPS = os.environ.get("STEPS", "100")
MPI = ["mpirun", "-np", "2", "--bind-to", "none"]
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
MODES = [
    ("1 process x 2 threads", [], ["--threads", "2"]),
    ("DDP, 2 ranks", MPI, []),
    ("tensor parallel, --tp 2", MPI, ["--parallel", "tp", "--tp", "2"]),
    ("pipeline, --pp 2, gpipe", MPI, ["--parallel", "pp", "--pp", "2", "--pp-schedule", "gpipe", "--grad-accum", "8"]),
    ("pipeline, --pp 2, 1f1b", MPI, ["--parallel", "pp", "--pp", "2", "--pp-schedule", "1f1b", "--grad-accum", "8"]),
]


MPI4 = ["mpirun", "-np", "4", "--oversubscribe", "--bind-to", "none"]
REPLICATED = [
    ("dp,pp", ["--parallel", "dp,pp", "--pp", "2", "--grad-accum", "4"]),
    ("zero1,pp", ["--parallel", "zero1,pp", "--pp", "2", "--grad-accum", "4"]),
]


def run(weft, launcher, flags):
    args = launcher + [weft, "train", "--model", "gpt", "--steps", STEPS, "--seed", "3", "--json"]
    args += flags if "--threads" in flags else flags + ["--threads", "1"]
    out = subprocess.run(args, env=ENV, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def compare(binaries):
    rounds = int(os.environ.get("RUNS", "2"))
    print(f"GPT (weft train's default), {STEPS} steps of 16 sequences, seed 3, 4 ranks x 1 thread, "
          f"{rounds} rounds of each binary in turn")
    runs = {}
    for _ in range(rounds):
        for mode, flags in REPLICATED:
            for weft in binaries:
                runs.setdefault((mode, weft), []).append(run(weft, MPI4, flags))
    print(f"{'mode':<10}{'binary':<28}{'tokens/s, each round':>24}{'ms/step':>10}{'val loss':>10}")
    for mode, _ in REPLICATED:
        for weft in binaries:
            rs = runs[(mode, weft)]
            rates = [r["train_tokens_per_s"] for r in rs]
            ms = [1000 * r["batch_size"] * r["context"] / r["train_tokens_per_s"] for r in rs]
            print(f"{mode:<10}{weft:<28}{' / '.join(f'{t:.0f}' for t in rates):>24}"
                  f"{min(ms):>5.0f}-{max(ms):<4.0f}{rs[0]['val_loss']:>10.5f}")


def main():
    if len(sys.argv) > 2:
        compare(sys.argv[1:])
        return
    weft = sys.argv[1] if len(sys.argv) > 1 else "build/weft"
    print(f"GPT (weft train's default), {STEPS} steps of 16 sequences, seed 3")
    print(f"{'mode':<28}{'tokens/s':>10}{'val loss':>10}{'peak MB':>9}{'bytes/step':>12}{'waited':>8}{'bubble':>8}")
    for name, launcher, flags in MODES:
        r = run(weft, launcher, flags)
        waited = f"{100 * r['pipeline_idle_fraction']:.1f}%" if "pipeline_idle_fraction" in r else "-"
        bubble = f"{100 * r['pipeline_bubble']:.1f}%" if "pipeline_bubble" in r else "-"
        print(f"{name:<28}{r['train_tokens_per_s']:>10.0f}{r['val_loss']:>10.5f}{r['peak_allocated_bytes'] / 1e6:>9.1f}"
              f"{r.get('communicated_bytes_per_step', 0):>12,}{waited:>8}{bubble:>8}")


if __name__ == "__main__":
    main()

# Where a training step's time goes, by op family, from weft's own profiler (`weft train
# --profile`, docs/profiler.md): the MLP and the CNN on Fashion-MNIST (batch 128, SGD with
# momentum 0.9), GPT small (4 layers, width 256, vocabulary 50304, context 64, batch 8) and GPT-2
# 124M (12 layers, width 768, context 64, batch 4) on random tokens with AdamW and clipping; each
# in fp32 and bf16, 2 threads. Prints one markdown table per workload, ms per profiled step by
# family. Given two weft binaries it runs each workload with both, one after the other, and
# prints them side by side (before / after).
#
#   python3 bench/op_families.py build/weft
#   python3 bench/op_families.py OLD/weft build/weft
#   WORKLOAD="GPT-2 124M" python3 bench/op_families.py OLD/weft build/weft   (one workload)
import json
import os
import subprocess
import sys
import tempfile

WORKLOADS = {
    "MLP": ["--model", "mlp", "--batch-size", "128", "--optimizer", "momentum", "--steps", "12"],
    "CNN": ["--model", "cnn", "--batch-size", "128", "--optimizer", "momentum", "--steps", "12"],
    "GPT small": ["--model", "gpt", "--layers", "4", "--heads", "4", "--dim", "256", "--vocab", "50304",
                  "--context", "64", "--batch-size", "8", "--data", "random", "--eval-windows", "1", "--steps", "12"],
    "GPT-2 124M": ["--model", "gpt", "--layers", "12", "--heads", "12", "--dim", "768", "--vocab", "50304",
                   "--context", "64", "--batch-size", "4", "--data", "random", "--eval-windows", "1", "--steps", "6"],
}
PROFILE_STEPS = {"MLP": "3:12", "CNN": "3:12", "GPT small": "3:12", "GPT-2 124M": "3:6"}


def families(weft, workload, precision):
    with tempfile.TemporaryDirectory() as out_dir:
        out = subprocess.run([weft, "train", *WORKLOADS[workload], "--threads", "2", "--precision", precision,
                              "--profile", out_dir + "/trace.json", "--profile-steps", PROFILE_STEPS[workload],
                              "--out", out_dir + "/run", "--json"], check=True, capture_output=True, text=True).stdout
    profile = json.loads(out.strip().splitlines()[-1])["profile"]
    first, last = profile["first_step"], profile["last_step"]
    return {row["family"]: row["ms"] for row in profile["families"]}, profile["step_ms"] / (last - first + 1)


def main():
    binaries = sys.argv[1:] or ["build/weft"]
    names = ["before", "after"] if len(binaries) == 2 else [""]
    only = os.environ.get("WORKLOAD")
    if only and only not in WORKLOADS:
        sys.exit(f"WORKLOAD={only!r} is none of: {', '.join(WORKLOADS)}")
    for workload in [only] if only else WORKLOADS:
        columns = []  # (title, {family: ms}, step ms)
        for precision in ("fp32", "bf16"):
            for name, weft in zip(names, binaries):
                rows, step = families(weft, workload, precision)
                columns.append((f"{precision} {name}".strip(), rows, step))
        order = sorted({f for _, rows, _ in columns for f in rows}, key=lambda f: -columns[-1][1].get(f, 0))
        print(f"\n{workload}, ms per step (share of the step)\n")
        print("| family | " + " | ".join(title for title, _, _ in columns) + " |")
        print("|---|" + "---:|" * len(columns))
        for family in order:
            cells = [f"{rows.get(family, 0):.2f} ({100 * rows.get(family, 0) / step:.0f}%)" for _, rows, step in columns]
            print(f"| {family} | " + " | ".join(cells) + " |")
        print("| **step** | " + " | ".join(f"**{step:.2f}**" for _, _, step in columns) + " |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()

"""What defining a model in Python costs a training step: the CNN of examples/fashion_mnist_cnn.py
trained by weft.train.fit, beside the same network built in C++ from weft's layers and trained by
the same trainer (bench/bench_fit_cnn.cpp). Both run the same steps of batch 128 on Fashion-MNIST
with the same options, alternated, in separate processes; the trainer's own samples/s (training
steps only) is compared.

    PYTHONPATH=build/python python3 bench/python_overhead.py build [--steps 200] [--rounds 3] [--threads 2]
"""
import argparse
import json
import os
import subprocess
import sys

CHILD = """
import json, sys
sys.path.insert(0, {examples!r})
import weft
from fashion_mnist_cnn import FashionCNN
weft.manual_seed(0)
result = weft.train.fit(FashionCNN(), steps={steps}, threads={threads}, eval_every=0, log=False)
print(json.dumps(result))
"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    a = parser.parse_args()
    examples = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")
    env = dict(os.environ, PYTHONPATH=os.path.join(a.build, "python"))
    commands = {
        "C++": [os.path.join(a.build, "bench", "bench_fit_cnn"), str(a.steps), str(a.threads)],
        "Python": [sys.executable, "-c", CHILD.format(examples=examples, steps=a.steps, threads=a.threads)],
    }
    rates = {name: [] for name in commands}
    for _ in range(a.rounds):
        for name, command in commands.items():
            out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
            rates[name].append(json.loads(out.strip().splitlines()[-1])["train_samples_per_s"])
    print(f"{a.steps} steps of 128, {a.threads} threads, {a.rounds} rounds alternated (samples/s, training steps only)")
    for name, r in rates.items():
        print(f"  {name:7s} " + "  ".join(f"{x:8.0f}" for x in r) + f"   ms a step: {1e3 * 128 / max(r):.3f} at best")
    cpp, python = max(rates["C++"]), max(rates["Python"])
    print(f"Python's step time over C++'s (best of each): {cpp / python:.3f}; "
          f"overhead {1e3 * 128 * (1 / python - 1 / cpp):.3f} ms a step")


if __name__ == "__main__":
    main()

# Fashion-MNIST training throughput, weft against PyTorch 1.13 in the same run: the same MLP and
# CNN (`weft train --model mlp|cnn`), batch 128, SGD with momentum 0.9 at lr 0.01 (the performance
# issue's optimizer; OPTIMIZER=adamw measures AdamW at 4e-3, weft train's default, instead), 2
# threads, the same number of batches; then the CNN in bf16 mixed precision, weft's --precision bf16
# beside torch.autocast('cpu', bfloat16). Targets: the CNN in fp32 at least 2x PyTorch, and weft's
# bf16 CNN at least 1.7x its own fp32 (PyTorch autocast's own speed-up, printed beside it).
#
#   OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 bench/train_vs_pytorch.py build/weft
#
# PyTorch gets its best configuration here: 2 intra-op threads (Debian's build defaults to 1),
# OpenBLAS pinned to one thread and to its AVX-512 kernels (the environment otherwise selects
# AVX2), and the whole training set pre-normalised in one tensor, so that its data path costs
# only an index. weft normalises each batch from the u8 images in its background loader.
# Both figures are samples/s over the training loop only, after the same warm-up; each is the best
# of REPEATS runs (default 3), weft's and PyTorch's alternating, as the machine may be shared.
import gzip
import json
import os
import struct
import subprocess
import sys
import time

import torch

BATCHES = int(os.environ.get("BATCHES", "300"))
OPTIMIZER = os.environ.get("OPTIMIZER", "momentum")  # momentum (SGD, 0.9) or adamw
LR = {"momentum": 0.01, "adamw": 4e-3}[OPTIMIZER]
WARMUP = 20
REPEATS = int(os.environ.get("REPEATS", "3"))
# Where weft train reads it too (src/weft/data/paths.h).
DATA = os.path.join(os.environ.get("WEFT_DATA_DIR") or "/usr/share/datasets", "fashion-mnist")


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def torch_model(name):
    nn = torch.nn
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                             nn.Linear(256, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1600, 128), nn.ReLU(), nn.Linear(128, 10))


def torch_samples_per_s(name, images, labels, bf16=False):
    torch.manual_seed(0)
    model = torch_model(name)
    if OPTIMIZER == "momentum":
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    else:  # weft's AdamW default decay 0.01 is torch's default too
        opt = torch.optim.AdamW(model.parameters(), lr=LR)
    order = torch.randperm(len(labels))
    start = None
    for i in range(WARMUP + BATCHES):
        if i == WARMUP:
            start = time.perf_counter()
        idx = order[i * 128:(i + 1) * 128]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = torch.nn.functional.cross_entropy(model(images[idx]), labels[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return BATCHES * 128 / (time.perf_counter() - start)


def weft_samples_per_s(weft, name, precision="fp32"):
    # weft's figure covers every batch it trained, so it trains WARMUP more and the warm-up's
    # cost (first-call oneDNN primitive creation) is included: a slight handicap for weft.
    out = subprocess.run([weft, "train", "--model", name, "--epochs", "1", "--threads", "2", "--optimizer", OPTIMIZER,
                          "--lr", str(LR), "--batch-size", "128", "--limit-train-batches", str(WARMUP + BATCHES), "--precision", precision,
                          "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["train_samples_per_s"]


def main():
    weft = sys.argv[1] if len(sys.argv) > 1 else "build/weft"
    torch.set_num_threads(2)
    images = ((read_idx(f"{DATA}/train-images-idx3-ubyte.gz").float() / 255 - 0.2860) / 0.3530).unsqueeze(1)
    labels = read_idx(f"{DATA}/train-labels-idx1-ubyte.gz").long()
    optimizer = "SGD momentum 0.9" if OPTIMIZER == "momentum" else "AdamW"
    print(f"Fashion-MNIST training, batch 128, {optimizer} lr {LR}, 2 threads, {BATCHES} batches after {WARMUP} "
          f"warm-up, best of {REPEATS}")
    print(f"torch {torch.__version__}, OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')}")
    print(f"{'model':6} {'weft samples/s':>15} {'torch samples/s':>16} {'ratio':>7} {'target':>7}")

    def best(name, bf16=False):
        w = t = 0
        for _ in range(REPEATS):
            w = max(w, weft_samples_per_s(weft, name, "bf16" if bf16 else "fp32"))
            t = max(t, torch_samples_per_s(name, images, labels, bf16))
        return w, t

    fp32 = {}
    for name, target in (("mlp", 1.5), ("cnn", 2.0)):
        w, t = fp32[name] = best(name)
        print(f"{name:6} {w:15.0f} {t:16.0f} {w / t:6.2f}x {target:6.1f}x")
    w, t = best("cnn", bf16=True)
    print(f"{'cnn bf16':9} {w:12.0f} {t:16.0f} {w / t:6.2f}x")
    print(f"bf16 over fp32 on the CNN: weft {w / fp32['cnn'][0]:.2f}x (target 1.7x), "
          f"PyTorch autocast {t / fp32['cnn'][1]:.2f}x")


if __name__ == "__main__":
    main()

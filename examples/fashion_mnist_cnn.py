"""A CNN defined in Python, trained on Fashion-MNIST with weft.

    PYTHONPATH=build/python python3 examples/fashion_mnist_cnn.py [--epochs 3] [--out DIR] [--data DIR]
    PYTHONPATH=build/python python3 examples/fashion_mnist_cnn.py --loop   # the PyTorch loop, written for weft

The network is not one of weft's own: two 5x5 convolutions (16 and 32 channels, padded), each with
ReLU and 2x2 max pooling, then one linear layer to the 10 classes. By default weft.train.fit trains
it with the trainer of `weft train` (its data loader, schedule, evaluation, checkpoints with --out);
--loop trains it with a loop of its own over batches read with NumPy. The data is Debian's
dataset-fashion-mnist (/usr/share/datasets/fashion-mnist).
"""
import argparse
import gzip
import os
import time

import numpy as np

import weft
from weft import nn


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


class FashionCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5, padding=2)
        self.conv2 = nn.Conv2d(16, 32, 5, padding=2)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x):
        x = self.pool(weft.relu(self.conv1(x)))
        x = self.pool(weft.relu(self.conv2(x)))
        return self.head(x.flatten(1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, help="default: the trainer's for the classifiers (AdamW 4e-3, cosine), "
                        "2e-3 (constant) for --loop")
    parser.add_argument("--data", default=os.environ.get("WEFT_DATA_DIR", "/usr/share/datasets") + "/fashion-mnist")
    parser.add_argument("--out", help="with the trainer: checkpoint, metrics and TensorBoard events go here")
    parser.add_argument("--loop", action="store_true", help="train with the loop below instead of weft.train.fit")
    a = parser.parse_args()
    if not a.loop:
        weft.manual_seed(0)
        result = weft.train.fit(FashionCNN(), epochs=a.epochs, batch_size=a.batch_size, lr=a.lr, data_dir=a.data,
                                out=a.out)
        print(f"{result['steps']} steps of {a.batch_size}: {1e3 * a.batch_size / result['train_samples_per_s']:.2f} ms "
              f"a step, test accuracy {result['test_accuracy']:.2%}")
        return
    images = {s: read_idx(f"{a.data}/{s}-images-idx3-ubyte.gz") for s in ("train", "t10k")}
    labels = {s: read_idx(f"{a.data}/{s}-labels-idx1-ubyte.gz").astype(np.int64) for s in ("train", "t10k")}
    # Normalised by the training set's mean and deviation, as weft train does.
    mean, std = images["train"].mean() / 255, images["train"].std() / 255
    inputs = {s: ((images[s].astype(np.float32) / 255 - mean) / std)[:, None] for s in images}

    weft.manual_seed(0)
    model = FashionCNN()
    opt = weft.optim.AdamW(model.parameters(), lr=a.lr or 2e-3, weight_decay=0.0)
    rng = np.random.default_rng(0)
    n = len(labels["train"])
    steps, compute_s, start = 0, 0.0, time.perf_counter()
    for epoch in range(a.epochs):
        order = rng.permutation(n)
        model.train()
        for first in range(0, n - a.batch_size + 1, a.batch_size):
            batch = order[first:first + a.batch_size]
            x = weft.from_numpy(np.ascontiguousarray(inputs["train"][batch]))
            y = weft.from_numpy(labels["train"][batch])
            step_start = time.perf_counter()
            loss = weft.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            compute_s += time.perf_counter() - step_start
            steps += 1
        model.eval()
        correct = 0
        with weft.no_grad():
            for first in range(0, len(labels["t10k"]), 1000):
                logits = model(weft.from_numpy(inputs["t10k"][first:first + 1000]))
                correct += int((logits.argmax(1).numpy() == labels["t10k"][first:first + 1000]).sum())
        print(f"epoch {epoch + 1}: loss {loss.item():.4f}, test accuracy {correct / len(labels['t10k']):.2%}")
    elapsed = time.perf_counter() - start
    print(f"{steps} steps of {a.batch_size}: {1e3 * compute_s / steps:.2f} ms a step (forward, backward, update), "
          f"{steps * a.batch_size / elapsed:.0f} samples/s overall with the batches' gathering and evaluation")


if __name__ == "__main__":
    main()

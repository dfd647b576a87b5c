# The PyTorch twin of bench_train_step.cpp: same model, batch, optimizer and thread count.
# Prints one row in the C++ benchmark's table format. Run with Debian's /usr/bin/python3.
import time

import torch

torch.set_num_threads(2)
torch.manual_seed(0)
batch = 128
model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256),
                            torch.nn.ReLU(), torch.nn.Linear(256, 10))
opt = torch.optim.AdamW(model.parameters())
x = torch.randn(batch, 784)
y = torch.arange(batch) % 10
fwd, bwd, step = [], [], []
for it in range(220):
    t0 = time.perf_counter()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    f = time.perf_counter() - t0
    t0 = time.perf_counter()
    loss.backward()
    b = time.perf_counter() - t0
    t0 = time.perf_counter()
    opt.step()
    opt.zero_grad()
    s = time.perf_counter() - t0
    if it >= 20:
        fwd.append(f); bwd.append(b); step.append(s)
med = lambda v: sorted(v)[len(v) // 2] * 1e3
f, b, s = med(fwd), med(bwd), med(step)
print("%-10s %8.3fms %8.3fms %8.3fms %8.3fms %12.0f" % ("torch " + torch.__version__[:4], f, b, s, f + b + s,
                                                      batch / ((f + b + s) / 1e3)))

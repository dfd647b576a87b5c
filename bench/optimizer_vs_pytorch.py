# Optimizer step time, weft against PyTorch 1.13 in the same run: AdamW, SGD with momentum 0.9 and
# clip_grad_norm_ (max_norm 1) on GPT-2 small's parameter shapes (124M f32 parameters: 12 layers,
# width 768, vocabulary 50304, context 64) and on the Fashion-MNIST MLP's (784-512-256-10).
#
#   OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 bench/optimizer_vs_pytorch.py build/bench/bench_optimizer
#
# Figures are the best ms of STEPS timed calls (default 10 for the GPT, 200 for the MLP) after two
# untimed ones, over ROUNDS rounds (default 3; on a shared machine other work only ever adds time),
# on random grads, 2 threads each; before each clip_grad_norm_ the grads are restored, untimed, so
# that every call scales them. PyTorch gets its best configuration: both of its CPU implementations, the per-tensor loop
# (foreach=False) and the multi-tensor one (foreach=True), are timed and printed. GB/s counts each
# f32 read and write once: AdamW 28 bytes per parameter (p, g, m, v read; p, m, v written), SGD
# with momentum 20, clip_grad_norm 12 (the norm reads g, the scaling reads and writes it),
# grad_norm 4.
# weft's trainer clips with grad_norm and passes the coefficient to the optimizer's step, which
# scales each grad as it reads it: its clipping costs the "grad_norm" row, not "clip_grad_norm".
import json
import os
import subprocess
import sys
import time

import torch

DIM, VOCAB, CONTEXT, LAYERS = 768, 50304, 64, 12


def gpt_shapes():
    shapes = [(VOCAB, DIM), (CONTEXT, DIM)]
    for _ in range(LAYERS):
        shapes += [(DIM,), (DIM,), (3 * DIM, DIM), (3 * DIM,), (DIM, DIM), (DIM,),
                   (DIM,), (DIM,), (4 * DIM, DIM), (4 * DIM,), (DIM, 4 * DIM), (DIM,)]
    return shapes + [(DIM,), (DIM,)]


def mlp_shapes():
    return [(512, 784), (512,), (256, 512), (256,), (10, 256), (10,)]


def best_ms(fn, steps, before=lambda: None):
    """`before` runs untimed ahead of every call."""
    for _ in range(2):
        before()
        fn()
    times = []
    for _ in range(steps):
        before()
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return min(times)


def torch_figures(shapes, steps):
    torch.manual_seed(0)
    params = [torch.randn(s, requires_grad=True) for s in shapes]
    for p in params:
        p.grad = torch.randn(p.shape)
    out = {}
    for foreach in (False, True):
        opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, foreach=foreach)
        out[f"adamw foreach={foreach}"] = best_ms(opt.step, steps)
        opt = torch.optim.SGD(params, lr=1e-4, momentum=0.9, foreach=foreach)
        out[f"sgd foreach={foreach}"] = best_ms(opt.step, steps)
    saved = [p.grad.clone() for p in params]

    def restore():
        for p, g in zip(params, saved):
            p.grad.copy_(g)
    out["clip"] = best_ms(lambda: torch.nn.utils.clip_grad_norm_(params, 1.0), steps, restore)
    return out


def weft_figures(binary, shapes, steps):
    args = [binary] + ["x".join(str(d) for d in s) for s in shapes]
    out = subprocess.run(args, check=True, capture_output=True, text=True, env={**os.environ, "STEPS": str(steps)})
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(name, shapes, steps, weft, peer):
    numel = sum(torch.Size(s).numel() for s in shapes)
    assert weft["params"] == numel, f"weft counted {weft['params']} parameters, expected {numel}"
    print(f"\n{name}: {len(shapes)} tensors, {numel} f32 parameters, best of {steps} steps")
    print(f"{'step':34} {'ms':>9} {'GB/s':>7} {'vs weft':>8}")

    def row(label, ms, bytes_per_param, weft_ms):
        gbs = bytes_per_param * numel / ms / 1e6
        print(f"{label:34} {ms:9.2f} {gbs:7.1f} {ms / weft_ms:7.2f}x")

    row("weft AdamW", weft["adamw_ms"], 28, weft["adamw_ms"])
    row("weft AdamW, clip factor folded", weft["adamw_with_factor_ms"], 28, weft["adamw_ms"])
    row("torch AdamW foreach=False", peer["adamw foreach=False"], 28, weft["adamw_ms"])
    row("torch AdamW foreach=True", peer["adamw foreach=True"], 28, weft["adamw_ms"])
    row("weft SGD momentum 0.9", weft["sgd_momentum_ms"], 20, weft["sgd_momentum_ms"])
    row("torch SGD momentum foreach=False", peer["sgd foreach=False"], 20, weft["sgd_momentum_ms"])
    row("torch SGD momentum foreach=True", peer["sgd foreach=True"], 20, weft["sgd_momentum_ms"])
    row("weft clip_grad_norm", weft["clip_grad_norm_ms"], 12, weft["clip_grad_norm_ms"])
    row("torch clip_grad_norm_", peer["clip"], 12, weft["clip_grad_norm_ms"])
    row("weft grad_norm (trainer's clip)", weft["grad_norm_ms"], 4, weft["clip_grad_norm_ms"])


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "build/bench/bench_optimizer"
    torch.set_num_threads(2)
    print(f"torch {torch.__version__}, 2 threads; 'vs weft' is the row's time over weft's for the same step")
    configs = [("GPT-2 124M", gpt_shapes(), int(os.environ.get("STEPS", "10"))),
               ("MLP 784-512-256-10", mlp_shapes(), int(os.environ.get("MLP_STEPS", "200")))]
    # ROUNDS rounds, each weft then PyTorch, and each row's best: on a shared machine the quiet moments
    # then fall to both. weft runs first in a round, as PyTorch's idle OpenMP threads in this
    # process would compete with it for the cores.
    weft, peer = [{} for _ in configs], [{} for _ in configs]
    for _ in range(int(os.environ.get("ROUNDS", "3"))):
        for k, (_, shapes, steps) in enumerate(configs):
            for key, ms in weft_figures(binary, shapes, steps).items():
                weft[k][key] = min(ms, weft[k].get(key, ms))
        for k, (_, shapes, steps) in enumerate(configs):
            for key, ms in torch_figures(shapes, steps).items():
                peer[k][key] = min(ms, peer[k].get(key, ms))
    for (name, shapes, steps), w, p in zip(configs, weft, peer):
        report(name, shapes, steps, w, p)


if __name__ == "__main__":
    main()

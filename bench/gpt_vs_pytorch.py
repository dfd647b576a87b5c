# GPT training throughput, weft against PyTorch 1.13 in the same run, on uniform random tokens
# with AdamW; fp32, then bf16 mixed precision (weft's --precision bf16 beside torch.autocast).
# Two configurations: CONFIG=small (the default) is 4 layers, 4 heads, width 256, vocabulary
# 50304, context 64, batch 8; CONFIG=124m is GPT-2 small's 124M parameters (12 layers, 12 heads,
# width 768, vocabulary 50304) at context 64, batch 4.
#
#   OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 bench/gpt_vs_pytorch.py build/weft
#   CONFIG=124m STEPS=10 OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 bench/gpt_vs_pytorch.py build/weft
#
# The PyTorch model is the same GPT-2 (pre-LN blocks, fused qkv projection, GELU tanh, tied
# output) with the same step: AdamW (betas 0.9/0.95, weight decay 0.1), gradients clipped to norm
# 1. PyTorch 1.13 has no fused attention (F.scaled_dot_product_attention came in 2.0), so its
# attention is the usual masked softmax of q k^T. It gets its best configuration here: 2 threads,
# OpenBLAS on one thread with its AVX-512 kernels, and both of AdamW's CPU implementations (the
# per-tensor loop and foreach) tried, the faster one reported.
# Both sides' tokens/s cover the same steps: those after the warm-up (weft's from its per-step
# records in metrics.jsonl, --log-every 1). The first steps pay for first-touching the
# allocator's memory (GiBs at 124M) and creating oneDNN's primitives.
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = {"small": (4, 4, 256, 50304, 64, 8), "124m": (12, 12, 768, 50304, 64, 4)}
LAYERS, HEADS, DIM, VOCAB, CONTEXT, BATCH = CONFIGS[os.environ.get("CONFIG", "small")]
STEPS = int(os.environ.get("STEPS", "60"))
WARMUP = int(os.environ.get("WARMUP", "5"))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.c_attn, self.attn_proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.c_fc, self.mlp_proj = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)
        self.register_buffer("mask", torch.ones(CONTEXT, CONTEXT, dtype=torch.bool).tril())

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, HEADS, C // HEADS).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(C // HEADS)
        scores = scores.masked_fill(~self.mask[:T, :T], float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.attn_proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, DIM), nn.Embedding(CONTEXT, DIM)
        self.h = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(DIM)

    def forward(self, tokens):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1]))
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def torch_tokens_per_s(bf16, foreach):
    torch.manual_seed(0)
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.95), weight_decay=0.1, foreach=foreach)
    data = torch.randint(0, VOCAB, (STEPS + WARMUP, BATCH, CONTEXT + 1))
    start = None
    for i in range(WARMUP + STEPS):
        if i == WARMUP:
            start = time.perf_counter()
        tokens = data[i]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, VOCAB).float(), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return STEPS * BATCH * CONTEXT / (time.perf_counter() - start)


def weft_tokens_per_s(weft, precision):
    with tempfile.TemporaryDirectory() as out_dir:
        out = subprocess.run([weft, "train", "--model", "gpt", "--layers", str(LAYERS), "--heads", str(HEADS),
                              "--dim", str(DIM), "--vocab", str(VOCAB), "--context", str(CONTEXT),
                              "--batch-size", str(BATCH), "--data", "random", "--steps", str(WARMUP + STEPS),
                              "--eval-windows", "1", "--threads", "2", "--precision", precision, "--log-every", "1",
                              "--profile", out_dir + "/trace.json", "--profile-steps", "1:1",
                              "--out", out_dir + "/run", "--json"], check=True, capture_output=True, text=True).stdout
        result = json.loads(out.strip().splitlines()[-1])
        with open(out_dir + "/run/metrics.jsonl") as f:
            records = [json.loads(line) for line in f]
    rates = [r["train/tokens_per_s"] for r in records if "train/tokens_per_s" in r and r["step"] > WARMUP]
    assert len(rates) == STEPS, f"expected {STEPS} per-step records after the warm-up, got {len(rates)}"
    tokens = BATCH * CONTEXT
    return len(rates) * tokens / sum(tokens / rate for rate in rates), result["params"], \
        result["profile"]["roofline"]["peak_gflops"]


def gflop_per_step():
    # 6 FLOPs per GEMM weight per token (forward, and the gradients of input and weight), the
    # output projection included (it is wte again), wpe and the norms not; plus attention's
    # q k^T and p v, 4 B T^2 D per layer forward and twice that backward (all pairs counted).
    gemm_weights = LAYERS * 12 * DIM * DIM + VOCAB * DIM
    return (6 * BATCH * CONTEXT * gemm_weights + 12 * LAYERS * BATCH * CONTEXT * CONTEXT * DIM) / 1e9


def main():
    weft = sys.argv[1] if len(sys.argv) > 1 else "build/weft"
    torch.set_num_threads(2)
    print(f"GPT training: {LAYERS} layers, {HEADS} heads, width {DIM}, vocab {VOCAB}, context {CONTEXT}, batch {BATCH}, "
          f"AdamW, 2 threads, {STEPS} steps after {WARMUP} warm-up")
    print(f"torch {torch.__version__}, OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')}")
    weft_fp32, params, peak_fp32 = weft_tokens_per_s(weft, "fp32")
    torch_params = sum(p.numel() for p in GPT().parameters())
    assert params == torch_params, f"weft's GPT has {params} parameters, PyTorch's {torch_params}"
    print(f"{params} parameters in both")
    rows = []
    for precision, bf16 in (("fp32", False), ("bf16", True)):
        weft_rate, _, peak = (weft_fp32, params, peak_fp32) if precision == "fp32" else weft_tokens_per_s(weft, "bf16")
        torch_rate = max(torch_tokens_per_s(bf16, foreach) for foreach in (False, True))
        rows.append((precision, weft_rate, torch_rate, peak))
    flop = gflop_per_step()
    print(f"{flop:.1f} GFLOP per step of {BATCH * CONTEXT} tokens; GEMM ceiling: weft's oneDNN GEMM peak measured "
          f"in this run (1024^3 in the step's dtype) over the FLOPs per token")
    print(f"{'precision':9} {'weft tokens/s':>14} {'torch tokens/s':>15} {'weft/torch':>11} {'peak GFLOP/s':>13} "
          f"{'ceiling tok/s':>14} {'weft/ceiling':>13} {'torch/ceiling':>14}")
    for precision, weft_rate, torch_rate, peak in rows:
        ceiling = peak * BATCH * CONTEXT / flop
        print(f"{precision:9} {weft_rate:14.0f} {torch_rate:15.0f} {weft_rate / torch_rate:10.2f}x {peak:13.0f} "
              f"{ceiling:14.0f} {weft_rate / ceiling:12.0%} {torch_rate / ceiling:14.0%}")
    real_size = os.environ.get("CONFIG", "small") == "124m"
    print(f"weft fp32 / torch fp32: {rows[0][1] / rows[0][2]:.2f}x (target >= {2.0 if real_size else 1.5}x)")
    print(f"weft bf16 / weft fp32:  {rows[1][1] / rows[0][1]:.2f}x (target {'>= 1.7x' if real_size else '> 1'})")
    if real_size:
        print(f"weft bf16 / torch bf16: {rows[1][1] / rows[1][2]:.2f}x (target >= 1.3x)")


if __name__ == "__main__":
    main()

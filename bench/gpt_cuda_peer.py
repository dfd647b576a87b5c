# GPT-2 124M training on one CUDA GPU with PyTorch at its best in eager mode: bf16 autocast,
# F.scaled_dot_product_attention (flash attention), fused AdamW, TF32 allowed for what stays f32;
# then torch.compile of the same model where it runs. The yardstick weft's CUDA backend is held to
# by scripts/gpu-check, on the same card in the same command.
#
#   python3 bench/gpt_cuda_peer.py [--steps 30] [--warmup 5] [--compile-timeout 240]
#
# GPT-2 small's shape (12 layers, 12 heads, width 768, vocabulary 50304, context 1024) at batch 16
# on uniform random tokens, AdamW (betas 0.9/0.95, weight decay 0.1), gradients clipped to norm 1.
# Model FLOPs per token are 6 per weight of every GEMM (the tied output projection included) plus
# attention's 12 x layers x context x width, as PaLM's MFU counts them; MFU is over the card's
# dense bf16 peak from its datasheet (H100 and H200 SXM: 989 TFLOP/s).
import argparse
import json
import math
import multiprocessing
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

LAYERS, HEADS, DIM, VOCAB, CONTEXT, BATCH = 12, 12, 768, 50304, 1024, 16
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.c_attn, self.attn_proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.c_fc, self.mlp_proj = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, HEADS, C // HEADS).transpose(1, 2) for t in self.c_attn(self.ln_1(x)).split(C, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, DIM), nn.Embedding(CONTEXT, DIM)
        self.h = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(DIM)

    def forward(self, tokens):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def flop_per_token():
    return 6 * (LAYERS * 12 * DIM * DIM + VOCAB * DIM) + 12 * LAYERS * CONTEXT * DIM


def peak_flops():
    name = torch.cuda.get_device_name()
    return next((peak for card, peak in PEAK_BF16.items() if card in name), None), name


def train(compiled, steps, warmup):
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    model = GPT().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    step_model = torch.compile(model) if compiled else model
    data = torch.randint(0, VOCAB, (warmup + steps, BATCH, CONTEXT + 1), device="cuda")
    torch.cuda.reset_peak_memory_stats()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    losses = []
    for i in range(warmup + steps):
        if i == warmup:
            start.record()
        tokens = data[i]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = step_model(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, VOCAB), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.detach())
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1e3
    assert all(math.isfinite(l.item()) for l in losses), "a loss that is not a number"
    return {"tokens_per_s": steps * BATCH * CONTEXT / seconds, "step_ms": 1e3 * seconds / steps,
            "peak_allocated_bytes": torch.cuda.max_memory_allocated(), "first_loss": losses[0].item(),
            "last_loss": losses[-1].item()}


def compiled_in_child(queue, steps, warmup):
    try:
        queue.put(train(True, steps, warmup))
    except Exception as error:  # reported as a row, not a crash of the whole check
        queue.put({"error": f"{type(error).__name__}: {error}"})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--compile-timeout", type=float, default=240)
    parser.add_argument("--json", help="write the rows here as JSON")
    a = parser.parse_args()
    peak, name = peak_flops()
    params = sum(p.numel() for p in GPT().parameters())
    print(f"{name}, torch {torch.__version__}; GPT-2 {params / 1e6:.1f}M, batch {BATCH}, context {CONTEXT}, bf16 "
          f"autocast, fused AdamW, {a.steps} steps after {a.warmup} warm-up")
    rows = {"eager": train(False, a.steps, a.warmup)}
    # torch.compile in a process of its own, so that a hang or a long compile costs a bounded time.
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=compiled_in_child, args=(queue, a.steps, a.warmup))
    start = time.monotonic()
    child.start()
    child.join(a.compile_timeout)
    if child.is_alive():
        child.kill()
        rows["compile"] = {"error": f"not done within {a.compile_timeout:.0f} s"}
    else:
        rows["compile"] = queue.get() if not queue.empty() else {"error": f"exit code {child.exitcode}"}
    rows["compile"]["wall_s"] = time.monotonic() - start
    print(f"{'torch':8} {'tokens/s':>10} {'step ms':>8} {'MFU':>6} {'peak memory':>12}")
    for mode, r in rows.items():
        if "error" in r:
            print(f"{mode:8} {r['error']}")
            continue
        mfu = r["tokens_per_s"] * flop_per_token() / peak if peak else float("nan")
        r["mfu"] = mfu
        print(f"{mode:8} {r['tokens_per_s']:10.0f} {r['step_ms']:8.1f} {mfu:6.1%} {r['peak_allocated_bytes'] / 2**30:9.2f} GiB")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": name, "torch": torch.__version__, "params": params, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Writes the GPT golden files: a PyTorch twin of weft's GPT, its weights and its results.

Regenerate (needs PyTorch; Debian's python3-torch 1.13 made the checked-in files):
    /usr/bin/python3 tests/nn/golden/make_gpt_golden.py

The twin below is written from the GPT-2 architecture (nanoGPT's layout and parameter names),
not from weft's code: token + position embeddings, pre-LN blocks whose attention is written out
with a causal mask and a softmax, GELU with the tanh approximation, a final LayerNorm, and an
output projection tied to the token embedding. Everything runs in float64.

It writes, beside this script:
  gpt_weights.safetensors    the initial parameters under weft's (and GPT-2's) names, and the
                             model's configuration as metadata: what the test loads into nn::GPT
  gpt_reference.safetensors  the batches (tokens, targets: [STEPS, BATCH, T] i64) and PyTorch's
                             results: "logits" on batch 0 and "loss" [STEPS] (mean cross entropy,
                             each step's loss on its own batch, before that step's update) as
                             float64, "grad.<name>" for every parameter on batch 0, and
                             "step<k>.<name>" for every parameter after k AdamW steps; the
                             optimizer's hyperparameters as metadata

tests/nn/test_gpt_golden.cpp compares weft against these files without needing Python.
The safetensors files are written by hand (the `safetensors` package is not installed here) and
read back with tests/io/safetensors_reference.py before the script finishes.
"""
import json
import math
import os
import struct
import sys

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.join(HERE, "..", "..", "io"))
import safetensors_reference  # noqa: E402  (the independent reader, for the round trip)

# Small enough that the files stay under 100 KB, large enough for two heads and a position
# embedding row that the batches never reach (T < CONTEXT: its gradient must be exactly zero).
CONFIG = {"layers": 2, "heads": 2, "dim": 8, "context": 8, "vocab": 40}
BATCH, T, STEPS = 2, 7, 3
# eps is large on purpose: each block's key bias has an exact gradient of zero (adding one vector
# to every key shifts all of a query's scores alike, which softmax ignores), so in float32 it is
# rounding noise; Adam divides by sqrt(v) + eps, and a tiny eps would turn that noise into steps
# of +-lr that no two implementations share.
ADAMW = {"lr": 0.01, "beta1": 0.9, "beta2": 0.95, "eps": 1e-4, "weight_decay": 0.1}


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, T, C = x.shape
        head_dim = C // self.heads
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, head_dim).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)
        future = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)
        weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        y = (weights @ v).transpose(1, 2).reshape(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-5)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-5)
        self.mlp = MLP(dim)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, layers, heads, dim, context, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(context, dim)
        self.h = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim, eps=1e-5)

    def forward(self, tokens):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1]))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()  # the head is tied to the token embedding


def initialise(model):
    """Weights far larger than GPT-2's N(0, 0.02), so that no gradient is negligibly small, and
    LayerNorm scales away from one, so that a LayerNorm ignoring them would show."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln_" in name and name.endswith(".weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.2 * torch.randn_like(p))
            else:
                p.copy_(0.4 * torch.randn_like(p))


def batches():
    """STEPS batches of next-token pairs; each checked to repeat a token, so the embedding's
    backward has to add several rows into one."""
    sequences = torch.randint(CONFIG["vocab"], (STEPS, BATCH, T + 1))
    tokens, targets = sequences[..., :-1].contiguous(), sequences[..., 1:].contiguous()
    for batch in tokens:
        assert batch.unique().numel() < batch.numel(), "regenerate with another seed: no repeated token"
    return tokens, targets


def loss_of(model, tokens, targets):
    logits = model(tokens)
    return logits, nn.functional.cross_entropy(logits.view(-1, CONFIG["vocab"]), targets.view(-1))


def write_safetensors(path, tensors, metadata):
    """tensors: (name, tensor) pairs of 8-byte elements (so every offset stays aligned)."""
    dtypes = {torch.float64: "F64", torch.int64: "I64"}
    header, chunks, offset = {"__metadata__": metadata}, [], 0
    for name, t in tensors:
        values = t.detach().contiguous().numpy()
        data = values.astype(values.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dtypes[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
    read_back, read_metadata = safetensors_reference.read(path)
    assert read_metadata == metadata and [n for n, _ in read_back] == [n for n, _ in tensors]
    assert all(torch.equal(a, b.detach()) for (_, a), (_, b) in zip(read_back, tensors))


def main():
    torch.manual_seed(2024)
    torch.set_default_dtype(torch.float64)
    model = GPT(**CONFIG)
    initialise(model)
    tokens, targets = batches()
    initial = [(name, p.detach().clone()) for name, p in model.named_parameters()]

    logits, loss = loss_of(model, tokens[0], targets[0])
    loss.backward()
    grads = [("grad." + name, p.grad.clone()) for name, p in model.named_parameters()]

    optimizer = torch.optim.AdamW(model.parameters(), lr=ADAMW["lr"], betas=(ADAMW["beta1"], ADAMW["beta2"]),
                                  eps=ADAMW["eps"], weight_decay=ADAMW["weight_decay"])
    losses, trajectory = [], []
    for s in range(STEPS):
        if s > 0:
            optimizer.zero_grad()
            _, loss = loss_of(model, tokens[s], targets[s])
            loss.backward()
        losses.append(loss.item())
        optimizer.step()
        trajectory += [("step%d.%s" % (s + 1, name), p.detach().clone()) for name, p in model.named_parameters()]

    write_safetensors(os.path.join(HERE, "gpt_weights.safetensors"), initial,
                      {k: str(v) for k, v in CONFIG.items()})
    write_safetensors(os.path.join(HERE, "gpt_reference.safetensors"),
                      [("tokens", tokens), ("targets", targets), ("logits", logits), ("loss", torch.tensor(losses))]
                      + grads + trajectory,
                      dict({k: repr(v) for k, v in ADAMW.items()}, torch=torch.__version__))


if __name__ == "__main__":
    main()

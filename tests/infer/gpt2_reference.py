#!/usr/bin/python3
"""Writes a tiny GPT-2 in Hugging Face's layout and what PyTorch and GPT-2's encoder make of it.

    /usr/bin/python3 tests/infer/gpt2_reference.py OUT

tests/infer/test_huggingface_gpt2.cpp runs it (Debian's python3-torch and python3-regex) and
checks weft against what it writes:

  OUT/hf/config.json, model.safetensors, vocab.json, merges.txt
      a randomly initialised GPT-2 (2 layers, 2 heads, n_embd 64, n_positions 32) in float32,
      its tensors named as GPT2LMHeadModel.state_dict() names them ("transformer.h.0.attn.
      c_attn.weight", Conv1D weights [in, out]), with lm_head.weight and the attention's mask
      buffers as older checkpoints hold them; its byte-level BPE vocabulary of 300 tokens: the
      256 bytes, 43 merges learned below from a small text, and <|endoftext|>
  OUT/hf-bin/   the same model as save_pretrained(safe_serialization=False) writes it: the same
      files but pytorch_model.bin (torch.save of the state dict, lm_head.weight sharing
      wte.weight's storage) in place of model.safetensors
  OUT/reference.safetensors
      "tokens" (i64 [T]: ENCODED_TEXT as the encoder below encodes it) and "logits" (f64 [T, 300]:
      the model's logits for them, computed in float64 from the float32 weights)
  OUT/encodings.json
      [{"text": ..., "ids": [...]}, ...]: TEXTS and 20 random strings of the corpus's characters
      (runs that the merges overlap in) as the encoder below encodes them

The model is written here from GPT-2's definition (Hugging Face's modeling_gpt2.py: Conv1D
projections, pre-LN blocks, attention scaled by 1/sqrt(head dim) under a causal mask, GELU's tanh
form, layer norms with eps 1e-5, the head tied to wte), not from weft's code; the encoder is
OpenAI's encoder.py (bytes_to_unicode, the same pattern through the `regex` module, merges by
rank). The safetensors file is written by hand: the `safetensors` package is not installed here.
"""
import collections
import json
import math
import os
import random
import shutil
import struct
import sys

import regex
import torch
from torch import nn

LAYERS, HEADS, DIM, CONTEXT = 2, 2, 64, 32
MERGES = 43
PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
CORPUS = ("the cat sat on the mat; the rat ate the hat. that is the thing they're seeing: "
          "then there they were, and the others went there too. 1234 + 5678 = 6912\n\n") * 3
ENCODED_TEXT = "the cat sat there, then they went home.\n"
TEXTS = [
    "I'm sure they're here; we'll see, you've said it's what he'd do, can't you?",
    "Call 555-0123 in 2024, or 3.14159 at 10:30pm!",
    "Hello, world!!! (yes?) -- \"quoted\" & <tags> ...",
    "a  b   c    d     e",
    "line one\n\nline two\n  indented\n\t\ttabs\tend   ",
    "naïve café Ωμέγα Привет 日本語 ١٢٣",
    "emoji 🙂👍🏽 ok 🇫🇷",
    "   leading spaces and trailing   \n",
    "the cat sat there, then they went home.\n",
]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


BYTE_ENCODER = bytes_to_unicode()


def learn_merges(text, count):
    """Plain BPE training: the most frequent adjacent pair of the pre-tokenized words, merged."""
    words = {}
    for piece in PATTERN.findall(text):
        word = tuple(BYTE_ENCODER[b] for b in piece.encode("utf-8"))
        words[word] = words.get(word, 0) + 1
    merges = []
    for _ in range(count):
        pairs = {}
        for word, n in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] = pairs.get(pair, 0) + n
        best = max(sorted(pairs), key=lambda p: pairs[p])
        merges.append(best)
        merged = {}
        for word, n in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] = n
        words = merged
    return merges


def bpe(token, ranks):
    """encoder.py's Encoder.bpe."""
    word = tuple(token)
    while len(word) > 1:
        pairs = set(zip(word, word[1:]))
        bigram = min(pairs, key=lambda pair: ranks.get(pair, float("inf")))
        if bigram not in ranks:
            break
        first, second = bigram
        new_word, i = [], 0
        while i < len(word):
            try:
                j = word.index(first, i)
            except ValueError:
                new_word.extend(word[i:])
                break
            new_word.extend(word[i:j])
            i = j
            if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                new_word.append(first + second)
                i += 2
            else:
                new_word.append(word[i])
                i += 1
        word = tuple(new_word)
    return word


def encode(text, encoder, ranks):
    ids = []
    for piece in PATTERN.findall(text):
        token = "".join(BYTE_ENCODER[b] for b in piece.encode("utf-8"))
        ids.extend(encoder[t] for t in bpe(token, ranks))
    return ids


class Conv1D(nn.Module):
    """Hugging Face's Conv1D: a linear layer whose weight is stored [in, out]."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.empty(n_out))

    def forward(self, x):
        return x @ self.weight + self.bias


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = Conv1D(DIM, 3 * DIM)
        self.c_proj = Conv1D(DIM, DIM)

    def forward(self, x):
        T = x.shape[0]
        q, k, v = (t.view(T, HEADS, DIM // HEADS).transpose(0, 1) for t in self.c_attn(x).split(DIM, dim=1))
        scores = q @ k.transpose(-1, -2) / math.sqrt(DIM // HEADS)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        weights = torch.softmax(torch.where(causal, scores, torch.tensor(-1e30, dtype=scores.dtype)), dim=-1)
        return self.c_proj((weights @ v).transpose(0, 1).reshape(T, DIM))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(DIM, eps=1e-5)
        self.attn = Attention()
        self.ln_2 = nn.LayerNorm(DIM, eps=1e-5)
        self.mlp = nn.Module()
        self.mlp.c_fc = Conv1D(DIM, 4 * DIM)
        self.mlp.c_proj = Conv1D(4 * DIM, DIM)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        h = self.mlp.c_fc(self.ln_2(x))
        gelu = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h.pow(3))))  # gelu_new
        return x + self.mlp.c_proj(gelu)


class GPT2(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, DIM)
        self.wpe = nn.Embedding(CONTEXT, DIM)
        self.h = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(DIM, eps=1e-5)

    def forward(self, tokens):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[0]))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


def write_safetensors(path, tensors, metadata):
    dtypes = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64"}
    header, chunks, offset = {"__metadata__": metadata}, [], 0
    for name, t in tensors:
        data = t.detach().contiguous().numpy().tobytes()  # little-endian on the machines weft runs on
        header[name] = {"dtype": dtypes[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def main():
    out = sys.argv[1]
    hf = os.path.join(out, "hf")
    os.makedirs(hf, exist_ok=True)
    torch.manual_seed(1234)
    random.seed(1234)

    merges = learn_merges(CORPUS, MERGES)
    tokens = sorted(BYTE_ENCODER.values())  # GPT-2's order: by written form ("!" is 0), not by byte
    tokens += [a + b for a, b in merges] + ["<|endoftext|>"]
    encoder = {t: i for i, t in enumerate(tokens)}
    ranks = {pair: i for i, pair in enumerate(merges)}
    with open(os.path.join(hf, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(encoder, f, ensure_ascii=False)
    with open(os.path.join(hf, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))

    model = GPT2(len(tokens))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln_" in name and name.endswith(".weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    tensors = [("transformer." + name, p.detach().float()) for name, p in model.state_dict().items()]
    mask = torch.ones(CONTEXT, CONTEXT).tril().view(1, 1, CONTEXT, CONTEXT)
    for layer in range(LAYERS):
        tensors.append((f"transformer.h.{layer}.attn.bias", mask))
        tensors.append((f"transformer.h.{layer}.attn.masked_bias", torch.tensor(-1e4)))
    tensors.append(("lm_head.weight", model.wte.weight.detach().float()))
    write_safetensors(os.path.join(hf, "model.safetensors"), tensors, {"format": "pt"})
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
              "n_layer": LAYERS, "n_head": HEADS, "n_embd": DIM, "n_positions": CONTEXT, "n_ctx": CONTEXT,
              "vocab_size": len(tokens), "layer_norm_epsilon": 1e-05, "n_inner": None, "resid_pdrop": 0.1,
              "embd_pdrop": 0.1, "attn_pdrop": 0.1, "bos_token_id": len(tokens) - 1,
              "eos_token_id": len(tokens) - 1}
    with open(os.path.join(hf, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    hf_bin = os.path.join(out, "hf-bin")
    shutil.copytree(hf, hf_bin, ignore=shutil.ignore_patterns("model.safetensors"))
    state = collections.OrderedDict(tensors)
    state["lm_head.weight"] = state["transformer.wte.weight"]
    torch.save(state, os.path.join(hf_bin, "pytorch_model.bin"))

    ids = encode(ENCODED_TEXT, encoder, ranks)
    assert len(ids) <= CONTEXT
    model.double()  # the float32 weights, exactly, computing in float64
    with torch.no_grad():
        logits = model(torch.tensor(ids))
    write_safetensors(os.path.join(out, "reference.safetensors"),
                      [("tokens", torch.tensor(ids)), ("logits", logits)], {})
    alphabet = sorted(set(CORPUS)) + ["é", "  ", "'s"]
    texts = TEXTS + ["".join(random.choice(alphabet) for _ in range(300)) for _ in range(20)]
    with open(os.path.join(out, "encodings.json"), "w", encoding="utf-8") as f:
        json.dump([{"text": t, "ids": encode(t, encoder, ranks)} for t in texts], f, ensure_ascii=False)


if __name__ == "__main__":
    main()

"""weft.nn.GPT, written in Python over weft's ops: the independent PyTorch GPT-2 of
tests/nn/golden/ (make_gpt_golden.py) gives the same logits, loss and gradients from the same
weights, and its tensors are those of the GPT weft train builds, name for name."""
import json
import os
import struct
import subprocess

import numpy as np
import pytest

import weft
from weft import nn

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "nn", "golden")
BUILD = os.environ.get("WEFT_BUILD_DIR", "build")


def metadata(path):
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(length))["__metadata__"]


def golden_model(dtype):
    config = metadata(os.path.join(GOLDEN, "gpt_weights.safetensors"))
    model = nn.GPT(**{k: int(config[k]) for k in ("layers", "heads", "dim", "context", "vocab")}).to(dtype)
    model.load_state_dict(weft.load(os.path.join(GOLDEN, "gpt_weights.safetensors")))
    return model


def assert_close(actual, expected, tolerance, what):
    """The worst error relative to the tensor's largest |value|, as the C++ golden test judges it."""
    a, e = np.asarray(actual.numpy(), dtype=np.float64), np.asarray(expected.numpy(), dtype=np.float64)
    assert a.shape == e.shape, what
    scale = max(np.abs(e).max(), 1e-300)
    assert np.abs(a - e).max() / scale <= tolerance, f"{what}: {np.abs(a - e).max() / scale}"


# Observed: logits within 7e-16 (f64) and 5e-7 (f32), gradients within 4e-15 and 1.4e-6; a modelling
# slip (exact GELU, an untied head, no position embedding) is orders of magnitude above the bounds.
@pytest.mark.parametrize("dtype, tolerance", [(weft.f64, 1e-10), (weft.f32, 1e-5)])
def test_python_gpt_gives_pytorchs_logits_loss_and_gradients(dtype, tolerance):
    model = golden_model(dtype)
    reference = weft.load(os.path.join(GOLDEN, "gpt_reference.safetensors"))
    tokens, targets = reference["tokens"][0].contiguous(), reference["targets"][0].contiguous()
    logits = model(tokens)
    assert_close(logits, reference["logits"], tolerance, "logits")
    loss = weft.cross_entropy(logits.reshape(targets.numel(), model.vocab), targets.reshape(targets.numel()))
    assert_close(loss, reference["loss"][0], tolerance, "loss")
    loss.backward()
    for name, p in model.named_parameters():
        assert_close(p.grad, reference["grad." + name], 10 * tolerance, "grad." + name)


def test_the_head_is_the_token_embedding():
    model = nn.GPT(layers=1, heads=2, dim=8, context=4, vocab=16)
    names = [n for n, _ in model.named_parameters()]
    assert "wte.weight" in names and not any("head" in n for n in names)
    logits = model(weft.tensor([[1, 2, 3]], dtype=weft.i64))
    logits.sum().backward()
    # wte is read twice, by the lookup (rows 1-3 only) and by the head (every row).
    assert np.all(model.wte.weight.grad.numpy()[4:] != 0)


def test_a_checkpoint_of_weft_train_loads_name_for_name(tmp_path):
    out = tmp_path / "run"
    subprocess.run([os.path.join(BUILD, "weft"), "train", "--model", "gpt", "--data", "random", "--steps", "2",
                    "--layers", "2", "--heads", "2", "--dim", "16", "--context", "8", "--vocab", "32",
                    "--batch-size", "4", "--threads", "1", "--out", str(out)], check=True, capture_output=True)
    model = nn.GPT(layers=2, heads=2, dim=16, context=8, vocab=32)
    state = weft.load(str(out / "model.safetensors"))
    assert model.load_state_dict(state) == ([], [])  # strict: every name and shape
    np.testing.assert_array_equal(model.h[1].mlp.c_proj.weight.numpy(), state["h.1.mlp.c_proj.weight"].numpy())


def test_bad_shapes_and_sizes_are_refused_with_the_bound():
    with pytest.raises(ValueError, match="3 heads do not divide the width 8"):
        nn.GPT(heads=3, dim=8)
    with pytest.raises(ValueError, match="layers must be a positive integer, got 0"):
        nn.GPT(layers=0)
    model = nn.GPT(layers=1, heads=2, dim=8, context=4, vocab=16)
    with pytest.raises(ValueError, match=r"1 <= T <= 4 \(the context\), got \[1, 5\]"):
        model(weft.zeros(1, 5, dtype=weft.i64))
    with pytest.raises(IndexError):
        model(weft.full([1, 2], 16, dtype=weft.i64))


TINY = dict(layers=2, heads=2, dim=16, context=8, vocab=256)
TINY_FLAGS = ["--layers", "2", "--heads", "2", "--dim", "16", "--context", "8", "--vocab", "256"]
RUN = dict(data="random", steps=3, batch_size=4, threads=1, seed=0)


def weft_train(*args):
    result = subprocess.run([os.path.join(BUILD, "weft"), "train", "--model", "gpt", *args, "--json"], check=True,
                            capture_output=True, text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_fit_trains_a_python_gpt_to_the_bits_of_weft_train(tmp_path):
    start = tmp_path / "start"
    weft_train("--data", "random", "--steps", "1", "--batch-size", "4", "--threads", "1", *TINY_FLAGS, "--out", str(start))
    native = weft_train("--data", "random", "--steps", "3", "--batch-size", "4", "--threads", "1", "--seed", "0",
                        *TINY_FLAGS, "--init-from", str(start), "--out", str(tmp_path / "native"))
    model = nn.GPT(**TINY)
    result = weft.train.fit(model, init_from=str(start), out=str(tmp_path / "python"), log=False, **RUN)
    assert result["model"] == "gpt"
    assert result["train_loss"] == native["train_loss"] and result["val_loss"] == native["val_loss"]
    trained = weft.load(str(tmp_path / "native" / "model.safetensors"))
    for name, p in model.named_parameters():
        np.testing.assert_array_equal(p.numpy(), trained[name].numpy(), err_msg=name)
    # The Python GPT's checkpoint is weft's GPT's: the command line samples it.
    out = subprocess.run([os.path.join(BUILD, "weft"), "generate", "--checkpoint", str(tmp_path / "python"),
                          "--prompt", "ab", "--max-tokens", "4"], check=True, capture_output=True)
    assert b"4 tokens after a prompt of 2" in out.stdout + out.stderr  # the bytes it samples need not be UTF-8


class Bigram(nn.Module):
    """A language model that is not a GPT: each token's logits from itself alone."""

    def __init__(self, vocab):
        super().__init__()
        self.table = nn.Embedding(vocab, vocab)

    def forward(self, tokens):
        return self.table(tokens)


def test_fit_trains_any_language_model_given_its_window_and_vocabulary(tmp_path):
    weft.manual_seed(0)
    model = Bigram(256)
    with pytest.raises(ValueError, match=r"needs context= \(tokens per window\) and vocab="):
        weft.train.fit(model, task="language", **RUN)
    # On the fortunes' bytes, with the byte tokenizer.
    result = weft.train.fit(model, task="language", context=8, vocab=256, steps=300, batch_size=16, lr=0.05,
                            threads=1, log=False, out=str(tmp_path / "run"))
    assert result["model"] == "python:Bigram" and result["steps"] == 300
    # The previous byte tells more than the bytes' frequencies alone (4.8 bits a byte).
    assert result["val_bits_per_byte"] < result["unigram_bits_per_byte"] - 0.3
    with pytest.raises(ValueError, match="vocab given as options differ from the GPT's own"):
        weft.train.fit(nn.GPT(**TINY), vocab=512, **RUN)
    with pytest.raises(ValueError, match="task must be 'classify' or 'language', got 'translate'"):
        weft.train.fit(model, task="translate")

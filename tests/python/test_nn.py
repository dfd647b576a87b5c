"""weft.nn and weft.optim from Python: a model defined in Python registers what it is given,
computes what NumPy computes, saves and loads its state, and trains with weft's optimizers."""
import numpy as np
import pytest

import weft
from weft import nn


class TwoLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 3)
        self.register_buffer("calls", weft.zeros(1))
        self.scale = 2.0  # a plain attribute, not state

    def forward(self, x):
        return self.fc2(weft.relu(self.fc1(x))) * self.scale


def test_a_python_module_registers_what_is_assigned():
    m = TwoLayer()
    assert [n for n, _ in m.named_parameters()] == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert [n for n, _ in m.named_buffers()] == ["calls"]
    assert [n for n, _ in m.named_modules()] == ["", "fc1", "fc2"]
    assert m.fc1.weight.shape == (8, 4) and m.fc1.weight.requires_grad
    assert list(m.state_dict()) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "calls"]
    assert m.scale == 2.0
    assert sum(p.numel() for p in m.parameters()) == 4 * 8 + 8 + 8 * 3 + 3


def test_linear_matches_numpy_forward_and_backward():
    m = TwoLayer()
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    w1, b1, w2, b2 = (p.numpy() for p in m.parameters())
    h = np.maximum(x @ w1.T + b1, 0)
    want = 2 * (h @ w2.T + b2)
    out = m(weft.from_numpy(x))
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6)
    out.sum().backward()
    np.testing.assert_allclose(m.fc2.weight.grad.numpy(), 2 * np.ones((5, 3)).T @ h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m.fc2.bias.grad.numpy(), np.full(3, 10.0), rtol=1e-6)


def test_state_dict_round_trip_and_strict_loading():
    weft.manual_seed(1)
    a = TwoLayer()
    weft.manual_seed(2)
    b = TwoLayer()
    x = weft.randn(3, 4)
    assert not np.allclose(a(x).numpy(), b(x).numpy())
    b.load_state_dict(a.state_dict())
    np.testing.assert_array_equal(a(x).numpy(), b(x).numpy())
    with pytest.raises(KeyError, match=r"missing \['fc2.bias'\]"):
        b.load_state_dict({k: v for k, v in a.state_dict().items() if k != "fc2.bias"})
    bad = a.state_dict()
    bad["fc1.weight"] = weft.zeros(4, 8)
    with pytest.raises(ValueError, match=r"'fc1.weight' is \[4, 8\], the module's is \[8, 4\]"):
        b.load_state_dict(bad)


def test_hooks_see_and_may_replace():
    m = TwoLayer()
    seen = []
    handle = m.fc1.register_forward_hook(lambda module, args, out: seen.append(out.shape))
    m.register_forward_pre_hook(lambda module, args: (args[0] * 0,))
    out = m(weft.ones(2, 4))
    assert seen == [(2, 8)]
    np.testing.assert_allclose(out.numpy(), np.tile(2 * (np.maximum(m.fc1.bias.numpy(), 0) @ m.fc2.weight.numpy().T
                                                         + m.fc2.bias.numpy()), (2, 1)), rtol=1e-5, atol=1e-6)
    handle.remove()
    m(weft.ones(2, 4))
    assert len(seen) == 1


def conv_reference(x, w, b, stride, padding):
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, o, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = x[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, :, i, j] = np.tensordot(patch, w, axes=([1, 2, 3], [1, 2, 3])) + b
    return out


def test_conv_and_pooling_match_numpy():
    weft.manual_seed(3)
    conv = nn.Conv2d(3, 5, 3, stride=2, padding=1)
    x = np.random.default_rng(3).standard_normal((2, 3, 9, 9)).astype(np.float32)
    out = conv(weft.from_numpy(x)).numpy()
    np.testing.assert_allclose(out, conv_reference(x, conv.weight.numpy(), conv.bias.numpy(), 2, 1), rtol=1e-4, atol=1e-5)
    pooled = nn.MaxPool2d(2)(weft.from_numpy(out)).numpy()
    want = out[:, :, :4, :4].reshape(2, 5, 2, 2, 2, 2).max(axis=(3, 5))
    np.testing.assert_array_equal(pooled, want)


def test_dropout_follows_train_and_eval():
    m = nn.Sequential(nn.Dropout(0.5))
    x = weft.ones(1000)
    kept = (m(x).numpy() != 0).mean()
    assert 0.4 < kept < 0.6
    assert set(np.unique(m(x).numpy())) <= {0.0, 2.0}
    m.eval()
    np.testing.assert_array_equal(m(x).numpy(), np.ones(1000))


def test_sgd_with_momentum_and_adamw_follow_their_formulas():
    w0 = np.array([1.0, -2.0, 3.0])
    g = np.array([0.5, 0.25, -1.0])
    for make in (lambda p: weft.optim.SGD(p, lr=0.1, momentum=0.9),
                 lambda p: weft.optim.AdamW(p, lr=0.01, betas=(0.9, 0.99), weight_decay=0.1)):
        p = weft.tensor(w0, requires_grad=True)
        opt = make([p])
        for _ in range(2):
            p.grad = weft.tensor(g)
            opt.step()
        if isinstance(opt, weft.optim.SGD):
            buf = g  # first step: the buffer is the gradient
            w = w0 - 0.1 * buf
            buf = 0.9 * buf + g
            w = w - 0.1 * buf
        else:
            w, m, v = w0.copy(), np.zeros(3), np.zeros(3)
            for t in (1, 2):
                w = w * (1 - 0.01 * 0.1)
                m = 0.9 * m + 0.1 * g
                v = 0.99 * v + 0.01 * g * g
                w = w - 0.01 * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.99 ** t)) + 1e-8)
        np.testing.assert_allclose(p.numpy(), w, rtol=1e-12, atol=1e-14)


def test_a_python_model_learns_with_wefts_optimizer():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((512, 2)).astype(np.float32)
    y = ((x[:, 0] * x[:, 1]) > 0).astype(np.int64)  # XOR of the signs: not linearly separable
    weft.manual_seed(4)
    model = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 2))
    opt = weft.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.0)
    xs, ys = weft.from_numpy(x), weft.from_numpy(y)
    for _ in range(300):
        loss = weft.cross_entropy(model(xs), ys)
        opt.zero_grad()
        loss.backward()
        weft.optim.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
    with weft.no_grad():
        accuracy = (model(xs).argmax(1).numpy() == y).mean()
    assert accuracy > 0.95, accuracy
    assert loss.item() < 0.2

"""import weft: tensors shared with NumPy, operators, indexing, autograd and errors, each checked
against NumPy's own answer."""
import gc

import numpy as np
import pytest

import weft


def test_from_numpy_shares_memory_both_ways():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = weft.from_numpy(a)
    a[0, 0] = 42
    assert t[0, 0].item() == 42
    view = np.asarray(t)
    assert np.shares_memory(view, a)
    view[1, 2] = -1
    assert a[1, 2] == -1
    assert np.shares_memory(t.numpy(), a)


def test_strided_arrays_are_viewed_and_reversed_ones_copied():
    a = np.arange(24, dtype=np.float64).reshape(4, 6)
    for view in (a[:, ::2], a.T, a[1:3, 2:]):
        t = weft.from_numpy(view)
        assert t.shape == view.shape
        np.testing.assert_array_equal(np.asarray(t), view)
        assert np.shares_memory(np.asarray(t), a)
    reversed_rows = a[::-1]
    t = weft.from_numpy(reversed_rows)
    np.testing.assert_array_equal(t.numpy(), reversed_rows)
    assert not np.shares_memory(t.numpy(), a)


@pytest.mark.parametrize("np_dtype,dtype", [(np.float64, weft.f64), (np.float32, weft.f32), (np.float16, weft.f16),
                                            (np.int64, weft.i64), (np.int32, weft.i32), (np.int8, weft.i8),
                                            (np.uint8, weft.u8), (np.bool_, weft.bool_)])
def test_every_numpy_dtype_round_trips(np_dtype, dtype):
    a = (np.arange(12) % 5).astype(np_dtype).reshape(3, 4)
    t = weft.from_numpy(a)
    assert t.dtype == dtype
    back = t.numpy()
    assert back.dtype == a.dtype
    np.testing.assert_array_equal(back, a)
    np.testing.assert_array_equal(weft.tensor(a.tolist(), dtype=dtype).numpy(), a)


def test_bf16_has_no_numpy_type_and_says_how_to_convert():
    t = weft.tensor([1.5, -2.25, 3.0], dtype=weft.bf16)
    assert t.dtype == weft.bf16
    with pytest.raises(TypeError, match=r"NumPy has no bf16 type: convert first, t.to\(weft.f32\)"):
        t.numpy()
    np.testing.assert_array_equal(t.to(weft.f32).numpy(), [1.5, -2.25, 3.0])
    assert t.tolist() == [1.5, -2.25, 3.0]  # as Python floats
    assert weft.tensor([1 / 3], dtype=weft.bf16).to(weft.f64).item() == 0.333984375  # bf16's nearest


def test_memory_outlives_the_object_it_came_from():
    t = weft.from_numpy(np.full(1000, 7.0))
    gc.collect()
    assert t.sum().item() == 7000
    arr = np.asarray(weft.ones(4, 4))
    gc.collect()
    np.testing.assert_array_equal(arr, np.ones((4, 4), np.float32))


def test_operators_match_numpy():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.uniform(0.5, 2, (3, 4)).astype(np.float32)
    x, y = weft.from_numpy(a), weft.from_numpy(b)
    cases = [(x + y, a + b), (x - y, a - b), (x * y, a * b), (x / y, a / b), (x + 2, a + 2), (2 + x, 2 + a),
             (x - 2, a - 2), (2 - x, 2 - a), (x * 3, a * 3), (3 * x, 3 * a), (x / 4, a / 4), (4 / y, 4 / b),
             (y ** 2, b ** 2), (-x, -a), (x @ y.T, a @ b.T), (x + y[0], a + b[0]),
             (x.sum(), a.sum()), (x.mean(dim=[1]), a.mean(axis=1)), (x.exp(), np.exp(a)), (y.log(), np.log(b)),
             (weft.relu(x), np.maximum(a, 0)), (weft.softmax(x, 1), np.exp(a) / np.exp(a).sum(1, keepdims=True))]
    for got, want in cases:
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)


def test_indexing_gives_numpys_views():
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    t = weft.from_numpy(a)
    for key in (1, -1, (0, 2), (slice(None), 1), (slice(0, 2), slice(None, None, 2)), (Ellipsis, 0), (None, 1),
                (1, Ellipsis, slice(1, 4)), slice(-2, None), (slice(None), slice(None), slice(1, 100, 3))):
        view = t[key]
        np.testing.assert_array_equal(np.asarray(view), a[key])
        assert np.shares_memory(np.asarray(view), a), key
    with pytest.raises(IndexError, match="out of range for dim 0 of size 3"):
        t[3]
    with pytest.raises(IndexError, match="too many indices"):
        t[0, 0, 0, 0]


def test_autograd_matches_the_formulas():
    rng = np.random.default_rng(1)
    xa, wa = rng.standard_normal((5, 3)), rng.standard_normal((3, 2))
    x = weft.tensor(xa, requires_grad=True)
    w = weft.tensor(wa, requires_grad=True)
    assert x.dtype == weft.f64 and x.requires_grad and x.is_leaf
    h = x @ w
    loss = (h.relu() * h.relu()).sum()
    loss.backward()
    ha = xa @ wa
    dh = 2 * np.maximum(ha, 0)
    np.testing.assert_allclose(x.grad.numpy(), dh @ wa.T, rtol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), xa.T @ dh, rtol=1e-12)
    assert h.grad is None and not h.is_leaf


def test_cross_entropy_and_its_gradient():
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((4, 6))
    target = np.array([0, 5, 2, 2])
    x = weft.tensor(logits, requires_grad=True)
    loss = weft.cross_entropy(x, weft.tensor(target))
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    assert loss.item() == pytest.approx(-np.log(p[np.arange(4), target]).mean(), rel=1e-12)
    loss.backward()
    onehot = np.eye(6)[target]
    np.testing.assert_allclose(x.grad.numpy(), (p - onehot) / 4, rtol=1e-10, atol=1e-15)


def test_no_grad_records_nothing():
    x = weft.tensor([1.0, 2.0], requires_grad=True)
    with weft.no_grad():
        y = x * 2
    assert not y.requires_grad
    assert weft.is_grad_enabled()

    @weft.no_grad()
    def double(t):
        return t * 2

    assert not double(x).requires_grad
    assert (x * 2).requires_grad


def test_errors_are_pythons_with_wefts_messages():
    with pytest.raises(ValueError, match=r"\[2, 3\].*\[4\]"):
        weft.ones(2, 3) + weft.ones(4)
    assert (weft.ones(2) + weft.ones(2, dtype=weft.f64)).dtype == weft.f64  # promoted, as PyTorch does
    with pytest.raises(TypeError, match="exp: expected a floating-point tensor, got i64"):
        weft.exp(weft.arange(3))
    with pytest.raises(TypeError, match=r"matmul: dtypes differ: a is f32 \[1, 2\], b is i64 \[2, 1\]"):
        weft.ones(2) @ weft.arange(2)
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh', got 'fast'"):
        weft.gelu(weft.ones(2), approximate="fast")
    with pytest.raises(ValueError, match="cannot view"):
        weft.ones(2, 3).T.view(6)
    with pytest.raises(TypeError, match="weft has no dtype for NumPy's complex128"):
        weft.from_numpy(np.zeros(2, dtype=np.complex128))
    assert issubclass(weft.Error, RuntimeError)


def test_factories_and_repr():
    assert weft.zeros(2, 3).shape == (2, 3)
    assert weft.zeros((2, 3)).shape == (2, 3)
    assert weft.full([2], 1.5).tolist() == [1.5, 1.5]
    assert weft.arange(4).tolist() == [0, 1, 2, 3]
    assert weft.arange(4).dtype == weft.i64
    weft.manual_seed(3)
    first = weft.randn(5).tolist()
    weft.manual_seed(3)
    assert weft.randn(5).tolist() == first
    # Python's floats are f32 and its ints i64, as in PyTorch; an array keeps its own dtype.
    assert repr(weft.tensor([1.0, 2.0])) == "tensor([1.0000, 2.0000])"
    assert weft.tensor([1, 2]).dtype == weft.i64
    assert weft.tensor(np.ones(2)).dtype == weft.f64
    assert repr(weft.f32) == "weft.f32" and str(weft.bf16) == "bf16" and weft.bf16.itemsize == 2
    assert weft.ones(2, 3).device == "cpu"

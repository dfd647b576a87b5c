"""weft: a deep-learning engine whose every byte and FLOP you can see, from Python.

Tensors share memory with NumPy both ways (``weft.from_numpy``, ``np.asarray(t)``), record the ops
that need a gradient, and backpropagate with ``t.backward()``, as PyTorch's do.
"""
from ._weft import (Error, Tensor, arange, cat, cross_entropy, empty, exp, from_numpy, full, gelu,
                    is_grad_enabled, linear, log, log_softmax, manual_seed, matmul, mean, ones, rand, randn,
                    relu, set_grad_enabled, sigmoid, softmax, stack, sum, tanh, tensor, zeros)
from ._weft import (adaptive_avg_pool2d, avg_pool2d, conv2d, dropout, dtype, embedding, layer_norm, max_pool2d,
                    mse_loss, load, amp, from_dlpack, scaled_dot_product_attention)
from . import _weft, nn, optim, train

f64, f32, f16, bf16 = dtype.f64, dtype.f32, dtype.f16, dtype.bf16
i64, i32, i8, u8 = dtype.i64, dtype.i32, dtype.i8, dtype.u8
bool_ = dtype.bool
float64, float32, float16, bfloat16, int64, int32, int8, uint8 = f64, f32, f16, bf16, i64, i32, i8, u8


class no_grad:
    """Ops inside record nothing for autograd, as ``torch.no_grad``; also a decorator."""

    def __enter__(self):
        self._previous = is_grad_enabled()
        set_grad_enabled(False)

    def __exit__(self, *exc):
        set_grad_enabled(self._previous)
        return False

    def __call__(self, function):
        def wrapper(*args, **kwargs):
            with no_grad():
                return function(*args, **kwargs)
        wrapper.__name__, wrapper.__doc__ = function.__name__, function.__doc__
        return wrapper


def save(tensors, path):
    """Writes ``tensors`` (a state dict: name -> tensor) to a .safetensors file, atomically;
    ``weft.load(path)`` reads it back, and so do PyTorch's and Hugging Face's readers."""
    _weft.save(list(tensors.items()), path)

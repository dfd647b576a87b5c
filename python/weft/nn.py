"""weft.nn: models written in Python over weft's ops, as torch.nn's are.

A Module registers what is assigned to it: a leaf tensor that requires a gradient is a parameter,
a Module is a submodule, and ``register_buffer`` names a tensor that is state but not learned
(running statistics). Every layer's arithmetic is one of weft's ops, the kernels the ``weft``
command runs; the layers here only hold tensors and say which op to call, and initialise them as
PyTorch's do.
"""
import math
from collections import OrderedDict

from . import _weft


def Parameter(tensor):
    """``tensor``'s values as a leaf that requires a gradient: what a Module registers."""
    return tensor.detach().clone().requires_grad_(True)


class RemovableHandle:
    def __init__(self, hooks, key):
        self._hooks, self._key = hooks, key

    def remove(self):
        self._hooks.pop(self._key, None)


class Module:
    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_forward_hooks", OrderedDict())
        object.__setattr__(self, "_forward_pre_hooks", OrderedDict())
        object.__setattr__(self, "_next_hook", 0)
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError("call Module.__init__() before assigning to a Module: super().__init__()")
        for table in (self._parameters, self._buffers, self._modules):
            table.pop(name, None)
        if isinstance(value, Module):
            self._modules[name] = value
        elif isinstance(value, _weft.Tensor) and value.requires_grad and value.is_leaf:
            self._parameters[name] = value
        else:
            object.__setattr__(self, name, value)
            return
        self.__dict__.pop(name, None)

    def __getattr__(self, name):
        for table in ("_parameters", "_buffers", "_modules"):
            entries = self.__dict__.get(table, {})
            if name in entries:
                return entries[name]
        raise AttributeError(f"'{type(self).__name__}' has no attribute '{name}'")

    def __delattr__(self, name):
        for table in (self._parameters, self._buffers, self._modules):
            if name in table:
                del table[name]
                return
        object.__delattr__(self, name)

    def register_buffer(self, name, tensor):
        self.__dict__.pop(name, None)
        self._buffers[name] = tensor

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args, **kwargs):
        for hook in list(self._forward_pre_hooks.values()):
            changed = hook(self, args)
            if changed is not None:
                args = changed if isinstance(changed, tuple) else (changed,)
        output = self.forward(*args, **kwargs)
        for hook in list(self._forward_hooks.values()):
            changed = hook(self, args, output)
            if changed is not None:
                output = changed
        return output

    def _add_hook(self, hooks, hook):
        key = self._next_hook
        object.__setattr__(self, "_next_hook", key + 1)
        hooks[key] = hook
        return RemovableHandle(hooks, key)

    def register_forward_hook(self, hook):
        """hook(module, args, output) after forward; what it returns (if not None) replaces the output."""
        return self._add_hook(self._forward_hooks, hook)

    def register_forward_pre_hook(self, hook):
        """hook(module, args) before forward; what it returns (if not None) replaces the arguments."""
        return self._add_hook(self._forward_pre_hooks, hook)

    def named_modules(self, prefix=""):
        yield prefix, self
        for name, module in self._modules.items():
            yield from module.named_modules(f"{prefix}.{name}" if prefix else name)

    def modules(self):
        return (m for _, m in self.named_modules())

    def children(self):
        return iter(self._modules.values())

    def _named(self, table, recurse=True):
        for prefix, module in self.named_modules() if recurse else [("", self)]:
            for name, tensor in getattr(module, table).items():
                yield (f"{prefix}.{name}" if prefix else name), tensor

    def named_parameters(self, recurse=True):
        return self._named("_parameters", recurse)

    def parameters(self, recurse=True):
        return [p for _, p in self.named_parameters(recurse)]

    def named_buffers(self, recurse=True):
        return self._named("_buffers", recurse)

    def buffers(self, recurse=True):
        return [b for _, b in self.named_buffers(recurse)]

    def train(self, mode=True):
        for module in self.modules():
            object.__setattr__(module, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def to(self, dtype):
        """Every parameter and floating buffer as ``dtype``, in place of the old ones (new leaves, so an
        optimizer made before must be made again), as ``torch.nn.Module.to``."""
        for module in self.modules():
            for name, p in list(module._parameters.items()):
                if p is not None:
                    module._parameters[name] = Parameter(p.to(dtype))
            for name, b in list(module._buffers.items()):
                if b is not None and b.dtype in _FLOATING:
                    module._buffers[name] = b.to(dtype)
        return self

    def zero_grad(self):
        for p in self.parameters():
            p.grad = None

    def state_dict(self):
        """Every parameter and buffer by its dotted name, detached (they share the module's memory)."""
        return OrderedDict(list((n, t.detach()) for n, t in self.named_parameters()) +
                           list((n, t.detach()) for n, t in self.named_buffers()))

    def load_state_dict(self, state_dict, strict=True):
        """Copies each tensor's values in place; with strict, the names must be the module's exactly."""
        own = OrderedDict(list(self.named_parameters()) + list(self.named_buffers()))
        missing = [n for n in own if n not in state_dict]
        unexpected = [n for n in state_dict if n not in own]
        if strict and (missing or unexpected):
            raise KeyError(f"load_state_dict: missing {missing}, unexpected {unexpected}")
        with _no_grad():
            for name, tensor in own.items():
                if name not in state_dict:
                    continue
                value = state_dict[name]
                if tuple(value.shape) != tuple(tensor.shape):
                    raise ValueError(f"load_state_dict: '{name}' is {list(value.shape)}, the module's is "
                                     f"{list(tensor.shape)}")
                tensor.copy_(value)
        return missing, unexpected

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [f"  ({name}): " + repr(m).replace("\n", "\n  ") for name, m in self._modules.items()]
        body = self.extra_repr()
        if not lines:
            return f"{type(self).__name__}({body})"
        return f"{type(self).__name__}(" + (body + "\n" if body else "\n") + "\n".join(lines) + "\n)"


class _no_grad:
    def __enter__(self):
        self._previous = _weft.is_grad_enabled()
        _weft.set_grad_enabled(False)

    def __exit__(self, *exc):
        _weft.set_grad_enabled(self._previous)
        return False


_FLOATING = (_weft.dtype.f64, _weft.dtype.f32, _weft.dtype.f16, _weft.dtype.bf16)


def _uniform(shape, bound):
    return _weft.rand(*shape) * (2 * bound) - bound


class Linear(Module):
    """y = x W^T + b, W [out, in]; W and b uniform in +-1/sqrt(in), as PyTorch initialises them."""

    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1 / math.sqrt(in_features)
        self.weight = Parameter(_uniform((out_features, in_features), bound))
        self.bias = Parameter(_uniform((out_features,), bound)) if bias else None

    def forward(self, x):
        return _weft.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Conv2d(Module):
    """2-d convolution, weight [out, in / groups, kH, kW]; uniform in +-1/sqrt(fan_in), as PyTorch's."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True):
        super().__init__()
        kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.shape = (in_channels, out_channels, (kh, kw))
        bound = 1 / math.sqrt(in_channels // groups * kh * kw)
        self.weight = Parameter(_uniform((out_channels, in_channels // groups, kh, kw), bound))
        self.bias = Parameter(_uniform((out_channels,), bound)) if bias else None

    def forward(self, x):
        return _weft.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self):
        i, o, k = self.shape
        return f"{i}, {o}, kernel_size={k}, stride={self.stride}, padding={self.padding}"


class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x):
        return _weft.max_pool2d(x, self.kernel_size, self.stride, self.padding)


class AvgPool2d(MaxPool2d):
    def forward(self, x):
        return _weft.avg_pool2d(x, self.kernel_size, self.stride, self.padding)


class AdaptiveAvgPool2d(Module):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, x):
        return _weft.adaptive_avg_pool2d(x, self.output_size)


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps=1e-5):
        super().__init__()
        self.normalized_shape = [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)
        self.eps = eps
        self.weight = Parameter(_weft.ones(self.normalized_shape))
        self.bias = Parameter(_weft.zeros(self.normalized_shape))

    def forward(self, x):
        return _weft.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class Embedding(Module):
    """A lookup table [num, dim], N(0, 1) as PyTorch initialises it; input: i64 indices."""

    def __init__(self, num_embeddings, embedding_dim):
        super().__init__()
        self.weight = Parameter(_weft.randn(num_embeddings, embedding_dim))

    def forward(self, indices):
        return _weft.embedding(indices, self.weight)


class Dropout(Module):
    def __init__(self, p=0.5):
        super().__init__()
        self.p = p

    def forward(self, x):
        return _weft.dropout(x, self.p, self.training)


class Flatten(Module):
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)


class _Activation(Module):
    function = None

    def forward(self, x):
        return type(self).function(x)


class ReLU(_Activation):
    function = staticmethod(_weft.relu)


class Sigmoid(_Activation):
    function = staticmethod(_weft.sigmoid)


class Tanh(_Activation):
    function = staticmethod(_weft.tanh)


class GELU(Module):
    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return _weft.gelu(x, self.approximate)


class Sequential(Module):
    """Modules called in turn, named "0", "1", ... as PyTorch names them."""

    def __init__(self, *modules):
        super().__init__()
        for i, module in enumerate(modules):
            self._modules[str(i)] = module

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)

    def forward(self, x):
        for module in self._modules.values():
            x = module(x)
        return x


# The GPT: GPT-2 (Radford et al. 2019) as ``weft train --model gpt`` builds it in C++, with the same
# parameter names, shapes and initialisation, so a checkpoint of either loads into the other
# (``model.load_state_dict(weft.load("run/model.safetensors"))``, a GPT-2 that ``weft import gpt2``
# wrote included). Written here in Python over weft's ops, its blocks can be changed as any Module.


def _normal(shape, std):
    return Parameter(_weft.randn(*shape) * std)


def _gpt_linear(in_features, out_features, std=0.02, bias=True):
    """A Linear initialised as GPT-2's: weight ~ N(0, std), bias zero."""
    layer = Linear(in_features, out_features, bias)
    layer.weight = _normal((out_features, in_features), std)
    if bias:
        layer.bias = Parameter(_weft.zeros(out_features))
    return layer


class MultiheadAttention(Module):
    """Causal self-attention, x [B, T, dim] -> [B, T, dim]: one projection c_attn to q, k and v side
    by side, weft's fused attention over ``num_heads`` heads, the output projection c_proj, then
    dropout (training only). ``proj_std``: c_proj's initial spread (GPT-2 scales it by depth)."""

    def __init__(self, dim, num_heads, dropout=0.0, bias=True, proj_std=0.02):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"MultiheadAttention: {num_heads} heads do not divide the width {dim}")
        self.dim, self.num_heads = dim, num_heads
        self.c_attn = _gpt_linear(dim, 3 * dim, bias=bias)
        self.c_proj = _gpt_linear(dim, dim, std=proj_std, bias=bias)
        self.resid_dropout = Dropout(dropout)

    def forward(self, x):
        if x.ndim != 3 or x.shape[2] != self.dim:
            raise ValueError(f"MultiheadAttention({self.dim}): expected x [B, T, {self.dim}], got {list(x.shape)}")
        B, T, _ = x.shape
        q, k, v = (t.view(B, T, self.num_heads, self.dim // self.num_heads).transpose(1, 2)
                   for t in self.c_attn(x).split(self.dim, 2))
        y = _weft.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(B, T, self.dim)))

    def extra_repr(self):
        return f"dim={self.dim}, num_heads={self.num_heads}"


class FeedForward(Module):
    """Linear(dim, hidden) -> GELU (tanh) -> Linear(hidden, dim) -> Dropout."""

    def __init__(self, dim, hidden, dropout=0.0, bias=True, proj_std=0.02):
        super().__init__()
        self.c_fc = _gpt_linear(dim, hidden, bias=bias)
        self.gelu = GELU("tanh")
        self.c_proj = _gpt_linear(hidden, dim, std=proj_std, bias=bias)
        self.dropout = Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class TransformerBlock(Module):
    """Pre-LN: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))."""

    def __init__(self, dim, num_heads, mlp_ratio=4, dropout=0.0, bias=True, proj_std=0.02):
        super().__init__()
        self.ln_1 = LayerNorm(dim)
        self.attn = MultiheadAttention(dim, num_heads, dropout, bias, proj_std)
        self.ln_2 = LayerNorm(dim)
        self.mlp = FeedForward(dim, mlp_ratio * dim, dropout, bias, proj_std)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(Module):
    """tokens i64 [B, T] (T <= context) -> logits [B, T, vocab]:
    dropout(wte(tokens) + wpe(0..T-1)) -> blocks h.0 .. h.{layers-1} -> ln_f -> x wte.weight^T.

    The output projection is the token embedding's weight (tied, one parameter). The defaults are
    ``weft train --model gpt``'s. Weights start as GPT-2's: N(0, 0.02), biases zero, and the two
    projections into the residual stream N(0, 0.02 / sqrt(2 layers)), so its variance does not grow
    with depth."""

    def __init__(self, layers=4, heads=4, dim=128, context=128, vocab=256, dropout=0.0):
        super().__init__()
        for name, value in (("layers", layers), ("heads", heads), ("dim", dim), ("context", context), ("vocab", vocab)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"GPT: {name} must be a positive integer, got {value!r}")
        if dim % heads:
            raise ValueError(f"GPT: {heads} heads do not divide the width {dim}")
        self.layers, self.heads, self.dim, self.context, self.vocab = layers, heads, dim, context, vocab
        self.wte = Embedding(vocab, dim)
        self.wpe = Embedding(context, dim)
        for table in (self.wte, self.wpe):
            table.weight = _normal(table.weight.shape, 0.02)
        self.drop = Dropout(dropout)
        proj_std = 0.02 / math.sqrt(2 * layers)
        self.h = Sequential(*(TransformerBlock(dim, heads, dropout=dropout, proj_std=proj_std) for _ in range(layers)))
        self.ln_f = LayerNorm(dim)

    def forward(self, tokens):
        if tokens.ndim != 2 or not 1 <= tokens.shape[1] <= self.context:
            raise ValueError(f"GPT: expected tokens [B, T] with 1 <= T <= {self.context} (the context), "
                             f"got {list(tokens.shape)}")
        x = self.drop(self.wte(tokens) + self.wpe(_weft.arange(tokens.shape[1])))
        return _weft.linear(self.ln_f(self.h(x)), self.wte.weight)

    def extra_repr(self):
        return f"layers={self.layers}, heads={self.heads}, dim={self.dim}, context={self.context}, vocab={self.vocab}"

"""DLPack: weft tensors and PyTorch's or NumPy's share memory both ways without a copy, with
every floating type (bf16 included, which NumPy's buffer protocol lacks), strides kept."""
import numpy as np
import pytest

import weft

torch = pytest.importorskip("torch", reason="Debian's python3-torch is the other side of the exchange")


def test_torch_reads_a_weft_tensor_in_place():
    t = weft.arange(6, weft.f32).reshape(2, 3)
    x = torch.from_dlpack(t)
    assert x.dtype == torch.float32 and tuple(x.shape) == (2, 3)
    x[0, 0] = 42.0
    assert t.tolist()[0][0] == 42.0  # one buffer
    del t
    assert x.sum().item() == 42.0 + 1 + 2 + 3 + 4 + 5  # the capsule kept weft's storage alive


def test_weft_reads_a_torch_tensor_in_place_strides_kept():
    x = torch.arange(12, dtype=torch.float64).reshape(3, 4).t()
    t = weft.from_dlpack(x)
    assert t.dtype == weft.f64 and t.shape == (4, 3) and t.stride() == (1, 4)
    x[1, 2] = -1.0
    assert t.tolist() == x.tolist()
    del x
    assert t.sum().item() == sum(range(12)) - 9 - 1  # torch's storage lives on with t


@pytest.mark.parametrize("dtype, torch_dtype", [
    (weft.bf16, torch.bfloat16), (weft.f16, torch.float16), (weft.i64, torch.int64), (weft.i32, torch.int32),
    (weft.i8, torch.int8), (weft.u8, torch.uint8)])
def test_every_type_round_trips_through_torch(dtype, torch_dtype):
    t = (weft.arange(10, weft.f32) - 3.0).to(dtype) if dtype not in (weft.u8,) else weft.arange(10, weft.u8)
    x = torch.from_dlpack(t)
    assert x.dtype == torch_dtype
    assert x.tolist() == t.tolist()
    back = weft.from_dlpack(x * 2 if dtype in (weft.bf16, weft.f16) else x)
    assert back.dtype == dtype
    if dtype in (weft.bf16, weft.f16):
        assert back.tolist() == [2 * v for v in t.tolist()]


def test_numpy_and_weft_exchange_through_dlpack():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    t = weft.from_dlpack(a)
    a[1, 2] = 99
    assert t.tolist() == [[0, 1, 2], [3, 4, 99]]
    b = np.from_dlpack(weft.ones(2, 2))
    assert b.dtype == np.float32 and b.tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_what_dlpack_cannot_carry_is_refused():
    with pytest.raises(TypeError, match="bool has no type every DLPack reader takes"):
        torch.from_dlpack(weft.tensor([True, False]))
    with pytest.raises(TypeError, match="has no __dlpack__"):
        weft.from_dlpack([1, 2, 3])
    with pytest.raises(TypeError, match="no weft dtype for type code 5"):
        weft.from_dlpack(torch.zeros(2, dtype=torch.complex64))

#!/usr/bin/python3
"""An independent safetensors reader, to show that files weft writes load elsewhere.

Written from the format description (https://github.com/huggingface/safetensors, README "Format")
and the checks of the Rust reference reader (safetensors/src/tensor.rs: read_metadata and
Metadata::validate), using only json, struct and torch, because the `safetensors` package is not
installed here. It shares no code with weft.

Usage: safetensors_reference.py FILE
Prints one line per tensor in data order, "name dtype shape sum", then the metadata, and exits 0;
on a malformed file prints the reason to stderr and exits 1.
"""
import json
import struct
import sys

import torch

MAX_HEADER_SIZE = 100_000_000
DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}


class FormatError(Exception):
    pass


def no_duplicate_keys(pairs):
    result = {}
    for key, value in pairs:
        if key in result:
            raise FormatError(f"duplicate key {key!r}")
        result[key] = value
    return result


def is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read(path):
    with open(path, "rb") as f:
        buffer = f.read()
    if len(buffer) < 8:
        raise FormatError("HeaderTooSmall")
    (n,) = struct.unpack("<Q", buffer[:8])
    if n > MAX_HEADER_SIZE:
        raise FormatError("HeaderTooLarge")
    if 8 + n > len(buffer):
        raise FormatError("InvalidHeaderLength")
    text = buffer[8:8 + n].decode("utf-8")
    if not text.startswith("{"):
        raise FormatError("InvalidHeaderStart")
    header = json.loads(text, object_pairs_hook=no_duplicate_keys)
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise FormatError("__metadata__ must map strings to strings")

    entries = []
    for name, info in header.items():
        if not isinstance(info, dict):
            raise FormatError(f"{name}: not an object")
        if info.get("dtype") not in DTYPES:
            raise FormatError(f"{name}: unsupported dtype {info.get('dtype')!r}")
        shape, offsets = info.get("shape"), info.get("data_offsets")
        if not isinstance(shape, list) or not all(is_count(s) for s in shape):
            raise FormatError(f"{name}: bad shape {shape!r}")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(is_count(o) for o in offsets):
            raise FormatError(f"{name}: bad data_offsets {offsets!r}")
        entries.append((tuple(offsets), name, DTYPES[info["dtype"]], shape))
    entries.sort(key=lambda e: e[0])

    data = buffer[8 + n:]
    start = 0
    tensors = []
    for (begin, end), name, dtype, shape in entries:
        if begin != start or end < begin:
            raise FormatError(f"InvalidOffset({name})")
        start = end
        numel = 1
        for s in shape:
            numel *= s
        element_size = torch.empty((), dtype=dtype).element_size()
        if end - begin != numel * element_size:
            raise FormatError(f"TensorInvalidInfo({name})")
        if numel == 0:
            tensor = torch.empty(shape, dtype=dtype)
        else:
            tensor = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype).reshape(shape)
        tensors.append((name, tensor))
    if start != len(data):
        raise FormatError("MetadataIncompleteBuffer")
    return tensors, metadata


def main():
    try:
        tensors, metadata = read(sys.argv[1])
    except (FormatError, UnicodeDecodeError, json.JSONDecodeError) as error:
        print(f"{sys.argv[1]}: {error}", file=sys.stderr)
        return 1
    for name, tensor in tensors:
        total = tensor.to(torch.float64).sum().item()
        print(f"{name} {str(tensor.dtype).removeprefix('torch.')} {list(tensor.shape)} {total:.6g}")
    for key, value in sorted(metadata.items()):
        print(f"metadata {key}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

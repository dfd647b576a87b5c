#!/usr/bin/env python3
"""Prints the largest absolute difference between the f32 tensors of two safetensors files of the
same tensors, and fails when it exceeds TOLERANCE: usage max_difference.py A B TOLERANCE."""
import array
import json
import struct
import sys


def f32_tensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    body = data[8 + length:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry["dtype"] != "F32":
            sys.exit(f"{path}: {name} is {entry['dtype']}, this check reads F32 only")
        begin, end = entry["data_offsets"]
        values = array.array("f")
        values.frombytes(body[begin:end])
        if sys.byteorder != "little":
            values.byteswap()
        tensors[name] = values
    return tensors


def main():
    a, b, tolerance = f32_tensors(sys.argv[1]), f32_tensors(sys.argv[2]), float(sys.argv[3])
    if a.keys() != b.keys():
        sys.exit(f"the files hold different tensors: {sorted(a.keys() ^ b.keys())}")
    worst = 0.0
    for name in a:
        if len(a[name]) != len(b[name]):
            sys.exit(f"{name}: {len(a[name])} against {len(b[name])} elements")
        worst = max([worst] + [abs(x - y) for x, y in zip(a[name], b[name])])
    print(f"{len(a)} tensors, largest difference {worst:.3g} (tolerance {tolerance:g})")
    if not worst <= tolerance:
        sys.exit(1)


if __name__ == "__main__":
    main()

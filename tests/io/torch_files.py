"""Writes torch.save files for tests/io/test_torch_checkpoint.cpp with Debian's python3-torch.

Usage: torch_files.py OUT

  OUT/valid.pt         a state dict of every dtype weft has, a strided view of a larger storage,
                       two names sharing one storage, an nn.Parameter, an empty tensor, a scalar,
                       and the _metadata attribute nn.Module.state_dict() sets
  OUT/valid.json       each tensor's dtype, shape and values (as float), for the test to compare
  OUT/legacy.pt        the same dict saved in the format before PyTorch 1.6
  OUT/calls.pt         a pickle that calls os.system (an object whose __reduce__ says so)
  OUT/not_a_dict.pt    a list of tensors
  OUT/not_tensors.pt   a dict whose value is a string
  OUT/int16.pt         a storage of a dtype weft lacks (torch.ShortStorage)
  OUT/compressed.pt    valid.pt's entries deflated
  OUT/truncated.pt     valid.pt without its last 100 bytes
"""
import collections
import json
import os
import sys
import zipfile

import torch


class CallsSystem:
    def __reduce__(self):
        return (os.system, ("echo this must never run",))


def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    big = torch.randn(6, 5)
    shared = torch.randn(3, 4)
    state = collections.OrderedDict()
    state["f32"] = torch.randn(2, 3)
    state["f64"] = torch.randn(4, dtype=torch.float64)
    state["f16"] = torch.randn(3, 2).half()
    state["bf16"] = torch.randn(5).bfloat16()
    state["i64"] = torch.arange(-3, 3)
    state["i32"] = torch.arange(4, dtype=torch.int32) * 7
    state["i8"] = torch.tensor([-128, 0, 127], dtype=torch.int8)
    state["u8"] = torch.tensor([0, 200, 255], dtype=torch.uint8)
    state["bool"] = torch.tensor([True, False, True])
    state["view"] = big[1:4, ::2]  # offset 5, strides (5, 2) in a storage of 30
    state["wte"] = shared
    state["lm_head"] = shared  # one storage under two names, as a tied head is saved
    state["param"] = torch.nn.Parameter(torch.randn(2, 2))
    state["empty"] = torch.zeros(0, 3)
    state["scalar"] = torch.tensor(2.5)
    state._metadata = collections.OrderedDict({"": {"version": 1}})
    path = os.path.join(out, "valid.pt")
    torch.save(state, path)
    described = {name: {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
                        "values": t.detach().double().flatten().tolist()} for name, t in state.items()}
    with open(os.path.join(out, "valid.json"), "w") as f:
        json.dump(described, f)

    torch.save(state, os.path.join(out, "legacy.pt"), _use_new_zipfile_serialization=False)
    torch.save({"w": torch.ones(2), "payload": CallsSystem()}, os.path.join(out, "calls.pt"))
    torch.save([torch.ones(2)], os.path.join(out, "not_a_dict.pt"))
    torch.save({"w": torch.ones(2), "note": "text"}, os.path.join(out, "not_tensors.pt"))
    torch.save({"w": torch.ones(2, dtype=torch.int16)}, os.path.join(out, "int16.pt"))

    with zipfile.ZipFile(path) as source, zipfile.ZipFile(os.path.join(out, "compressed.pt"), "w",
                                                          zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            target.writestr(info.filename, source.read(info.filename))
    with open(path, "rb") as f:
        data = f.read()
    with open(os.path.join(out, "truncated.pt"), "wb") as f:
        f.write(data[:-100])


if __name__ == "__main__":
    main()

// State dicts saved by torch.save (PyTorch 1.6 and later: a zip of one pickle and the tensors'
// storages), such as Hugging Face's pytorch_model.bin, read without PyTorch and without running
// the pickle.
//
// A pickle is a program: loading one with Python's pickle calls whatever functions it names.
// This reader interprets the opcodes itself and calls nothing. It knows what a state dict is made
// of: dicts (OrderedDict), strings, numbers, tuples, the storages (persistent ids pointing at the
// zip's data/<key> entries, typed by torch's FloatStorage, HalfStorage, ... classes) and the one
// constructor of a tensor from a storage view (torch._utils._rebuild_tensor_v2, and
// _rebuild_parameter around it). A call to anything else is refused, naming the function: such a
// file holds more than tensors, and only PyTorch should open it.
//
// The top-level object must be a dict of names to tensors. Each tensor is a strided view of its
// storage (tensors may share one: a tied weight is saved once); it is checked to lie inside the
// storage, whose byte size the zip entry gives. Storages are read little-endian, as torch.save
// writes them on every machine PyTorch supports; entries must be stored, not compressed, as
// torch.save stores them. ZIP64 archives (files over 4 GiB) are read.
//
// Errors: a file that is no zip, a legacy torch.save file (before 1.6), a truncated or malformed
// zip or pickle, an unknown opcode or call, a dtype weft lacks, a view outside its storage →
// FormatError naming the file and what was found; nothing is returned.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "weft/core/shape.h"
#include "weft/core/tensor.h"

namespace weft::io {

struct TorchTensorInfo {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
};

// The state dict's names, dtypes and shapes, in the pickle's order, reading no storage: what a
// caller checks before anything is allocated.
std::vector<TorchTensorInfo> read_torch_state_dict_header(const std::string& path);

// The state dict's tensors, contiguous, in the pickle's order.
std::vector<std::pair<std::string, Tensor>> load_torch_state_dict(const std::string& path);

}  // namespace weft::io

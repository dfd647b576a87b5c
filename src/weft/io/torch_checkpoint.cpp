#include "weft/io/torch_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string_view>

#include "weft/core/error.h"
#include "weft/io/input_file.h"

namespace weft::io {
namespace {

// ---- the zip: its central directory, each entry's name, size and data offset ----

struct ZipEntry {
  uint64_t offset = 0, size = 0;  // of the data, stored
};

uint64_t le(const std::string& bytes, size_t at, int n) {
  uint64_t v = 0;
  for (int k = n - 1; k >= 0; --k) v = v << 8 | static_cast<uint8_t>(bytes[at + static_cast<size_t>(k)]);
  return v;
}

class Zip {
 public:
  explicit Zip(const std::string& path) : file_(path, UINT64_MAX) {
    const uint64_t size = file_.size();
    std::string head = read(0, std::min<uint64_t>(size, 4));
    WEFT_CHECK(head != std::string("\x80\x02\x8a\x0a", 4), FormatError, path, ": a torch.save file of the legacy "
               "format (PyTorch before 1.6), which weft does not read; load and save it again with a newer PyTorch, or "
               "convert it to safetensors");
    WEFT_CHECK(head == std::string("PK\x03\x04", 4), FormatError, path, ": not a zip archive, as torch.save writes "
               "(it starts with no local file header)");
    // The end of central directory record: 22 bytes and a comment of up to 65535, at the end.
    const uint64_t tail_size = std::min<uint64_t>(size, 22 + 65535);
    const std::string tail = read(size - tail_size, tail_size);
    size_t end = std::string::npos;
    for (size_t at = tail.size() >= 22 ? tail.size() - 22 + 1 : 0; at-- > 0;)
      if (le(tail, at, 4) == 0x06054b50) {
        end = at;
        break;
      }
    WEFT_CHECK(end != std::string::npos, FormatError, path, ": truncated or not a zip (no end of central directory)");
    uint64_t entries = le(tail, end + 10, 2), directory_size = le(tail, end + 12, 4), directory = le(tail, end + 16, 4);
    if (entries == 0xffff || directory_size == 0xffffffff || directory == 0xffffffff) {  // ZIP64
      WEFT_CHECK(end >= 20 && le(tail, end - 20, 4) == 0x07064b50, FormatError, path,
                 ": a ZIP64 archive without its end of central directory locator");
      const uint64_t record = le(tail, end - 20 + 8, 8);
      WEFT_CHECK(size >= 56 && record <= size - 56, FormatError, path, ": its ZIP64 end of central directory lies past the end");
      const std::string r = read(record, 56);
      WEFT_CHECK(le(r, 0, 4) == 0x06064b50, FormatError, path, ": no ZIP64 end of central directory where its "
                 "locator points");
      entries = le(r, 32, 8), directory_size = le(r, 40, 8), directory = le(r, 48, 8);
    }
    WEFT_CHECK(directory <= size && directory_size <= size - directory && entries <= directory_size / 46, FormatError,
               path, ": its central directory (", entries, " entries, ", directory_size, " bytes at ", directory,
               ") does not fit the file's ", size, " bytes");
    const std::string d = read(directory, directory_size);
    size_t at = 0;
    for (uint64_t e = 0; e < entries; ++e) {
      WEFT_CHECK(at + 46 <= d.size() && le(d, at, 4) == 0x02014b50, FormatError, path, ": central directory entry ",
                 e, " is malformed");
      const uint64_t method = le(d, at + 10, 2), name_length = le(d, at + 28, 2), extra_length = le(d, at + 30, 2),
                     comment_length = le(d, at + 32, 2);
      uint64_t compressed = le(d, at + 20, 4), stored = le(d, at + 24, 4), local = le(d, at + 42, 4);
      WEFT_CHECK(at + 46 + name_length + extra_length + comment_length <= d.size(), FormatError, path,
                 ": central directory entry ", e, " runs past the directory");
      const std::string name = d.substr(at + 46, name_length);
      // ZIP64's extended information: 8-byte values for the fields that hold 0xffffffff, in order.
      for (size_t x = at + 46 + name_length; x + 4 <= at + 46 + name_length + extra_length;) {
        const uint64_t id = le(d, x, 2), length = le(d, x + 2, 2);
        WEFT_CHECK(x + 4 + length <= at + 46 + name_length + extra_length, FormatError, path, ": entry ", name,
                   " has a malformed extra field");
        if (id == 1) {
          size_t v = x + 4;
          for (uint64_t* field : {&stored, &compressed, &local}) {
            if (*field != 0xffffffff) continue;
            WEFT_CHECK(v + 8 <= x + 4 + length, FormatError, path, ": entry ", name, " lacks its ZIP64 sizes");
            *field = le(d, v, 8);
            v += 8;
          }
        }
        x += 4 + length;
      }
      WEFT_CHECK(method == 0 && compressed == stored, FormatError, path, ": entry ", name, " is compressed (method ",
                 method, "); torch.save stores its entries uncompressed");
      WEFT_CHECK(local <= size && size - local >= 30, FormatError, path, ": entry ", name, " starts past the end");
      const std::string header = read(local, 30);
      WEFT_CHECK(le(header, 0, 4) == 0x04034b50, FormatError, path, ": no local header where entry ", name,
                 " should start");
      const uint64_t data = local + 30 + le(header, 26, 2) + le(header, 28, 2);
      WEFT_CHECK(data <= size && stored <= size - data, FormatError, path, ": entry ", name, " (", stored,
                 " bytes) runs past the end of the file: truncated?");
      entries_[name] = {data, stored};
      at += 46 + name_length + extra_length + comment_length;
    }
  }

  const std::string& path() const { return file_.path(); }
  const ZipEntry* find(const std::string& name) const {
    auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : &it->second;
  }
  const std::map<std::string, ZipEntry>& entries() const { return entries_; }
  std::string read(uint64_t offset, uint64_t n) const {
    std::string bytes(n, '\0');
    if (n > 0) file_.read_at(bytes.data(), n, offset);
    return bytes;
  }
  void read_into(void* buffer, const ZipEntry& entry) const {
    if (entry.size > 0) file_.read_at(buffer, entry.size, entry.offset);
  }

 private:
  InputFile file_;
  std::map<std::string, ZipEntry> entries_;
};

// ---- the pickle: a stack machine over the values a state dict is made of ----

struct Value;
using ValuePtr = std::shared_ptr<Value>;

struct StorageRef {
  std::string key;
  DType dtype = DType::f32;
  int64_t numel = 0;
};

struct TensorRef {
  StorageRef storage;
  int64_t offset = 0;
  Shape shape, strides;
};

struct Value {
  enum class Kind { none, boolean, integer, floating, string, tuple, list, dict, global, storage, tensor };
  Kind kind = Kind::none;
  int64_t integer = 0;
  double floating = 0;
  std::string text;  // a string; a global's "module.name"
  std::vector<ValuePtr> items;  // a tuple's or list's
  std::vector<std::pair<ValuePtr, ValuePtr>> entries;  // a dict's, in order
  StorageRef storage;
  TensorRef tensor;
};

const char* kind_name(Value::Kind k) {
  static const char* const names[] = {"None", "a bool", "an int", "a float", "a string", "a tuple", "a list",
                                      "a dict", "a class or function", "a storage", "a tensor"};
  return names[static_cast<int>(k)];
}

std::optional<DType> storage_dtype(const std::string& global) {
  static const std::map<std::string, DType> types = {
      {"torch.FloatStorage", DType::f32}, {"torch.DoubleStorage", DType::f64}, {"torch.HalfStorage", DType::f16},
      {"torch.BFloat16Storage", DType::bf16}, {"torch.LongStorage", DType::i64}, {"torch.IntStorage", DType::i32},
      {"torch.CharStorage", DType::i8}, {"torch.ByteStorage", DType::u8}, {"torch.BoolStorage", DType::boolean}};
  auto it = types.find(global);
  if (it == types.end()) return std::nullopt;
  return it->second;
}

class Unpickler {
 public:
  Unpickler(std::string bytes, std::string where) : p_(std::move(bytes)), where_(std::move(where)) {}

  ValuePtr run() {
    for (;;) {
      const auto op = static_cast<uint8_t>(take(1)[0]);
      switch (op) {
        case 0x80: take(1); break;  // PROTO
        case 0x95: take(8); break;  // FRAME
        case '.': {                 // STOP
          WEFT_CHECK(stack_.size() == 1 && marks_.empty(), FormatError, where_, ": the pickle stops with ",
                     stack_.size(), " values on its stack, not one");
          return stack_.back();
        }
        case '(':
          WEFT_CHECK(marks_.size() < kMaxValues, FormatError, where_, ": the pickle opens more than ", kMaxValues,
                     " MARKs");
          marks_.push_back(stack_.size());
          break;
        case 'N': stack_.push_back(make(Value::Kind::none)); break;
        case 0x88: case 0x89: {
          auto v = make(Value::Kind::boolean);
          v->integer = op == 0x88;
          stack_.push_back(v);
          break;
        }
        case 'K': push_integer(static_cast<int64_t>(le(take(1), 0, 1))); break;
        case 'M': push_integer(static_cast<int64_t>(le(take(2), 0, 2))); break;
        case 'J': push_integer(static_cast<int32_t>(le(take(4), 0, 4))); break;
        case 0x8a: {  // LONG1: n little-endian two's-complement bytes
          const size_t n = static_cast<uint8_t>(take(1)[0]);
          WEFT_CHECK(n <= 8, FormatError, where_, ": an integer of ", n, " bytes, more than 64 bits");
          const std::string b = take(n);
          uint64_t v = n ? le(b, 0, static_cast<int>(n)) : 0;
          if (n > 0 && n < 8 && (static_cast<uint8_t>(b[n - 1]) & 0x80)) v |= ~uint64_t{0} << (8 * n);
          push_integer(static_cast<int64_t>(v));
          break;
        }
        case 'G': {  // BINFLOAT: big-endian
          const std::string b = take(8);
          uint64_t bits = 0;
          for (char c : b) bits = bits << 8 | static_cast<uint8_t>(c);
          auto v = make(Value::Kind::floating);
          std::memcpy(&v->floating, &bits, 8);
          stack_.push_back(v);
          break;
        }
        case 'X': push_string(take(le(take(4), 0, 4))); break;  // BINUNICODE
        case 0x8c: case 'U': push_string(take(static_cast<uint8_t>(take(1)[0]))); break;
        case 0x8d: push_string(take(le(take(8), 0, 8))); break;
        case 'T': push_string(take(le(take(4), 0, 4))); break;
        case 'c': {  // GLOBAL: "module\nname\n"
          const std::string module = line(), name = line();
          push_global(module + "." + name);
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          const ValuePtr name = pop(), module = pop();
          WEFT_CHECK(name->kind == Value::Kind::string && module->kind == Value::Kind::string, FormatError, where_,
                     ": STACK_GLOBAL of a non-string");
          push_global(module->text + "." + name->text);
          break;
        }
        case ')': stack_.push_back(make(Value::Kind::tuple)); break;
        case ']': stack_.push_back(make(Value::Kind::list)); break;
        case '}': stack_.push_back(make(Value::Kind::dict)); break;
        case 't': case 'l': {
          auto v = make(op == 't' ? Value::Kind::tuple : Value::Kind::list);
          v->items = pop_to_mark();
          stack_.push_back(v);
          break;
        }
        case 0x85: case 0x86: case 0x87: {
          const size_t n = op - 0x84u;
          WEFT_CHECK(stack_.size() >= n, FormatError, where_, ": TUPLE", n, " on a stack of ", stack_.size());
          auto v = make(Value::Kind::tuple);
          v->items.assign(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
          stack_.resize(stack_.size() - n);
          stack_.push_back(v);
          break;
        }
        case 'a': {
          const ValuePtr item = pop();
          expect(top(), Value::Kind::list, "APPEND")->items.push_back(item);
          break;
        }
        case 'e': {
          std::vector<ValuePtr> items = pop_to_mark();
          auto& list = expect(top(), Value::Kind::list, "APPENDS")->items;
          list.insert(list.end(), items.begin(), items.end());
          break;
        }
        case 's': {
          const ValuePtr value = pop(), key = pop();
          expect(top(), Value::Kind::dict, "SETITEM")->entries.emplace_back(key, value);
          break;
        }
        case 'u': {
          std::vector<ValuePtr> items = pop_to_mark();
          WEFT_CHECK(items.size() % 2 == 0, FormatError, where_, ": SETITEMS of an odd number of values");
          auto& dict = expect(top(), Value::Kind::dict, "SETITEMS")->entries;
          for (size_t k = 0; k < items.size(); k += 2) dict.emplace_back(items[k], items[k + 1]);
          break;
        }
        case 'd': {
          std::vector<ValuePtr> items = pop_to_mark();
          WEFT_CHECK(items.size() % 2 == 0, FormatError, where_, ": DICT of an odd number of values");
          auto v = make(Value::Kind::dict);
          for (size_t k = 0; k < items.size(); k += 2) v->entries.emplace_back(items[k], items[k + 1]);
          stack_.push_back(v);
          break;
        }
        case 'q': memoize(le(take(1), 0, 1)); break;
        case 'r': memoize(le(take(4), 0, 4)); break;
        case 0x94: memoize(memo_.size()); break;  // MEMOIZE
        case 'h': case 'j': {
          const uint64_t key = op == 'h' ? le(take(1), 0, 1) : le(take(4), 0, 4);
          auto it = memo_.find(key);
          WEFT_CHECK(it != memo_.end(), FormatError, where_, ": the pickle reads memo ", key, ", never written");
          stack_.push_back(it->second);
          break;
        }
        case 'Q': stack_.push_back(storage(pop())); break;  // BINPERSID
        case 'R': {
          const ValuePtr args = pop(), callable = pop();
          stack_.push_back(call(callable, args));
          break;
        }
        // BUILD sets an object's state: here only the _metadata attribute that a state dict
        // (an OrderedDict) carries, or a parameter's, neither of which weft needs.
        case 'b': pop(); break;
        default:
          throw FormatError(str(where_, ": pickle opcode 0x", hex(op), " at byte ", at_ - 1,
                                " is not one a state dict of tensors is written with"));
      }
    }
  }

 private:
  // A value for each opcode that makes one, a few hundred bytes each: a state dict makes some 20
  // a tensor, and a pickle of millions of empty tuples must not take the machine's memory.
  static constexpr size_t kMaxValues = size_t{1} << 22;
  ValuePtr make(Value::Kind kind) {
    WEFT_CHECK(++made_ <= kMaxValues, FormatError, where_, ": the pickle makes more than ", kMaxValues,
               " values; a state dict makes some 20 a tensor");
    auto v = std::make_shared<Value>();
    v->kind = kind;
    return v;
  }
  void memoize(uint64_t key) {
    WEFT_CHECK(memo_.size() < kMaxValues, FormatError, where_, ": the pickle memoizes more than ", kMaxValues,
               " values");
    memo_[key] = top();
  }
  std::string take(uint64_t n) {
    WEFT_CHECK(n <= p_.size() - at_, FormatError, where_, ": the pickle ends inside an opcode (truncated)");
    std::string s = p_.substr(at_, n);
    at_ += n;
    return s;
  }
  std::string line() {
    const size_t end = p_.find('\n', at_);
    WEFT_CHECK(end != std::string::npos, FormatError, where_, ": the pickle ends inside a GLOBAL (truncated)");
    std::string s = p_.substr(at_, end - at_);
    at_ = end + 1;
    return s;
  }
  static std::string hex(uint8_t b) {
    const char* digits = "0123456789abcdef";
    return {digits[b >> 4], digits[b & 15]};
  }
  ValuePtr pop() {
    WEFT_CHECK(!stack_.empty() && (marks_.empty() || stack_.size() > marks_.back()), FormatError, where_,
               ": the pickle pops an empty stack");
    ValuePtr v = stack_.back();
    stack_.pop_back();
    return v;
  }
  const ValuePtr& top() const {
    WEFT_CHECK(!stack_.empty(), FormatError, where_, ": the pickle reads an empty stack");
    return stack_.back();
  }
  std::vector<ValuePtr> pop_to_mark() {
    WEFT_CHECK(!marks_.empty(), FormatError, where_, ": the pickle closes a MARK it never opened");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<ValuePtr> items(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return items;
  }
  const ValuePtr& expect(const ValuePtr& v, Value::Kind kind, const char* op) const {
    WEFT_CHECK(v->kind == kind, FormatError, where_, ": ", op, " on ", kind_name(v->kind), ", expected ",
               kind_name(kind));
    return v;
  }
  void push_integer(int64_t i) {
    auto v = make(Value::Kind::integer);
    v->integer = i;
    stack_.push_back(v);
  }
  void push_string(std::string s) {
    auto v = make(Value::Kind::string);
    v->text = std::move(s);
    stack_.push_back(v);
  }
  void push_global(std::string name) {
    auto v = make(Value::Kind::global);
    v->text = std::move(name);
    stack_.push_back(v);
  }
  int64_t integer(const ValuePtr& v, const char* what) const {
    WEFT_CHECK(v->kind == Value::Kind::integer, FormatError, where_, ": ", what, " is ", kind_name(v->kind),
               ", expected an int");
    return v->integer;
  }
  Shape integers(const ValuePtr& v, const char* what) const {
    WEFT_CHECK(v->kind == Value::Kind::tuple && v->items.size() <= 64, FormatError, where_, ": ", what, " is ",
               kind_name(v->kind), ", expected a tuple of ints");
    Shape out;
    for (const ValuePtr& i : v->items) out.push_back(integer(i, what));
    return out;
  }

  // ('storage', torch.FloatStorage, key, location, numel): a storage of the archive's data/<key>.
  ValuePtr storage(const ValuePtr& pid) {
    WEFT_CHECK(pid->kind == Value::Kind::tuple && pid->items.size() == 5 && pid->items[0]->kind == Value::Kind::string &&
                   pid->items[0]->text == "storage" && pid->items[1]->kind == Value::Kind::global &&
                   pid->items[2]->kind == Value::Kind::string,
               FormatError, where_, ": a persistent id that is not ('storage', type, key, location, numel)");
    const std::optional<DType> dtype = storage_dtype(pid->items[1]->text);
    WEFT_CHECK(dtype, FormatError, where_, ": a storage of ", pid->items[1]->text, ", a type weft has no dtype for");
    auto v = make(Value::Kind::storage);
    v->storage = {.key = pid->items[2]->text, .dtype = *dtype, .numel = integer(pid->items[4], "a storage's size")};
    WEFT_CHECK(v->storage.numel >= 0, FormatError, where_, ": a storage of ", v->storage.numel, " elements");
    return v;
  }

  ValuePtr call(const ValuePtr& callable, const ValuePtr& args) {
    WEFT_CHECK(callable->kind == Value::Kind::global && args->kind == Value::Kind::tuple, FormatError, where_,
               ": REDUCE of ", kind_name(callable->kind), " with ", kind_name(args->kind));
    const std::string& f = callable->text;
    const std::vector<ValuePtr>& a = args->items;
    if (f == "collections.OrderedDict" && a.empty()) return make(Value::Kind::dict);
    if ((f == "torch._utils._rebuild_parameter" || f == "torch._utils._rebuild_parameter_with_state") && !a.empty() &&
        a[0]->kind == Value::Kind::tensor)
      return a[0];
    if (f == "torch._utils._rebuild_tensor_v2" && a.size() >= 4 && a[0]->kind == Value::Kind::storage) {
      auto v = make(Value::Kind::tensor);
      v->tensor = {.storage = a[0]->storage, .offset = integer(a[1], "a tensor's storage offset"),
                   .shape = integers(a[2], "a tensor's size"), .strides = integers(a[3], "a tensor's stride")};
      const TensorRef& t = v->tensor;
      WEFT_CHECK(t.shape.size() == t.strides.size(), FormatError, where_, ": a tensor of size ", shape_str(t.shape),
                 " with strides ", shape_str(t.strides));
      // The view's last element, offset + sum (size - 1) * stride, must lie in the storage, and the
      // tensor it makes must fit in memory (a stride of 0 repeats elements: an expanded tensor is
      // saved so). In 128 bits, 64 dims of sizes and strides below 2^56 cannot overflow.
      bool empty = false;
      __int128 last = t.offset, elements = 1;
      for (size_t d = 0; d < t.shape.size(); ++d) {
        WEFT_CHECK(t.shape[d] >= 0 && t.strides[d] >= 0 && t.shape[d] <= (int64_t{1} << 56) &&
                       t.strides[d] <= (int64_t{1} << 56),
                   FormatError, where_, ": a tensor of size ", shape_str(t.shape), " and strides ",
                   shape_str(t.strides));
        empty = empty || t.shape[d] == 0;
        if (t.shape[d] > 0) last += static_cast<__int128>(t.shape[d] - 1) * t.strides[d];
        elements = std::min<__int128>(elements * t.shape[d], __int128{1} << 64);
      }
      WEFT_CHECK(t.offset >= 0 && (empty || last < t.storage.numel), FormatError, where_, ": a tensor of size ",
                 shape_str(t.shape), ", strides ", shape_str(t.strides), " at offset ", t.offset,
                 " reaches past its storage of ", t.storage.numel, " elements");
      WEFT_CHECK(elements * static_cast<__int128>(dtype_size(t.storage.dtype)) <= usable_memory_bytes(), FormatError,
                 where_, ": a tensor of size ", shape_str(t.shape), " is larger than this machine's memory");
      return v;
    }
    throw FormatError(str(where_, ": the pickle calls ", f, ", which weft does not run: it reads state dicts of "
                          "tensors only (load the file with PyTorch and save its state_dict() as safetensors)"));
  }

  std::string p_;
  size_t at_ = 0;
  std::string where_;
  std::vector<ValuePtr> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, ValuePtr> memo_;
  size_t made_ = 0;
};

struct StateDict {
  std::string prefix;  // the archive's folder: "archive/", or the name torch.save was given
  std::vector<std::pair<std::string, TensorRef>> tensors;
};

StateDict read_state_dict(const Zip& zip) {
  const ZipEntry* pickle = nullptr;
  StateDict state;
  for (const auto& [name, entry] : zip.entries()) {
    const size_t slash = name.find('/');
    if (slash == std::string::npos || name.substr(slash + 1) != "data.pkl") continue;
    WEFT_CHECK(!pickle, FormatError, zip.path(), ": holds two pickles (", state.prefix, "data.pkl and ", name, ")");
    pickle = &entry;
    state.prefix = name.substr(0, slash + 1);
  }
  WEFT_CHECK(pickle, FormatError, zip.path(), ": a zip without data.pkl, so not a torch.save file");
  WEFT_CHECK(pickle->size <= (uint64_t{64} << 20), FormatError, zip.path(), ": a pickle of ", pickle->size,
             " bytes; a state dict's takes some 200 bytes a tensor");
  if (const ZipEntry* order = zip.find(state.prefix + "byteorder")) {
    const std::string byteorder = zip.read(order->offset, std::min<uint64_t>(order->size, 16));
    WEFT_CHECK(byteorder == "little", FormatError, zip.path(), ": storages saved ", byteorder,
               "-endian, which weft does not read");
  }
  const std::string where = zip.path() + " (" + state.prefix + "data.pkl)";
  const ValuePtr root = Unpickler(zip.read(pickle->offset, pickle->size), where).run();
  WEFT_CHECK(root->kind == Value::Kind::dict, FormatError, where, ": holds ", kind_name(root->kind),
             ", not a state dict (a dict of names to tensors)");
  for (const auto& [key, value] : root->entries) {
    WEFT_CHECK(key->kind == Value::Kind::string, FormatError, where, ": a state dict keyed by ", kind_name(key->kind));
    WEFT_CHECK(value->kind == Value::Kind::tensor, FormatError, where, ": '", key->text, "' is ",
               kind_name(value->kind), ", not a tensor: not a state dict of tensors");
    state.tensors.emplace_back(key->text, value->tensor);
  }
  return state;
}

}  // namespace

std::vector<TorchTensorInfo> read_torch_state_dict_header(const std::string& path) {
  const Zip zip(path);
  std::vector<TorchTensorInfo> infos;
  for (const auto& [name, t] : read_state_dict(zip).tensors) infos.push_back({name, t.storage.dtype, t.shape});
  return infos;
}

std::vector<std::pair<std::string, Tensor>> load_torch_state_dict(const std::string& path) {
  const Zip zip(path);
  const StateDict state = read_state_dict(zip);
  std::map<std::string, Tensor> storages;  // by key: tensors that share a storage read it once
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, t] : state.tensors) {
    auto it = storages.find(t.storage.key);
    if (it == storages.end()) {
      const std::string entry_name = state.prefix + "data/" + t.storage.key;
      const ZipEntry* entry = zip.find(entry_name);
      WEFT_CHECK(entry, FormatError, path, ": '", name, "' is in storage ", t.storage.key, ", and the archive has no ",
                 entry_name);
      const uint64_t element = dtype_size(t.storage.dtype);
      WEFT_CHECK(entry->size % element == 0 && entry->size / element == static_cast<uint64_t>(t.storage.numel),
                 FormatError, path, ": ", entry_name, " holds ", entry->size, " bytes, not the ", t.storage.numel,
                 " elements of ", dtype_name(t.storage.dtype), " its pickle says");
      WEFT_CHECK(entry->size <= usable_memory_bytes(), FormatError, path, ": storage ", t.storage.key, " of ",
                 entry->size, " bytes is more than this machine's memory");
      Tensor storage = Tensor::empty({t.storage.numel}, t.storage.dtype);
      zip.read_into(storage.data_ptr(), *entry);
      it = storages.emplace(t.storage.key, storage).first;
    }
    out.emplace_back(name, it->second.as_strided(t.shape, t.strides, t.offset).contiguous());
  }
  return out;
}

}  // namespace weft::io

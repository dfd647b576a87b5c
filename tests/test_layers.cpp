// The layer order of src/weft/ (docs/architecture.md says what lives in each layer; this file is
// the one place the order itself is written):
//
//   a file under src/weft/<layer>/ includes "weft/<other>/..." only when <other> is <layer> or
//   below it, and every folder under src/weft/ is a layer of the order.
//
// One exception is declared, not included: core/tensor.h declares Tensor's view and autograd
// methods, which src/weft/ops/ and src/weft/autograd/ define (see the note in tensor.h). Its
// invariant is checked here too: no source in core/ or kernels/ calls a Tensor method defined in
// ops/ or autograd/, so everything below autograd runs without them.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "temp_dir.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

constexpr std::array<std::string_view, 18> kLayerOrder = {
    "core", "io", "net", "monitor", "kernels", "autograd", "ops", "nn", "optim", "amp",
    "quant", "memory", "data", "infer", "dist", "train", "serve", "cli"};

// The layer's position in kLayerOrder, or -1 for a folder that is not a layer.
int layer_rank(std::string_view layer) {
  auto it = std::find(kLayerOrder.begin(), kLayerOrder.end(), layer);
  return it == kLayerOrder.end() ? -1 : static_cast<int>(it - kLayerOrder.begin());
}

// Why a file in layer `from` may not include `included` ("weft/nn/module.h"); "" when it may.
std::string include_violation(std::string_view from, std::string_view included) {
  const std::string_view prefix = "weft/";
  if (included.substr(0, prefix.size()) != prefix) return "";  // a system or third-party header
  std::string_view rest = included.substr(prefix.size());
  std::string_view to = rest.substr(0, rest.find('/'));
  if (layer_rank(from) < 0) return std::string(from) + " is not a layer of the order in tests/test_layers.cpp; place it there";
  if (layer_rank(to) < 0) return std::string(to) + " is not a layer of the order in tests/test_layers.cpp";
  if (layer_rank(to) > layer_rank(from))
    return std::string(from) + " includes " + std::string(to) + ", a layer above it";
  return "";
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<fs::path> sources_under(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    const std::string ext = entry.path().extension().string();
    if (entry.is_regular_file() && (ext == ".h" || ext == ".cpp")) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Every upward or unplaced include under `root` (a src/weft/ tree), one "file:line: why" each,
// and every folder of `root` that is not a layer.
std::vector<std::string> layering_violations(const fs::path& root) {
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.is_directory() && layer_rank(entry.path().filename().string()) < 0)
      found.push_back(entry.path().filename().string() + "/ is not a layer of the order in tests/test_layers.cpp; "
                      "place it there and in docs/architecture.md");
  const std::regex include(R"(^\s*#\s*include\s*"([^"]+)\")");
  for (const fs::path& file : sources_under(root)) {
    const std::string relative = fs::relative(file, root).generic_string();
    const std::string layer = relative.substr(0, relative.find('/'));
    if (relative.find('/') == std::string::npos) {
      found.push_back(relative + ": a file outside every layer; move it into one");
      continue;
    }
    std::istringstream lines(read_text(file));
    std::string line;
    for (int number = 1; std::getline(lines, line); ++number) {
      std::smatch m;
      if (!std::regex_search(line, m, include)) continue;
      if (std::string why = include_violation(layer, m[1].str()); !why.empty())
        found.push_back(relative + ":" + std::to_string(number) + ": " + why + " (" + m[1].str() + ")");
    }
  }
  return found;
}

// `text` without // comments and string literals, which may name a method without calling it.
std::string code_only(const std::string& text) {
  static const std::regex strings(R"("(\\.|[^"\\\n])*")"), comments(R"(//[^\n]*)");
  return std::regex_replace(std::regex_replace(text, strings, "\"\""), comments, "");
}

// The Tensor methods that the files of `layer` define: a line that starts at column 0 with
// "... Tensor::name(" ("Tensor Tensor::view(const Shape& shape) const {"); calls are indented.
std::set<std::string> tensor_methods_defined_in(const fs::path& root, std::string_view layer) {
  std::set<std::string> names;
  const std::regex definition(R"(^[^\s].*\bTensor::(\w+)\s*\()");
  for (const fs::path& file : sources_under(root / layer)) {
    std::istringstream lines(code_only(read_text(file)));
    std::string line;
    std::smatch m;
    while (std::getline(lines, line))
      if (std::regex_search(line, m, definition)) names.insert(m[1].str());
  }
  return names;
}

// Calls, in core/ and kernels/, of the Tensor methods that ops/ and autograd/ define:
// "file: name()". Member calls (x.view(...), p->grad()) anywhere; bare calls (from inside a Tensor
// method) in core's .cpp files, where a header's declarations do not count.
std::vector<std::string> calls_of_methods_above(const fs::path& root) {
  std::set<std::string> above = tensor_methods_defined_in(root, "ops");
  std::set<std::string> autograd = tensor_methods_defined_in(root, "autograd");
  above.insert(autograd.begin(), autograd.end());
  for (const std::string& own : tensor_methods_defined_in(root, "core")) above.erase(own);  // overloads core defines
  // tensor.h's inline methods that forward to one of them (t() is transpose(0, 1)).
  const std::regex inline_method(R"(^\s*[\w:&<>]+\s+(\w+)\s*\([^)]*\)[^{;]*\{(.*)\}\s*$)"), call_in_body(R"(\b(\w+)\s*\()");
  std::istringstream header(fs::exists(root / "core/tensor.h") ? code_only(read_text(root / "core/tensor.h")) : "");
  std::string line;
  std::smatch m;
  while (std::getline(header, line)) {
    if (!std::regex_search(line, m, inline_method)) continue;
    const std::string method = m[1].str(), body = m[2].str();
    for (std::sregex_iterator it(body.begin(), body.end(), call_in_body), end; it != end; ++it)
      if (above.count((*it)[1].str())) above.insert(method);
  }
  std::vector<std::string> found;
  const std::regex member(R"((\.|->)\s*(\w+)\s*\()"), bare(R"(()\b(\w+)\s*\()");
  for (std::string_view layer : {"core", "kernels"}) {
    if (!fs::is_directory(root / layer)) continue;
    for (const fs::path& file : sources_under(root / layer)) {
      const std::string code = code_only(read_text(file));
      auto scan = [&](const std::regex& call) {
        for (std::sregex_iterator it(code.begin(), code.end(), call), end; it != end; ++it) {
          const char before = it->position(0) > 0 ? code[it->position(0) - 1] : ' ';
          if (&call == &bare && (before == ':' || before == '.' || before == '>')) continue;  // qualified, or a member call
          if (above.count((*it)[2].str()))
            found.push_back(fs::relative(file, root).generic_string() + ": " + (*it)[2].str() + "()");
        }
      };
      scan(member);
      if (layer == "core" && file.extension() == ".cpp") scan(bare);
    }
  }
  return found;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += "  " + l + "\n";
  return out;
}

void write_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

TEST(Layers, SourceTreeIncludesOnlyItsOwnLayerAndBelow) {
  const fs::path root = WEFT_SOURCE_DIR;
  ASSERT_TRUE(fs::is_directory(root / "core")) << root;
  const std::vector<std::string> found = layering_violations(root);
  EXPECT_TRUE(found.empty()) << "includes against the layer order:\n" << joined(found);
}

TEST(Layers, CoreAndKernelsCallNoTensorMethodDefinedAboveThem) {
  const fs::path root = WEFT_SOURCE_DIR;
  // The methods the check looks for exist: a renamed folder or definition style would make it vacuous.
  EXPECT_TRUE(tensor_methods_defined_in(root, "ops").count("view"));
  EXPECT_TRUE(tensor_methods_defined_in(root, "autograd").count("backward"));
  const std::vector<std::string> found = calls_of_methods_above(root);
  EXPECT_TRUE(found.empty()) << "core/ or kernels/ call Tensor methods that ops/ or autograd/ define (core/tensor.h's note):\n"
                             << joined(found);
}

// The device seam (kernels/kernel_table.h): an op that named kernels/cpu would run on the CPU
// whatever device its tensors are on.
TEST(Layers, OpsReachKernelsOnlyThroughTheKernelTable) {
  const fs::path ops = fs::path(WEFT_SOURCE_DIR) / "ops";
  std::vector<std::string> found;
  int files = 0;
  for (const auto& entry : fs::directory_iterator(ops)) {
    ++files;
    std::istringstream text(read_text(entry.path()));
    int number = 0;
    for (std::string line; std::getline(text, line);) {
      ++number;
      if (line.find("cpu::") != std::string::npos || line.find("weft/kernels/cpu/") != std::string::npos)
        found.push_back(entry.path().filename().string() + ":" + std::to_string(number) + ": " + line);
    }
  }
  EXPECT_GT(files, 10);
  EXPECT_TRUE(found.empty()) << "ops/ names kernels/cpu instead of going through kernels::of(tensor):\n"
                             << joined(found);
}

TEST(Layers, AnIncludeFromAboveIsCaught) {
  EXPECT_EQ(include_violation("nn", "weft/core/tensor.h"), "");
  EXPECT_EQ(include_violation("nn", "weft/nn/module.h"), "");
  EXPECT_EQ(include_violation("nn", "gtest/gtest.h"), "");
  EXPECT_EQ(include_violation("ops", "weft/kernels/cpu/matmul.h"), "");
  EXPECT_NE(include_violation("core", "weft/ops/shape.h"), "");
  EXPECT_NE(include_violation("monitor", "weft/kernels/cpu/matmul.h"), "");
  EXPECT_NE(include_violation("infer", "weft/train/checkpoint.h"), "");
  EXPECT_NE(include_violation("nn", "weft/zoo/animal.h"), "") << "an unknown layer is not below anything";

  testing::TempDir dir;
  const fs::path root = dir.path();
  write_file(root / "core/tensor.h", "#include <vector>\n#include \"weft/core/shape.h\"\n");
  write_file(root / "kernels/cpu/matmul.h", "#include \"weft/core/tensor.h\"\n");
  write_file(root / "nn/module.cpp", "#include \"weft/nn/module.h\"\n#include \"weft/ops/linear.h\"\n");
  EXPECT_TRUE(layering_violations(root).empty()) << joined(layering_violations(root));

  write_file(root / "core/storage.cpp", "// storage\n\n  #include \"weft/autograd/node.h\"\n");
  std::vector<std::string> found = layering_violations(root);
  ASSERT_EQ(found.size(), 1u) << joined(found);
  EXPECT_EQ(found[0], "core/storage.cpp:3: core includes autograd, a layer above it (weft/autograd/node.h)");

  write_file(root / "zoo/animal.cpp", "#include \"weft/core/tensor.h\"\n");
  found = layering_violations(root);
  EXPECT_EQ(found.size(), 3u) << joined(found);  // storage.cpp's, the folder, and its file's include
  EXPECT_TRUE(std::any_of(found.begin(), found.end(), [](const std::string& f) { return f.rfind("zoo/ is not a layer", 0) == 0; }))
      << joined(found);
}

TEST(Layers, ACoreCallOfAnOpsMethodIsCaught) {
  testing::TempDir dir;
  const fs::path root = dir.path();
  write_file(root / "ops/shape.cpp", "Tensor Tensor::view(const Shape& shape) const { return {}; }\n"
                                     "Tensor Tensor::transpose(int64_t a, int64_t b) const { return {}; }\n");
  write_file(root / "core/tensor.h", "class Tensor {\n  Tensor view(const Shape& shape) const;\n"
                                     "  Tensor t() const { return transpose(0, 1); }\n  int64_t dim() const { return 2; }\n};\n");
  write_file(root / "autograd/engine.cpp", "void Tensor::backward(const Tensor& g, bool r) const {}\n");
  write_file(root / "core/tensor.cpp",
        "Tensor Tensor::clone_raw() const {\n"
        "  // view() would record on the tape\n"
        "  WEFT_CHECK(ok, Error, \"call view() instead\");\n"
        "  return as_strided(shape(), strides(), 0);\n"
        "}\n");
  EXPECT_TRUE(calls_of_methods_above(root).empty()) << joined(calls_of_methods_above(root));
  write_file(root / "kernels/cpu/attention.cpp", "static void backward(float* g) {}\nvoid run() { backward(g); }\n");
  EXPECT_TRUE(calls_of_methods_above(root).empty()) << "a kernel's own free function of the same name";
  write_file(root / "core/storage.cpp", "void f(const Tensor& t) { t.view({2}); t.backward (); }\n");
  write_file(root / "kernels/cpu/int4.cpp", "Tensor g(const Tensor* w) { return w->view({w->dim()}).t(); }\n");
  std::vector<std::string> found = calls_of_methods_above(root);
  EXPECT_EQ(found, (std::vector<std::string>{"core/storage.cpp: view()", "core/storage.cpp: backward()",
                                             "kernels/cpu/int4.cpp: view()", "kernels/cpu/int4.cpp: t()"}));
}

}  // namespace
}  // namespace weft

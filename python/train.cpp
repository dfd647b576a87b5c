// weft.train.fit: the trainer every `weft train` runs (train/trainer.h), given a model written in
// Python (a weft.nn.Module) in place of one of weft's own.
//
// The trainer walks a C++ module tree: the optimizer takes its parameters, data parallelism lays
// them out in buckets, checkpoints save and load them by name. So the Python module's parameters
// and buffers are registered, as the same tensors (not copies) and under the names Python gives
// them, in a tree of C++ modules that mirrors its submodules. Only the root runs: its forward
// calls the Python module, holding the GIL for the call. Everything else (backward, the update,
// the data loader's thread, collectives) runs without it, so fit releases the GIL for the run.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "weft/cli/commands.h"
#include "weft/dist/world.h"
#include "weft/monitor/progress.h"
#include "weft/monitor/status_file.h"
#include "weft/train/trainer.h"

namespace py = pybind11;
using namespace weft;

namespace {

// What the run and its checkpoints call a Python model: "python:" and its class, so that weft's
// loaders can tell it from their own kinds and say how to load it instead.
std::string python_model_name(const py::handle& module) {
  return weft::str("python:", py::str(py::type::of(module).attr("__qualname__")).cast<std::string>());
}

// One Python module's tensors and its children's, under their Python names. Its type name is not
// the Python class's: ZeRO-3 treats a "Sequential"'s children as layers it gathers around their
// calls, which a mirror never receives.
class MirroredModule : public nn::Module {
 public:
  explicit MirroredModule(const py::handle& module) : nn::Module(python_model_name(module)) {
    for (auto [name, tensor] : py::reinterpret_borrow<py::dict>(module.attr("_parameters"))) {
      const Tensor p = tensor.cast<Tensor>();
      const bool trained = p.requires_grad();  // a parameter frozen in Python stays frozen
      register_parameter(name.cast<std::string>(), p);
      if (!trained) Tensor(p).requires_grad_(false);
    }
    for (auto [name, tensor] : py::reinterpret_borrow<py::dict>(module.attr("_buffers")))
      register_buffer(name.cast<std::string>(), tensor.cast<Tensor>());
    for (auto [name, child] : py::reinterpret_borrow<py::dict>(module.attr("_modules")))
      register_module(name.cast<std::string>(), std::make_shared<MirroredModule>(child));
  }
  Tensor forward(const Tensor&) override {
    throw Error(str(name(), ": a mirror of a Python module is run by its root, through Python"));
  }
};

class PythonModel : public MirroredModule {
 public:
  explicit PythonModel(py::object model)
      : MirroredModule(model), model_(std::move(model)), training_in_python_(model_.attr("training").cast<bool>()) {}
  ~PythonModel() override {
    py::gil_scoped_acquire gil;
    model_ = py::object();
  }
  Tensor forward(const Tensor& x) override {
    py::gil_scoped_acquire gil;
    follow_training_flag();
    py::object output = model_(x);
    if (!py::isinstance<Tensor>(output))
      throw py::type_error(weft::str(name(), ".forward returned a ", py::str(py::type::of(output).attr("__name__")).cast<std::string>(),
                          ", not a weft.Tensor: the trainer takes the logits it returns"));
    return output.cast<Tensor>();
  }

  // The trainer sets weft's training flag (an evaluation turns it off, then on again); Python's
  // layers read their own. Called with the GIL held.
  void follow_training_flag() {
    if (is_training() == training_in_python_) return;
    model_.attr("train")(is_training());
    training_in_python_ = is_training();
  }

 private:
  py::object model_;
  bool training_in_python_;
};

// `name`: what checkpoints call the model ("": python_model_name's).
py::object fit(py::object model, const std::vector<std::string>& args, bool log, const std::string& name) {
  const train::TrainOptions options = cli::parse_train_flags(args);
  const auto mirror = std::make_shared<PythonModel>(model);
  const train::CustomModel custom{mirror, name.empty() ? python_model_name(model) : name};
  py::module_::import("sys").attr("stdout").attr("flush")();
  std::ostream nowhere(nullptr);
  train::TrainResult result;
  {
    py::gil_scoped_release release;
    const monitor::StatusPublisher published("train", custom.name, "step");
    result = train::train(options, log ? std::cout : nowhere, log && monitor::stdout_is_terminal(),
                          dist::ProcessGroup::world(), &custom);
    std::cout.flush();
  }
  mirror->follow_training_flag();
  return py::module_::import("json").attr("loads")(result.to_json().dump());
}

}  // namespace

void add_train(py::module_& m) {
  py::module_ t = m.def_submodule("train", "the trainer of weft train, for models defined in Python");
  t.def("fit", &fit, py::arg("model"), py::arg("args"), py::arg("log") = true, py::arg("name") = "",
        "trains `model` as `weft train ARGS` would train one of weft's models; returns the run's result");
  t.def("rank", [] { return dist::world().rank; }, "this process's rank in an mpirun launch (0 without one)");
  t.def("world_size", [] { return dist::world().size; }, "the launch's number of processes (1 without mpirun)");
}

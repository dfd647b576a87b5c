// The CNN of examples/fashion_mnist_cnn.py, built in C++ from weft's layers and trained by the
// trainer weft.train.fit runs (train::train with a CustomModel): the C++ half of
// bench/python_overhead.py, which runs the same network defined in Python through fit beside it.
//
//   bench_fit_cnn STEPS THREADS [TRACE]   prints the run's result as one JSON line (train_samples_per_s);
//                                         with TRACE, the profile of steps 2-4 too (its op table on stderr)
#include <cstdlib>
#include <iostream>
#include <memory>
#include <sstream>

#include "weft/nn/activation.h"
#include "weft/nn/container.h"
#include "weft/nn/conv.h"
#include "weft/nn/linear.h"
#include "weft/train/trainer.h"

int main(int argc, char** argv) {
  using namespace weft;
  if (argc != 3 && argc != 4) {
    std::cerr << "usage: bench_fit_cnn STEPS THREADS [TRACE]\n";
    return 2;
  }
  train::TrainOptions o;
  o.model = nn::ModelKind::cnn;  // the task: Fashion-MNIST
  o.steps = std::atoll(argv[1]);
  o.threads = std::atoi(argv[2]);
  o.eval_every = 0;
  if (argc == 4) o.profile_trace = argv[3];
  auto cnn = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Conv2d>(1, 16, 5, 1, 2), std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Conv2d>(16, 32, 5, 1, 2), std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(32 * 7 * 7, 10));
  const train::CustomModel custom{cnn, "FashionCNN (C++)"};
  std::ostringstream log;
  const train::TrainResult result = train::train(o, log, false, dist::ProcessGroup::world(), &custom);
  if (argc == 4) std::cerr << log.str();
  std::cout << result.to_json().dump() << "\n";
  return 0;
}

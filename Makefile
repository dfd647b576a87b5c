# The commands a user types. Everything builds with CMake + Ninja into build/ (optimised),
# build-asan/ (AddressSanitizer + UndefinedBehaviorSanitizer, for the tests) and build-fuzz/
# (clang's libFuzzer with both sanitizers, for make fuzz).
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: setup configure build build-cli build-asan demo test test-fast bench fuzz clean

setup:
	@scripts/setup

configure: setup
	@cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build build -j $(JOBS)

# The weft executable alone: what make demo runs, without the tests and benchmarks (about half of
# a fresh build's compile steps).
build-cli: configure
	@cmake --build build -j $(JOBS) --target weft_cli

build-asan: setup
	@cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DWEFT_SANITIZE=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build build-asan -j $(JOBS) --target weft_tests weft_dist_tests

# Trains the CNN on Fashion-MNIST for two epochs, then evaluates the saved checkpoint. The demo's
# directory is its own: a second make demo replaces the first one's run.
DEMO_OUT ?= runs/demo
demo: build-cli
	@build/weft train --model cnn --epochs 2 --out $(DEMO_OUT) --overwrite
	@build/weft eval --checkpoint $(DEMO_OUT)

# The whole suite on the optimised build, then again under the sanitizers.
test: build build-asan
	@cd build && ctest --output-on-failure -j $(JOBS)
	@cd build-asan && ctest --output-on-failure -j $(JOBS)

# Only the optimised build: the quick loop while developing.
test-fast: build
	@cd build && ctest --output-on-failure -j $(JOBS)

bench: build
	@scripts/setup --bench
	@for b in build/bench/bench_*; do echo "== $$b"; $$b; done
	@echo "== bench/train_vs_pytorch.py"
	@OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 bench/train_vs_pytorch.py build/weft
	@echo "== bench/model_parallel.py"
	@python3 bench/model_parallel.py build/weft
	@echo "== bench/gpt_vs_pytorch.py"
	@OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 bench/gpt_vs_pytorch.py build/weft
	@echo "== bench/serve_load.py"
	@python3 bench/serve_load.py build/weft
	@echo "== bench/mlp_inference_vs_pytorch.py"
	@OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 bench/mlp_inference_vs_pytorch.py build

# Fuzzes the file readers for FUZZ_SECONDS each, adding what it finds to tests/fuzz/corpus/, which
# make test replays (scripts/fuzz says more).
FUZZ_SECONDS ?= 60
fuzz: setup
	@scripts/setup --fuzz
	@cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DWEFT_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ $(CMAKE_FLAGS) >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target fuzz
	@FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz

clean:
	rm -rf build build-asan build-fuzz runs

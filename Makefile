# The commands a user types. Everything builds with CMake + Ninja into build/ (optimised) and
# build-asan/ (AddressSanitizer + UndefinedBehaviorSanitizer, for the tests).
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: setup build build-asan test test-fast bench clean

setup:
	@scripts/setup

build: setup
	@cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build build -j $(JOBS)

build-asan: setup
	@cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DWEFT_SANITIZE=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build build-asan -j $(JOBS) --target weft_tests

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

clean:
	rm -rf build build-asan

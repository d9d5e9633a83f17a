# ottr's two commands and the CI steps. See README.md.
#
#   make train   install what is missing, build, and run the bundled MLP (real training: next issue)
#   make test    install what is missing, configure, build, and run every test with ctest
#   make asan    ASan+UBSan build (build-asan/) running the importer, runtime and CLI tests
#   make fuzz    clang libFuzzer build (build-fuzz/) fuzzing the importer for FUZZ_SECONDS
#
# Variables: BUILD (build folder), JOBS (parallel build and test jobs), CMAKE_FLAGS (extra cmake
# arguments, e.g. CMAKE_FLAGS=-DOTTR_CUDA=OFF), FUZZ_SECONDS, TRAIN_MODEL.

BUILD ?= build
JOBS ?= 2
CMAKE_FLAGS ?=
FUZZ_SECONDS ?= 60
TRAIN_MODEL ?= models/mlp/model.onnx
# Debian's Python: the scripts need its python3-onnx, not whatever python3 comes first on PATH.
PYTHON ?= /usr/bin/python3

CMAKE_CONFIGURE = cmake -S . -G Ninja -DCMAKE_BUILD_TYPE=Release
# Sanitizer builds: light optimisation and line tables only (readable reports, quicker to build
# on CI's two cores than -O2 -g), assertions kept.
SANITIZER_BUILD_TYPE = -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1"

.PHONY: all deps configure build test train asan fuzz models clean

all: build

deps:
	scripts/install-deps.sh

# Configure once (after the dependencies are in); later builds let ninja re-run cmake when a
# CMakeLists.txt changes. `make configure` forces it, e.g. with other CMAKE_FLAGS.
$(BUILD)/build.ninja: | deps
	$(CMAKE_CONFIGURE) -B $(BUILD) $(CMAKE_FLAGS)

configure: deps
	$(CMAKE_CONFIGURE) -B $(BUILD) $(CMAKE_FLAGS)

build: $(BUILD)/build.ninja
	ninja -C $(BUILD) -j$(JOBS)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS)

# For now: inspect the bundled MLP and run it on random inputs. The next issue replaces the
# `run` step with `ottr train`.
train: $(BUILD)/build.ninja
	ninja -C $(BUILD) -j$(JOBS) ottr
	$(BUILD)/tools/ottr inspect $(TRAIN_MODEL)
	rm -rf $(BUILD)/train-inputs
	$(PYTHON) scripts/random_inputs.py $(TRAIN_MODEL) $(BUILD)/train-inputs --batch 8 --seed 1
	$(BUILD)/tools/ottr run $(TRAIN_MODEL) --inputs $(BUILD)/train-inputs --outputs $(BUILD)/train-outputs

# Sanitizer build (CPU only): every test that does not need a GPU (importer, runtime, CLI,
# conformance, goldens) under AddressSanitizer and UndefinedBehaviorSanitizer.
asan: deps
	cmake -S . -G Ninja -B build-asan $(SANITIZER_BUILD_TYPE) -DOTTR_CUDA=OFF -DOTTR_SANITIZE=ON
	ninja -C build-asan -j$(JOBS) ottr ottr_tests
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir build-asan -LE gpu --output-on-failure -j$(JOBS)

# libFuzzer build with clang; the seed corpus is every bundled model and conformance model.
fuzz: deps
	CC=clang CXX=clang++ cmake -S . -G Ninja -B build-fuzz $(SANITIZER_BUILD_TYPE) \
	  -DOTTR_CUDA=OFF -DOTTR_FUZZ=ON -DOTTR_TESTS=ON
	ninja -C build-fuzz -j$(JOBS) importer_fuzzer
	scripts/run-fuzzer.sh build-fuzz $(FUZZ_SECONDS)

models:
	$(PYTHON) models/make_models.py

clean:
	rm -rf $(BUILD) build-asan build-fuzz

# ottr's two commands and the CI steps. See README.md.
#
#   make train   install what is missing, build, and train the bundled MLP on Fashion-MNIST
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

# Trains the bundled MLP on Fashion-MNIST (Debian's data set, installed by `deps`) with Adam:
# 3 epochs of batch 128, the test accuracy after each epoch (>= 0.85 at the end), the trained
# model written to $(BUILD)/mlp-trained.onnx. --device auto takes the GPU when there is one.
train: $(BUILD)/build.ninja
	ninja -C $(BUILD) -j$(JOBS) ottr
	$(BUILD)/tools/ottr train $(TRAIN_MODEL) --data fashion-mnist --loss softmax_cross_entropy --logits logits \
	  --optimizer adam --lr 1e-3 --epochs 3 --batch 128 --device auto --out $(BUILD)/mlp-trained.onnx

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

# snapkv-mlir: `make demo` runs the main job, `make test` the whole test suite.
# Both install what is missing, configure and build first.

BUILD   ?= build
PYTHON  ?= python3
LLVM    ?= /usr/lib/llvm-22
JOBS    ?= 2

CMAKE_FLAGS = -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DMLIR_DIR=$(LLVM)/lib/cmake/mlir \
  -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
  -DLLVM_ENABLE_LLD=ON -DLLVM_ENABLE_ASSERTIONS=ON

export SNAPKV_OPT = $(CURDIR)/$(BUILD)/bin/snapkv-opt

.PHONY: all deps configure build demo test check-lit check-python bench docs clean

all: build

deps:
	PYTHON=$(PYTHON) scripts/install-deps.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

configure: deps $(BUILD)/build.ninja

build: configure
	ninja -C $(BUILD) -j$(JOBS)

# The seed's worked example through snapkv-opt, the CPU pipeline and
# mlir-runner, printed as a table.
demo: build
	$(PYTHON) -m snapkv.demo

check-lit: build
	ninja -C $(BUILD) check-snapkv

check-python: build
	cd python && $(PYTHON) -m pytest -q tests

test: check-lit check-python

bench: build
	$(PYTHON) benchmarks/cpu/bench_select.py --write docs/benchmarks.md

# Refresh the committed copies of the generated dialect/pass docs.
docs: build
	mkdir -p docs/generated
	cp $(BUILD)/docs/generated/*.md docs/generated/

clean:
	rm -rf $(BUILD)

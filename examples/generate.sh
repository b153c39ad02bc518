#!/usr/bin/env bash
# A tour of the `snapkv` command line on the bundled tiny Llama
# (test/Models/tiny_llama_dynamic.mlir). From the repository root, after `make build`
# (which also installs the `snapkv` command):
#
#   bash examples/generate.sh [OUT_DIR]
#
# 1. compile: rewrite the model for a SnapKV-compacted cache and write it to OUT_DIR;
# 2. ledger:  what the compacted cache holds compared with the full one;
# 3. generate: greedy tokens with both caches, side by side;
# 4. visualize: one PNG per layer with the votes, pooled scores and kept positions.
#
# The first run compiles three libraries (about 20 s each); they are cached under
# ~/.cache/snapkv/runner, so later runs take a second or two.
set -euo pipefail
out=${1:-$(mktemp -d -t snapkv-example-XXXXXX)}
mkdir -p "$out"
# python -m snapkv.cli is the `snapkv` command; it works without the console script too.
snapkv() { "${PYTHON:-python3}" -m snapkv.cli "$@"; }
options=(--window 8 --capacity 16 --kernel 5 --pooling avg --gqa expand)

snapkv compile test/Models/tiny_llama_dynamic.mlir -o "$out/compact.mlir" "${options[@]}" --strict
snapkv ledger "$out/compact.mlir" --prompt-length 64 --generated 8
snapkv generate --prompt-length 64 --steps 8 "${options[@]}"
snapkv visualize --out "$out" --prompt-length 64 "${options[@]}"
echo "wrote $out/compact.mlir and $out/layer*.png"

//===- snapkv-fuzz.cpp - libFuzzer target for the snapkv dialect ----------===//
//
// Parses arbitrary text with the snapkv dialect (and the upstream dialects
// its tests use) registered, verifies it, and runs the model rewrite
// (snapkv-compress-kv-cache), snapkv-fuse-attention, snapkv-append-in-place and
// then convert-snapkv-to-linalg on whatever verifies: once with each select
// lowered whole, once decomposed into its stage ops first
// (snapkv-decompose-select) under budget=pyramid, and once under
// budget=adaptive (snapkv.select_adaptive, ragged decode). Invalid input must
// be rejected with diagnostics; a pass that fails on verified input (the
// rewrite only warns when it refuses) or produces IR that does not verify is a
// bug, so it aborts and the fuzzer reports it.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Conversion/Passes.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVDialect.h"
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <cstdio>
#include <cstdlib>
#include <memory>

using namespace mlir;

/// A context that is replaced every few thousand inputs: the types and
/// attributes every input uniques would otherwise grow without bound over a
/// long campaign.
static MLIRContext &context() {
  static std::unique_ptr<MLIRContext> ctx;
  static unsigned uses = 0;
  if (!ctx || ++uses % 4096 == 0) {
    DialectRegistry registry;
    registry.insert<snapkv::SnapKVDialect, arith::ArithDialect,
                    bufferization::BufferizationDialect, cf::ControlFlowDialect,
                    func::FuncDialect, linalg::LinalgDialect, math::MathDialect,
                    memref::MemRefDialect, tensor::TensorDialect>();
    ctx = std::make_unique<MLIRContext>(registry);
    ctx->loadAllAvailableDialects();
    // Threads only add noise to a fuzzer.
    ctx->disableMultithreading();
  }
  return *ctx;
}

/// Upstream's recursive-descent parser has no depth limit: a few thousand
/// nested parentheses in an affine expression overflow the stack (in
/// snapkv-opt and Debian's mlir-opt alike; docs/reliability.md, F2). Inputs
/// nested deeper than this are skipped so the campaign keeps exploring our
/// code instead of rediscovering that.
constexpr int kMaxNesting = 256;

static bool nestsTooDeep(StringRef text) {
  int depth = 0;
  for (char c : text) {
    if (c == '(' || c == '[' || c == '{' || c == '<')
      ++depth;
    else if (c == ')' || c == ']' || c == '}' || c == '>')
      depth = std::max(depth - 1, 0);
    if (depth > kMaxNesting)
      return true;
  }
  return false;
}

/// True when some `key` in `text` is not followed by `= [item, ...]` with
/// every item accepted by `itemOk` (an empty list is accepted).
static bool hasBadList(StringRef text, StringRef key,
                       function_ref<bool(StringRef)> itemOk) {
  for (size_t at = text.find(key); at != StringRef::npos;
       at = text.find(key, at + 1)) {
    StringRef rest = text.drop_front(at + key.size()).ltrim();
    if (!rest.consume_front("="))
      return true;
    rest = rest.ltrim();
    if (!rest.consume_front("["))
      return true;
    size_t close = rest.find(']');
    if (close == StringRef::npos)
      return true;
    StringRef list = rest.take_front(close);
    if (list.trim(" \t\n").empty())
      continue;
    SmallVector<StringRef> items;
    list.split(items, ',');
    for (StringRef item : items)
      if (!itemOk(item.trim(" \t\n")))
        return true;
  }
  return false;
}

/// Upstream's `linalg.transpose` parser dereferences a null attribute when
/// its `permutation = [...]` list does not parse (docs/reliability.md, F3;
/// Debian's mlir-opt crashes too). Inputs where `permutation` is not followed
/// by a list of small non-negative integers are skipped.
static bool hasMalformedPermutation(StringRef text) {
  return hasBadList(text, "permutation", [](StringRef item) {
    return !item.empty() && item.size() <= 9 &&
           item.find_first_not_of("0123456789") == StringRef::npos;
  });
}

/// Upstream's parser for linalg ops (`linalg.matmul`, `linalg.fill`, ...)
/// reads out of bounds when their `<...>` properties are not a dictionary:
/// `linalg.matmul<1>` crashes Debian's mlir-opt too (docs/reliability.md,
/// F4), and so does `linalg.generic {...} <"x">` (F6). Such inputs are
/// skipped.
static bool hasBadLinalgProperties(StringRef text) {
  constexpr StringLiteral kPrefix = "linalg.";
  for (size_t at = text.find(kPrefix); at != StringRef::npos;
       at = text.find(kPrefix, at + 1)) {
    StringRef rest = text.drop_front(at + kPrefix.size());
    rest = rest.drop_while([](char c) { return llvm::isAlnum(c) || c == '_'; });
    rest = rest.ltrim();
    // After an attribute dictionary too (F6): `linalg.generic {...} <"x">`.
    if (rest.starts_with("{")) {
      int depth = 0;
      size_t end = 0;
      for (; end < rest.size(); ++end) {
        depth += rest[end] == '{' ? 1 : rest[end] == '}' ? -1 : 0;
        if (depth == 0)
          break;
      }
      rest = rest.drop_front(std::min(end + 1, rest.size())).ltrim();
    }
    if (rest.consume_front("<") && !rest.ltrim().starts_with("{"))
      return true;
  }
  return false;
}

/// Upstream's `linalg.generic` parser crashes while reporting an
/// `iterator_types` entry that is not a string, e.g.
/// `linalg.generic{iterator_types=[2]}` (docs/reliability.md, F5). Inputs
/// whose iterator list holds anything but quoted words are skipped.
static bool hasBadIteratorTypes(StringRef text) {
  return hasBadList(text, "iterator_types", [](StringRef item) {
    return item.size() >= 2 && item.starts_with("\"") && item.ends_with("\"") &&
           item.drop_front().drop_back().find_first_not_of(
               "abcdefghijklmnopqrstuvwxyz") == StringRef::npos;
  });
}

/// Upstream's `expand_shape` verifier builds an affine map from each
/// reassociation group's first expression before it checks the groups, and
/// only asserts that a group is not empty: `[[ ], [1], [2, 3]]` reads an
/// uninitialised AffineExpr (docs/reliability.md, F7; Debian's mlir-opt
/// crashes too). Inputs with an empty group after `expand_shape` are skipped.
static bool hasEmptyReassociationGroup(StringRef text) {
  constexpr StringLiteral kKey = "expand_shape";
  for (size_t at = text.find(kKey); at != StringRef::npos;
       at = text.find(kKey, at + 1)) {
    // The groups come before `output_shape` (or the type, when it is absent).
    StringRef rest = text.drop_front(at + kKey.size());
    rest = rest.take_front(std::min(rest.find("output_shape"), rest.find(':')));
    for (size_t open = rest.find('['); open != StringRef::npos;
         open = rest.find('[', open + 1))
      if (rest.drop_front(open + 1).ltrim(" \t\n\r").starts_with("]"))
        return true;
  }
  return false;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  StringRef input(reinterpret_cast<const char *>(data), size);
  if (nestsTooDeep(input) || hasMalformedPermutation(input) ||
      hasBadLinalgProperties(input) || hasBadIteratorTypes(input) ||
      hasEmptyReassociationGroup(input))
    return 0;
  MLIRContext &ctx = context();
  // Rejections are the expected outcome for most inputs: keep them quiet.
  ScopedDiagnosticHandler quiet(&ctx, [](Diagnostic &) { return success(); });
  StringRef text(reinterpret_cast<const char *>(data), size);
  // The MLIR lexer relies on a terminating NUL (as files read by mlir-opt
  // have): parsing the raw, unterminated fuzzer bytes reads past their end.
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(text),
                               llvm::SMLoc());
  ParserConfig config(&ctx);
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, config);
  if (!module || failed(verify(*module)))
    return 0;

  // Three rewrites: Hq heads on the whole run; Hkv with the budget spread
  // over the layers (pyramid: per-layer capacities, per-call copies of a
  // layer function), decomposed; Hkv with Ada-KV's shared budget (ragged
  // caches, decode appending each head's row in place). A fourth, chunked
  // prefill with decode-time compression, only where there is a chunk
  // function to rewrite (the layer functions of `snapkv export --hf
  // --extend`), so as not to slow the rest.
  enum class Variant { expand, pyramid, adaptive, chunked };
  bool chunkable =
      module->lookupSymbol<func::FuncOp>("extend_layer") != nullptr;
  for (Variant variant : {Variant::expand, Variant::pyramid, Variant::adaptive,
                          Variant::chunked}) {
    if (variant == Variant::chunked && !chunkable)
      continue;
    PassManager pm(&ctx);
    // Small window and capacity so the one-layer seeds (prompt 8) get
    // rewritten.
    snapkv::CompressKVCacheOptions rewrite;
    rewrite.window = 2;
    rewrite.capacity = 6;
    rewrite.kernelSize = 3;
    rewrite.gqa = variant == Variant::expand ? snapkv::GqaPolicy::expand
                                             : snapkv::GqaPolicy::mean;
    if (variant == Variant::pyramid) {
      rewrite.budget = snapkv::BudgetPolicy::pyramid;
      rewrite.pyramidBeta = 2;
    }
    if (variant == Variant::adaptive) {
      rewrite.budget = snapkv::BudgetPolicy::adaptive;
      rewrite.floor = 1;
    }
    if (variant == Variant::chunked) {
      rewrite.chunk = 4;
      rewrite.prefillFunc = "prefill_layer";
      rewrite.decodeFunc = "decode_layer";
      rewrite.extendFunc = "extend_layer";
      // Decode-time compression to another capacity: the extend call chain
      // is copied for it.
      rewrite.decodeInterval = 4;
      rewrite.decodeCapacity = 5;
    }
    pm.addPass(snapkv::createCompressKVCache(rewrite));
    pm.addNestedPass<func::FuncOp>(snapkv::createFuseAttention());
    pm.addPass(snapkv::createAppendInPlace());
    if (variant == Variant::pyramid)
      pm.addPass(snapkv::createDecomposeSelect());
    pm.addPass(snapkv::createConvertSnapKVToLinalg());
    OwningOpRef<ModuleOp> target = module->clone();
    if (failed(pm.run(*target)) || failed(verify(*target))) {
      std::fprintf(stderr,
                   "snapkv-fuzz: verified input failed to rewrite or "
                   "lower (variant %d), or produced invalid IR\n",
                   static_cast<int>(variant));
      std::abort();
    }
  }
  return 0;
}

//===- snapkv-fuzz.cpp - libFuzzer target for the snapkv dialect ----------===//
//
// Parses arbitrary text with the snapkv dialect (and the upstream dialects
// its tests use) registered, verifies it, and lowers whatever verifies with
// convert-snapkv-to-linalg. Invalid input must be rejected with diagnostics;
// a lowering that fails or produces IR that does not verify is a bug, so it
// aborts and the fuzzer reports it.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Conversion/Passes.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
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
                    bufferization::BufferizationDialect, func::FuncDialect,
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

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (nestsTooDeep(StringRef(reinterpret_cast<const char *>(data), size)))
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

  PassManager pm(&ctx);
  pm.addPass(snapkv::createConvertSnapKVToLinalg());
  if (failed(pm.run(*module)) || failed(verify(*module))) {
    std::fprintf(stderr, "snapkv-fuzz: verified input failed to lower or "
                         "lowered to invalid IR\n");
    std::abort();
  }
  return 0;
}

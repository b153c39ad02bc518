//===- CPUPipeline.cpp - --snapkv-cpu-pipeline ----------------------------===//

#include "snapkv/Pipelines/Pipelines.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/ErrorHandling.h"

using namespace mlir;

// Written as a textual pipeline so that it reads like the mlir-opt command it
// is equivalent to (and can be copied for debugging). The mode of
// snapkv-lower-asserts goes between the two parts.
static constexpr const char *kCPUPipeline[] = {
    // Tensor level: our ops to linalg, user elementwise ops to linalg.
    // fpowi is expanded first: once vectorised, its exponent would become a
    // vector, which llvm.intr.powi does not accept.
    "convert-snapkv-to-linalg,canonicalize,cse,"
    "func.func(math-expand-ops{ops=fpowi},convert-elementwise-to-linalg),"
    // Buffers, then tile + vectorise every linalg op on them.
    "one-shot-bufferize{bufferize-function-boundaries "
    "function-boundary-type-conversion=identity-layout-map},"
    "func.func(snapkv-vectorize-linalg,canonicalize,snapkv-optimize-math),"
    // Deallocation so repeated calls do not leak.
    "buffer-deallocation-pipeline,convert-bufferization-to-memref,"
    // What is left of linalg becomes loops; vectors become LLVM vectors.
    "func.func(convert-linalg-to-loops,lower-vector-mask,"
    "lower-vector-multi-reduction,convert-vector-to-scf{full-unroll}),"
    "canonicalize,cse,expand-strided-metadata,lower-affine,"
    "convert-scf-to-cf,snapkv-lower-asserts{mode=",
    "},convert-vector-to-llvm,"
    "finalize-memref-to-llvm,"
    "convert-math-to-llvm,convert-arith-to-llvm,convert-index-to-llvm,"
    "convert-ub-to-llvm,convert-cf-to-llvm,convert-func-to-llvm,"
    "reconcile-unrealized-casts"};

void snapkv::buildCPUPipeline(OpPassManager &pm, AssertMode asserts) {
  StringRef mode = asserts == AssertMode::report ? "report" : "abort";
  std::string text = (Twine(kCPUPipeline[0]) + mode + kCPUPipeline[1]).str();
  if (failed(parsePassPipeline(text, pm)))
    llvm::report_fatal_error("snapkv: the built-in CPU pipeline does not parse");
}

//===- CPUPipeline.cpp - --snapkv-cpu-pipeline ----------------------------===//
//
// Tensor level: each prompt's attention fused into snapkv.attention; the
// formulation, tiled into scf.forall groups with the logits fused into
// their consumers; attention as a tiled online softmax; the ops around it (a
// model's layers) split into scf.forall tiles; register tiles vectorised on
// tensors, their accumulators hoisted. Then one-shot bufferisation, and the
// forall loops become OpenMP parallel loops on the way to the LLVM dialect.
//
//===----------------------------------------------------------------------===//

#include "Stages.h"
#include "snapkv/Pipelines/Pipelines.h"

#include "snapkv/Codegen/Passes.h"
#include "snapkv/Conversion/Passes.h"
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h"

#include "mlir/Conversion/ConvertToLLVM/ToLLVMPass.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/Conversion/VectorToSCF/VectorToSCF.h"
#include "mlir/Dialect/Bufferization/Pipelines/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/SCF/Transforms/Passes.h"
#include "mlir/Dialect/Vector/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void snapkv::buildCPUPipeline(OpPassManager &pm,
                              const CPUPipelineOptions &options) {
  // A prompt's attention as one op, in the original and the rewritten
  // module alike, so that neither materialises the [L, L] scores.
  if (options.fuseAttention)
    pm.addNestedPass<func::FuncOp>(createFuseAttention());
  // Each select in a function of its own: the layer code and the select
  // lower and compile on different cores.
  pm.addPass(createOutlineSelect());
  // The select's stages as ops of their own (score, top_positions, gather),
  // each lowered and tiled like the whole op's parts.
  ConfigureLoweringOptions config;
  config.target = LoweringTarget::cpu;
  config.keyTile = options.keyTile;
  config.queryTile = options.queryTile;
  config.chunk = options.chunk;
  config.keepLogits = options.keepLogits;
  config.cpuFeatures = options.cpuFeatures;
  stages::lowerSelections(pm, config, /*decompose=*/true);
  OpPassManager &tensors = pm.nest<func::FuncOp>();
  stages::prepareTensorCode(tensors);
  tensors.addPass(createFuseElementwise());
  tensors.addPass(createCanonicalizerPass());
  tensors.addPass(createCSEPass());
  if (options.packWeights) {
    tensors.addPass(createPackWeights());
    tensors.addPass(createCanonicalizerPass());
  }
  ParallelizeOptions parallelize;
  parallelize.reductionParts = options.reductionParts;
  parallelize.rowBlock = options.rowBlock;
  parallelize.columns = options.columns;
  tensors.addPass(createParallelize(parallelize));
  // One OpenMP region for independent loops over the same iterations.
  if (options.fuseParallelLoops)
    tensors.addPass(createFuseParallelLoops());
  VectorizeOptions vectorize;
  vectorize.vectorBits = options.vectorBits;
  // For the bf16 contractions the strategy did not mark (made after it).
  vectorize.microkernel =
      cpuFeatureNames(options.cpuFeatures).lookup("avx512bf16") ? "avx512bf16"
                                                                : "none";
  vectorize.int8Microkernel =
      cpuFeatureNames(options.cpuFeatures).lookup("avx512vnni") ? "avx512vnni"
                                                                : "none";
  tensors.addPass(createVectorize(vectorize));
  tensors.addPass(createCanonicalizerPass());
  tensors.addPass(createCSEPass());
  tensors.addPass(createLoopInvariantSubsetHoistingPass());
  tensors.addPass(createCanonicalizerPass());

  stages::bufferize(pm);
  // Passes that see one function at a time run nested, so that the pass
  // manager runs them on several functions at once.
  OpPassManager &bufferized = pm.nest<func::FuncOp>();
  bufferized.addPass(createCanonicalizerPass());
  bufferized.addPass(createCSEPass());
  bufferization::BufferDeallocationPipelineOptions dealloc;
  bufferization::buildBufferDeallocationPipeline(pm, dealloc);
  pm.addPass(createConvertBufferizationToMemRefPass());

  OpPassManager &buffers = pm.nest<func::FuncOp>();
  buffers.addPass(createExpandStridedCopies());
  buffers.addPass(createConvertLinalgToLoopsPass());
  buffers.addPass(createOptimizeMath());
  buffers.addPass(math::createMathUpliftToFMA());
  buffers.addPass(vector::createLowerVectorMaskPass());
  buffers.addPass(vector::createLowerVectorMultiReductionPass());
  buffers.addPass(createCanonicalizerPass());
  buffers.addPass(createCSEPass());
  buffers.addPass(createLowerAffinePass());
  buffers.addPass(createForallToParallelLoopPass());
  pm.addPass(createConvertSCFToOpenMPPass());

  OpPassManager &loops = pm.nest<func::FuncOp>();
  ScheduleParallelLoopsOptions schedule;
  schedule.kind = options.schedule;
  schedule.staticTripCount = options.staticTripCount;
  loops.addPass(createScheduleParallelLoops(schedule));
  // Folds the alloca scope around each parallel loop body (there are no
  // allocas), which would otherwise have to keep one block until the memref
  // conversion; snapkv-lower-asserts must run before that conversion.
  loops.addPass(createCanonicalizerPass());
  // Fully unrolled: the loop form would put temporary buffers (allocas) in
  // loops, and an alloca in a parallel loop gets an alloca scope that must
  // stay one block until the memref conversion.
  loops.addPass(createConvertVectorToSCFPass(
      VectorTransferToSCFOptions().enableFullUnroll()));
  loops.addPass(memref::createExpandStridedMetadataPass());
  loops.addPass(createLowerAffinePass());
  loops.addPass(createSCFToControlFlowPass());
  stages::lowerChecks(pm, options.asserts);
  FinalizeMemRefToLLVMConversionPassOptions memrefToLLVM;
  memrefToLLVM.useGenericFunctions = options.genericAlloc;
  pm.addPass(createFinalizeMemRefToLLVMConversionPass(memrefToLLVM));
  // The vector pass also runs the vector-to-vector lowerings (transfers,
  // broadcasts, transposes) that convert-to-llvm's vector patterns expect
  // done; everything else converts in one walk instead of one per dialect.
  // A transpose becomes one shuffle of the flattened vector, not one
  // extract/insert pair per element (a tenth of the LLVM IR of a model).
  ConvertVectorToLLVMPassOptions toLLVM;
  toLLVM.vectorTransposeLowering = vector::VectorTransposeLowering::Shuffle1D;
  // The bf16 microkernel's dot products (x86vector.avx512.dot).
  toLLVM.x86Vector = true;
  pm.nest<func::FuncOp>().addPass(createConvertVectorToLLVMPass(toLLVM));
  pm.addPass(createConvertToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  // Each memref and n-D vector op above built and took apart its own
  // descriptor or array; folding those here halves the LLVM IR that
  // mlir-translate and clang read.
  OpPassManager &llvmFuncs = pm.nest<LLVM::LLVMFuncOp>();
  llvmFuncs.addPass(createByteBoolVectors());
  llvmFuncs.addPass(createCanonicalizerPass());
  llvmFuncs.addPass(createCSEPass());
}

//===- Stages.cpp - the stages the CPU and GPU pipelines share ------------===//

#include "Stages.h"

#include "snapkv/Codegen/Passes.h"
#include "snapkv/Conversion/Passes.h"
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void snapkv::stages::lowerSelections(OpPassManager &pm,
                                     const ConfigureLoweringOptions &config,
                                     bool decompose) {
  if (decompose) {
    // On the GPU the conversion splits select_adaptive itself, to lay the
    // ops between its stages out as kernels.
    DecomposeSelectOptions split;
    split.adaptive = config.target != LoweringTarget::gpu;
    pm.addPass(createDecomposeSelect(split));
  }
  // Each root op's strategy as data (kept where the input already has one),
  // then the conversion that reads it.
  pm.addPass(createConfigureLowering(config));
  pm.addPass(createConvertSnapKVToLinalg());
  // The GPU's kernels, recorded by the conversion (the CPU records none).
  if (config.target == LoweringTarget::gpu)
    pm.addPass(createTileAndFuse());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

void snapkv::stages::prepareTensorCode(OpPassManager &funcs) {
  math::MathExpandOpsPassOptions expand;
  expand.opMnemonics = {"fpowi"};
  funcs.addPass(math::createMathExpandOpsPass(expand));
  funcs.addPass(createConvertElementwiseToLinalgPass());
}

void snapkv::stages::lowerChecks(OpPassManager &pm, AssertMode mode) {
  LowerAssertsOptions asserts;
  asserts.mode = mode;
  pm.addPass(createLowerAsserts(asserts));
}

void snapkv::stages::bufferize(OpPassManager &pm) {
  bufferization::OneShotBufferizePassOptions options;
  options.bufferizeFunctionBoundaries = true;
  options.functionBoundaryTypeConversion =
      bufferization::LayoutMapOption::IdentityLayoutMap;
  pm.addPass(bufferization::createOneShotBufferizePass(options));
}

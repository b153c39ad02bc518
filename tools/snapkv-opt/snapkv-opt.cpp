//===- snapkv-opt.cpp - mlir-opt with the snapkv dialect and passes -------===//

#include "snapkv/Codegen/Passes.h"
#include "snapkv/Conversion/Passes.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVDialect.h"
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h"
#include "snapkv/Pipelines/Pipelines.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::registerAllPasses();
  mlir::snapkv::registerSnapKVConversionPasses();
  mlir::snapkv::registerSnapKVCodegenPasses();
  mlir::snapkv::registerSnapKVTransformsPasses();
  mlir::snapkv::registerPipelines();

  mlir::DialectRegistry registry;
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  // gpu-module-to-binary translates device code to LLVM IR in-process.
  mlir::registerAllToLLVMIRTranslations(registry);
  registry.insert<mlir::snapkv::SnapKVDialect>();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "snapkv optimizer driver\n", registry));
}

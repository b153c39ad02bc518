//===- SnapKVPlugin.cpp - snapkv as an mlir-opt plugin --------------------===//
//
//   mlir-opt --load-dialect-plugin=snapkv-plugin.so \
//            --load-pass-plugin=snapkv-plugin.so \
//            --pass-pipeline="builtin.module(snapkv-cpu-pipeline)" in.mlir
//
// (Plugin passes are registered after mlir-opt has parsed its flags, so they
// are reached through --pass-pipeline, not as --snapkv-... flags.)
//
//===----------------------------------------------------------------------===//

#include "snapkv/Codegen/Passes.h"
#include "snapkv/Conversion/Passes.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVDialect.h"
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h"
#include "snapkv/Pipelines/Pipelines.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/Plugins/DialectPlugin.h"
#include "mlir/Tools/Plugins/PassPlugin.h"
#include "llvm/Config/llvm-config.h"

using namespace mlir;

extern "C" LLVM_ATTRIBUTE_WEAK DialectPluginLibraryInfo
mlirGetDialectPluginInfo() {
  return {MLIR_PLUGIN_API_VERSION, "SnapKV", LLVM_VERSION_STRING,
          [](DialectRegistry *registry) {
            registry->insert<snapkv::SnapKVDialect>();
          }};
}

extern "C" LLVM_ATTRIBUTE_WEAK PassPluginLibraryInfo mlirGetPassPluginInfo() {
  return {MLIR_PLUGIN_API_VERSION, "SnapKVPasses", LLVM_VERSION_STRING, []() {
            snapkv::registerSnapKVConversionPasses();
            snapkv::registerSnapKVCodegenPasses();
            snapkv::registerSnapKVTransformsPasses();
            snapkv::registerPipelines();
          }};
}

//===- snapkv-opt.cpp - mlir-opt with the snapkv dialect and passes -------===//
//
// mlir-opt's driver, plus one exit status: 3 when a pass failed because
// `snapkv-compress-kv-cache strict=true` refused the model (the module then
// carries `snapkv.refusal`), so callers tell "not a model the rewrite
// recognises" from a broken input or a bug without reading diagnostics.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Codegen/Passes.h"
#include "snapkv/Conversion/Passes.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVDialect.h"
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h"
#include "snapkv/Pipelines/Pipelines.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"

#include <atomic>

namespace {
constexpr int kRefusalExitCode = 3;

/// Notes a failed model rewrite whose module records a refusal (another
/// pass failing on a module that carries an old record is no refusal).
class RefusalObserver : public mlir::PassInstrumentation {
public:
  explicit RefusalObserver(std::atomic<bool> &refused) : refused(refused) {}
  void runAfterPassFailed(mlir::Pass *pass, mlir::Operation *op) override {
    auto module = llvm::dyn_cast<mlir::ModuleOp>(op);
    if (pass->getArgument() == "snapkv-compress-kv-cache" && module &&
        module->hasAttr(mlir::snapkv::kRefusalAttrName))
      refused = true;
  }

private:
  std::atomic<bool> &refused;
};
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
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

  auto [inputFile, outputFile] = mlir::registerAndParseCLIOptions(
      argc, argv, "snapkv optimizer driver\n", registry);
  mlir::MlirOptMainConfig config =
      mlir::MlirOptMainConfig::createFromCLOptions();
  // Listing dialects or passes is upstream's business.
  if (config.shouldShowDialects() || config.shouldListPasses())
    return mlir::asMainReturnCode(
        mlir::MlirOptMain(argc, argv, inputFile, outputFile, registry));

  std::atomic<bool> refused = false;
  // The command line's pipeline first, then the observer.
  mlir::MlirOptMainConfig fromCommandLine = config;
  config.setPassPipelineSetupFn(
      [fromCommandLine, &refused](mlir::PassManager &pm) {
        if (mlir::failed(fromCommandLine.setupPassPipeline(pm)))
          return mlir::failure();
        pm.addInstrumentation(std::make_unique<RefusalObserver>(refused));
        return mlir::success();
      });
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> input =
      mlir::openInputFile(inputFile, &error);
  if (!input) {
    llvm::errs() << error << "\n";
    return 1;
  }
  std::unique_ptr<llvm::ToolOutputFile> output =
      mlir::openOutputFile(outputFile, &error);
  if (!output) {
    llvm::errs() << error << "\n";
    return 1;
  }
  if (mlir::failed(
          mlir::MlirOptMain(output->os(), std::move(input), registry, config)))
    return refused ? kRefusalExitCode : 1;
  output->keep();
  return 0;
}

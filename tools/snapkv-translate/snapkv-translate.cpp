//===- snapkv-translate.cpp - LLVM-dialect MLIR to split LLVM bitcode -----===//
//
// `mlir-translate --mlir-to-llvmir` followed by `llvm-split`, in one process
// and without LLVM IR text in between: the step of a compile between
// snapkv-opt and the clangs that compile the parts at the same time.
// Functions are dealt out in turn (round-robin), which balances a model's
// parts better than llvm-split's default hash of the names.
//
//===----------------------------------------------------------------------===//

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/Bitcode/BitcodeWriter.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Transforms/Utils/SplitModule.h"

using namespace llvm;

static cl::opt<std::string> inputFile(cl::Positional, cl::desc("<input>"),
                                      cl::init("-"));
static cl::opt<std::string>
    outputPrefix("o",
                 cl::desc("output file; with --parts N > 1, the prefix "
                          "of <prefix>0 ... <prefix>N-1"),
                 cl::value_desc("path"), cl::Required);
static cl::opt<unsigned> parts("parts",
                               cl::desc("number of bitcode files (default 1)"),
                               cl::init(1));

static bool writeBitcode(const Module &module, const std::string &path) {
  std::error_code error;
  ToolOutputFile out(path, error, sys::fs::OF_None);
  if (error) {
    errs() << "snapkv-translate: cannot write " << path << ": "
           << error.message() << "\n";
    return false;
  }
  WriteBitcodeToFile(module, out.os());
  out.keep();
  return true;
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  cl::ParseCommandLineOptions(
      argc, argv,
      "snapkv-translate: LLVM-dialect MLIR (text or bytecode) to LLVM "
      "bitcode, optionally split by function into --parts files\n");
  if (parts == 0) {
    errs() << "snapkv-translate: --parts must be at least 1\n";
    return 1;
  }

  mlir::DialectRegistry registry;
  mlir::registerAllToLLVMIRTranslations(registry);
  mlir::MLIRContext context(registry);
  // Unknown dialects are a clear parse error ("dialect ... is unknown").
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(inputFile, sourceMgr,
                                            mlir::ParserConfig(&context));
  if (!module)
    return 1;

  LLVMContext llvmContext;
  std::unique_ptr<Module> llvmModule =
      mlir::translateModuleToLLVMIR(*module, llvmContext);
  if (!llvmModule)
    return 1;
  if (parts == 1)
    return writeBitcode(*llvmModule, outputPrefix) ? 0 : 1;

  unsigned index = 0;
  bool ok = true;
  SplitModule(
      *llvmModule, parts,
      [&](std::unique_ptr<Module> part) {
        ok &= writeBitcode(*part, outputPrefix + std::to_string(index++));
      },
      /*PreserveLocals=*/false, /*RoundRobin=*/true);
  return ok ? 0 : 1;
}

//===- snapkv-translate.cpp - LLVM-dialect MLIR to split LLVM bitcode -----===//
//
// `mlir-translate --mlir-to-llvmir` followed by `llvm-split`, in one process
// and without LLVM IR text in between: the step of a compile between
// snapkv-opt and the clangs that compile the parts at the same time.
// Functions go to parts by size, largest first into the lightest part:
// llvm-split's name hash, or its round-robin (which balances counts), left
// a model's parts up to twice as large as each other, and clang's wall time
// is the largest part's.
//
//===----------------------------------------------------------------------===//

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Bitcode/BitcodeWriter.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Transforms/Utils/Cloning.h"
#include "llvm/Transforms/Utils/SplitModule.h"
#include "llvm/Transforms/Utils/ValueMapper.h"

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

/// Splits `module` into `count` parts with about the same number of
/// instructions each (longest-processing-time-first), as SplitModule does
/// otherwise: locals become hidden externals so the parts link; global
/// variables are defined in the first part. A module with aliases, ifuncs or
/// comdats (which must stay with what they refer to) goes to SplitModule.
static void splitBySize(Module &module, unsigned count,
                        function_ref<void(std::unique_ptr<Module>)> write) {
  if (!module.alias_empty() || !module.ifunc_empty() ||
      !module.getComdatSymbolTable().empty()) {
    SplitModule(module, count, write, /*PreserveLocals=*/false,
                /*RoundRobin=*/true);
    return;
  }
  auto externalize = [](GlobalValue &value) {
    if (value.hasLocalLinkage()) {
      value.setLinkage(GlobalValue::ExternalLinkage);
      value.setVisibility(GlobalValue::HiddenVisibility);
    }
    if (!value.hasName())
      value.setName("__snapkv_split_unnamed");
  };
  // (size, position, function): largest first, ties in module order.
  SmallVector<std::tuple<unsigned, unsigned, Function *>> functions;
  for (Function &function : module) {
    externalize(function);
    if (!function.isDeclaration())
      functions.push_back(
          {function.getInstructionCount(), functions.size(), &function});
  }
  for (GlobalVariable &variable : module.globals())
    externalize(variable);
  llvm::sort(functions, [](const auto &a, const auto &b) {
    return std::get<0>(a) != std::get<0>(b) ? std::get<0>(a) > std::get<0>(b)
                                            : std::get<1>(a) < std::get<1>(b);
  });
  SmallVector<uint64_t> load(count, 0);
  DenseMap<const GlobalValue *, unsigned> partOf;
  for (auto [size, position, function] : functions) {
    unsigned lightest = llvm::min_element(load) - load.begin();
    partOf[function] = lightest;
    load[lightest] += size + 1;
  }
  for (unsigned part = 0; part < count; ++part) {
    ValueToValueMapTy map;
    std::unique_ptr<Module> piece =
        CloneModule(module, map, [&](const GlobalValue *value) {
          auto it = partOf.find(value);
          return it == partOf.end() ? part == 0 : it->second == part;
        });
    if (part != 0)
      piece->setModuleInlineAsm("");
    write(std::move(piece));
  }
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
  splitBySize(*llvmModule, parts, [&](std::unique_ptr<Module> part) {
    ok &= writeBitcode(*part, outputPrefix + std::to_string(index++));
  });
  return ok ? 0 : 1;
}

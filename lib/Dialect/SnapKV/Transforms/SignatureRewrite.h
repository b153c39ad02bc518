//===- SignatureRewrite.h - carry new signatures to the callers -*- C++ -*-===//
//
// The model rewrite's changes of function signatures (compacted caches, GQA
// expansion, adaptive offsets), carried to every caller, and per-layer copies
// of functions. Internal to SnapKVTransforms.
//
//===----------------------------------------------------------------------===//

#ifndef SNAPKV_LIB_DIALECT_SNAPKV_TRANSFORMS_SIGNATUREREWRITE_H
#define SNAPKV_LIB_DIALECT_SNAPKV_TRANSFORMS_SIGNATUREREWRITE_H

#include "KVCacheAnalysis.h"
#include "snapkv/Dialect/SnapKV/Transforms/QuantizeKV.h"

#include "mlir/IR/BuiltinOps.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::snapkv::detail {

/// Positions of a rewritten function's arguments and results whose types
/// change, with their new types.
struct SignatureChange {
  llvm::SmallDenseMap<unsigned, Type> args, results;
  /// New results, each after the (changed) result it names:
  /// budget=adaptive's per-layer offsets follow the layer's values.
  SmallVector<std::pair<unsigned, Type>> inserted;
  /// New arguments, each after the argument it names: staging-carry's
  /// per-layer scores follow the layer's value cache. The caller passes its
  /// own new argument, inserted after the one it passes there.
  SmallVector<std::pair<unsigned, Type>> insertedArgs;
  bool empty() const {
    return args.empty() && results.empty() && inserted.empty() &&
           insertedArgs.empty();
  }
};

/// The calls of a function whose signature changes, all in the entry block
/// of callers that are not used themselves (a model exported with one
/// function per layer: the entry points call it once per layer).
struct CallSites {
  SmallVector<func::CallOp> calls;
};

/// Checks that `change` can be carried to every caller of `callee`: each use
/// is a func.call in the single block of a function that is not rewritten
/// and not used itself; a changed result is only returned by the caller; a
/// changed operand is an argument of the caller used only as such operands
/// (or by tensor.dim).
FailureOr<CallSites> analyseCallers(ModuleOp module, func::FuncOp callee,
                                    const SignatureChange &change,
                                    ArrayRef<func::FuncOp> rewritten,
                                    Refusal &refusal);

/// The types prefill's K/V results take: `snapkv.select`'s results, layer l
/// keeping `capacities[l]` positions; packed i8 rows under kv-dtype=i8.
SignatureChange prefillChange(ArrayRef<PrefillLayer> layers, GqaPolicy gqa,
                              ArrayRef<int64_t> capacities, bool ragged,
                              KVCacheType kvDtype = KVCacheType::same);

/// The types decode's caches take: `Hq` heads under gqa=expand, packed i8
/// rows under kv-dtype=i8.
SignatureChange decodeChange(ArrayRef<DecodeLayer> layers, GqaPolicy gqa,
                             KVCacheType kvDtype);

/// Erases the ops of `func` left without uses, to a fixed point.
void eraseDeadOps(func::FuncOp func);

/// Sets `func`'s type from its entry block's arguments and its return.
void updateSignature(func::FuncOp func);

/// Gives each call of `callee` its new signature, and each caller the types
/// that now flow to its results and from its arguments.
void updateCallers(func::FuncOp callee, const CallSites &sites);

/// Replaces each call of `callee` (whose signature gained the results
/// `inserted`, each after the result it names) by one that returns them, and
/// returns each new result from the caller right after the result it follows.
void insertCallResults(func::FuncOp callee, const CallSites &sites,
                       ArrayRef<std::pair<unsigned, Type>> inserted);

/// Gives each call of `callee` (whose signature gained the arguments
/// `inserted`, each after the argument it names) the new operands: each a new
/// argument of the caller, right after the caller's argument the call passes
/// at the position it follows (analyseCallers checked that it is one).
void insertCallArguments(func::FuncOp callee, const CallSites &sites,
                         ArrayRef<std::pair<unsigned, Type>> inserted);

/// The func.call ops of `callee` in `module`, in the order they appear.
SmallVector<func::CallOp> callsOf(func::FuncOp callee, ModuleOp module);

/// `func` and every function that reaches it through func.call, `func`
/// first: the call chain from the entry points down to it.
llvm::SetVector<func::FuncOp> callChain(func::FuncOp func, ModuleOp module);

/// Copies `chain` as `<name><suffix>` (renamed if taken), each copy after
/// its original, and points the copies' calls within the chain at the
/// copies. Returns the copies in the order of `chain`.
SmallVector<func::FuncOp> copyChain(ArrayRef<func::FuncOp> chain,
                                    StringRef suffix, ModuleOp module);

/// Gives each call of @name its own copy (`<name>_layer<l>`, l in call
/// order) and erases the original; `copies` gets the copies' names. Fails,
/// saying why in `why`, unless every use is a call and all calls are in the
/// entry block of one function (the layers, in order).
LogicalResult copyPerCall(ModuleOp module, StringRef name,
                          SmallVectorImpl<std::string> &copies,
                          std::string &why);

} // namespace mlir::snapkv::detail

#endif // SNAPKV_LIB_DIALECT_SNAPKV_TRANSFORMS_SIGNATUREREWRITE_H

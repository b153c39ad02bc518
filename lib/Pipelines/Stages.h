//===- Stages.h - the stages the CPU and GPU pipelines share ----*- C++ -*-===//
//
// Each pipeline is a short list of these stages plus its target's own
// passes (docs/lowering.md lists them with the IR after each).
//
//===----------------------------------------------------------------------===//

#ifndef SNAPKV_LIB_PIPELINES_STAGES_H
#define SNAPKV_LIB_PIPELINES_STAGES_H

#include "snapkv/Codegen/Passes.h"
#include "snapkv/Conversion/SnapKVToLinalg/SnapKVToLinalg.h"

#include "mlir/Pass/PassManager.h"

namespace mlir::snapkv::stages {

/// With `decompose`, each snapkv.select / select_adaptive split into its
/// stage ops (score, top_positions, gather); each root op's
/// #snapkv.lowering_config chosen by snapkv-configure-lowering with
/// `config` (its target, sizes given and CPU features); then the snapkv ops
/// lowered: on the CPU snapkv.attention and the stage ops tiled through
/// TilingInterface, each tile decomposed or lowered whole; on the GPU the
/// formulation laid out as blocks, its recorded kernels tiled at once
/// (before anything could rewrite the ops that carry them); then
/// canonicalisation and CSE.
void lowerSelections(OpPassManager &pm, const ConfigureLoweringOptions &config,
                     bool decompose);

/// The user's tensor code around the selects, into linalg: fpowi expanded
/// (a vectorised fpowi would get a vector exponent llvm.intr.powi does not
/// accept) and elementwise ops as linalg.generic; `funcs` runs on each
/// function.
void prepareTensorCode(OpPassManager &funcs);

/// One-shot bufferisation of the whole module, function boundaries with
/// identity layouts (what the runner and the GPU host code pass).
void bufferize(OpPassManager &pm);

/// The run-time checks (cf.assert) lowered in `mode`, on code already in
/// the CFG form (in report mode each check must sit in a function body)
/// and before the memref conversion (report mode also checks the result of
/// every memref.alloc in a function body).
void lowerChecks(OpPassManager &pm, AssertMode mode);

} // namespace mlir::snapkv::stages

#endif // SNAPKV_LIB_PIPELINES_STAGES_H

//===- GPUUtils.cpp - helpers shared by the GPU codegen passes ------------===//

#include "snapkv/Codegen/GPUUtils.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

using namespace mlir;

static bool mappedTo(scf::ForallOp forall,
                     function_ref<bool(Attribute)> isKind) {
  std::optional<ArrayAttr> mapping = forall.getMapping();
  return mapping && !mapping->empty() && llvm::all_of(*mapping, isKind);
}

bool snapkv::isBlockLoop(scf::ForallOp forall) {
  return mappedTo(forall,
                  [](Attribute a) { return isa<gpu::GPUBlockMappingAttr>(a); });
}

bool snapkv::isThreadLoop(scf::ForallOp forall) {
  return mappedTo(forall, [](Attribute a) {
    return isa<gpu::GPUThreadMappingAttr, gpu::GPUWarpMappingAttr>(a);
  });
}

bool snapkv::isInThreadLoop(Operation *op) {
  for (auto forall = op->getParentOfType<scf::ForallOp>(); forall;
       forall = forall->getParentOfType<scf::ForallOp>())
    if (isThreadLoop(forall))
      return true;
  return false;
}

SmallVector<scf::ForallOp> snapkv::blockLoops(Operation *root) {
  SmallVector<scf::ForallOp> loops;
  root->walk<WalkOrder::PreOrder>([&](scf::ForallOp forall) {
    if (isBlockLoop(forall))
      loops.push_back(forall);
  });
  return loops;
}

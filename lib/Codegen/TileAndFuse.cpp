//===- TileAndFuse.cpp - tile the groups the IR names ---------------------===//
//
// Reads the tiling that `convert-snapkv-to-linalg` wrote as data
// (#snapkv.tile on a group's root, snapkv.fuse on its producers) and applies
// it with upstream's tileConsumerAndFuseProducersUsingSCF, consumers first.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Codegen/Passes.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/TileUsingInterface.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/TilingInterface.h"

#include "llvm/ADT/MapVector.h"

#include <map>

namespace mlir::snapkv {
#define GEN_PASS_DEF_TILEANDFUSE
#include "snapkv/Codegen/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;
using namespace mlir::snapkv;

namespace {

constexpr llvm::StringLiteral kTileAttr = "snapkv.tile";
constexpr llvm::StringLiteral kFuseAttr = "snapkv.fuse";
/// On a GPU group's root: its op's configuration, which the block loop
/// carries on (threads, tensor cores: snapkv-gpu-distribute reads it).
constexpr llvm::StringLiteral kConfigAttr = "snapkv.lowering_config";

/// One group as the IR describes it.
struct Group {
  Operation *root;
  TileAttr tile;
  llvm::SmallPtrSet<Operation *, 8> fuse;
};

bool inGroup(Operation *op, int64_t group) {
  auto groups = op->getAttrOfType<DenseI64ArrayAttr>(kFuseAttr);
  return groups && llvm::is_contained(groups.asArrayRef(), group);
}

/// Tiles `group.root` into an scf.forall and fuses the group's producers.
/// A producer that is also used outside the group is yielded by the loop
/// (computed once, in its tile, and used from there). With `gpu_blocks` the
/// loop is mapped to GPU blocks, its innermost tiled loop to x (the largest
/// grid dimension).
LogicalResult tileGroup(RewriterBase &rewriter, const Group &group) {
  bool blocks = group.tile.getMapping() == TileMapping::gpu_blocks;
  llvm::SmallPtrSet<Operation *, 8> members(group.fuse.begin(),
                                            group.fuse.end());
  members.insert(group.root);
  llvm::SmallPtrSet<Operation *, 4> usedOutside;
  // A tensor.dim is no use of the values: it is redirected to the init
  // operand below.
  for (Operation *op : group.fuse)
    for (Operation *user : op->getUsers())
      if (!members.contains(user) && !isa<tensor::DimOp>(user))
        usedOutside.insert(op);

  scf::SCFTilingOptions tiling;
  tiling.setLoopType(scf::SCFTilingOptions::LoopType::ForallOp);
  ArrayRef<int64_t> sizes = group.tile.getSizes();
  tiling.setTileSizes(getAsIndexOpFoldResult(rewriter.getContext(), sizes));
  if (blocks) {
    int64_t tiled =
        llvm::count_if(sizes, [](int64_t size) { return size != 0; });
    SmallVector<Attribute> mapping;
    for (int64_t i = tiled - 1; i >= 0; --i)
      mapping.push_back(gpu::GPUBlockMappingAttr::get(
          rewriter.getContext(), static_cast<gpu::MappingId>(i)));
    tiling.setMapping(mapping);
  }
  scf::SCFTileAndFuseOptions options;
  options.setTilingOptions(tiling);
  options.setFusionControlFn(
      [&](tensor::ExtractSliceOp, OpResult producer,
          bool) -> std::optional<scf::SCFTileAndFuseOptions::ControlFnResult> {
        if (!group.fuse.contains(producer.getOwner()))
          return std::nullopt;
        return scf::SCFTileAndFuseOptions::ControlFnResult{
            usedOutside.contains(producer.getOwner())};
      });
  rewriter.setInsertionPoint(group.root);
  FailureOr<scf::SCFTileAndFuseResult> result =
      scf::tileConsumerAndFuseProducersUsingSCF(
          rewriter, cast<TilingInterface>(group.root), options);
  if (failed(result))
    return group.root->emitError("snapkv-tile-and-fuse: could not tile group ")
           << group.tile.getGroup();
  // Fusion leaves the slices it fused through in place; drop the dead ones
  // before the loop's results replace the producers they slice.
  for (LoopLikeOpInterface loop : result->loops) {
    SmallVector<Operation *> deadSlices;
    loop->walk([&](tensor::ExtractSliceOp slice) {
      if (slice->use_empty())
        deadSlices.push_back(slice);
    });
    for (Operation *slice : deadSlices)
      rewriter.eraseOp(slice);
  }
  if (Attribute config = group.root->getAttr(kConfigAttr);
      config && blocks && !result->loops.empty())
    result->loops.front()->setAttr(kConfigAttr, config);
  for (auto [original, replacement] : result->replacements) {
    // Sizes of a fused producer's result are the sizes of its init operand;
    // read them there, so that nothing before the loop uses the loop.
    auto dps = original.getDefiningOp<DestinationStyleOpInterface>();
    for (OpOperand &use : llvm::make_early_inc_range(original.getUses()))
      if (auto dim = dyn_cast<tensor::DimOp>(use.getOwner()); dim && dps)
        rewriter.modifyOpInPlace(dim, [&] {
          use.set(
              dps.getDpsInitOperand(cast<OpResult>(use.get()).getResultNumber())
                  ->get());
        });
    rewriter.replaceAllUsesWith(original, replacement);
  }
  // The untiled ops are dead now (a yielded producer's other users read the
  // loop's result); erase them so nothing refers back into the loop.
  SmallVector<Operation *> dead = {group.root};
  for (Operation *op : result->fusedProducers)
    dead.push_back(op);
  for (Operation *op : dead)
    if (op->use_empty())
      rewriter.eraseOp(op);
  return success();
}

struct TileAndFuse : public mlir::snapkv::impl::TileAndFuseBase<TileAndFuse> {
  void runOnOperation() override {
    // Group numbers are per function (or other isolated region): the
    // conversion may run on each function on its own.
    llvm::MapVector<Operation *,
                    std::map<int64_t, Operation *, std::greater<int64_t>>>
        scopes;
    WalkResult walk = getOperation()->walk([&](Operation *op) {
      auto tile = op->getAttrOfType<TileAttr>(kTileAttr);
      if (!tile)
        return WalkResult::advance();
      auto tileable = dyn_cast<TilingInterface>(op);
      if (!tileable) {
        op->emitError("snapkv-tile-and-fuse: ")
            << op->getName() << " is not tileable (TilingInterface)";
        return WalkResult::interrupt();
      }
      size_t loops = tileable.getLoopIteratorTypes().size();
      if (loops != tile.getSizes().size()) {
        op->emitError("snapkv-tile-and-fuse: ")
            << tile.getSizes().size() << " tile sizes for an op with " << loops
            << " loops";
        return WalkResult::interrupt();
      }
      // A tile of a reduction loop in an scf.forall would race on the
      // accumulator; buffers cannot be fused into a tile.
      for (auto [loop, kind] : llvm::enumerate(tileable.getLoopIteratorTypes()))
        if (tile.getSizes()[loop] != 0 &&
            kind != utils::IteratorType::parallel) {
          op->emitError("snapkv-tile-and-fuse: loop ")
              << loop << " is a reduction; only parallel loops are tiled";
          return WalkResult::interrupt();
        }
      auto dps = dyn_cast<DestinationStyleOpInterface>(op);
      if (dps && !dps.hasPureTensorSemantics()) {
        op->emitError("snapkv-tile-and-fuse: the op works on buffers; groups "
                      "are tiled on tensors");
        return WalkResult::interrupt();
      }
      Operation *scope = op->getParentWithTrait<OpTrait::IsIsolatedFromAbove>();
      if (!scopes[scope].emplace(tile.getGroup(), op).second) {
        op->emitError("snapkv-tile-and-fuse: two roots of tile group ")
            << tile.getGroup();
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();

    IRRewriter rewriter(&getContext());
    // Consumers (later groups) first: a group's root may read an earlier
    // group's result, never the other way round.
    for (auto &[scope, roots] : scopes) {
      for (auto [groupId, groupRoot] : roots) {
        int64_t id = groupId;
        Operation *root = groupRoot;
        Group group{root, root->getAttrOfType<TileAttr>(kTileAttr), {}};
        scope->walk([&](Operation *op) {
          if (op != root && inGroup(op, id))
            group.fuse.insert(op);
        });
        root->removeAttr(kTileAttr);
        if (failed(tileGroup(rewriter, group)))
          return signalPassFailure();
      }
    }
    // Copies fused into a tile keep the membership; nothing reads it now.
    getOperation()->walk([](Operation *op) {
      op->removeAttr(kTileAttr);
      op->removeAttr(kFuseAttr);
      if (!isa<scf::ForallOp>(op))
        op->removeAttr(kConfigAttr);
    });
  }
};

} // namespace

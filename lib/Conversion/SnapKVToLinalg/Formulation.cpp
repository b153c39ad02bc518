//===- Formulation.cpp - shapes, builders and the select/score entry points
//-===//

#include "Formulation.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"

#include <limits>

using namespace mlir;
using namespace mlir::snapkv;
using namespace mlir::snapkv::detail;

static SelectShape commonShape(Operation *op, RankedTensorType qTy,
                               RankedTensorType kTy, int64_t window,
                               int64_t kernel, PoolingKind pooling,
                               GqaPolicy gqa, double scale) {
  SelectShape s;
  s.elemTy = qTy.getElementType();
  s.batch = qTy.getDimSize(0);
  s.queryHeads = qTy.getDimSize(1);
  s.kvHeads = kTy.getDimSize(1);
  s.group = s.queryHeads / s.kvHeads;
  s.window = window;
  s.dim = qTy.getDimSize(3);
  s.length = kTy.getDimSize(2);
  s.gqa = gqa;
  s.heads = gqa == GqaPolicy::expand ? s.queryHeads : s.kvHeads;
  s.kernel = kernel;
  s.pooling = pooling;
  s.scale = static_cast<float>(scale);
  s.opName = op->getName().getStringRef().str();
  return s;
}

SelectShape SelectShape::get(SelectOp op) {
  SelectShape s = commonShape(
      op, op.getQueries().getType(), op.getKeys().getType(), op.getWindow(),
      op.getKernel(), op.getPooling(), op.getGqa(), op.getEffectiveScale());
  s.capacity = op.getCapacity();
  s.keep = s.capacity - s.window;
  s.block = op.getBlock();
  s.order = op.getOrder();
  s.scoring = op.getScoring();
  s.sinks = op.getEffectiveSinks();
  s.seed = op.getEffectiveSeed();
  return s;
}

SelectShape SelectShape::get(ScoreOp op) {
  SelectShape s = commonShape(
      op, op.getQueries().getType(), op.getKeys().getType(), op.getWindow(),
      op.getKernel(), op.getPooling(), op.getGqa(), op.getEffectiveScale());
  s.capacity = s.window + 1;
  s.keep = 1;
  s.block = op.getBlock();
  s.order = Order::position;
  s.scoring = op.getScoring();
  s.sinks = s.seed = 0;
  return s;
}

SelectShape SelectShape::get(TopPositionsOp op) {
  RankedTensorType sTy = op.getScores().getType();
  SelectShape s;
  s.elemTy = sTy.getElementType();
  s.batch = sTy.getDimSize(0);
  s.queryHeads = s.kvHeads = s.heads = sTy.getDimSize(1);
  s.group = 1;
  s.window = op.getWindow();
  s.dim = 1;
  // The prompt length the chunk size follows, as for the whole select.
  s.length =
      sTy.isDynamicDim(2) ? ShapedType::kDynamic : sTy.getDimSize(2) + s.window;
  s.gqa = GqaPolicy::mean;
  s.kernel = 1;
  s.pooling = PoolingKind::avg;
  s.scale = 1.0f;
  s.capacity = op.getCapacity();
  s.keep = s.capacity - s.window;
  s.order = op.getOrder();
  s.scoring = Scoring::votes;
  s.sinks = s.seed = 0;
  s.opName = op->getName().getStringRef().str();
  return s;
}

SelectShape SelectShape::get(GatherOp op) {
  RankedTensorType srcTy = op.getSource().getType();
  RankedTensorType initTy = op.getInit().getType();
  SelectShape s;
  s.elemTy = srcTy.getElementType();
  s.batch = srcTy.getDimSize(0);
  s.kvHeads = srcTy.getDimSize(1);
  s.queryHeads = s.heads = initTy.getDimSize(1);
  s.group = op.getGroup();
  s.gqa = s.group == 1 ? GqaPolicy::mean : GqaPolicy::expand;
  s.window = 1;
  s.dim = srcTy.getDimSize(3);
  s.length = srcTy.getDimSize(2);
  s.kernel = 1;
  s.pooling = PoolingKind::avg;
  s.scale = 1.0f;
  s.capacity = 2;
  s.keep = 1;
  s.order = Order::position;
  s.scoring = Scoring::votes;
  s.sinks = s.seed = 0;
  s.opName = op->getName().getStringRef().str();
  return s;
}

Formulation::Formulation(OpBuilder &builder, Location loc,
                         const SelectShape &shape,
                         const FormulationOptions &options, TileRecorder *tiles)
    : b(builder), loc(loc), s(shape), opts(options),
      layout(Layout::of(options)), tiles(tiles) {
  f32 = b.getF32Type();
  i32 = b.getI32Type();
  i64 = b.getI64Type();
  // Finding a kept position costs a search over P / chunk chunk counts and a
  // scan of one chunk; the chunk counts' prefix sums cost (P / chunk)^2.
  // With a static prompt length the chunk is about sqrt(P), which balances
  // the two; `options.chunk` is the size otherwise.
  keyTile = opts.keyTile;
  if (!ShapedType::isDynamic(s.length))
    keyTile = std::max<int64_t>(1, std::min(keyTile, s.length));
  chunk = opts.chunk;
  if (!ShapedType::isDynamic(s.length) && opts.autoChunk)
    chunk = autoChunkSize(s.length, s.window);
}

int64_t mlir::snapkv::detail::autoChunkSize(int64_t length, int64_t window) {
  int64_t prefix = std::max<int64_t>(length - window, 1);
  int64_t chunk = 16;
  while (chunk < 1024 && chunk * chunk < prefix)
    chunk *= 2;
  return chunk;
}

//===----------------------------------------------------------------------===//
// The whole-tensor layout
//===----------------------------------------------------------------------===//

namespace mlir::snapkv::detail {
/// Every step on whole [B, H, ...] tensors (the CPU tiles the stage ops
/// that run it, not its steps).
class WholeTensors final : public Layout {
public:
  SmallVector<KeyTiles> keyTiles(Formulation &f, Value keys,
                                 Value length) const override {
    return f.viewKeyTiles(keys, length);
  }
  bool restagesPerKernel() const override { return false; }
  bool keepsLogits() const override { return true; }
  SmallVector<Value> perRow(Formulation &f,
                            function_ref<SmallVector<Value>()> inits,
                            RowBody body) const override {
    return body(f, Rows{&f, {}, {}});
  }
};
} // namespace mlir::snapkv::detail

const Layout &Layout::of(const FormulationOptions &options) {
  static const WholeTensors wholeTensors;
  switch (options.mapping) {
  case TileMapping::forall:
    return wholeTensors;
  case TileMapping::gpu_blocks:
    return rowBlocks();
  }
  llvm_unreachable("unknown tile mapping");
}

Value Rows::of(Value source, bool byKvHead) const {
  return bi ? outer->rowOf(source, bi, h, byKvHead) : source;
}

//===----------------------------------------------------------------------===//
// Builders
//===----------------------------------------------------------------------===//

Value Formulation::cIndex(int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
}
Value Formulation::cI32(int32_t v) {
  return arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(v));
}
Value Formulation::cF32(float v) {
  return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
}
Value Formulation::empty(ArrayRef<OpFoldResult> shape, Type elem) {
  return tensor::EmptyOp::create(b, loc, shape, elem);
}
Value Formulation::filled(ArrayRef<OpFoldResult> shape, Type elem, Value init) {
  return linalg::FillOp::create(b, loc, init, empty(shape, elem)).getResult(0);
}
AffineMap Formulation::map(unsigned numDims, ArrayRef<unsigned> dims) {
  SmallVector<AffineExpr> exprs;
  for (unsigned d : dims)
    exprs.push_back(b.getAffineDimExpr(d));
  return AffineMap::get(numDims, 0, exprs, b.getContext());
}
linalg::GenericOp Formulation::generic(
    TypeRange resultTypes, ValueRange ins, ValueRange outs,
    ArrayRef<AffineMap> maps, ArrayRef<utils::IteratorType> iters,
    function_ref<void(OpBuilder &, Location, ValueRange)> body) {
  return linalg::GenericOp::create(b, loc, resultTypes, ins, outs, maps, iters,
                                   body);
}

void Formulation::blockGroup(Operation *root, ArrayRef<int64_t> tileSizes,
                             ArrayRef<Operation *> fuse,
                             ArrayRef<Operation *> staged) {
  if (!tiles)
    return;
  SmallVector<Operation *> members(fuse.begin(), fuse.end());
  for (Operation *op : staged)
    for (Value in : cast<linalg::LinalgOp>(op).getDpsInputs())
      if (Operation *producer = in.getDefiningOp<linalg::LinalgOp>())
        members.push_back(producer);
  tiles->record(root, tileSizes, members);
}

void TileRecorder::record(Operation *root, ArrayRef<int64_t> tileSizes,
                          ArrayRef<Operation *> fuse) {
  MLIRContext *ctx = root->getContext();
  int64_t id = next++;
  // One size per loop, the loops not named untiled.
  SmallVector<int64_t> sizes(tileSizes);
  sizes.resize(cast<linalg::LinalgOp>(root).getNumLoops(), 0);
  root->setAttr("snapkv.tile",
                TileAttr::get(ctx, id, sizes, TileMapping::gpu_blocks));
  root->setAttr("snapkv.lowering_config", config);
  // Initial values (fills) are computed per tile too, so that no full-size
  // init tensor is materialised.
  llvm::SetVector<Operation *> members(fuse.begin(), fuse.end());
  SmallVector<Operation *> withRoot(fuse.begin(), fuse.end());
  withRoot.push_back(root);
  for (Operation *op : withRoot)
    if (auto dps = dyn_cast<DestinationStyleOpInterface>(op))
      for (Value init : dps.getDpsInits())
        if (auto fill = init.getDefiningOp<linalg::FillOp>())
          members.insert(fill);
  for (Operation *op : members) {
    SmallVector<int64_t> ids;
    if (auto before = op->getAttrOfType<DenseI64ArrayAttr>("snapkv.fuse"))
      llvm::append_range(ids, before.asArrayRef());
    ids.push_back(id);
    op->setAttr("snapkv.fuse", DenseI64ArrayAttr::get(ctx, ids));
  }
}

SmallVector<Value> Formulation::castTo(SmallVector<Value> values,
                                       TypeRange types) {
  for (auto [v, ty] : llvm::zip(values, types))
    if (v.getType() != ty)
      v = tensor::CastOp::create(b, loc, ty, v);
  return values;
}

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

Value Formulation::checkedLength(Value keys, Value values) {
  Value length = tensor::DimOp::create(b, loc, keys, 2);
  if (opts.checked)
    return length;
  if (values) {
    Value valuesLength = tensor::DimOp::create(b, loc, values, 2);
    Value same = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, length,
                                       valuesLength);
    cf::AssertOp::create(b, loc, same,
                         s.opName +
                             ": prompt length of 'values' differs from 'keys'");
  }
  Value longEnough = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge,
                                           length, cIndex(s.window));
  cf::AssertOp::create(
      b, loc, longEnough,
      llvm::formatv("{0}: prompt length (keys dim 2) is shorter than window "
                    "{1}",
                    s.opName, s.window)
          .str());
  // Counters and ranks are i32.
  Value small =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, length,
                            cIndex(std::numeric_limits<int32_t>::max()));
  cf::AssertOp::create(
      b, loc, small,
      s.opName + ": prompt length (keys dim 2) must be below 2^31 - 1");
  return length;
}

Value Formulation::prefixLength(Value length) {
  // A constant, when the length is, so that every shape after it is static.
  if (std::optional<int64_t> l = getConstantIntValue(length))
    return cIndex(*l - s.window);
  return arith::SubIOp::create(b, loc, length, cIndex(s.window));
}

OpFoldResult Formulation::paddedPrefix(Value prefix) {
  AffineExpr p = b.getAffineSymbolExpr(0);
  return affine::makeComposedFoldedAffineApply(
      b, loc, (p + chunk - 1).floorDiv(chunk) * chunk,
      {getAsOpFoldResult(prefix)});
}

SmallVector<Value> Formulation::select(Value queries, Value keys, Value values,
                                       TypeRange resultTypes) {
  if (!ShapedType::isDynamic(s.length) &&
      !cast<RankedTensorType>(values.getType()).isDynamicDim(2)) {
    Value length = cIndex(s.length);
    return castTo(s.length < s.capacity
                      ? bypass(keys, values, length)
                      : selection(queries, keys, values, length),
                  resultTypes);
  }
  // Dynamic prompt length: check at run time what the verifier could not,
  // then branch between the bypass and the selection.
  Value length = checkedLength(keys, values);
  Value isShort = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt,
                                        length, cIndex(s.capacity));
  auto ifOp = scf::IfOp::create(b, loc, resultTypes, isShort,
                                /*withElseRegion=*/true);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  scf::YieldOp::create(b, loc,
                       castTo(bypass(keys, values, length), resultTypes));
  b.setInsertionPointToStart(ifOp.elseBlock());
  scf::YieldOp::create(
      b, loc, castTo(selection(queries, keys, values, length), resultTypes));
  b.setInsertionPointAfter(ifOp);
  return SmallVector<Value>(ifOp.getResults());
}

SmallVector<Value> Formulation::score(Value queries, Value keys,
                                      TypeRange resultTypes) {
  Value length = ShapedType::isDynamic(s.length) ? checkedLength(keys, Value())
                                                 : cIndex(s.length);
  Value prefix = prefixLength(length);
  Value v = votes(queries, keys, length, prefix);
  OpFoldResult padded = paddedPrefix(prefix);
  Value pooled = layout
                     .perRow(
                         *this,
                         [&] {
                           return SmallVector<Value>{empty(
                               {ofr(s.batch), ofr(s.heads), padded}, f32)};
                         },
                         [&](Formulation &f, const Rows &rows) {
                           return SmallVector<Value>{
                               f.pool(rows.of(v, false), prefix, padded)};
                         })
                     .front();
  SmallVector<OpFoldResult> offsets(3, ofr(0)), strides(3, ofr(1));
  SmallVector<OpFoldResult> sizes = {ofr(s.batch), ofr(s.heads),
                                     getAsOpFoldResult(prefix)};
  pooled =
      tensor::ExtractSliceOp::create(b, loc, pooled, offsets, sizes, strides);
  return castTo({v, pooled}, resultTypes);
}

Value Formulation::topPositions(Value scores, Value init) {
  auto scoresTy = cast<RankedTensorType>(scores.getType());
  Value prefix;
  if (scoresTy.isDynamicDim(2)) {
    prefix = tensor::DimOp::create(b, loc, scores, 2);
    checkPrefix(prefix);
  } else {
    prefix = cIndex(scoresTy.getDimSize(2));
  }
  return layout
      .perRow(
          *this, [&] { return SmallVector<Value>{init}; },
          [&](Formulation &f, const Rows &rows) {
            // On whole tensors the ranking writes into `init` itself.
            return SmallVector<Value>{f.rankPositions(
                rows.of(scores, false), prefix, rows.bi ? Value() : init)};
          })
      .front();
}

Value Formulation::rankPositions(Value scores, Value prefix, Value init) {
  // Chunk padding, which orderKeys ranks below every position.
  OpFoldResult padded = paddedPrefix(prefix);
  AffineExpr p = b.getAffineSymbolExpr(0), q = b.getAffineSymbolExpr(1);
  OpFoldResult high = affine::makeComposedFoldedAffineApply(
      b, loc, q - p, {getAsOpFoldResult(prefix), padded});
  Value pooled = scores;
  if (!isConstantIntValue(high, 0))
    pooled = tensor::PadOp::create(
        b, loc, Type(), scores, ArrayRef<OpFoldResult>{ofr(0), ofr(0), ofr(0)},
        ArrayRef<OpFoldResult>{ofr(0), ofr(0), high}, cF32(0.0f));
  Value keys = orderKeys(pooled, prefix);
  Value thresh = threshold(keys);
  Value above = countAbove(keys, thresh);
  auto [positions, keptKeys] = keptPositions(keys, thresh, above);
  if (s.order == Order::score)
    positions = orderByScore(positions, keptKeys);
  return withWindow(positions, prefix, init);
}

Value Formulation::gatherRows(Value source, Value indices, Value init) {
  OpFoldResult slots = tensor::getMixedSize(b, loc, init, 2);
  Value length = tensor::DimOp::create(b, loc, source, 2);
  checkGather(length, indices, slots);
  return gather(source, indices, slots, init, length);
}

void Formulation::checkPrefix(Value prefix) {
  if (opts.checked)
    return;
  auto check = [&](arith::CmpIPredicate pred, int64_t bound,
                   const std::string &message) {
    cf::AssertOp::create(
        b, loc, arith::CmpIOp::create(b, loc, pred, prefix, cIndex(bound)),
        s.opName + ": " + message);
  };
  check(arith::CmpIPredicate::sge, s.keep,
        llvm::formatv("'scores' holds fewer prefix positions than "
                      "capacity - window ({0})",
                      s.keep)
            .str());
  check(arith::CmpIPredicate::slt,
        std::numeric_limits<int32_t>::max() - s.window,
        "prompt length (prefix + window) must be below 2^31 - 1");
}

void Formulation::checkGather(Value length, Value indices, OpFoldResult slots) {
  if (opts.checked)
    return;
  if (cast<RankedTensorType>(indices.getType()).isDynamicDim(2) ||
      isa<Value>(slots)) {
    Value same =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                              tensor::DimOp::create(b, loc, indices, 2),
                              getValueOrCreateConstantIndexOp(b, loc, slots));
    cf::AssertOp::create(b, loc, same,
                         s.opName + ": 'indices' dim 2 differs from 'init'");
  }
  if (ShapedType::isDynamic(s.length)) {
    // An empty source has no row to clamp to.
    Value rows = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt,
                                       length, cIndex(0));
    Value none = arith::CmpIOp::create(
        b, loc, arith::CmpIPredicate::eq,
        getValueOrCreateConstantIndexOp(b, loc, slots), cIndex(0));
    cf::AssertOp::create(b, loc, arith::OrIOp::create(b, loc, rows, none),
                         s.opName + ": 'source' has no rows to gather");
  }
}

void Formulation::checkStage(Operation *op) {
  llvm::TypeSwitch<Operation *>(op)
      .Case([&](ScoreOp score) {
        Value length = ShapedType::isDynamic(s.length)
                           ? checkedLength(score.getKeys(), Value())
                           : cIndex(s.length);
        if (isAccumulated(s.scoring) &&
            score.getQueries().getType().isDynamicDim(2))
          checkQueryRows(tensor::DimOp::create(b, loc, score.getQueries(), 2),
                         length);
      })
      .Case([&](TopPositionsOp top) {
        if (top.getScores().getType().isDynamicDim(2))
          checkPrefix(tensor::DimOp::create(b, loc, top.getScores(), 2));
      })
      .Case([&](GatherOp gather) {
        checkGather(tensor::DimOp::create(b, loc, gather.getSource(), 2),
                    gather.getIndices(),
                    tensor::getMixedSize(b, loc, gather.getInit(), 2));
      });
}

SmallVector<Value> Formulation::selection(Value queries, Value keys,
                                          Value values, Value length) {
  Value prefix = prefixLength(length);
  // Votes for the vote scorings; the ranking keys of `recent` / `random`
  // otherwise (computed over all rows, so that GPU row blocks see their row's
  // keys without needing their own row index).
  bool byVotes = s.scoring != Scoring::recent && s.scoring != Scoring::random;
  Value v = !byVotes ? Value()
            : s.scoring == Scoring::keydiff
                ? keydiffScores(keys, length, prefix)
                : votes(queries, keys, length, prefix);
  Value ranked =
      byVotes ? Value() : comparisonKeys(prefix, paddedPrefix(prefix));
  return layout.perRow(
      *this,
      [&] {
        SmallVector<OpFoldResult> rows = {ofr(s.batch), ofr(s.heads),
                                          ofr(s.capacity), ofr(s.dim)};
        return SmallVector<Value>{empty(rows, s.elemTy), empty(rows, s.elemTy),
                                  empty(ArrayRef(rows).drop_back(), i64)};
      },
      [&](Formulation &f, const Rows &rows) {
        return f.choose(v ? rows.of(v, false) : Value(),
                        ranked ? rows.of(ranked, false) : Value(),
                        rows.of(keys, true), rows.of(values, true), prefix);
      });
}

SmallVector<Value> Formulation::choose(Value v, Value ranked, Value keys,
                                       Value values, Value prefix) {
  Value orderKeyed =
      v ? orderKeys(pool(v, prefix, paddedPrefix(prefix)), prefix) : ranked;
  Value thresh = threshold(orderKeyed);
  Value above = countAbove(orderKeyed, thresh);
  auto [positions, keptKeys] = keptPositions(orderKeyed, thresh, above);
  if (s.order == Order::score)
    positions = orderByScore(positions, keptKeys);
  Value indices = withWindow(positions, prefix);
  return {gather(keys, indices, ofr(s.capacity)),
          gather(values, indices, ofr(s.capacity)), indices};
}

SmallVector<Value> Formulation::bypass(Value keys, Value values, Value length) {
  return layout.perRow(
      *this,
      [&] {
        SmallVector<OpFoldResult> rows = {
            ofr(s.batch), ofr(s.heads), getAsOpFoldResult(length), ofr(s.dim)};
        return SmallVector<Value>{empty(rows, s.elemTy), empty(rows, s.elemTy),
                                  empty(ArrayRef(rows).drop_back(), i64)};
      },
      [&](Formulation &f, const Rows &rows) {
        return f.keepAll(rows.of(keys, true), rows.of(values, true), length);
      });
}

SmallVector<Value> Formulation::keepAll(Value keys, Value values,
                                        Value length) {
  OpFoldResult kept = getAsOpFoldResult(length);
  Value indices = allPositions(kept);
  return {gather(keys, indices, kept), gather(values, indices, kept), indices};
}

//===- Vectorize.cpp - register tiling and vectorisation of linalg ops ----===//
//
// A driver around upstream facilities: each linalg op on tensors is tiled
// with scf.for (TilingInterface) into a register-sized tile and the tile is
// vectorised with linalg::vectorize (masked where a size is dynamic). The
// choice of tile is decided here, plus three small rewrites of the register
// tile's operand reads that upstream's patterns (LLVM 22) leave as
// transposes of broadcasts; loop-invariant accumulators are hoisted
// afterwards by the upstream loop-invariant-subset-hoisting pass.
//
//===----------------------------------------------------------------------===//

#include "BF16Microkernel.h"
#include "Int8Microkernel.h"
#include "VectorLoops.h"
#include "snapkv/Codegen/Passes.h"
#include "snapkv/Codegen/Q41Contraction.h"
#include "snapkv/Codegen/ScaledContraction.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "mlir/Dialect/DLTI/DLTI.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/TileUsingInterface.h"
#include "mlir/Dialect/SCF/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/Vector/Transforms/LoweringPatterns.h"
#include "mlir/Dialect/Vector/Transforms/VectorRewritePatterns.h"
#include "mlir/Dialect/X86Vector/X86VectorDialect.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/TargetParser/Host.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_VECTORIZE
#include "snapkv/Codegen/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;

namespace {

using utils::IteratorType;

/// Whether `v` may bufferize into a view whose rows are not packed back to
/// back: a slice that is not one run of whole inner rows. Upstream's N-D
/// `tensor.extract` vectorisation (LLVM 22) flattens the indices with the
/// tensor's logical shape, which reads the wrong elements of such a view
/// once bufferised (docs/reliability.md, F8).
bool mayBeStrided(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (auto reshape = dyn_cast<tensor::ExpandShapeOp>(def))
      v = reshape.getSrc();
    else if (auto reshape = dyn_cast<tensor::CollapseShapeOp>(def))
      v = reshape.getSrc();
    else if (auto cast = dyn_cast<tensor::CastOp>(def))
      v = cast.getSource();
    else
      break;
  }
  auto slice = v.getDefiningOp<tensor::ExtractSliceOp>();
  if (!slice)
    return false;
  if (!slice.hasUnitStride())
    return true;
  ArrayRef<int64_t> source = slice.getSourceType().getShape();
  ArrayRef<int64_t> sizes = slice.getStaticSizes();
  // Whole rows from the innermost dim out, then one partial dim, then unit
  // dims only.
  int64_t d = static_cast<int64_t>(source.size()) - 1;
  while (d >= 0 && !ShapedType::isDynamic(sizes[d]) && sizes[d] == source[d])
    --d;
  for (int64_t outer = d - 1; outer >= 0; --outer)
    if (sizes[outer] != 1)
      return true;
  return mayBeStrided(slice.getSource());
}

/// N-D `tensor.extract` is vectorised only from sources that stay packed.
bool ndExtractIsSafe(linalg::LinalgOp op) {
  WalkResult result = op->walk([&](tensor::ExtractOp extract) {
    return mayBeStrided(extract.getTensor()) ? WalkResult::interrupt()
                                             : WalkResult::advance();
  });
  return !result.wasInterrupted();
}

/// Marks the ops of a peeled remainder of rows until the second round.
constexpr llvm::StringLiteral kRowsByOne = "__snapkv_rows_by_one";

/// Vector register width of the target the IR names: the
/// `max_vector_op_width` of the "CPU" device in the closest
/// `dlti.target_system_spec` (upstream's target description).
std::optional<int64_t> targetVectorBits(Operation *op) {
  for (; op; op = op->getParentOp()) {
    FailureOr<Attribute> width =
        dlti::query(op, ArrayRef<StringRef>{"CPU", "max_vector_op_width"});
    if (failed(width))
      continue;
    if (auto value = dyn_cast<IntegerAttr>(*width))
      return value.getValue().getZExtValue();
    return std::nullopt;
  }
  return std::nullopt;
}

/// Vector register width of the host, in bits.
int64_t hostVectorBits() {
  llvm::StringMap<bool> features = llvm::sys::getHostCPUFeatures();
  if (features.lookup("avx512f"))
    return 512;
  if (features.lookup("avx2") || features.lookup("avx"))
    return 256;
  return 128;
}

struct Target {
  int64_t lanes;     // f32 lanes per register
  int64_t registers; // vector registers
};

/// How a contraction's register tile multiplies (see the pass description).
enum class Microkernel { none, avx512bf16 };

std::optional<Microkernel> parseMicrokernel(StringRef name) {
  return llvm::StringSwitch<std::optional<Microkernel>>(name)
      .Case("none", Microkernel::none)
      .Case("avx512bf16", Microkernel::avx512bf16)
      .Default(std::nullopt);
}

/// The microkernel of `op`: the strategy's `snapkv.microkernel` on it
/// (snapkv-configure-lowering's, from the CPU features), else the pass's
/// option (`option`, "auto" resolved from the host's features). `amx` takes
/// the AVX512_BF16 kernel (no AMX tiles yet; CPUs with AMX-BF16 have
/// AVX512_BF16). Only a contraction of bf16 operands into f32 whose
/// right-hand operand is read in rows along the vector (`[..., K, N]`, the
/// left-hand one `[..., K]` or `[..., K, M]`) gets one: the pairs of
/// reduction steps are then two rows of it.
Microkernel chooseMicrokernel(linalg::LinalgOp op, Microkernel option,
                              const Target &target) {
  if (auto attr =
          op->getAttrOfType<snapkv::MicrokernelAttr>("snapkv.microkernel"))
    option = attr.getValue() == snapkv::Microkernel::none
                 ? Microkernel::none
                 : Microkernel::avx512bf16;
  // vdpbf16ps accumulates 4, 8 or 16 f32 lanes.
  if (option == Microkernel::none ||
      !llvm::is_contained({4, 8, 16}, target.lanes))
    return Microkernel::none;
  if (!linalg::isaContractionOpInterface(op) || op.getNumDpsInputs() != 2 ||
      op.getNumReductionLoops() > 2)
    return Microkernel::none;
  auto elementType = [](Value v) { return getElementTypeOrSelf(v.getType()); };
  if (!elementType(op.getDpsInputs()[0]).isBF16() ||
      !elementType(op.getDpsInputs()[1]).isBF16() ||
      !elementType(op.getDpsInits()[0]).isF32())
    return Microkernel::none;
  SmallVector<unsigned> reductions;
  op.getReductionDims(reductions);
  SmallVector<AffineMap> maps = op.getIndexingMapsArray();
  auto endsWith = [](AffineMap map, ArrayRef<unsigned> dims) {
    if (map.getNumResults() < dims.size())
      return false;
    for (auto [expr, dim] :
         llvm::zip(map.getResults().take_back(dims.size()), dims))
      if (!expr.isFunctionOfDim(dim) || !isa<AffineDimExpr>(expr))
        return false;
    return true;
  };
  unsigned k = reductions.back();
  auto n = dyn_cast<AffineDimExpr>(maps[2].getResults().back());
  if (!n || maps[0].isFunctionOfDim(n.getPosition()))
    return Microkernel::none;
  if (reductions.size() == 2) {
    // B already in pairs, `[..., K / 2, N, 2]` (the VNNI layout; attention's
    // V): the reduction is (K / 2, 2), the pair innermost in both operands.
    if (op.getStaticLoopRanges()[k] != 2 ||
        !endsWith(maps[1], {reductions.front(), n.getPosition(), k}))
      return Microkernel::none;
  } else if (!endsWith(maps[1], {k, n.getPosition()})) {
    return Microkernel::none;
  }
  // The left-hand operand `[..., K]`, or `[..., K, M]` (attention's P, rows
  // innermost: each row's pair is interleaved from two of its rows).
  auto last = dyn_cast<AffineDimExpr>(maps[0].getResults().back());
  if (!endsWith(maps[0], {k}) &&
      !(last && endsWith(maps[0], {k, last.getPosition()})))
    return Microkernel::none;
  return Microkernel::avx512bf16;
}

/// The width of a register tile's vector over a loop of `range`: the whole
/// loop if it is at most `limit`, else the widest power-of-two number of
/// vectors up to `limit` that divides it (a tile that does not divide its
/// loop is taken one element at a time: 96 columns in tiles of 64 ran as
/// scalars; a width of 3 vectors, such as 48, leaves LLVM a non-power-of-two
/// vector type whose rows it assembles with inserts and spills: a GEMM with
/// [8 x 48] tiles ran at 4 % of the FMA peak), else `limit`.
int64_t vectorWidth(int64_t range, int64_t limit, int64_t lanes) {
  if (ShapedType::isDynamic(range))
    return limit;
  if (range <= limit)
    return range;
  for (int64_t width = limit; width >= lanes; width /= 2)
    if (width % lanes == 0 && range % width == 0)
      return width;
  return limit;
}

/// Register tile of a contraction: the innermost parallel loop is the
/// vector; the parallel loop before it (with a static size > 1) gives the
/// rows of the accumulator tile, as many as fit in the registers beside the
/// operands; every other loop, the reduction included, steps by one.
SmallVector<int64_t> contractionTile(linalg::LinalgOp op,
                                     ArrayRef<int64_t> ranges,
                                     const Target &target, bool rowsByOne,
                                     std::optional<unsigned> &peelRows) {
  SmallVector<IteratorType> iters = op.getIteratorTypesArray();
  SmallVector<int64_t> tile(ranges.size(), 1);
  std::optional<unsigned> vectorDim, rowDim;
  for (int64_t d = ranges.size() - 1; d >= 0; --d) {
    if (iters[d] != IteratorType::parallel)
      continue;
    if (!vectorDim) {
      vectorDim = d;
    } else if (ranges[d] != 1) {
      rowDim = d;
      break;
    }
  }
  if (!vectorDim)
    return tile;
  int64_t range = ranges[*vectorDim];
  int64_t width = vectorWidth(range, 4 * target.lanes, target.lanes);
  tile[*vectorDim] = width;
  // Rows over a dynamic extent (the tokens of a projection): a tile of two
  // vectors by as many rows as the registers hold beside them, the loop over
  // the rows peeled so that the full tiles are static; the remainder rows
  // are taken one at a time.
  if (rowDim && ShapedType::isDynamic(ranges[*rowDim]) &&
      !ShapedType::isDynamic(ranges[*vectorDim])) {
    if (rowsByOne)
      return tile;
    width = vectorWidth(range, 2 * target.lanes, target.lanes);
    tile[*vectorDim] = width;
    int64_t vectorsPerRow = (width + target.lanes - 1) / target.lanes;
    int64_t rows = std::max<int64_t>(1, (target.registers - vectorsPerRow - 2) /
                                            vectorsPerRow);
    tile[*rowDim] = rows;
    if (rows > 1)
      peelRows = *rowDim;
    return tile;
  }
  if (rowDim && !ShapedType::isDynamic(ranges[*rowDim])) {
    int64_t vectorsPerRow = (width + target.lanes - 1) / target.lanes;
    int64_t budget = std::max<int64_t>(
        1, (target.registers - vectorsPerRow - 2) / vectorsPerRow);
    int64_t rows = 1;
    for (int64_t r = std::min(budget, ranges[*rowDim]); r >= 1; --r)
      if (ranges[*rowDim] % r == 0) {
        rows = r;
        break;
      }
    tile[*rowDim] = rows;
  }
  return tile;
}

/// Tile of any other op: the innermost loop is the vector (whole if short,
/// else four registers' worth); when it is parallel and the loop before it
/// is a reduction, eight steps of that reduction are taken at once (a
/// multi-reduction over rows of vectors); other loops step by one.
SmallVector<int64_t> defaultTile(linalg::LinalgOp op, ArrayRef<int64_t> ranges,
                                 const Target &target) {
  SmallVector<IteratorType> iters = op.getIteratorTypesArray();
  size_t n = ranges.size();
  SmallVector<int64_t> tile(n, 1);
  if (n == 0)
    return tile;
  int64_t inner = ranges[n - 1];
  int64_t maxWidth = 4 * target.lanes;
  tile[n - 1] = (!ShapedType::isDynamic(inner) && inner <= 2 * maxWidth)
                    ? inner
                    : maxWidth;
  if (n >= 2 && iters[n - 1] == IteratorType::parallel &&
      iters[n - 2] == IteratorType::reduction &&
      !ShapedType::isDynamic(ranges[n - 2]) && ranges[n - 2] % 8 == 0)
    tile[n - 2] = 8;
  // An innermost loop shorter than a vector of an elementwise op (a layout
  // change into pairs: attention's V as [Tk / 2, D, 2]) takes the loop
  // before it whole too: one [D x 2] vector, one shuffle of its [2 x D]
  // read, instead of D vectors of 2.
  if (n >= 2 && !ShapedType::isDynamic(inner) && inner < target.lanes &&
      !ShapedType::isDynamic(ranges[n - 2]) &&
      ranges[n - 2] * inner <= 2 * maxWidth &&
      llvm::all_of(
          iters, [](IteratorType it) { return it == IteratorType::parallel; }))
    tile[n - 2] = ranges[n - 2];
  return tile;
}

/// A transpose that moves only unit dimensions (the other dimensions keep
/// their order) is a shape_cast, which folds into the extracts and reads
/// around it. The contraction lowering makes one per operand of every
/// register tile ([6x16x1] -> [1x6x16]); left as transposes they lower to a
/// flattened vector rebuilt element by element. Upstream's canonicalisation
/// (LLVM 22) keeps them, and its shape-cast lowering handles only 2-D ones.
struct TransposeOfUnitDimsToShapeCast : OpRewritePattern<vector::TransposeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(vector::TransposeOp op,
                                PatternRewriter &rewriter) const override {
    VectorType source = op.getSourceVectorType();
    if (source.isScalable())
      return failure();
    int64_t last = -1;
    for (int64_t dim : op.getPermutation()) {
      if (source.getDimSize(dim) == 1)
        continue;
      if (dim < last)
        return failure();
      last = dim;
    }
    rewriter.replaceOpWithNewOp<vector::ShapeCastOp>(
        op, op.getResultVectorType(), op.getVector());
    return success();
  }
};

/// A shape_cast that only drops unit dimensions of a transfer_read's result
/// is the same read with those dimensions left out of its permutation map:
/// the register tile's operand reads ([6x1] broadcast to [6x16x1]) then
/// lower to one load and splat per row instead of a vector rebuilt lane by
/// lane.
struct ReadDroppingUnitDims : OpRewritePattern<vector::ShapeCastOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(vector::ShapeCastOp cast,
                                PatternRewriter &rewriter) const override {
    auto read = cast.getSource().getDefiningOp<vector::TransferReadOp>();
    if (!read || read.getMask() || !read->hasOneUse())
      return failure();
    VectorType from = read.getVectorType(), to = cast.getResultVectorType();
    if (from.isScalable() || to.isScalable())
      return failure();
    // Which dimensions of `from` survive: those equal, in order, to `to`'s.
    SmallVector<unsigned> kept;
    ArrayRef<int64_t> toShape = to.getShape();
    size_t next = 0;
    for (auto [dim, size] : llvm::enumerate(from.getShape())) {
      if (next < toShape.size() && size == toShape[next]) {
        kept.push_back(dim);
        ++next;
      } else if (size != 1 || !read.isDimInBounds(dim)) {
        // A dropped dimension is no longer checked against the source's
        // bounds, so it must be known in bounds.
        return failure();
      }
    }
    if (next != toShape.size() ||
        static_cast<int64_t>(kept.size()) == from.getRank())
      return failure();
    AffineMap map = read.getPermutationMap();
    SmallVector<AffineExpr> results;
    SmallVector<bool> inBounds;
    for (unsigned dim : kept) {
      results.push_back(map.getResult(dim));
      inBounds.push_back(read.isDimInBounds(dim));
    }
    AffineMap newMap =
        AffineMap::get(map.getNumDims(), 0, results, rewriter.getContext());
    rewriter.replaceOpWithNewOp<vector::TransferReadOp>(
        cast, to, read.getBase(), read.getIndices(), AffineMapAttr::get(newMap),
        read.getPadding(), /*mask=*/Value(),
        rewriter.getBoolArrayAttr(inBounds));
    return success();
  }
};

/// A transfer_read that broadcasts (a constant-0 result of its map) reads
/// one element along that dimension and a vector.broadcast stretches it:
/// each row of a register tile's operand becomes one load and one splat.
/// vector-to-scf would otherwise build the broadcast row lane by lane.
struct ReadThenBroadcast : OpRewritePattern<vector::TransferReadOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(vector::TransferReadOp read,
                                PatternRewriter &rewriter) const override {
    VectorType type = read.getVectorType();
    if (read.getMask() || type.isScalable())
      return failure();
    // ReadDroppingUnitDims first: it needs the read itself.
    if (read->hasOneUse() && isa<vector::ShapeCastOp>(*read->user_begin()))
      return failure();
    AffineMap map = read.getPermutationMap();
    SmallVector<int64_t> shape(type.getShape());
    SmallVector<AffineExpr> results(map.getResults());
    // A one-element broadcast reads the element at the index of a source
    // dimension the map leaves out, so it may read that dimension instead:
    // the map becomes a (minor) identity that vector-to-scf lowers to loads.
    llvm::SmallBitVector unused(map.getNumDims(), true);
    for (AffineExpr expr : results)
      if (auto d = dyn_cast<AffineDimExpr>(expr))
        unused.reset(d.getPosition());
    bool stretched = false;
    for (auto [dim, expr] : llvm::enumerate(results)) {
      auto c = dyn_cast<AffineConstantExpr>(expr);
      if (!c || c.getValue() != 0 || shape[dim] == 1)
        continue;
      shape[dim] = 1;
      stretched = true;
      int next = unused.find_first();
      if (next >= 0) {
        expr = rewriter.getAffineDimExpr(next);
        unused.reset(next);
      }
    }
    if (!stretched)
      return failure();
    auto narrow = vector::TransferReadOp::create(
        rewriter, read.getLoc(), VectorType::get(shape, type.getElementType()),
        read.getBase(), read.getIndices(),
        AffineMapAttr::get(
            AffineMap::get(map.getNumDims(), 0, results, getContext())),
        read.getPadding(), /*mask=*/Value(), read.getInBoundsAttr());
    rewriter.replaceOpWithNewOp<vector::BroadcastOp>(read, type, narrow);
    return success();
  }
};

/// Whether `op` has one row (every parallel loop of its left-hand operand
/// steps once): a decode step's vector x matrix product. It takes the
/// fallback: it reuses no interleaved pair of B across rows, so the
/// interleaving cost as much as the multiply-adds it saved (decode steps
/// were slower with the dot products). One-row tiles of a larger product
/// (its remainder rows) keep them.
bool isVectorTimesMatrix(linalg::LinalgOp op) {
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  AffineMap lhs = op.getIndexingMapsArray().front();
  return llvm::all_of(llvm::seq<unsigned>(0, ranges.size()), [&](unsigned d) {
    return op.getIteratorTypesArray()[d] != IteratorType::parallel ||
           !lhs.isFunctionOfDim(d) || ranges[d] == 1;
  });
}

/// Columns of the vector x Q8_0 matrix product per chunk of its block sums.
constexpr int64_t kScaledChunk = 2048;

/// The vector x Q8_0 matrix product (snapkv-quantize-weights' one-row
/// scaled contraction over (m, k / 32, k % 32, n), a part of it once
/// snapkv-parallelize has split its blocks) with each block's 32 products
/// summed before its scale: per block, the 32 rows of int8 values are read
/// in address order, widened (`sitofp`) and multiply-added into a row of
/// block sums (one FMA per vector, the sums in the L1 cache), then one FMA
/// per vector adds the sums, times the block's scales, to the result. The
/// per-product form (`x * (q * s)`) spent a multiply and a load of the
/// scales per product; accumulators in registers over a block's 32 rows
/// read the rows a vector at a time across them (32 strided streams), which
/// ran slower than that on the layers' projections.
LogicalResult vectorizeScaledVectorTimesMatrix(RewriterBase &rewriter,
                                               linalg::LinalgOp op,
                                               int64_t lanes) {
  MLIRContext *ctx = op.getContext();
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (ranges.size() != 4 || ranges[0] != 1 ||
      llvm::any_of(ranges, ShapedType::isDynamic) || op.getNumDpsInputs() != 3)
    return failure();
  if (op.getIndexingMapsArray() != snapkv::scaledContractionMaps(ctx))
    return failure();
  // The body `out + a * (sitofp(q) * scale)` with a (perhaps widened from
  // bf16), q, scale the inputs in order (isScaledContraction checked its
  // shape).
  Block &body = op->getRegion(0).front();
  auto add =
      cast<arith::AddFOp>(body.getTerminator()->getOperand(0).getDefiningOp());
  Value out = body.getArgument(3);
  auto product = (add.getLhs() == out ? add.getRhs() : add.getLhs())
                     .getDefiningOp<arith::MulFOp>();
  auto scaled = product.getRhs().getDefiningOp<arith::MulFOp>();
  auto widen = scaled.getLhs().getDefiningOp<arith::SIToFPOp>();
  Value a = product.getLhs();
  if (auto ext = a.getDefiningOp<arith::ExtFOp>())
    a = ext.getIn();
  if (a != body.getArgument(0) || widen.getIn() != body.getArgument(1) ||
      scaled.getRhs() != body.getArgument(2))
    return failure();
  Type f32 = rewriter.getF32Type();
  Value x = op.getDpsInputs()[0], values = op.getDpsInputs()[1],
        scales = op.getDpsInputs()[2], init = op.getDpsInits()[0];
  auto elementType = [](Value v) { return getElementTypeOrSelf(v.getType()); };
  if (!(elementType(x).isF32() || elementType(x).isBF16()) ||
      !elementType(scales).isF32() || !elementType(init).isF32() ||
      !elementType(values).isInteger(8))
    return failure();
  int64_t columns = ranges[3];
  int64_t width = vectorWidth(columns, 4 * lanes, lanes);
  if (columns % width != 0)
    return failure();
  // Columns in chunks whose block sums (and results) stay in the L1 cache:
  // the whole row up to 2,048 columns (8 KB of f32), else the widest
  // multiple of `width` below that divides it (the 49,152 logits: 24 of
  // 2,048; wider chunks ran slower).
  int64_t chunk = columns;
  if (chunk > kScaledChunk)
    for (chunk = kScaledChunk - kScaledChunk % width; columns % chunk != 0;)
      chunk -= width;
  Location loc = op.getLoc();
  auto index = [&](int64_t v) -> Value {
    return arith::ConstantIndexOp::create(rewriter, loc, v);
  };
  Value c0 = index(0), c1 = index(1);
  auto wideType = VectorType::get({width}, f32);
  auto intType = VectorType::get({width}, elementType(values));
  Value zeros = arith::ConstantOp::create(
      rewriter, loc, wideType, DenseElementsAttr::get(wideType, 0.0f));
  auto loop = snapkv::forCarrying;
  auto read = snapkv::readVector;
  auto write = snapkv::writeVector;
  // A block's 32 sums of a chunk: a row of the chunk's width, re-zeroed per
  // block, carried through the loops (one buffer once bufferized).
  Value sums0 = tensor::EmptyOp::create(rewriter, loc, {chunk}, f32);
  auto chunks = scf::ForOp::create(
      rewriter, loc, c0, index(columns), index(chunk), ValueRange{init, sums0},
      [&](OpBuilder &b, Location loc, Value first, ValueRange carried) {
        auto blocks = scf::ForOp::create(
            b, loc, c0, index(ranges[1]), c1, carried,
            [&](OpBuilder &b, Location loc, Value block, ValueRange carried) {
              Value sums =
                  loop(b, loc, c0, chunk, width, carried[1],
                       [&](OpBuilder &b, Location loc, Value col, Value sums) {
                         return write(b, loc, zeros, sums, {col});
                       })
                      .getResult(0);
              // Row after row of the block, in address order: one FMA per
              // widened vector of int8 values.
              sums =
                  loop(b, loc, c0, ranges[2], 1, sums,
                       [&](OpBuilder &b, Location loc, Value row,
                           Value sums) -> Value {
                         Value a = tensor::ExtractOp::create(
                             b, loc, x, ValueRange{c0, block, row});
                         if (!a.getType().isF32())
                           a = arith::ExtFOp::create(b, loc, f32, a);
                         Value splat =
                             vector::BroadcastOp::create(b, loc, wideType, a);
                         return loop(b, loc, c0, chunk, width, sums,
                                     [&](OpBuilder &b, Location loc, Value col,
                                         Value sums) {
                                       Value at = arith::AddIOp::create(
                                           b, loc, first, col);
                                       Value q = read(b, loc, intType, values,
                                                      {block, row, at});
                                       Value sum = vector::FMAOp::create(
                                           b, loc, splat,
                                           arith::SIToFPOp::create(b, loc,
                                                                   wideType, q),
                                           read(b, loc, wideType, sums, {col}));
                                       return write(b, loc, sum, sums, {col});
                                     })
                             .getResult(0);
                       })
                      .getResult(0);
              // The block's scales, once per sum.
              Value result =
                  loop(b, loc, c0, chunk, width, carried[0],
                       [&](OpBuilder &b, Location loc, Value col, Value out) {
                         Value at = arith::AddIOp::create(b, loc, first, col);
                         Value sum = vector::FMAOp::create(
                             b, loc, read(b, loc, wideType, sums, {col}),
                             read(b, loc, wideType, scales, {block, at}),
                             read(b, loc, wideType, out, {c0, at}));
                         return write(b, loc, sum, out, {c0, at});
                       })
                      .getResult(0);
              scf::YieldOp::create(b, loc, ValueRange{result, sums});
            });
        scf::YieldOp::create(b, loc, blocks.getResults());
      });
  rewriter.replaceOp(op, chunks.getResult(0));
  return success();
}

/// `write` of a whole static tensor tile as a write of its flattened
/// vector into the tile collapsed to 1-D.
void writeThroughFlatView(RewriterBase &rewriter,
                          vector::TransferWriteOp write) {
  auto type = dyn_cast<RankedTensorType>(write.getBase().getType());
  VectorType vecType = write.getVectorType();
  if (!type || !type.hasStaticShape() || write.getMask() ||
      !write.getPermutationMap().isMinorIdentity() ||
      type.getNumElements() != vecType.getNumElements() ||
      !llvm::all_of(write.getIndices(),
                    [](Value i) { return isZeroInteger(i); }))
    return;
  rewriter.setInsertionPoint(write);
  Location loc = write.getLoc();
  ReassociationIndices all =
      llvm::to_vector(llvm::seq<int64_t>(0, type.getRank()));
  Value flat = tensor::CollapseShapeOp::create(
      rewriter, loc, write.getBase(), ArrayRef<ReassociationIndices>{all});
  Value vector = vector::ShapeCastOp::create(
      rewriter, loc,
      VectorType::get({type.getNumElements()}, vecType.getElementType()),
      write.getVector());
  Value zero = arith::ConstantIndexOp::create(rewriter, loc, 0);
  Value written =
      vector::TransferWriteOp::create(rewriter, loc, vector, flat,
                                      ValueRange{zero}, ArrayRef<bool>{true})
          .getResult();
  rewriter.replaceOpWithNewOp<tensor::ExpandShapeOp>(
      write, type, written, ArrayRef<ReassociationIndices>{all});
}

struct VectorizePass : snapkv::impl::VectorizeBase<VectorizePass> {
  using Base::Base;

  /// Whether a dynamic vector dimension was peeled (a second round runs).
  bool peeled = false;
  /// The microkernel the option asks for.
  Microkernel kernel = Microkernel::none;
  /// Whether int8 block products take vpdpbusd (`int8-microkernel`).
  bool int8Vnni = false;

  void runOnOperation() override {
    peeled = false;
    // The option, else the module's target, else the machine running us.
    int64_t bits = vectorBits;
    if (!bits)
      bits = targetVectorBits(getOperation()).value_or(hostVectorBits());
    if (bits < 64 || bits % 32 != 0) {
      emitError(getOperation().getLoc())
          << "snapkv-vectorize: vector-bits must be a multiple of 32 of at "
             "least 64, got "
          << bits;
      return signalPassFailure();
    }
    Target target{bits / 32, bits >= 512 ? 32 : 16};
    std::optional<Microkernel> chosen =
        microkernel == "auto"
            ? (llvm::sys::getHostCPUFeatures().lookup("avx512bf16")
                   ? Microkernel::avx512bf16
                   : Microkernel::none)
            : parseMicrokernel(microkernel);
    if (!chosen) {
      emitError(getOperation().getLoc())
          << "snapkv-vectorize: microkernel must be auto, avx512bf16 or none, "
             "got '"
          << microkernel << "'";
      return signalPassFailure();
    }
    kernel = *chosen;
    if (int8Microkernel != "auto" && int8Microkernel != "avx512vnni" &&
        int8Microkernel != "none") {
      emitError(getOperation().getLoc())
          << "snapkv-vectorize: int8-microkernel must be auto, avx512vnni or "
             "none, got '"
          << int8Microkernel << "'";
      return signalPassFailure();
    }
    int8Vnni = int8Microkernel == "auto"
                   ? llvm::sys::getHostCPUFeatures().lookup("avx512vnni")
                   : int8Microkernel == "avx512vnni";

    SmallVector<linalg::LinalgOp> ops;
    getOperation().walk([&](linalg::LinalgOp op) {
      // An empty static loop (a prompt shorter than one key tile has no
      // whole tiles) computes nothing and has no register tile.
      if (op.hasPureTensorSemantics() &&
          !llvm::is_contained(op.getStaticLoopRanges(), 0))
        ops.push_back(op);
    });
    IRRewriter rewriter(&getContext());
    for (linalg::LinalgOp op : ops)
      tileAndVectorize(rewriter, op, target);

    // Second round: the full tiles peeled off dynamic vector dimensions,
    // once canonicalisation has given their slices static sizes. Every
    // other op in a tile loop with static sizes was tried in the first round
    // and its tile is the whole op now, so trying it again changes nothing.
    if (peeled) {
      RewritePatternSet statics(&getContext());
      tensor::ExtractSliceOp::getCanonicalizationPatterns(statics,
                                                          &getContext());
      tensor::InsertSliceOp::getCanonicalizationPatterns(statics,
                                                         &getContext());
      tensor::CastOp::getCanonicalizationPatterns(statics, &getContext());
      for (Dialect *dialect : getContext().getLoadedDialects())
        dialect->getCanonicalizationPatterns(statics);
      if (failed(applyPatternsGreedily(getOperation(), std::move(statics))))
        return signalPassFailure();
      SmallVector<linalg::LinalgOp> fullTiles, remainders;
      getOperation().walk([&](linalg::LinalgOp op) {
        if (op->removeAttr(kRowsByOne))
          remainders.push_back(op);
        else if (op.hasPureTensorSemantics() &&
                 op->getParentOfType<scf::ForOp>() &&
                 !llvm::any_of(op.getStaticLoopRanges(), ShapedType::isDynamic))
          fullTiles.push_back(op);
      });
      for (linalg::LinalgOp op : fullTiles)
        tileAndVectorize(rewriter, op, target);
      for (linalg::LinalgOp op : remainders)
        tileAndVectorize(rewriter, op, target, /*rowsByOne=*/true);
    }

    RewritePatternSet patterns(&getContext());
    vector::populateCastAwayVectorLeadingOneDimPatterns(patterns);
    vector::populateDropUnitDimWithShapeCastPatterns(patterns);
    vector::populateVectorReductionToContractPatterns(patterns);
    vector::populateSinkVectorOpsPatterns(patterns);
    patterns.add<TransposeOfUnitDimsToShapeCast>(&getContext());
    scf::ForOp::getCanonicalizationPatterns(patterns, &getContext());
    tensor::populateFoldTensorEmptyPatterns(patterns);
    for (Dialect *dialect : getContext().getLoadedDialects())
      dialect->getCanonicalizationPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();

    // A register tile's contraction steps the reduction by one: lowered to
    // elementwise multiply-adds (FMAs once the `contract` flags are honoured)
    // rather than to per-element dot products.
    RewritePatternSet contractions(&getContext());
    vector::populateVectorContractLoweringPatterns(
        contractions, vector::VectorContractLowering::ParallelArith);
    vector::populateVectorContractLoweringPatterns(
        contractions, vector::VectorContractLowering::OuterProduct,
        /*benefit=*/0);
    vector::populateVectorOuterProductLoweringPatterns(contractions);
    contractions.add<TransposeOfUnitDimsToShapeCast, ReadDroppingUnitDims,
                     ReadThenBroadcast>(&getContext());
    vector::ShapeCastOp::getCanonicalizationPatterns(contractions,
                                                     &getContext());
    vector::ExtractOp::getCanonicalizationPatterns(contractions, &getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(contractions))))
      return signalPassFailure();
  }

  void tileAndVectorize(RewriterBase &rewriter, linalg::LinalgOp op,
                        const Target &target, bool rowsByOne = false) {
    SmallVector<int64_t> ranges = op.getStaticLoopRanges();
    if (ranges.empty())
      return;
    // The vector dimension is the innermost loop, except in a contraction,
    // where it is the innermost parallel loop: a dynamic reduction after it
    // (P x V over a dynamic prompt length) steps by one like any dynamic
    // loop. A dynamic vector dimension of a contraction (Q x K^T over a
    // dynamic prompt length) is tiled by the vector width and the last,
    // partial tile peeled off (upstream masked vectorisation of a
    // contraction with a broadcast operand does not verify at LLVM 22);
    // other ops with one stay scalar loops (the selection over a dynamic
    // prompt length), which LLVM's loop vectoriser handles where it can.
    // The vector x Q8_0 matrix product too: with the default tile, its eight
    // reduction steps became per-column dot products.
    bool contraction = linalg::isaContractionOpInterface(op) ||
                       snapkv::isScaledContraction(op);
    if (snapkv::isInt8ScaledContraction(op)) {
      rewriter.setInsertionPoint(op);
      auto attr =
          op->getAttrOfType<snapkv::MicrokernelAttr>("snapkv.microkernel");
      bool vnni =
          attr ? attr.getValue() == snapkv::Microkernel::avx512vnni : int8Vnni;
      if (succeeded(snapkv::vectorizeInt8VectorTimesMatrix(
              rewriter, op, target.lanes, vnni)) ||
          succeeded(snapkv::vectorizeInt8MatrixTimesMatrix(rewriter, op,
                                                           target.lanes, vnni)))
        return;
    }
    if (succeeded(snapkv::vectorizeQ41VectorTimesMatrix(
            rewriter, op, target.lanes, int8Vnni)))
      return;
    if (snapkv::isScaledContraction(op) && isVectorTimesMatrix(op)) {
      rewriter.setInsertionPoint(op);
      if (succeeded(
              vectorizeScaledVectorTimesMatrix(rewriter, op, target.lanes)))
        return;
    }
    bool dot =
        contraction &&
        chooseMicrokernel(op, kernel, target) == Microkernel::avx512bf16 &&
        !isVectorTimesMatrix(op);
    // The bf16 dot products need three more registers: the two index vectors
    // of the permutations that interleave B's rows and the pair a
    // permutation overwrites (with 14 rows the accumulators spilled).
    Target tileTarget = target;
    if (dot)
      tileTarget.registers -= 3;
    std::optional<unsigned> peelRows;
    SmallVector<int64_t> tile =
        contraction
            ? contractionTile(op, ranges, tileTarget, rowsByOne, peelRows)
            : defaultTile(op, ranges, target);
    std::optional<unsigned> vectorDim;
    for (int64_t d = ranges.size() - 1; d >= 0 && !vectorDim; --d)
      if (!contraction ||
          op.getIteratorTypesArray()[d] == IteratorType::parallel)
        vectorDim = d;
    if (!vectorDim)
      return;
    bool masked = ShapedType::isDynamic(ranges[*vectorDim]);
    if (masked && !contraction)
      return;
    // The bf16 microkernel takes the reduction two steps at a time. A
    // reduction of odd extent, or one known only at run time (a block of
    // it), is peeled: its pairs are static tiles, vectorised in the second
    // round; the odd step left, if any, stays a scalar loop. The remainder
    // rows of a peeled row loop take such a reduction one step at a time.
    // B already in pairs (two reduction loops, the pair's static 2 last):
    // the pair is whole.
    std::optional<unsigned> pairDim;
    if (dot && !masked) {
      SmallVector<unsigned> reductions;
      op.getReductionDims(reductions);
      unsigned k = reductions.front();
      bool ragged = ShapedType::isDynamic(ranges[k]) || ranges[k] % 2 != 0;
      if (reductions.size() == 2) {
        tile[reductions.back()] = 2;
      } else if ((!ragged || !rowsByOne) &&
                 (ShapedType::isDynamic(ranges[k]) || ranges[k] >= 2)) {
        tile[k] = 2;
        if (ragged)
          pairDim = k;
      }
    }
    // A tile that covers a whole static loop is not a tile; a dynamic loop
    // other than a masked vector dimension steps by one, so every other tile
    // is static.
    SmallVector<int64_t> tileSizes(tile.size(), 0);
    bool tiled = false;
    for (auto [d, size] : llvm::enumerate(tile)) {
      if ((masked && d == *vectorDim) || d == peelRows || d == pairDim)
        ; // the last, partial tile is peeled off
      else if (ShapedType::isDynamic(ranges[d]))
        size = 1;
      else if (size >= ranges[d] || ranges[d] % size != 0)
        size = size >= ranges[d] ? 0 : 1;
      tileSizes[d] = size;
      tiled |= size != 0;
    }
    // A single row (a decode step's projection, vector x matrix): the
    // reduction loop goes outside the loop over the vector's tiles, so that
    // the matrix is read row after row, in address order, and the few
    // accumulators stay in the L1 cache instead of registers.
    SmallVector<int64_t> interchange;
    if (contraction && !masked &&
        llvm::all_of(llvm::enumerate(ranges),
                     [&](auto it) {
                       auto [d, range] = it;
                       return d == *vectorDim || range == 1 ||
                              op.getIteratorTypesArray()[d] ==
                                  IteratorType::reduction;
                     }) &&
        llvm::none_of(ranges, ShapedType::isDynamic)) {
      for (unsigned d = 0; d < ranges.size(); ++d)
        if (d != *vectorDim)
          interchange.push_back(d);
      interchange.push_back(*vectorDim);
    }
    Operation *tileOp = op;
    SmallVector<LoopLikeOpInterface> tileLoops;
    if (masked && !tiled)
      return;
    if (tiled) {
      scf::SCFTilingOptions options;
      options.setTileSizes(
          getAsIndexOpFoldResult(rewriter.getContext(), tileSizes));
      SmallVector<unsigned> reductions;
      for (auto [d, it] : llvm::enumerate(op.getIteratorTypesArray()))
        if (it == IteratorType::reduction && tileSizes[d] != 0)
          reductions.push_back(d);
      options.setReductionDims(reductions);
      if (!interchange.empty())
        options.setInterchange(interchange);
      rewriter.setInsertionPoint(op);
      FailureOr<scf::SCFTilingResult> result = scf::tileUsingSCF(
          rewriter, cast<TilingInterface>(op.getOperation()), options);
      if (failed(result))
        return;
      rewriter.replaceOp(op, result->replacements);
      tileOp = result->tiledOps.front();
      tileLoops = result->loops;
    }
    auto tiledOp = cast<linalg::LinalgOp>(tileOp);
    // A peeled dimension (dynamic rows, or a masked vector dimension): the
    // loop over it without its last, partial iteration holds full tiles,
    // vectorised in the second round once canonicalisation has made their
    // shapes static. Remainder rows are tiled again there, one row at a
    // time; the remainder of a vector dimension stays a scalar loop.
    // The loop over `dim`: the loops are the tiled dimensions in the
    // interchanged order.
    auto loopOf = [&](unsigned dim) {
      SmallVector<int64_t> order = interchange;
      if (order.empty())
        order = llvm::to_vector(llvm::seq<int64_t>(0, tileSizes.size()));
      unsigned index = 0;
      for (int64_t d : order) {
        if (d == dim)
          break;
        index += tileSizes[d] != 0;
      }
      return cast<scf::ForOp>(tileLoops[index]);
    };
    // The reduction loop is innermost: peeled first, so that a peeled row
    // loop's remainder holds both of its parts.
    if (pairDim) {
      scf::ForOp loop = loopOf(*pairDim), remainder;
      rewriter.setInsertionPoint(loop);
      if (failed(scf::peelForLoopAndSimplifyBounds(rewriter, loop, remainder)))
        return;
      peeled = true;
    }
    if (peelRows || masked) {
      unsigned dim = peelRows ? *peelRows : *vectorDim;
      scf::ForOp loop = loopOf(dim);
      scf::ForOp remainder;
      rewriter.setInsertionPoint(loop);
      if (failed(scf::peelForLoopAndSimplifyBounds(rewriter, loop, remainder)))
        return;
      peeled = true;
      if (peelRows)
        remainder.walk([&](linalg::LinalgOp rest) {
          rest->setAttr(kRowsByOne, rewriter.getUnitAttr());
        });
      return;
    }
    if (pairDim ||
        llvm::any_of(tiledOp.getStaticLoopRanges(), ShapedType::isDynamic))
      return;
    rewriter.setInsertionPoint(tiledOp);
    if (chooseMicrokernel(tiledOp, kernel, target) == Microkernel::avx512bf16 &&
        succeeded(snapkv::vectorizeBF16Dot(rewriter, tiledOp, target.lanes)))
      return;
    FailureOr<linalg::VectorizationResult> vectorized =
        linalg::vectorize(rewriter, tiledOp, /*inputVectorSizes=*/{},
                          /*inputScalableVecDims=*/{},
                          /*vectorizeNDExtract=*/ndExtractIsSafe(tiledOp));
    if (failed(vectorized))
      return;
    // A copy that transposes an N-D vector (V's rows into pairs): a read
    // and a vector.transpose (one shuffle of the flattened vector, Shuffle1D),
    // written through a 1-D view of the whole tile. convert-vector-to-scf
    // would otherwise read and write it a row of the result at a time, rows
    // of two elements here.
    llvm::SetVector<Operation *> transposing, writes;
    for (Value v : vectorized->replacements)
      if (auto write = v.getDefiningOp<vector::TransferWriteOp>())
        if (auto read =
                write.getVector().getDefiningOp<vector::TransferReadOp>())
          if (read.getVectorType().getRank() >= 2 &&
              read.getPermutationMap().isPermutation() &&
              !read.getPermutationMap().isMinorIdentity()) {
            transposing.insert(read);
            writes.insert(write);
          }
    rewriter.replaceOp(tiledOp, vectorized->replacements);
    if (transposing.empty())
      return;
    RewritePatternSet permutations(rewriter.getContext());
    vector::populateVectorTransferPermutationMapLoweringPatterns(permutations);
    // Only the reads: the writes are rewritten below.
    (void)applyOpPatternsGreedily(transposing.getArrayRef(),
                                  std::move(permutations),
                                  GreedyRewriteConfig().setStrictness(
                                      GreedyRewriteStrictness::ExistingOps));
    for (Operation *write : writes)
      writeThroughFlatView(rewriter, cast<vector::TransferWriteOp>(write));
  }
};

} // namespace

//===- QuantizeWeights.cpp - Q8_0 and Q4_1 projection weights -------------===//
//
// A model's projection weights taken as GGUF Q8_0 stores them (int8 values
// and one scale per 32 along the reduction), or as Q4_1 does (nibbles, a
// scale and a min per 32: QuantizeQ41.cpp), instead of f32 or bf16: the entry
// points' and the layer functions' arguments change type, and each
// linalg.matmul by such a weight reads the int8 values and widens them in
// its own inner loop (a vector x matrix product), or dequantizes the matrix
// once per call before the product (a prompt's rows: the conversion is K x N
// against the product's M x K x N). With int8 activations the values are
// taken packed by 4 rows, the layout `vpdpbusd` reads (the runner binds the
// permuted copy once). Plain linalg on tensors: the pipelines
// tile, vectorise and parallelise it as they do the f32 or bf16 matmul.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Dialect/SnapKV/Transforms/Passes.h"

#include "QuantizeQ41.h"
#include "SignatureRewrite.h"
#include "snapkv/Codegen/ScaledContraction.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/SymbolTable.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"

#include <functional>

namespace mlir::snapkv {
#define GEN_PASS_DEF_QUANTIZEWEIGHTS
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;
using namespace mlir::snapkv;

namespace {

/// Q8_0's block: one scale per 32 consecutive values along the reduction.
constexpr int64_t kBlock = 32;
/// Rows per column of the packed values (`activations=i8`): `vpdpbusd` adds
/// 4 adjacent byte products into each i32 lane.
constexpr int64_t kGroup = 4;
constexpr llvm::StringLiteral kQuantized = "snapkv.quantized";

/// The block formats a weight may be taken in; each is its values argument
/// and the `parts` after it (`snapkv.quantized` = format, format_part).
enum class Format { q8_0, q4_1 };

std::optional<Format> parseFormat(StringRef name) {
  if (name == "q8_0")
    return Format::q8_0;
  if (name == "q4_1")
    return Format::q4_1;
  return std::nullopt;
}

StringRef nameOf(Format format) {
  return format == Format::q8_0 ? "q8_0" : "q4_1";
}

/// The arguments after the values: Q8_0's scales; Q4_1's scales `d` and
/// mins `m` (the weight `q * d + m`).
SmallVector<StringRef> partsOf(Format format) {
  if (format == Format::q8_0)
    return {"scales"};
  return {"scales", "mins"};
}

/// A weight of `[K, N]` f32 or bf16 (`--dtype bf16`'s) whose K is a whole
/// number of blocks.
bool quantizable(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape() || tensor.getRank() != 2)
    return false;
  Type element = tensor.getElementType();
  return (element.isF32() || element.isBF16()) &&
         tensor.getDimSize(0) % kBlock == 0;
}

/// `use` is the right-hand operand of a linalg.matmul of the default maps
/// (`[M, K] x [K, N]`) whose operands have one type and whose result is f32.
bool isMatmulRhs(OpOperand &use) {
  auto matmul = dyn_cast<linalg::MatmulOp>(use.getOwner());
  if (!matmul || use.getOperandNumber() != 1 || matmul.hasUserDefinedMaps() ||
      !matmul.hasPureTensorSemantics())
    return false;
  auto element = [](Value v) { return getElementTypeOrSelf(v.getType()); };
  return element(matmul.getInputs()[0]) == element(use.get()) &&
         element(matmul.getOutputs()[0]).isF32();
}

bool isWeight(func::FuncOp func, unsigned i) {
  auto transposed = func.getArgAttrOfType<BoolAttr>(i, "snapkv.transposed");
  bool isTransposed = transposed
                          ? transposed.getValue()
                          : func.getArgAttr(i, "snapkv.transposed") != nullptr;
  return func.getArgAttrOfType<StringAttr>(i, "snapkv.weight") &&
         isTransposed && quantizable(func.getArgumentTypes()[i]);
}

/// Q8_0: one int8 per value, `[K, N]`, or `packed` (`activations=i8`):
/// `[K / 4, N, 4]` (the values of rows 4i..4i+3 of each column adjacent,
/// `linalg.pack` of `[K, N]` with inner_dims_pos = [0] and inner_tiles =
/// [4]); Q4_1: one byte per two values of a block (its nibbles), `[K / 2, N]`.
RankedTensorType valuesType(RankedTensorType weight, Format format,
                            bool packed) {
  Type i8 = IntegerType::get(weight.getContext(), 8);
  SmallVector<int64_t> shape(weight.getShape());
  if (format == Format::q4_1)
    shape[0] /= 2;
  else if (packed)
    shape = {shape[0] / kGroup, shape[1], kGroup};
  return RankedTensorType::get(shape, i8);
}

/// f32 whatever the weight's type: GGUF's f16 scales, exactly.
RankedTensorType scalesType(RankedTensorType weight) {
  return RankedTensorType::get(
      {weight.getDimSize(0) / kBlock, weight.getDimSize(1)},
      Float32Type::get(weight.getContext()));
}

/// `value` ([K, N] or [M, K]) with K split into [K / 32, 32].
Value splitBlocks(OpBuilder &b, Location loc, Value value, unsigned dim) {
  auto type = cast<RankedTensorType>(value.getType());
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] /= kBlock;
  shape.insert(shape.begin() + dim + 1, kBlock);
  SmallVector<ReassociationIndices> groups;
  for (unsigned d = 0; d < type.getRank(); ++d)
    groups.push_back(d == dim  ? ReassociationIndices{d, d + 1}
                     : d < dim ? ReassociationIndices{d}
                               : ReassociationIndices{d + 1});
  SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, loc, value);
  sizes[dim] = b.getIndexAttr(shape[dim]);
  sizes.insert(sizes.begin() + dim + 1, b.getIndexAttr(kBlock));
  return tensor::ExpandShapeOp::create(
      b, loc, RankedTensorType::get(shape, type.getElementType()), value,
      groups, sizes);
}

/// `matmul(x, dequant(values, scales))` where `x` has one row: one
/// contraction over (m, k / 32, k % 32, n) whose body widens the int8 value
/// and scales it (exactly the dequantized f32 weight: an f16 scale times an
/// int8 fits f32's significand) before the multiply-add; a bf16 `x` is
/// widened to f32 first (the products of bf16 matmuls are f32's too).
Value vectorTimesQuantized(OpBuilder &b, Location loc, Value x, Value values,
                           Value scales, Value init) {
  SmallVector<AffineMap> maps = scaledContractionMaps(b.getContext());
  using utils::IteratorType;
  SmallVector<IteratorType> iterators = {
      IteratorType::parallel, IteratorType::reduction, IteratorType::reduction,
      IteratorType::parallel};
  auto generic = linalg::GenericOp::create(
      b, loc, TypeRange{init.getType()},
      ValueRange{splitBlocks(b, loc, x, 1), splitBlocks(b, loc, values, 0),
                 scales},
      ValueRange{init}, maps, iterators,
      [](OpBuilder &nb, Location nloc, ValueRange args) {
        Value a = args[0];
        if (!a.getType().isF32())
          a = arith::ExtFOp::create(nb, nloc, nb.getF32Type(), a);
        Value wide =
            arith::SIToFPOp::create(nb, nloc, nb.getF32Type(), args[1]);
        Value weight = arith::MulFOp::create(nb, nloc, wide, args[2]);
        Value product = arith::MulFOp::create(nb, nloc, a, weight);
        Value sum = arith::AddFOp::create(nb, nloc, args[3], product);
        linalg::YieldOp::create(nb, nloc, ValueRange{sum});
      });
  return generic.getResult(0);
}

} // namespace

/// `x`'s rows quantized per block of 32 as GGUF Q8_0 quantizes: `scale =
/// max|x| / 127` and `a = round(x / scale)` (a multiply by `1 / scale`, 0 for
/// a block of zeros); the `[m, K / 32, 32]` int8 values and `[m, K / 32]`
/// scales.
std::pair<Value, Value>
snapkv::quantizeActivationBlocks(OpBuilder &b, Location loc, Value x) {
  MLIRContext *ctx = b.getContext();
  Type f32 = b.getF32Type();
  Value blocks = splitBlocks(b, loc, x, 1);
  using utils::IteratorType;
  AffineExpr m, kb, kk;
  bindDims(ctx, m, kb, kk);
  AffineMap all = AffineMap::getMultiDimIdentityMap(3, ctx);
  AffineMap perBlock = AffineMap::get(3, 0, {m, kb}, ctx);
  auto widened = [&](OpBuilder &nb, Location nloc, Value v) -> Value {
    return v.getType().isF32() ? v : arith::ExtFOp::create(nb, nloc, f32, v);
  };
  // max |x| per block.
  Value zero = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0));
  // The row count may be dynamic (a prompt's).
  SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, loc, blocks);
  Value rowShape = tensor::EmptyOp::create(
      b, loc, ArrayRef<OpFoldResult>(sizes).take_front(2), f32);
  Value maxima0 = linalg::FillOp::create(b, loc, zero, rowShape).getResult(0);
  Value maxima =
      linalg::GenericOp::create(
          b, loc, TypeRange{maxima0.getType()}, ValueRange{blocks},
          ValueRange{maxima0}, ArrayRef<AffineMap>{all, perBlock},
          ArrayRef<IteratorType>{IteratorType::parallel, IteratorType::parallel,
                                 IteratorType::reduction},
          [&](OpBuilder &nb, Location nloc, ValueRange args) {
            Value magnitude =
                math::AbsFOp::create(nb, nloc, widened(nb, nloc, args[0]));
            Value max = arith::MaximumFOp::create(nb, nloc, args[1], magnitude);
            linalg::YieldOp::create(nb, nloc, ValueRange{max});
          })
          .getResult(0);
  // scale = max / 127.
  AffineMap id2 = AffineMap::getMultiDimIdentityMap(2, ctx);
  Value activationScales =
      linalg::GenericOp::create(
          b, loc, TypeRange{rowShape.getType()}, ValueRange{maxima},
          ValueRange{rowShape}, ArrayRef<AffineMap>{id2, id2},
          ArrayRef<IteratorType>{IteratorType::parallel,
                                 IteratorType::parallel},
          [&](OpBuilder &nb, Location nloc, ValueRange args) {
            Value limit =
                arith::ConstantOp::create(nb, nloc, nb.getF32FloatAttr(127));
            Value scale = arith::DivFOp::create(nb, nloc, args[0], limit);
            linalg::YieldOp::create(nb, nloc, ValueRange{scale});
          })
          .getResult(0);
  // a = round(x * (1 / scale)).
  Value quantized0 =
      tensor::EmptyOp::create(b, loc, sizes, IntegerType::get(ctx, 8));
  Value quantized =
      linalg::GenericOp::create(
          b, loc, TypeRange{quantized0.getType()},
          ValueRange{blocks, activationScales}, ValueRange{quantized0},
          ArrayRef<AffineMap>{all, perBlock, all},
          SmallVector<IteratorType>(3, IteratorType::parallel),
          [&](OpBuilder &nb, Location nloc, ValueRange args) {
            Value zero =
                arith::ConstantOp::create(nb, nloc, nb.getF32FloatAttr(0));
            Value one =
                arith::ConstantOp::create(nb, nloc, nb.getF32FloatAttr(1));
            Value inverse = arith::DivFOp::create(nb, nloc, one, args[1]);
            Value isZero = arith::CmpFOp::create(
                nb, nloc, arith::CmpFPredicate::OEQ, args[1], zero);
            inverse = arith::SelectOp::create(nb, nloc, isZero, zero, inverse);
            Value scaled = arith::MulFOp::create(
                nb, nloc, widened(nb, nloc, args[0]), inverse);
            Value rounded = math::RoundOp::create(nb, nloc, scaled);
            Value value = arith::FPToSIOp::create(
                nb, nloc, IntegerType::get(ctx, 8), rounded);
            linalg::YieldOp::create(nb, nloc, ValueRange{value});
          })
          .getResult(0);
  return {quantized, activationScales};
}

namespace {

/// `matmul(x, dequant(values, scales))` with `x` (its rows: a decode step's
/// one, a prompt's many) quantized too (`activations=i8`,
/// quantizeActivationBlocks), then the int8 x int8 contraction of
/// int8ContractionMaps, whose `values` are packed by 4 rows (valuesType).
Value int8TimesQuantized(OpBuilder &b, Location loc, Value x, Value values,
                         Value scales, Value init) {
  MLIRContext *ctx = b.getContext();
  auto [quantized, activationScales] = quantizeActivationBlocks(b, loc, x);
  ArrayRef<int64_t> shape =
      cast<RankedTensorType>(quantized.getType()).getShape();
  using utils::IteratorType;
  // [m, k / 32, k % 32 / 4, k % 4] and [k / 32, k % 32 / 4, n, k % 4].
  auto valueType = cast<RankedTensorType>(values.getType());
  Value groups = tensor::ExpandShapeOp::create(
      b, loc,
      RankedTensorType::get({shape[0], shape[1], kBlock / kGroup, kGroup},
                            IntegerType::get(ctx, 8)),
      quantized, SmallVector<ReassociationIndices>{{0}, {1}, {2, 3}});
  Value packed = tensor::ExpandShapeOp::create(
      b, loc,
      RankedTensorType::get({valueType.getDimSize(0) * kGroup / kBlock,
                             kBlock / kGroup, valueType.getDimSize(1), kGroup},
                            valueType.getElementType()),
      values, SmallVector<ReassociationIndices>{{0, 1}, {2}, {3}});
  SmallVector<IteratorType> iterators = {
      IteratorType::parallel, IteratorType::reduction, IteratorType::reduction,
      IteratorType::reduction, IteratorType::parallel};
  auto generic = linalg::GenericOp::create(
      b, loc, TypeRange{init.getType()},
      ValueRange{groups, packed, activationScales, scales}, ValueRange{init},
      int8ContractionMaps(ctx), iterators,
      [](OpBuilder &nb, Location nloc, ValueRange args) {
        Type i32 = nb.getI32Type();
        Value a = arith::ExtSIOp::create(nb, nloc, i32, args[0]);
        Value q = arith::ExtSIOp::create(nb, nloc, i32, args[1]);
        Value product = arith::MulIOp::create(nb, nloc, a, q);
        Value wide =
            arith::SIToFPOp::create(nb, nloc, nb.getF32Type(), product);
        Value scale = arith::MulFOp::create(nb, nloc, args[2], args[3]);
        Value scaled = arith::MulFOp::create(nb, nloc, wide, scale);
        Value sum = arith::AddFOp::create(nb, nloc, args[4], scaled);
        linalg::YieldOp::create(nb, nloc, ValueRange{sum});
      });
  return generic.getResult(0);
}

/// The `[K, N]` weight of `values` and `scales`, of `type` (f32, or bf16:
/// the product rounded, as the bf16 model's own weights are).
Value dequantize(OpBuilder &b, Location loc, Value values, Value scales,
                 Type type) {
  MLIRContext *ctx = b.getContext();
  auto shape = cast<RankedTensorType>(values.getType());
  Value blocks = splitBlocks(b, loc, values, 0);
  auto blockType = cast<RankedTensorType>(blocks.getType());
  Value empty = tensor::EmptyOp::create(b, loc, blockType.getShape(), type);
  AffineExpr kb, kk, n;
  bindDims(ctx, kb, kk, n);
  SmallVector<AffineMap> maps = {AffineMap::getMultiDimIdentityMap(3, ctx),
                                 AffineMap::get(3, 0, {kb, n}, ctx),
                                 AffineMap::getMultiDimIdentityMap(3, ctx)};
  SmallVector<utils::IteratorType> iterators(3, utils::IteratorType::parallel);
  auto generic = linalg::GenericOp::create(
      b, loc, TypeRange{empty.getType()}, ValueRange{blocks, scales},
      ValueRange{empty}, maps, iterators,
      [&](OpBuilder &nb, Location nloc, ValueRange args) {
        Value wide =
            arith::SIToFPOp::create(nb, nloc, nb.getF32Type(), args[0]);
        Value weight = arith::MulFOp::create(nb, nloc, wide, args[1]);
        if (type != weight.getType())
          weight = arith::TruncFOp::create(nb, nloc, type, weight);
        linalg::YieldOp::create(nb, nloc, ValueRange{weight});
      });
  return tensor::CollapseShapeOp::create(
      b, loc, RankedTensorType::get(shape.getShape(), type),
      generic.getResult(0), SmallVector<ReassociationIndices>{{0, 1}, {2}});
}

/// Replaces each matmul by `values` (an argument now i8, of `type` before)
/// with its quantized form (`int8Activations`: the activations quantized
/// too, Q8_0's products of any row count and Q4_1's one-row products; a
/// prompt's Q4_1 products dequantize); `parts` are the arguments after
/// `values`.
void rewriteMatmuls(Value values, ValueRange parts, Format format, Type type,
                    bool int8Activations) {
  Value scales = parts.front();
  for (OpOperand &use : llvm::make_early_inc_range(values.getUses())) {
    auto matmul = dyn_cast<linalg::MatmulOp>(use.getOwner());
    if (!matmul)
      continue;
    OpBuilder b(matmul);
    Location loc = matmul.getLoc();
    Value x = matmul.getInputs()[0], init = matmul.getOutputs()[0];
    Value result;
    bool oneRow = cast<RankedTensorType>(x.getType()).getDimSize(0) == 1;
    if (oneRow && format == Format::q4_1) {
      result = buildQ41Contraction(b, loc, x, values, scales, parts[1], init,
                                   int8Activations);
    } else if (int8Activations && format == Format::q8_0) {
      result = int8TimesQuantized(b, loc, x, values, scales, init);
    } else if (oneRow) {
      result = vectorTimesQuantized(b, loc, x, values, scales, init);
    } else {
      Value weight =
          format == Format::q4_1
              ? buildQ41Dequantize(b, loc, values, scales, parts[1], type)
              : dequantize(b, loc, values, scales, type);
      result = linalg::MatmulOp::create(b, loc, ValueRange{x, weight},
                                        ValueRange{init})
                   .getResult(0);
    }
    matmul.getResult(0).replaceAllUsesWith(result);
    matmul.erase();
  }
}

struct QuantizeWeights
    : public mlir::snapkv::impl::QuantizeWeightsBase<QuantizeWeights> {
  using QuantizeWeightsBase::QuantizeWeightsBase;

  void runOnOperation() override {
    std::optional<Format> common = parseFormat(format);
    if (!common) {
      emitError(getOperation().getLoc())
          << "snapkv-quantize-weights: format must be q8_0 or q4_1, got '"
          << format << "'";
      return signalPassFailure();
    }
    llvm::StringMap<Format> named;
    for (StringRef entry : weightFormats) {
      auto [name, given] = entry.rsplit(':');
      std::optional<Format> parsed = parseFormat(given);
      if (name.empty() || !parsed) {
        emitError(getOperation().getLoc())
            << "snapkv-quantize-weights: weight-formats takes NAME:FORMAT "
               "entries with FORMAT q8_0 or q4_1, got '"
            << entry << "'";
        return signalPassFailure();
      }
      named[name] = *parsed;
    }
    if (activations != "float" && activations != "i8") {
      emitError(getOperation().getLoc())
          << "snapkv-quantize-weights: activations must be float or i8, got '"
          << activations << "'";
      return signalPassFailure();
    }
    ModuleOp module = getOperation();
    SymbolTable symbols(module);
    // The weights that may change: arguments of the entry points (public
    // functions nothing in the module calls: only the runner does).
    // Each in its format: its name's in `weight-formats`, else `format`.
    DenseMap<Value, Format> converted;
    for (auto func : module.getOps<func::FuncOp>())
      if (func.isPublic() && !func.isExternal() &&
          SymbolTable::symbolKnownUseEmpty(func, module))
        for (unsigned i = 0; i < func.getNumArguments(); ++i)
          if (isWeight(func, i)) {
            auto name = func.getArgAttrOfType<StringAttr>(i, "snapkv.weight");
            auto it = named.find(name.getValue());
            converted[func.getArgument(i)] =
                it == named.end() ? *common : it->second;
          }
    // A callee's argument changes when its only uses are matmuls and every
    // call passes it a weight that changes, all in one format; a weight
    // changes when its uses are matmuls and such calls. Narrowed to a fixed
    // point.
    using Position = std::pair<Operation *, unsigned>;
    DenseMap<Position, Format> positions;
    auto calleeOf = [&](func::CallOp call) {
      return symbols.lookup<func::FuncOp>(call.getCallee());
    };
    auto localOk = [](func::FuncOp callee, unsigned i) {
      return callee && callee.isPrivate() && !callee.isExternal() &&
             quantizable(callee.getArgumentTypes()[i]) &&
             llvm::all_of(callee.getArgument(i).getUses(), isMatmulRhs);
    };
    bool changed = true;
    while (changed) {
      changed = false;
      positions.clear();
      for (auto entry : converted)
        for (OpOperand &use : entry.first.getUses())
          if (auto call = dyn_cast<func::CallOp>(use.getOwner())) {
            func::FuncOp callee = calleeOf(call);
            unsigned i = use.getOperandNumber();
            if (!localOk(callee, i))
              continue;
            std::optional<SymbolTable::UseRange> uses =
                SymbolTable::getSymbolUses(callee, module);
            bool allCalls =
                uses && llvm::all_of(*uses, [&](auto symbolUse) {
                  auto other = dyn_cast<func::CallOp>(symbolUse.getUser());
                  auto it = other ? converted.find(other.getOperand(i))
                                  : converted.end();
                  return it != converted.end() && it->second == entry.second;
                });
            if (allCalls)
              positions[{callee.getOperation(), i}] = entry.second;
          }
      for (Value weight : llvm::to_vector(llvm::make_first_range(converted))) {
        bool ok = llvm::all_of(weight.getUses(), [&](OpOperand &use) {
          if (auto call = dyn_cast<func::CallOp>(use.getOwner()))
            return positions.contains(
                {calleeOf(call).getOperation(), use.getOperandNumber()});
          return isMatmulRhs(use);
        });
        if (!ok) {
          converted.erase(weight);
          changed = true;
        }
      }
    }

    // The parts (scales, ...) of each changed value, and the arguments that
    // change, per function (from the last, so that indices stay valid).
    DenseMap<Value, SmallVector<Value>> partsOfValue;
    DenseMap<Operation *, SmallVector<std::pair<unsigned, Format>>> changes;
    for (auto [weight, weightFormat] : converted) {
      auto arg = cast<BlockArgument>(weight);
      changes[arg.getOwner()->getParentOp()].push_back(
          {arg.getArgNumber(), weightFormat});
    }
    for (auto [position, positionFormat] : positions)
      changes[position.first].push_back({position.second, positionFormat});
    Builder b(&getContext());
    // int8 activations: every Q8_0 weight packed by 4 rows for vpdpbusd.
    bool int8 = activations == "i8";
    for (auto func : module.getOps<func::FuncOp>()) {
      if (!changes.count(func))
        continue;
      SmallVector<std::pair<unsigned, Format>> args = changes[func];
      llvm::sort(args, [](auto l, auto r) { return l.first > r.first; });
      for (auto [i, argFormat] : args) {
        auto type = cast<RankedTensorType>(func.getArgumentTypes()[i]);
        SmallVector<StringRef> partNames = partsOf(argFormat);
        for (auto [p, part] : llvm::enumerate(partNames)) {
          SmallVector<NamedAttribute> partAttrs;
          if (func.getArgAttr(i, "snapkv.weight")) {
            for (NamedAttribute attr : func.getArgAttrDict(i).getValue())
              if (attr.getName() != kQuantized)
                partAttrs.push_back(attr);
            partAttrs.push_back(b.getNamedAttr(
                kQuantized,
                b.getStringAttr(nameOf(argFormat) + "_" + part.str())));
          }
          (void)func.insertArgument(i + 1 + p, scalesType(type),
                                    b.getDictionaryAttr(partAttrs),
                                    func.getArgument(i).getLoc());
        }
        bool packed = int8 && argFormat == Format::q8_0;
        if (func.getArgAttr(i, "snapkv.weight"))
          func.setArgAttr(
              i, kQuantized,
              b.getStringAttr(packed ? "q8_0_packed" : nameOf(argFormat)));
        BlockArgument values = func.getArgument(i);
        values.setType(valuesType(type, argFormat, packed));
        SmallVector<Value> parts;
        for (unsigned p = 0; p < partNames.size(); ++p)
          parts.push_back(func.getArgument(i + 1 + p));
        partsOfValue[values] = parts;
        rewriteMatmuls(values, parts, argFormat, type.getElementType(), int8);
      }
      snapkv::detail::updateSignature(func);
    }
    // Each call passes the parts after the values.
    module.walk([&](func::CallOp call) {
      SmallVector<Value> operands;
      bool changedCall = false;
      for (Value operand : call.getOperands()) {
        operands.push_back(operand);
        auto it = partsOfValue.find(operand);
        if (it != partsOfValue.end()) {
          llvm::append_range(operands, it->second);
          changedCall = true;
        }
      }
      if (changedCall)
        call->setOperands(operands);
    });
  }
};

} // namespace

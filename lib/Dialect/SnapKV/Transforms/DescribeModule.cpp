//===- DescribeModule.cpp - a module's interface as JSON ------------------===//
//
// What programs around snapkv-opt need to know about a module (function
// signatures, weights, calls, selects, the rewrite's refusal), printed by the
// compiler that parsed it, so that no caller parses MLIR text.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"
#include "snapkv/Dialect/SnapKV/Transforms/AttentionMatcher.h"
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinTypes.h"

#include "llvm/ADT/SetVector.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_DESCRIBEMODULE
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;
using namespace mlir::snapkv;
namespace json = llvm::json;

template <typename T> static std::string printed(T entity) {
  std::string text;
  llvm::raw_string_ostream os(text);
  entity.print(os);
  return text;
}

/// {"text"} for every type; ranked tensors and identity-layout memrefs add
/// "shape" (null for a dynamic dimension) and "element"; memrefs (buffers the
/// caller passes and the callee may write, as snapkv-append-in-place makes the
/// caches) add "memref": true.
static json::Value describeType(Type type) {
  json::Object out{{"text", printed(type)}};
  auto memref = dyn_cast<MemRefType>(type);
  auto shaped = dyn_cast<ShapedType>(type);
  if (!isa<RankedTensorType>(type) &&
      !(memref && memref.getLayout().isIdentity()))
    return out;
  json::Array shape;
  for (int64_t dim : shaped.getShape())
    shape.push_back(ShapedType::isDynamic(dim) ? json::Value(nullptr)
                                               : json::Value(dim));
  out["shape"] = std::move(shape);
  out["element"] = printed(shaped.getElementType());
  if (memref)
    out["memref"] = true;
  return out;
}

static json::Array describeTypes(TypeRange types) {
  json::Array out;
  for (Type type : types)
    out.push_back(describeType(type));
  return out;
}

/// Builtin attributes as JSON values; anything else as its MLIR text.
static json::Value describeAttr(Attribute attr) {
  if (auto s = dyn_cast<StringAttr>(attr))
    return s.getValue().str();
  if (auto b = dyn_cast<BoolAttr>(attr))
    return b.getValue();
  if (isa<UnitAttr>(attr))
    return true;
  if (auto i = dyn_cast<IntegerAttr>(attr))
    if (i.getType().isSignlessInteger() || i.getType().isIndex())
      return i.getValue().getSExtValue();
  if (auto f = dyn_cast<FloatAttr>(attr))
    return f.getValueAsDouble();
  if (auto array = dyn_cast<ArrayAttr>(attr)) {
    json::Array out;
    for (Attribute element : array)
      out.push_back(describeAttr(element));
    return out;
  }
  if (auto dict = dyn_cast<DictionaryAttr>(attr)) {
    json::Object out;
    for (NamedAttribute named : dict)
      out[named.getName().getValue()] = describeAttr(named.getValue());
    return out;
  }
  if (auto type = dyn_cast<TypeAttr>(attr))
    return describeType(type.getValue());
  return printed(attr);
}

/// The attributes of `attrs` in the snapkv namespace.
static json::Object describeOwnAttrs(ArrayRef<NamedAttribute> attrs) {
  json::Object out;
  for (NamedAttribute named : attrs)
    if (named.getName().getValue().starts_with("snapkv."))
      out[named.getName().getValue()] = describeAttr(named.getValue());
  return out;
}

static json::Value optionalInt(std::optional<int64_t> value) {
  return value ? json::Value(*value) : json::Value(nullptr);
}

/// The clauses every select has (`snapkv.select` and `snapkv.select_adaptive`).
template <typename SelectLike>
static json::Object describeClauses(SelectLike op) {
  std::optional<APFloat> scale = op.getScale();
  return json::Object{
      {"op", op->getName().getStringRef()},
      {"window", op.getWindow()},
      {"capacity", op.getCapacity()},
      {"kernel", op.getKernel()},
      {"pooling", stringifyPoolingKind(op.getPooling())},
      {"gqa", stringifyGqaPolicy(op.getGqa())},
      {"scoring", stringifyScoring(op.getScoring())},
      {"scale",
       scale ? json::Value(scale->convertToDouble()) : json::Value(nullptr)},
      // For writing the op again in generic form: "snapkv.select"(...)
      // <{properties}> : (operands) -> (results).
      {"properties", printed(op->getPropertiesAsAttribute())},
      {"operands", describeTypes(op->getOperandTypes())},
      {"results", describeTypes(op->getResultTypes())}};
}

static json::Object describeSelect(SelectOp op) {
  json::Object out = describeClauses(op);
  out["order"] = stringifyOrder(op.getOrder());
  out["block"] = op.getBlock();
  out["sinks"] = optionalInt(op.getSinks());
  out["seed"] = optionalInt(op.getSeed());
  return out;
}

/// An adaptive select adds its `floor`; it always keeps ascending positions
/// and has no sinks or seed.
static json::Object describeSelect(SelectAdaptiveOp op) {
  json::Object out = describeClauses(op);
  out["floor"] = op.getFloor();
  out["order"] = stringifyOrder(Order::position);
  out["sinks"] = nullptr;
  out["seed"] = nullptr;
  return out;
}

/// The body of `func` as steps over numbered values (the arguments are
/// 0..n-1, then each result in order), when it holds only func.call,
/// tensor.cast and func.return: an entry point a runner can execute by
/// calling compiled functions. Null otherwise.
static json::Value describeGlue(func::FuncOp func) {
  if (func.isExternal() || !func.getBody().hasOneBlock())
    return nullptr;
  DenseMap<Value, int64_t> ids;
  for (BlockArgument arg : func.getArguments())
    ids[arg] = ids.size();
  auto numbered = [&](ValueRange values) {
    json::Array out;
    for (Value value : values)
      out.push_back(ids.lookup(value));
    return out;
  };
  auto define = [&](ValueRange values) {
    for (Value value : values)
      ids[value] = ids.size();
    return numbered(values);
  };
  json::Array steps;
  for (Operation &op : func.getBody().front()) {
    if (auto call = dyn_cast<func::CallOp>(op)) {
      json::Array operands = numbered(call.getOperands());
      steps.push_back(json::Object{{"op", "call"},
                                   {"callee", call.getCallee().str()},
                                   {"operands", std::move(operands)},
                                   {"results", define(call.getResults())}});
    } else if (auto cast = dyn_cast<tensor::CastOp>(op)) {
      json::Array operands = numbered(cast->getOperands());
      steps.push_back(json::Object{{"op", "cast"},
                                   {"operands", std::move(operands)},
                                   {"results", define(cast->getResults())},
                                   {"type", describeType(cast.getType())}});
    } else if (auto slice = dyn_cast<tensor::ExtractSliceOp>(op)) {
      // A static slice (one layer's row counts, snapkv-append-in-place).
      if (!slice.getOffsets().empty() || !slice.getSizes().empty() ||
          !slice.getStrides().empty())
        return nullptr;
      json::Array operands = numbered(ValueRange{slice.getSource()});
      steps.push_back(
          json::Object{{"op", "slice"},
                       {"operands", std::move(operands)},
                       {"results", define(slice->getResults())},
                       {"offsets", json::Array(slice.getStaticOffsets())},
                       {"sizes", json::Array(slice.getStaticSizes())},
                       {"strides", json::Array(slice.getStaticStrides())},
                       {"type", describeType(slice.getType())}});
    } else if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      steps.push_back(json::Object{{"op", "return"},
                                   {"operands", numbered(ret.getOperands())}});
    } else {
      return nullptr;
    }
  }
  return steps;
}

static StringRef stringifyVisibility(SymbolTable::Visibility visibility) {
  switch (visibility) {
  case SymbolTable::Visibility::Public:
    return "public";
  case SymbolTable::Visibility::Private:
    return "private";
  case SymbolTable::Visibility::Nested:
    return "nested";
  }
  llvm_unreachable("unknown visibility");
}

static json::Object describeFunction(func::FuncOp func) {
  json::Array arguments;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    json::Object arg{{"type", describeType(func.getArgumentTypes()[i])}};
    auto weight = func.getArgAttrOfType<StringAttr>(i, "snapkv.weight");
    arg["weight"] =
        weight ? json::Value(weight.getValue().str()) : json::Value(nullptr);
    auto transposed = func.getArgAttrOfType<BoolAttr>(i, "snapkv.transposed");
    bool isTransposed =
        transposed ? transposed.getValue()
                   : func.getArgAttr(i, "snapkv.transposed") != nullptr;
    arg["transposed"] = isTransposed;
    // snapkv-quantize-weights: "q8_0" (the int8 values) or "q8_0_scales".
    if (auto quantized =
            func.getArgAttrOfType<StringAttr>(i, "snapkv.quantized"))
      arg["quantized"] = quantized.getValue().str();
    arguments.push_back(std::move(arg));
  }

  llvm::SetVector<StringRef> callees;
  llvm::SetVector<Type> tensorTypes;
  json::Array selects;
  // Attention as one op (kept SDPA, snapkv.attention) and as the importer's
  // decomposed chain (the matcher's P . V products).
  int64_t kept = 0, decomposed = 0;
  func.walk([&](Operation *op) {
    if (isa<SdpaOp, AttentionOp>(op))
      ++kept;
    if (auto matmul = dyn_cast<linalg::BatchMatmulOp>(op)) {
      AttentionFailure failure;
      decomposed += succeeded(matchAttention(matmul, failure, true));
    }
    if (auto call = dyn_cast<func::CallOp>(op))
      callees.insert(call.getCallee());
    if (auto select = dyn_cast<SelectOp>(op))
      selects.push_back(describeSelect(select));
    else if (auto adaptive = dyn_cast<SelectAdaptiveOp>(op))
      selects.push_back(describeSelect(adaptive));
    for (Type type : op->getResultTypes())
      if (isa<TensorType>(type))
        tensorTypes.insert(type);
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (Type type : block.getArgumentTypes())
          if (isa<TensorType>(type))
            tensorTypes.insert(type);
  });
  json::Array calleeNames;
  for (StringRef callee : callees)
    calleeNames.push_back(callee.str());
  json::Array types;
  for (Type type : tensorTypes)
    types.push_back(describeType(type));

  return json::Object{
      {"name", func.getSymName().str()},
      {"visibility", stringifyVisibility(func.getVisibility())},
      {"external", func.isExternal()},
      {"arguments", std::move(arguments)},
      {"results", describeTypes(func.getResultTypes())},
      {"attributes", describeOwnAttrs(func->getAttrs())},
      {"callees", std::move(calleeNames)},
      {"selects", std::move(selects)},
      {"attentions", json::Object{{"kept", kept}, {"decomposed", decomposed}}},
      {"tensor_types", std::move(types)},
      {"glue", describeGlue(func)}};
}

namespace {
struct DescribeModule
    : public mlir::snapkv::impl::DescribeModuleBase<DescribeModule> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    json::Array functions;
    for (auto func : module.getOps<func::FuncOp>())
      functions.push_back(describeFunction(func));
    json::Object out{{"version", 1},
                     {"attributes", describeOwnAttrs(module->getAttrs())},
                     {"functions", std::move(functions)}};
    llvm::outs() << llvm::formatv("{0:2}", json::Value(std::move(out))) << "\n";
    llvm::outs().flush();
    markAllAnalysesPreserved();
  }
};
} // namespace

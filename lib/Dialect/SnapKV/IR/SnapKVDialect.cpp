#include "snapkv/Dialect/SnapKV/IR/SnapKVDialect.h"
#include "snapkv/Dialect/SnapKV/IR/SelectDecomposition.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Transforms/InliningUtils.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::snapkv;

#include "snapkv/Dialect/SnapKV/IR/SnapKVDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "snapkv/Dialect/SnapKV/IR/SnapKVAttrs.cpp.inc"

namespace {
/// Our ops are pure and hold no regions, so a function that contains them (a
/// model's per-layer function after snapkv-compress-kv-cache) may be inlined:
/// `snapkv visualize` and `snapkv eval` inline the layers into @prefill before
/// snapkv-expose-scores, which works on uncalled functions only.
struct SnapKVInlinerInterface : public DialectInlinerInterface {
  using DialectInlinerInterface::DialectInlinerInterface;

  bool isLegalToInline(Operation *, Region *, bool, IRMapping &) const final {
    return true;
  }
};
} // namespace

void SnapKVDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "snapkv/Dialect/SnapKV/IR/SnapKVAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.cpp.inc"
      >();
  addInterfaces<SnapKVInlinerInterface>();
}

LogicalResult TileAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               int64_t group, ArrayRef<int64_t> sizes,
                               TileMapping mapping) {
  if (group < 0)
    return emitError() << "tile group must be non-negative, got " << group;
  if (llvm::any_of(sizes, [](int64_t size) { return size < 0; }))
    return emitError() << "tile sizes must be non-negative";
  if (mapping == TileMapping::gpu_blocks &&
      llvm::count_if(sizes, [](int64_t size) { return size != 0; }) > 3)
    return emitError() << "a gpu_blocks tile maps at most 3 loops to blocks";
  return success();
}

LogicalResult LoweringConfigAttr::verify(
    function_ref<InFlightDiagnostic()> emitError, TileMapping mapping,
    int64_t keyTile, int64_t queryTile, int64_t chunk, BoolAttr keepLogits,
    int64_t threads, BoolAttr tensorCores, Microkernel microkernel) {
  if (keyTile < 1 || queryTile < 1)
    return emitError() << "key_tile and query_tile must be positive, got "
                       << keyTile << " and " << queryTile;
  if (chunk < 0)
    return emitError() << "chunk must be non-negative (0: automatic), got "
                       << chunk;
  if (!keepLogits)
    return emitError() << "keep_logits must be true or false";
  if (keepLogits.getValue() && mapping != TileMapping::forall)
    return emitError() << "keep_logits needs mapping = forall (the GPU "
                          "blocks recompute each tile's logits)";
  bool blocks = mapping == TileMapping::gpu_blocks;
  if (blocks && (threads < 1 || threads > 1024 || !tensorCores))
    return emitError() << "mapping = gpu_blocks needs threads in [1, 1024] "
                          "and tensor_cores";
  if (!blocks && (threads != 0 || tensorCores))
    return emitError() << "threads and tensor_cores are for mapping = "
                          "gpu_blocks";
  if (blocks && microkernel != Microkernel::none)
    return emitError() << "microkernel " << stringifyMicrokernel(microkernel)
                       << " is a CPU kernel; mapping = gpu_blocks needs none";
  return success();
}

void mlir::snapkv::inheritLoweringConfig(
    Operation *from, llvm::iterator_range<Block::iterator> created) {
  constexpr StringLiteral name = "snapkv.lowering_config";
  Attribute config = from->getAttr(name);
  if (!config)
    return;
  for (Operation &top : created)
    top.walk([&](Operation *op) {
      if (isa<SnapKVDialect>(op->getDialect()) && !op->hasAttr(name))
        op->setAttr(name, config);
    });
}

LogicalResult mlir::snapkv::decomposeSelect(RewriterBase &rewriter,
                                            linalg::AggregatedOpInterface op) {
  rewriter.setInsertionPoint(op);
  Operation *before = op->getPrevNode();
  FailureOr<SmallVector<Value>> stages = op.decomposeOperation(rewriter);
  if (failed(stages))
    return failure();
  Operation *first = before ? before->getNextNode() : &op->getBlock()->front();
  inheritLoweringConfig(
      op, llvm::make_range(first->getIterator(), op->getIterator()));
  rewriter.replaceOp(op, *stages);
  return success();
}

/// `{rows = i, buffers = [j, ...], dim = d}` on a function (written by
/// snapkv-append-in-place): argument i holds one i64 per buffer (each
/// buffer's row count, in the order of `buffers`), every j is a buffer (not
/// a tensor) with a dimension d. With `layout = "ragged"` (budget=adaptive),
/// the buffers are (keys, values) pairs and argument i is [pairs, 2, B, Hc]
/// (each pair's starts and lengths). With `layout = "pool"` (a batched
/// decode), `rows` is a list of arguments [n, 3, B, Hc] (starts, lengths,
/// capacities of n pairs each, in the order of the pairs). Lowered types
/// (LLVM) are not checked.
static LogicalResult verifyAppendInPlace(Operation *op, Attribute value) {
  auto func = dyn_cast<FunctionOpInterface>(op);
  auto record = dyn_cast<DictionaryAttr>(value);
  auto fail = [&] {
    return op->emitError("snapkv.append_in_place must be {rows = <argument>, "
                         "buffers = [<arguments>], dim = <int>[, layout = "
                         "\"ragged\"]} on a function whose rows argument "
                         "holds one i64 per buffer (ragged: [pairs, 2, B, Hc]) "
                         "and whose buffers are memrefs of rank > dim, or "
                         "{rows = [<arguments>], buffers, dim, layout = "
                         "\"pool\"} with rows [n, 3, B, Hc] for all pairs");
  };
  if (!func || !record)
    return fail();
  auto dim = dyn_cast_or_null<IntegerAttr>(record.get("dim"));
  auto buffers = dyn_cast_or_null<ArrayAttr>(record.get("buffers"));
  if (!dim || !buffers || buffers.empty() || dim.getInt() < 0)
    return fail();
  ArrayRef<Type> args = func.getArgumentTypes();
  auto argument = [&](IntegerAttr index) -> Type {
    int64_t i = index ? index.getInt() : -1;
    return i >= 0 && i < static_cast<int64_t>(args.size()) ? args[i] : Type();
  };
  Attribute layout = record.get("layout");
  auto count = static_cast<int64_t>(buffers.size());
  if (layout && layout == StringAttr::get(op->getContext(), "pool")) {
    auto rowArgs = dyn_cast_or_null<ArrayAttr>(record.get("rows"));
    if (!rowArgs || rowArgs.empty() || count % 2 != 0)
      return fail();
    int64_t pairs = 0;
    bool lowered = false;
    for (Attribute arg : rowArgs) {
      Type type = argument(dyn_cast<IntegerAttr>(arg));
      if (!type)
        return fail();
      auto shaped = dyn_cast<ShapedType>(type);
      lowered |= !shaped;
      if (!shaped)
        continue;
      if (!shaped.hasRank() || shaped.getRank() != 4 ||
          !shaped.getElementType().isInteger(64) || shaped.isDynamicDim(0) ||
          shaped.getDimSize(1) != 3)
        return fail();
      pairs += shaped.getDimSize(0);
    }
    if (!lowered && pairs != count / 2)
      return fail();
  } else if (layout && layout != StringAttr::get(op->getContext(), "ragged")) {
    return fail();
  }
  bool ragged = layout && layout == StringAttr::get(op->getContext(), "ragged");
  auto rows = dyn_cast_or_null<IntegerAttr>(record.get("rows"));
  Type rowsType = argument(rows);
  if (!layout || ragged) {
    if (!rowsType)
      return fail();
  }
  if (auto shaped = dyn_cast_or_null<ShapedType>(rowsType)) {
    if (!shaped.hasRank() || !shaped.getElementType().isInteger(64))
      return fail();
    if (!ragged && shaped.getShape() != ArrayRef<int64_t>{count})
      return fail();
    if (ragged &&
        (count % 2 != 0 || shaped.getRank() != 4 ||
         shaped.getDimSize(0) != count / 2 || shaped.getDimSize(1) != 2))
      return fail();
  }
  for (Attribute buffer : buffers) {
    Type type = argument(dyn_cast<IntegerAttr>(buffer));
    if (!type || isa<TensorType>(type))
      return fail();
    if (auto memref = dyn_cast<MemRefType>(type))
      if (dim.getInt() >= memref.getRank())
        return fail();
  }
  return success();
}

LogicalResult SnapKVDialect::verifyOperationAttribute(Operation *op,
                                                      NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  Attribute value = attr.getValue();
  // Whether the op can be tiled as the attributes say is
  // snapkv-tile-and-fuse's to check: TilingInterface is an external model of
  // the ops it tiles, not necessarily registered where the IR is verified.
  if (name == "snapkv.tile") {
    if (!isa<TileAttr>(value))
      return op->emitError("snapkv.tile must be a #snapkv.tile attribute");
    return success();
  }
  if (name == "snapkv.fuse") {
    auto groups = dyn_cast<DenseI64ArrayAttr>(value);
    if (!groups || groups.empty() ||
        llvm::any_of(groups.asArrayRef(), [](int64_t g) { return g < 0; }))
      return op->emitError("snapkv.fuse must be a non-empty array<i64> of "
                           "tile groups");
    return success();
  }
  if (name == "snapkv.lowering_config") {
    if (!isa<LoweringConfigAttr>(value))
      return op->emitError("snapkv.lowering_config must be a "
                           "#snapkv.lowering_config attribute");
    // The GPU block loops the conversion makes (and the roots of the groups
    // that become them) carry their op's too.
    if (!isa<SelectOp, ScoreOp, TopPositionsOp, GatherOp, SelectAdaptiveOp,
             AttentionOp, RaggedAttentionOp, scf::ForallOp>(op) &&
        !op->hasAttr("snapkv.tile"))
      return op->emitError("snapkv.lowering_config is for the snapkv ops "
                           "that convert-snapkv-to-linalg lowers and the "
                           "block loops it makes");
    // Attention and the CPU-only scorings (scoresOnCpuOnly) are lowered for the
    // CPU only: a configuration that maps them to GPU blocks names a lowering
    // that does not exist.
    if ((isa<AttentionOp, RaggedAttentionOp>(op) || scoresOnCpuOnly(op)) &&
        cast<LoweringConfigAttr>(value).getMapping() == TileMapping::gpu_blocks)
      return op->emitOpError("has no GPU lowering: its snapkv.lowering_config "
                             "cannot map it to gpu_blocks");
    return success();
  }
  if (name == "snapkv.microkernel") {
    // On the linalg contractions of a model; a snapkv op carries its
    // microkernel in its snapkv.lowering_config.
    if (!isa<MicrokernelAttr>(value))
      return op->emitError("snapkv.microkernel must be a #snapkv.microkernel "
                           "attribute");
    if (!isa<linalg::LinalgOp>(op))
      return op->emitError("snapkv.microkernel is for linalg ops (a snapkv "
                           "op's is in its snapkv.lowering_config)");
    return success();
  }
  if (name == "snapkv.refusal") {
    auto record = dyn_cast<DictionaryAttr>(value);
    auto isString = [&](StringRef field) {
      return record && isa_and_nonnull<StringAttr>(record.get(field));
    };
    if (!isa<ModuleOp>(op) || !isString("reason") || !isString("function") ||
        !isString("message"))
      return op->emitError("snapkv.refusal must be a dictionary with "
                           "string reason, function and message, on a module");
    // Programs branch on the code: one no RefusalKind names is a typo.
    StringRef reason = cast<StringAttr>(record.get("reason")).getValue();
    if (!symbolizeRefusalKind(reason))
      return op->emitError("snapkv.refusal reason '")
             << reason << "' is not a refusal code (RefusalKind)";
    return success();
  }
  if (name == "snapkv.chunked_prefill") {
    auto record = dyn_cast<DictionaryAttr>(value);
    auto chunk =
        record ? dyn_cast_or_null<IntegerAttr>(record.get("chunk")) : nullptr;
    auto window =
        record ? dyn_cast_or_null<IntegerAttr>(record.get("window")) : nullptr;
    auto function =
        record ? dyn_cast_or_null<StringAttr>(record.get("function")) : nullptr;
    if (!isa<ModuleOp>(op) || !chunk || !window || window.getInt() < 1 ||
        chunk.getInt() < window.getInt() || !function ||
        function.getValue().empty())
      return op->emitError("snapkv.chunked_prefill must be a dictionary with "
                           "integers chunk >= window >= 1 and a function "
                           "name, on a module");
    // Two-level chunked prefill: the staging capacity and the chain the
    // runner feeds the chunks before the last to, all three or none.
    Attribute staging = record.get("staging");
    auto stagingInt = dyn_cast_or_null<IntegerAttr>(staging);
    auto stagingFunction =
        dyn_cast_or_null<StringAttr>(record.get("staging_function"));
    auto stagingEntry =
        dyn_cast_or_null<StringAttr>(record.get("staging_entry"));
    bool none = !staging && !record.get("staging_function") &&
                !record.get("staging_entry");
    if (!none && (!stagingInt || stagingInt.getInt() <= window.getInt() ||
                  !stagingFunction || stagingFunction.getValue().empty() ||
                  !stagingEntry || stagingEntry.getValue().empty()))
      return op->emitError("snapkv.chunked_prefill's staging must be an "
                           "integer above window, with the staging_function "
                           "and staging_entry names");
    // The staged entry point takes and returns carried scores.
    if (Attribute carry = record.get("staging_carry");
        carry && (!isa<UnitAttr>(carry) || none))
      return op->emitError("snapkv.chunked_prefill's staging_carry must be a "
                           "unit attribute, with staging");
    return success();
  }
  if (name == "snapkv.decode_compression") {
    auto record = dyn_cast<DictionaryAttr>(value);
    auto positive = [&](StringRef field) {
      auto value =
          record ? dyn_cast_or_null<IntegerAttr>(record.get(field)) : nullptr;
      return value && value.getInt() >= 1 ? value.getInt() : 0;
    };
    auto function =
        record ? dyn_cast_or_null<StringAttr>(record.get("function")) : nullptr;
    // `entry`, when present, names the public function the runner calls (not
    // looked up: the runner compiles the layer functions without it).
    Attribute entryValue = record ? record.get("entry") : nullptr;
    auto entry = dyn_cast_or_null<StringAttr>(entryValue);
    if (!isa<ModuleOp>(op) || !positive("interval") || !positive("window") ||
        positive("capacity") <= positive("window") || !function ||
        function.getValue().empty() ||
        (entryValue && (!entry || entry.getValue().empty())))
      return op->emitError("snapkv.decode_compression must be a dictionary "
                           "with integers interval >= 1, capacity > window >= "
                           "1, a function name and optionally an entry "
                           "name, on a module");
    return success();
  }
  if (name == "snapkv.kv_cache") {
    // snapkv-compress-kv-cache kv-dtype=i8: the caches hold packed int8 rows
    // with an f32 scale each (QuantizeKV.h).
    auto record = dyn_cast<DictionaryAttr>(value);
    auto field = [&](StringRef key) {
      auto s = record ? dyn_cast_or_null<StringAttr>(record.get(key)) : nullptr;
      return s ? s.getValue() : StringRef();
    };
    if (!isa<ModuleOp>(op) || field("dtype") != "i8" || field("scale") != "f32")
      return op->emitError("snapkv.kv_cache must be {dtype = \"i8\", scale = "
                           "\"f32\"}, on a module");
    return success();
  }
  if (name == "snapkv.exposed_scores") {
    auto list = dyn_cast<ArrayAttr>(value);
    if (!list || !llvm::all_of(list, llvm::IsaPred<StringAttr>))
      return op->emitError("snapkv.exposed_scores must be an array of strings");
    return success();
  }
  if (name == "snapkv.append_in_place")
    return verifyAppendInPlace(op, value);
  return op->emitError("unknown snapkv attribute '") << name << "'";
}

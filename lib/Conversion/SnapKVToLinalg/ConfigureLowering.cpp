//===- ConfigureLowering.cpp - each root op's strategy for a target -------===//
//
// The one place where tile sizes and microkernels are chosen: writes
// #snapkv.lowering_config on the snapkv ops convert-snapkv-to-linalg lowers
// and #snapkv.microkernel on bf16 linalg contractions; see Passes.td.
//
//===----------------------------------------------------------------------===//

#include "Formulation.h"
#include "snapkv/Codegen/Q41Contraction.h"
#include "snapkv/Codegen/ScaledContraction.h"
#include "snapkv/Conversion/SnapKVToLinalg/SnapKVToLinalg.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVDialect.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/TargetParser/Host.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_CONFIGURELOWERING
#include "snapkv/Conversion/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;
using namespace mlir::snapkv;
using namespace mlir::snapkv::detail;

llvm::StringMap<bool> snapkv::cpuFeatureNames(StringRef spec) {
  if (spec == "host")
    return llvm::sys::getHostCPUFeatures();
  llvm::StringMap<bool> names;
  SmallVector<StringRef> parts;
  spec.split(parts, ',', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
  for (StringRef part : parts) {
    part = part.trim();
    bool on = !part.consume_front("-");
    part.consume_front("+");
    names[part] = on;
  }
  return names;
}

namespace {

constexpr StringLiteral kConfigName = "snapkv.lowering_config";
constexpr StringLiteral kMicrokernelName = "snapkv.microkernel";

/// The CPU features the strategy reads.
struct CPUFeatures {
  bool avx512bf16 = false, amx = false, avx512vnni = false;
  /// Vector register width: what compilers that vectorise on their own
  /// (IREE, through snapkv.iree_backend) read from the report.
  int64_t vectorBits = 128;

  /// `spec`: see snapkv::cpuFeatureNames.
  static CPUFeatures get(StringRef spec) {
    llvm::StringMap<bool> names = snapkv::cpuFeatureNames(spec);
    CPUFeatures features;
    features.avx512bf16 = names.lookup("avx512bf16");
    features.amx = names.lookup("amx-bf16") && names.lookup("amx-tile");
    features.avx512vnni = names.lookup("avx512vnni");
    if (names.lookup("avx512f"))
      features.vectorBits = 512;
    else if (names.lookup("avx2") || names.lookup("avx"))
      features.vectorBits = 256;
    return features;
  }

  /// The microkernel of inner products over `elementType` operands.
  Microkernel microkernel(Type elementType) const {
    if (!elementType.isBF16())
      return Microkernel::none;
    if (amx)
      return Microkernel::amx;
    return avx512bf16 ? Microkernel::avx512bf16 : Microkernel::none;
  }
};

/// What a root op's strategy reads off it.
struct RootShape {
  Type elementType;
  /// Prompt length (a scoring op's keys), or ShapedType::kDynamic.
  int64_t length = ShapedType::kDynamic;
  int64_t window = 0;
  /// Whether the op has inner products (a microkernel applies) and a
  /// prompt axis that the key tile splits and the chunk compacts.
  bool products = true, scoring = true;
};

std::optional<RootShape> rootShape(Operation *op) {
  auto fromSelect = [](const SelectShape &s, bool products) {
    return RootShape{s.elemTy, s.length, s.window, products,
                     /*scoring=*/true};
  };
  return llvm::TypeSwitch<Operation *, std::optional<RootShape>>(op)
      .Case<SelectOp, ScoreOp>(
          [&](auto op) { return fromSelect(SelectShape::get(op), true); })
      .Case<TopPositionsOp, GatherOp>(
          [&](auto op) { return fromSelect(SelectShape::get(op), false); })
      .Case([](SelectAdaptiveOp op) {
        // Its stages choose their chunk from their own (flattened) lengths.
        return RootShape{op.getQueries().getType().getElementType(),
                         op.getKeys().getType().getDimSize(2),
                         static_cast<int64_t>(op.getWindow()), true,
                         /*scoring=*/false};
      })
      .Case<AttentionOp, RaggedAttentionOp>([](auto op) {
        auto keys = cast<RankedTensorType>(op.getKeys().getType());
        return RootShape{
            cast<RankedTensorType>(op.getQueries().getType()).getElementType(),
            keys.getDimSize(2), 0, true, /*scoring=*/false};
      })
      .Default([](Operation *) { return std::nullopt; });
}

/// The element type of a linalg contraction's operands, if it is one.
Type contractionElementType(Operation *op) {
  auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
  if (!linalgOp || !linalg::isaContractionOpInterface(linalgOp) ||
      linalgOp.getNumDpsInputs() != 2)
    return {};
  Type lhs = getElementTypeOrSelf(linalgOp.getDpsInputs()[0].getType());
  Type rhs = getElementTypeOrSelf(linalgOp.getDpsInputs()[1].getType());
  return lhs == rhs ? lhs : Type();
}

std::string printed(Type type) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << type;
  return text;
}

llvm::json::Object describe(Operation *op, Type elementType) {
  auto func = op->getParentOfType<FunctionOpInterface>();
  return llvm::json::Object{
      {"op", op->getName().getStringRef()},
      {"function", func ? func.getName().str() : std::string()},
      {"element_type", printed(elementType)}};
}

llvm::json::Object describe(LoweringConfigAttr config) {
  llvm::json::Object object{
      {"mapping", stringifyTileMapping(config.getMapping())},
      {"key_tile", config.getKeyTile()},
      {"query_tile", config.getQueryTile()},
      {"chunk", config.getChunk()},
      {"keep_logits", config.getKeepLogits().getValue()},
      {"microkernel", stringifyMicrokernel(config.getMicrokernel())}};
  if (config.getMapping() == TileMapping::gpu_blocks) {
    object["threads"] = config.getThreads();
    object["tensor_cores"] = config.getTensorCores().getValue();
  }
  return object;
}

/// Refuses, on `op`, a target that has no lowering for it.
LogicalResult checkLowered(Operation *op, LoweringTarget target) {
  if (target != LoweringTarget::gpu ||
      !(isa<AttentionOp, RaggedAttentionOp>(op) || scoresOnCpuOnly(op)))
    return success();
  return op->emitOpError()
         << "has no GPU lowering (target=gpu); it is lowered for the CPU only";
}

/// The configuration of `op` (of `shape`) for `options`' target.
LoweringConfigAttr choose(Operation *op, const RootShape &shape,
                          const CPUFeatures &features,
                          const ConfigureLoweringOptions &strategy) {
  SnapKVToLinalgOptions options;
  bool staticLength = !ShapedType::isDynamic(shape.length);
  if (strategy.keyTile)
    options.keyTile = strategy.keyTile;
  // The scoring tiles no more keys than the prompt has.
  if (shape.scoring && staticLength)
    options.keyTile =
        std::max<int64_t>(1, std::min(options.keyTile, shape.length));
  if (strategy.queryTile)
    options.queryTile = strategy.queryTile;
  options.autoChunk = strategy.chunk == 0 && !(shape.scoring && staticLength);
  if (strategy.chunk != 0)
    options.chunk = strategy.chunk;
  else if (!options.autoChunk)
    options.chunk = autoChunkSize(shape.length, shape.window);
  options.keepLogits = strategy.keepLogits;
  options.threads = strategy.threads;
  options.tensorCores = strategy.tensorCores;
  if (shape.products)
    options.microkernel = features.microkernel(shape.elementType);
  return getLoweringConfig(op->getContext(), strategy.target, options);
}

struct ConfigureLoweringPass
    : snapkv::impl::ConfigureLoweringBase<ConfigureLoweringPass> {
  using Base::Base;

  void runOnOperation() override {
    Operation *root = getOperation();
    if (keyTile < 0 || queryTile < 0 || chunk < 0) {
      emitError(root->getLoc())
          << "snapkv-configure-lowering: key-tile, query-tile and chunk must "
             "be non-negative (0: chosen per op)";
      return signalPassFailure();
    }
    if (threads < 1 || threads > 1024) {
      emitError(root->getLoc())
          << "snapkv-configure-lowering: threads must be in [1, 1024], got "
          << static_cast<int64_t>(threads);
      return signalPassFailure();
    }
    bool gpu = target == LoweringTarget::gpu;
    ConfigureLoweringOptions strategy{target,     keyTile, queryTile,  chunk,
                                      keepLogits, threads, tensorCores};
    CPUFeatures features = CPUFeatures::get(cpuFeatures);
    std::vector<llvm::json::Value> choices;

    WalkResult result = root->walk([&](Operation *op) {
      // The int8 x int8 block products (activations=i8): vpdpbusd.
      if (auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
          !gpu && linalgOp &&
          (isInt8ScaledContraction(linalgOp) ||
           isQ41Int8Contraction(linalgOp))) {
        if (!op->hasAttr(kMicrokernelName))
          op->setAttr(kMicrokernelName,
                      MicrokernelAttr::get(op->getContext(),
                                           features.avx512vnni
                                               ? Microkernel::avx512vnni
                                               : Microkernel::none));
        llvm::json::Object choice =
            describe(op, IntegerType::get(op->getContext(), 8));
        choice["microkernel"] = stringifyMicrokernel(
            op->getAttrOfType<MicrokernelAttr>(kMicrokernelName).getValue());
        choices.push_back(std::move(choice));
        return WalkResult::advance();
      }
      if (!gpu)
        if (Type type = contractionElementType(op); type && type.isBF16()) {
          if (!op->hasAttr(kMicrokernelName))
            op->setAttr(kMicrokernelName,
                        MicrokernelAttr::get(op->getContext(),
                                             features.microkernel(type)));
          llvm::json::Object choice = describe(op, type);
          choice["microkernel"] = stringifyMicrokernel(
              op->getAttrOfType<MicrokernelAttr>(kMicrokernelName).getValue());
          choices.push_back(std::move(choice));
          return WalkResult::advance();
        }
      std::optional<RootShape> shape = rootShape(op);
      if (!shape)
        return WalkResult::advance();
      auto config = op->getAttrOfType<LoweringConfigAttr>(kConfigName);
      bool given = static_cast<bool>(config);
      if (!config) {
        if (failed(checkLowered(op, target)))
          return WalkResult::interrupt();
        config = choose(op, *shape, features, strategy);
        op->setAttr(kConfigName, config);
      }
      llvm::json::Object choice = describe(op, shape->elementType);
      choice["length"] = ShapedType::isDynamic(shape->length)
                             ? llvm::json::Value(nullptr)
                             : llvm::json::Value(shape->length);
      choice["given"] = given;
      choice["config"] = describe(config);
      if (!gpu)
        choice["vector_bits"] = features.vectorBits;
      choices.push_back(std::move(choice));
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      return signalPassFailure();
    if (failed(writeReport(choices)))
      signalPassFailure();
  }

  LogicalResult writeReport(ArrayRef<llvm::json::Value> choices) {
    if (report.empty())
      return success();
    auto print = [&](raw_ostream &os) {
      for (const llvm::json::Value &choice : choices)
        os << choice << "\n";
    };
    if (report == "-") {
      print(llvm::outs());
      return success();
    }
    std::error_code error;
    llvm::raw_fd_ostream file(report, error, llvm::sys::fs::OF_Text);
    if (error)
      return emitError(getOperation()->getLoc())
             << "snapkv-configure-lowering: cannot write the report to '"
             << report << "': " << error.message();
    print(file);
    return success();
  }
};

} // namespace

FailureOr<LoweringConfigAttr>
snapkv::chooseLoweringConfig(Operation *op,
                             const ConfigureLoweringOptions &strategy) {
  std::optional<RootShape> shape = rootShape(op);
  if (!shape)
    return LoweringConfigAttr();
  if (failed(checkLowered(op, strategy.target)))
    return failure();
  return choose(op, *shape, CPUFeatures::get(strategy.cpuFeatures), strategy);
}

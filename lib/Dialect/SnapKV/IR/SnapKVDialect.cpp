#include "snapkv/Dialect/SnapKV/IR/SnapKVDialect.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "mlir/IR/DialectImplementation.h"
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

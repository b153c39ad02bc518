//===- SelectBuilderTest.cpp - the type-inferring snapkv.select builder ---===//
//
// Builds snapkv.select with the builder that infers result types (what a
// pass uses) for each shape case, verifies it and prints it; FileCheck in
// test/Unit/select-builder.test checks the inferred types.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Dialect/SnapKV/IR/SnapKVDialect.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::snapkv;

namespace {
struct Case {
  const char *name;
  SmallVector<int64_t> q, kv;
  int64_t window, capacity;
  GqaPolicy gqa;
};
} // namespace

int runSelectBuilderTests() {
  MLIRContext ctx;
  ctx.loadDialect<SnapKVDialect, func::FuncDialect>();
  OpBuilder b(&ctx);
  Location loc = b.getUnknownLoc();
  Type f16 = b.getF16Type();
  constexpr int64_t dyn = ShapedType::kDynamic;

  Case cases[] = {
      {"static_expand",
       {1, 32, 32, 128},
       {1, 8, 4096, 128},
       32,
       1024,
       GqaPolicy::expand},
      {"dynamic_mean",
       {1, 32, 32, 128},
       {1, 8, dyn, 128},
       32,
       1024,
       GqaPolicy::mean},
      {"short_max", {2, 4, 4, 16}, {2, 2, 10, 16}, 4, 64, GqaPolicy::max},
  };
  int failures = 0;
  for (const Case &c : cases) {
    auto module = ModuleOp::create(loc);
    b.setInsertionPointToEnd(module.getBody());
    Type qTy = RankedTensorType::get(c.q, f16);
    Type kvTy = RankedTensorType::get(c.kv, f16);
    auto fn = func::FuncOp::create(b, loc, c.name,
                                   b.getFunctionType({qTy, kvTy, kvTy}, {}));
    Block *body = fn.addEntryBlock();
    b.setInsertionPointToStart(body);
    auto select = SelectOp::create(
        b, loc, body->getArgument(0), body->getArgument(1),
        body->getArgument(2), c.window, c.capacity, /*kernel=*/5,
        PoolingKind::avg, c.gqa, Order::position, /*scale=*/FloatAttr());
    func::ReturnOp::create(b, loc);
    if (failed(verify(module))) {
      llvm::outs() << "FAIL: " << c.name << " does not verify\n";
      ++failures;
    }
    select->print(llvm::outs());
    llvm::outs() << "\n";
    module->erase();
  }
  llvm::outs() << (failures ? "FAILED\n" : "ALL VERIFIED\n");
  return failures;
}

//===- ReportCache.cpp - persistent K/V cache ledger ----------------------===//

#include "snapkv/Dialect/SnapKV/Transforms/Passes.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_REPORTCACHE
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;
using namespace mlir::snapkv;

namespace {
/// Thousands separators make the byte counts comparable at a glance.
std::string grouped(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return out;
}

struct ReportCachePass : snapkv::impl::ReportCacheBase<ReportCachePass> {
  using Base::Base;

  void runOnOperation() override {
    int64_t length = promptLength, extra = generated;
    if (length <= 0 || extra < 0) {
      getOperation().emitError()
          << "snapkv-report-cache needs prompt-length > 0 and generated >= 0 "
             "(got prompt-length="
          << length << ", generated=" << extra << ")";
      return signalPassFailure();
    }
    llvm::raw_ostream &os = llvm::outs();
    os << "snapkv cache ledger: L=" << length << " g=" << extra
       << " (persistent K/V bytes)\n";
    os << llvm::format("%-6s %-7s %4s %4s %4s %5s %2s %8s %22s %22s\n",
                       "layer", "gqa", "B", "Hkv", "Hc", "D", "e", "kept",
                       "full", "compacted");
    uint64_t totalFull = 0, totalCompacted = 0;
    unsigned layer = 0;
    WalkResult result = getOperation().walk([&](SelectOp op) {
      auto qTy = op.getQueries().getType();
      auto kTy = op.getKeys().getType();
      uint64_t bytes = kTy.getElementTypeBitWidth() / 8;
      uint64_t batch = qTy.getDimSize(0), dim = qTy.getDimSize(3);
      uint64_t kvHeads = kTy.getDimSize(1);
      uint64_t heads =
          op.getGqa() == GqaPolicy::expand ? qTy.getDimSize(1) : kvHeads;
      if (!kTy.isDynamicDim(2) && kTy.getDimSize(2) != length) {
        op.emitError() << "keys hold " << kTy.getDimSize(2)
                       << " positions but prompt-length is " << length;
        return WalkResult::interrupt();
      }
      uint64_t kept = std::min<uint64_t>(length, op.getCapacity());
      uint64_t full = 2 * batch * kvHeads * (length + extra) * dim * bytes;
      uint64_t compacted = 2 * batch * heads * (kept + extra) * dim * bytes;
      totalFull += full;
      totalCompacted += compacted;
      os << llvm::format("%-6u %-7s %4llu %4llu %4llu %5llu %2llu %8llu ",
                         layer++, stringifyGqaPolicy(op.getGqa()).data(),
                         batch, kvHeads, heads, dim, bytes, kept)
         << llvm::format("%22s %22s\n", grouped(full).c_str(),
                         grouped(compacted).c_str());
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      return signalPassFailure();
    os << "total: " << layer << " layers, full " << grouped(totalFull)
       << " B, compacted " << grouped(totalCompacted) << " B";
    if (totalFull)
      os << llvm::format(" (%.4f of full)",
                         static_cast<double>(totalCompacted) / totalFull);
    os << "\n";
    markAllAnalysesPreserved();
  }
};
} // namespace

//===- ReportCache.cpp - persistent K/V cache ledger ----------------------===//

#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>

namespace mlir::snapkv {
#define GEN_PASS_DEF_REPORTCACHE
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;
using namespace mlir::snapkv;

/// Thousands separators make the byte counts comparable at a glance.
static std::string grouped(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return out;
}

/// The product of `factors`, or nothing if it does not fit in 64 bits.
static std::optional<uint64_t> product(ArrayRef<uint64_t> factors) {
  std::optional<uint64_t> result = 1;
  for (uint64_t factor : factors) {
    result = llvm::checkedMulUnsigned(*result, factor);
    if (!result)
      return std::nullopt;
  }
  return result;
}

namespace {
/// How often each function runs when the module's entry points (functions
/// nothing refers to) run once each: a layer function that the entry point
/// calls N times runs N times.
class CallCounts {
public:
  explicit CallCounts(ModuleOp module) : module(module) {}

  /// The count of `func`, or an error at `at` when it cannot be known.
  FailureOr<uint64_t> count(func::FuncOp func, Location at) {
    if (auto it = counts.find(func); it != counts.end())
      return it->second;
    if (!active.insert(func).second)
      return emitError(at) << "snapkv-report-cache: @" << func.getName()
                           << " is called recursively";
    std::optional<SymbolTable::UseRange> uses =
        SymbolTable::getSymbolUses(func, module);
    uint64_t total = 0;
    if (!uses)
      return emitError(at) << "snapkv-report-cache: the uses of @"
                           << func.getName() << " cannot be counted";
    if (uses->empty())
      total = 1;
    for (const SymbolTable::SymbolUse &use : *uses) {
      auto call = dyn_cast<func::CallOp>(use.getUser());
      auto caller = call ? call->getParentOfType<func::FuncOp>() : nullptr;
      if (!caller)
        return emitError(at)
               << "snapkv-report-cache: @" << func.getName() << " is used by "
               << use.getUser()->getName() << ", not only by func.call";
      FailureOr<uint64_t> callerCount = count(caller, at);
      if (failed(callerCount))
        return failure();
      std::optional<uint64_t> sum =
          llvm::checkedAddUnsigned(total, *callerCount);
      if (!sum)
        return emitError(at) << "snapkv-report-cache: the call count of @"
                             << func.getName() << " does not fit in 64 bits";
      total = *sum;
    }
    active.erase(func);
    counts[func] = total;
    return total;
  }

private:
  ModuleOp module;
  llvm::DenseMap<Operation *, uint64_t> counts;
  llvm::SmallPtrSet<Operation *, 8> active;
};

struct Row {
  GqaPolicy gqa;
  uint64_t batch, kvHeads, heads, dim, bytes, kept, full, compacted;
  /// Bytes of one compacted row of one head: D * e, or D + 4 for the packed
  /// int8 rows of kv-dtype=i8 (snapkv.kv_cache).
  uint64_t rowBytes;
  /// K/V the layer holds during prefill before its select: the whole prompt's
  /// (one-shot), or the cache plus one chunk (chunked prefill).
  uint64_t peakRows, peak;
  /// The most compacted rows held during the g decode steps (decode-time
  /// compression bounds them), and their bytes.
  uint64_t decodePeakRows, decodePeak;
};

/// snapkv.decode_compression: every `interval`-th decode step, once `window`
/// steps were taken, caches of more than `capacity` rows go back to it.
struct DecodeCompression {
  uint64_t interval, window, capacity;
};

/// (rows after `steps` decode steps from `start` rows, the most held at
/// once, counting the appended row before a compaction).
static std::pair<uint64_t, uint64_t>
decodeRows(uint64_t start, uint64_t steps,
           const std::optional<DecodeCompression> &dc) {
  uint64_t grown = start + steps; // checked by the caller
  if (!dc || grown <= dc->capacity)
    return {grown, grown};
  // The first compaction: the first multiple of the interval at or past both
  // the window and the step that takes the cache past the capacity.
  uint64_t need =
      std::max(dc->window,
               dc->capacity >= start ? dc->capacity - start + 1 : uint64_t(1));
  std::optional<uint64_t> first =
      llvm::checkedMulUnsigned((need - 1) / dc->interval + 1, dc->interval);
  if (!first || *first > steps)
    return {grown, grown};
  uint64_t last = *first + (steps - *first) / dc->interval * dc->interval;
  uint64_t peak = start + *first;
  if (steps - *first >= dc->interval)
    peak = std::max(peak, dc->capacity + dc->interval);
  uint64_t rows = dc->capacity + (steps - last);
  return {rows, std::max(peak, rows)};
}

/// The most rows a layer holds before its select while a `length`-token
/// prompt is prefilled `chunk` tokens at a time (0: at once), compacting to
/// `capacity` after each chunk (docs/semantics.md, "Chunked prefill": a last
/// chunk shorter than `window` joins the one before it). Two-level chunked
/// prefill passes its staging capacity: what the cache holds before a chunk.
static uint64_t prefillPeakRows(uint64_t length, uint64_t chunk,
                                uint64_t capacity, uint64_t window) {
  if (chunk == 0 || length <= chunk)
    return length;
  uint64_t chunks = (length + chunk - 1) / chunk;
  uint64_t last = length - (chunks - 1) * chunk;
  if (last < window) {
    --chunks;
    last += chunk;
  }
  // Chunk k starts at k * chunk over min(C, k * chunk) cached rows.
  uint64_t lastStart = length - last;
  uint64_t peak = std::min(capacity, lastStart) + last;
  if (chunks >= 2)
    peak = std::max(peak, std::min(capacity, (chunks - 2) * chunk) + chunk);
  return peak;
}

struct ReportCachePass : snapkv::impl::ReportCacheBase<ReportCachePass> {
  using Base::Base;

  /// The ledger row of one select (`snapkv.select` or, holding the same rows
  /// in all, `snapkv.select_adaptive`), or an error at its location.
  FailureOr<Row> row(Operation *op, unsigned layer, uint64_t length,
                     uint64_t extra, uint64_t chunk, uint64_t staging,
                     bool carried, const std::optional<DecodeCompression> &dc,
                     bool quantized) {
    auto select = dyn_cast<SelectOp>(op);
    auto adaptive = dyn_cast<SelectAdaptiveOp>(op);
    auto qTy = cast<RankedTensorType>(op->getOperand(0).getType());
    auto kTy = cast<RankedTensorType>(op->getOperand(1).getType());
    GqaPolicy gqa = select ? select.getGqa() : adaptive.getGqa();
    int64_t capacity = select ? select.getCapacity() : adaptive.getCapacity();
    if (qTy.isDynamicDim(0) || qTy.isDynamicDim(1) || qTy.isDynamicDim(3) ||
        kTy.isDynamicDim(1))
      return emitError(op->getLoc())
             << "snapkv-report-cache: layer " << layer
             << ": the batch, head counts and head dim must be static";
    if (!kTy.isDynamicDim(2) &&
        static_cast<uint64_t>(kTy.getDimSize(2)) != length)
      return emitError(op->getLoc())
             << "snapkv-report-cache: layer " << layer << ": keys hold "
             << kTy.getDimSize(2) << " positions but prompt-length is "
             << length;
    Row r;
    r.gqa = gqa;
    r.bytes = kTy.getElementTypeBitWidth() / 8;
    r.batch = qTy.getDimSize(0);
    r.dim = qTy.getDimSize(3);
    r.kvHeads = kTy.getDimSize(1);
    r.heads = r.gqa == GqaPolicy::expand ? qTy.getDimSize(1) : r.kvHeads;
    r.rowBytes = quantized ? r.dim + kScaleBytes : r.dim * r.bytes;
    // Adaptive heads keep different counts, Hc x min(L, C) in all.
    r.kept = std::min<uint64_t>(length, capacity);
    // Decode-time compression bounds what decoding appends.
    auto [decoded, decodePeak] = decodeRows(r.kept, extra, dc);
    // Both fit: prompt-length + generated was checked, and kept <= length.
    std::optional<uint64_t> full =
        product({2, r.batch, r.kvHeads, length + extra, r.dim, r.bytes});
    std::optional<uint64_t> compacted =
        product({2, r.batch, r.heads, decoded, r.rowBytes});
    if (!full || !compacted) {
      bool whole = !full;
      return emitError(op->getLoc())
             << "snapkv-report-cache: layer " << layer << ": the "
             << (whole ? "full cache, 2*B*Hkv*(L+g)*D*e bytes,"
                       : "compacted cache, 2*B*Hc*(min(L,C)+g)*D*e bytes,")
             << " does not fit in 64 bits (B=" << r.batch
             << (whole ? ", Hkv=" : ", Hc=") << (whole ? r.kvHeads : r.heads)
             << (whole ? ", L=" : ", min(L,C)=") << (whole ? length : r.kept)
             << ", g=" << extra << ", D=" << r.dim << ", e=" << r.bytes << ")";
    }
    r.full = *full;
    r.compacted = *compacted;
    int64_t window = select ? select.getWindow() : adaptive.getWindow();
    r.peakRows = prefillPeakRows(
        length, chunk, staging ? static_cast<int64_t>(staging) : capacity,
        window);
    // peakRows <= length, and 2*B*Hkv*(L+g)*D*e fits.
    r.peak = *product({2, r.batch, r.kvHeads, r.peakRows, r.dim, r.bytes});
    // staging_carry: the staged rows' scores, one f32 per row per cache head
    // (at most M rows; less than the K/V rows' bytes, so it fits too).
    if (carried)
      r.peak += r.batch * r.heads * std::min<uint64_t>(staging, length) * 4;
    r.decodePeakRows = decodePeak;
    std::optional<uint64_t> decodeBytes =
        product({2, r.batch, r.heads, decodePeak, r.rowBytes});
    if (!decodeBytes)
      return emitError(op->getLoc())
             << "snapkv-report-cache: layer " << layer
             << ": the decode peak does not fit in 64 bits";
    r.decodePeak = *decodeBytes;
    return r;
  }

  void runOnOperation() override {
    // Options first, before anything is printed; diagnostics go to a
    // location, not the module op (which mlir-opt would print whole).
    Location loc = getOperation().getLoc();
    int64_t length = promptLength, extra = generated;
    if (length <= 0 || extra < 0) {
      emitError(loc) << "snapkv-report-cache needs prompt-length > 0 and "
                        "generated >= 0 (got prompt-length="
                     << length << ", generated=" << extra << ")";
      return signalPassFailure();
    }
    if (!llvm::checkedAdd(length, extra)) {
      emitError(loc) << "snapkv-report-cache: prompt-length + generated does "
                        "not fit in 64 bits (prompt-length="
                     << length << ", generated=" << extra << ")";
      return signalPassFailure();
    }

    SmallVector<Row> rows;
    uint64_t totalFull = 0, totalCompacted = 0, totalPeak = 0,
             totalDecodePeak = 0;
    CallCounts calls(getOperation());
    // Chunked prefill's extend function compacts the same caches again after
    // each chunk: its selects are not more layers.
    // So are two-level chunked prefill's staged chunks'.
    llvm::SmallDenseSet<StringRef> extend;
    uint64_t chunk = 0, staging = 0;
    bool carried = false;
    for (StringRef attr : {kChunkedPrefillAttrName, kDecodeCompressionAttrName})
      if (auto record = getOperation()->getAttrOfType<DictionaryAttr>(attr))
        for (StringRef field : {"function", "staging_function"})
          if (auto name = record.getAs<StringAttr>(field))
            extend.insert(name.getValue());
    if (auto chunked = getOperation()->getAttrOfType<DictionaryAttr>(
            kChunkedPrefillAttrName)) {
      if (auto size = chunked.getAs<IntegerAttr>("chunk"))
        chunk = size.getInt();
      if (auto size = chunked.getAs<IntegerAttr>("staging"))
        staging = size.getInt();
      carried = chunked.contains("staging_carry");
    }
    // The dialect verified the record (positive integers).
    std::optional<DecodeCompression> dc;
    if (auto record = getOperation()->getAttrOfType<DictionaryAttr>(
            kDecodeCompressionAttrName)) {
      auto get = [&](StringRef field) -> uint64_t {
        auto value = record.getAs<IntegerAttr>(field);
        return value ? value.getInt() : 1;
      };
      dc = DecodeCompression{get("interval"), get("window"), get("capacity")};
    }
    // kv-dtype=i8: the compacted caches hold packed int8 rows.
    bool quantized = getOperation()->hasAttr(kKVCacheAttrName);
    WalkResult walk = getOperation().walk([&](Operation *op) {
      if (!isa<SelectOp, SelectAdaptiveOp>(op))
        return WalkResult::advance();
      if (auto func = op->getParentOfType<func::FuncOp>();
          func && extend.contains(func.getName()))
        return WalkResult::advance();
      // A select in a function called once per layer is one row per call.
      uint64_t repeats = 1;
      if (auto func = op->getParentOfType<func::FuncOp>()) {
        FailureOr<uint64_t> count = calls.count(func, op->getLoc());
        if (failed(count))
          return WalkResult::interrupt();
        repeats = *count;
      }
      for (uint64_t i = 0; i < repeats; ++i) {
        FailureOr<Row> r = row(op, rows.size(), length, extra, chunk, staging,
                               carried, dc, quantized);
        if (failed(r))
          return WalkResult::interrupt();
        std::optional<uint64_t> full =
            llvm::checkedAddUnsigned(totalFull, r->full);
        std::optional<uint64_t> compacted =
            llvm::checkedAddUnsigned(totalCompacted, r->compacted);
        // peak <= full of the same layer, so it fits wherever full does.
        if (full)
          totalPeak += r->peak;
        std::optional<uint64_t> decodePeak =
            llvm::checkedAddUnsigned(totalDecodePeak, r->decodePeak);
        if (!full || !compacted || !decodePeak) {
          emitError(op->getLoc())
              << "snapkv-report-cache: the total over " << rows.size() + 1
              << " layers does not fit in 64 bits (prompt-length=" << length
              << ", generated=" << extra << ")";
          return WalkResult::interrupt();
        }
        totalFull = *full;
        totalCompacted = *compacted;
        totalDecodePeak = *decodePeak;
        rows.push_back(*r);
      }
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();

    llvm::raw_ostream &os = llvm::outs();
    if (format == ReportFormat::json)
      printJson(os, rows, length, extra, chunk, totalFull, totalCompacted,
                totalPeak, totalDecodePeak);
    else
      printTable(os, rows, length, extra, chunk, totalFull, totalCompacted,
                 totalPeak, totalDecodePeak);
    markAllAnalysesPreserved();
  }

  /// The ledger as one JSON object, keys in a fixed order: prompt_length,
  /// generated, chunk (0: one-shot prefill), layers (one object per row, the
  /// columns of the table) and total (layers, full, compacted, ratio =
  /// compacted / full or null, prefill_peak).
  static void printJson(llvm::raw_ostream &os, ArrayRef<Row> rows,
                        int64_t length, int64_t extra, uint64_t chunk,
                        uint64_t totalFull, uint64_t totalCompacted,
                        uint64_t totalPeak, uint64_t totalDecodePeak) {
    llvm::json::OStream json(os, /*IndentSize=*/1);
    json.object([&] {
      json.attribute("prompt_length", length);
      json.attribute("generated", extra);
      json.attribute("chunk", chunk);
      json.attributeArray("layers", [&] {
        for (size_t layer = 0; layer < rows.size(); ++layer)
          json.object([&, &r = rows[layer]] {
            json.attribute("layer", static_cast<uint64_t>(layer));
            json.attribute("gqa", stringifyGqaPolicy(r.gqa));
            json.attribute("B", r.batch);
            json.attribute("Hkv", r.kvHeads);
            json.attribute("Hc", r.heads);
            json.attribute("D", r.dim);
            json.attribute("e", r.bytes);
            json.attribute("row_bytes", r.rowBytes);
            json.attribute("kept", r.kept);
            json.attribute("full", r.full);
            json.attribute("compacted", r.compacted);
            json.attribute("prefill_peak_rows", r.peakRows);
            json.attribute("prefill_peak", r.peak);
            json.attribute("decode_peak_rows", r.decodePeakRows);
            json.attribute("decode_peak", r.decodePeak);
          });
      });
      json.attributeObject("total", [&] {
        json.attribute("layers", static_cast<uint64_t>(rows.size()));
        json.attribute("full", totalFull);
        json.attribute("compacted", totalCompacted);
        if (totalFull)
          json.attribute("ratio",
                         static_cast<double>(totalCompacted) / totalFull);
        else
          json.attribute("ratio", nullptr);
        json.attribute("prefill_peak", totalPeak);
        json.attribute("decode_peak", totalDecodePeak);
      });
    });
    os << "\n";
  }

  static void printTable(llvm::raw_ostream &os, ArrayRef<Row> rows,
                         int64_t length, int64_t extra, uint64_t chunk,
                         uint64_t totalFull, uint64_t totalCompacted,
                         uint64_t totalPeak, uint64_t totalDecodePeak) {
    os << "snapkv cache ledger: L=" << length << " g=" << extra;
    if (chunk)
      os << " chunk=" << chunk;
    os << " (persistent K/V bytes; prefill peak: before each select; decode "
          "peak: the most held while decoding)\n";
    if (!rows.empty() &&
        rows.front().rowBytes != rows.front().dim * rows.front().bytes)
      os << "compacted cache in int8: D + 4 bytes a row (the values and an f32 "
            "scale)\n";
    os << llvm::format(
        "%-6s %-7s %4s %4s %4s %5s %2s %8s %22s %22s %22s %22s\n", "layer",
        "gqa", "B", "Hkv", "Hc", "D", "e", "kept", "full", "compacted",
        "prefill peak", "decode peak");
    for (auto [layer, r] : llvm::enumerate(rows))
      os << llvm::format("%-6u %-7s %4llu %4llu %4llu %5llu %2llu %8llu ",
                         static_cast<unsigned>(layer),
                         stringifyGqaPolicy(r.gqa).data(), r.batch, r.kvHeads,
                         r.heads, r.dim, r.bytes, r.kept)
         << llvm::format("%22s %22s %22s %22s\n", grouped(r.full).c_str(),
                         grouped(r.compacted).c_str(), grouped(r.peak).c_str(),
                         grouped(r.decodePeak).c_str());
    os << "total: " << rows.size() << " layers, full " << grouped(totalFull)
       << " B, compacted " << grouped(totalCompacted) << " B";
    if (totalFull)
      os << llvm::format(" (%.4f of full)",
                         static_cast<double>(totalCompacted) / totalFull);
    os << "; prefill peak " << grouped(totalPeak)
       << " B (every layer at its peak at once); decode peak "
       << grouped(totalDecodePeak) << " B\n";
  }
};
} // namespace

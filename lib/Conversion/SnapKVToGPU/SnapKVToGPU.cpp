//===- SnapKVToGPU.cpp - snapkv.select to GPU-mapped parallel loops -------===//
//
// One select becomes two `scf.parallel` nests on buffers, each mapped to
// GPU blocks x threads (one kernel each after convert-parallel-loops-to-gpu):
//
//   1. votes, one block per (b, kv head): its threads first compute the row
//      maximum and sum of the full causal softmax of the G * W rows of that
//      kv head's query heads (two passes over the keys); after a barrier they
//      take the prefix columns, recompute the logits, turn them into
//      probabilities and sum them over the rows, aggregated by the GQA policy;
//   2. select, one block per (b, cache head): its threads compute the pooled
//      order-preserving keys; after a barrier thread 0 runs the radix top-k
//      threshold, compaction (ties to the lower position), the optional score
//      order and the window; after another barrier the threads gather the K/V
//      rows with the same indices.
//
// Logits are recomputed and never stored: the [B, Hq, W, L] score tensor
// does not exist in memory. Every reduction is a sequential loop in one
// thread, so the results do not depend on scheduling (no atomics). The loops
// run on the CPU too (device-buffers=false; each barrier-separated phase
// becomes a loop over the block's threads), which is how the kernels are
// tested without a GPU. docs/gpu.md has the design.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Conversion/SnapKVToGPU/SnapKVToGPU.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/ParallelLoopMapper.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/Support/FormatVariadic.h"

#include <limits>

namespace mlir::snapkv {
#define GEN_PASS_DEF_CONVERTSNAPKVTOGPU
#include "snapkv/Conversion/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;
using namespace mlir::snapkv;

namespace {

/// Threads per block of every kernel.
constexpr int64_t kBlockSize = 128;

class GPUSelectEmitter {
public:
  GPUSelectEmitter(SelectOp op, PatternRewriter &rewriter, bool deviceBuffers)
      : op(op), b(rewriter), loc(op.getLoc()), device(deviceBuffers) {
    auto qTy = op.getQueries().getType();
    auto kTy = op.getKeys().getType();
    elemTy = qTy.getElementType();
    f32 = b.getF32Type();
    i32 = b.getI32Type();
    i64 = b.getI64Type();
    batch = qTy.getDimSize(0);
    queryHeads = qTy.getDimSize(1);
    kvHeads = kTy.getDimSize(1);
    group = queryHeads / kvHeads;
    window = op.getWindow();
    dim = qTy.getDimSize(3);
    capacity = op.getCapacity();
    keep = capacity - window;
    kernel = op.getKernel();
    expand = op.getGqa() == GqaPolicy::expand;
    heads = expand ? queryHeads : kvHeads;
    scale = op.getEffectiveScale();
  }

  SmallVector<Value> emit();

private:
  // --- small builders ------------------------------------------------------
  Value cIndex(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  static Value cIdx(OpBuilder &nb, Location l, int64_t v) {
    return arith::ConstantIndexOp::create(nb, l, v);
  }
  static Value cF32(OpBuilder &nb, Location l, float v) {
    return arith::ConstantOp::create(nb, l, nb.getF32FloatAttr(v));
  }
  static Value cI32(OpBuilder &nb, Location l, int32_t v) {
    return arith::ConstantOp::create(nb, l, nb.getI32IntegerAttr(v));
  }
  static Value toF32(OpBuilder &nb, Location l, Value v) {
    return v.getType().isF32() ? v : arith::ExtFOp::create(nb, l, nb.getF32Type(), v);
  }
  /// x - max, with x == max mapped to 0 so that max = +inf gives exp(0) = 1
  /// rather than NaN (docs/hostile-values.md); the CPU lowering does the same.
  static Value shifted(OpBuilder &nb, Location l, Value x, Value max) {
    Value isMax = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ, x, max);
    return arith::SelectOp::create(nb, l, isMax, cF32(nb, l, 0.0f),
                                   arith::SubFOp::create(nb, l, x, max));
  }

  /// A buffer on the device (gpu.alloc) or, for CPU emulation, on the host.
  Value alloc(MemRefType type, ValueRange dynamicSizes) {
    if (!device)
      return memref::AllocOp::create(b, loc, type, dynamicSizes);
    return gpu::AllocOp::create(b, loc, type, /*asyncToken=*/Type(),
                                /*asyncDependencies=*/ValueRange(),
                                dynamicSizes, /*symbolOperands=*/ValueRange(),
                                /*hostShared=*/false)
        .getMemref();
  }
  void copy(Value from, Value to) {
    if (device)
      gpu::MemcpyOp::create(b, loc, TypeRange(), ValueRange(), to, from);
    else
      memref::CopyOp::create(b, loc, from, to);
  }
  void release(Value buffer) {
    gpu::DeallocOp::create(b, loc, TypeRange(), ValueRange(), buffer);
  }
  MemRefType memrefOf(ArrayRef<int64_t> shape, Type elem) {
    return MemRefType::get(shape, elem);
  }

  /// `blocks` thread blocks of kBlockSize threads running `phases` in turn;
  /// each phase gets (block id, thread id). On the GPU the phases are
  /// separated by gpu.barrier; on the host (device-buffers=false) each phase
  /// is a loop over the block's threads, which is what the barrier means.
  void launchBlocks(Value blocks,
                    ArrayRef<function_ref<void(OpBuilder &, Location, Value, Value)>>
                        phases);

  /// s * <q[b, h, t], k[b, kv, j]> (f32, fused multiply-add in d order).
  Value dot(OpBuilder &nb, Location l, Value bi, Value kv, Value h, Value t,
            Value j);
  /// G dot products <q[b, kv*G+g, t], k[b, kv, j]> (f32, fused multiply-add),
  /// reading each key element once for the G query heads.
  SmallVector<Value> dots(OpBuilder &nb, Location l, Value bi, Value kv,
                          Value t, Value j);

  void emitVotes(Value rowMax, Value rowSum, Value votes, Value prefix);
  void emitSelect(Value votes, Value keys, Value keptKeys, Value ranked,
                  Value indices, Value keysOut, Value valuesOut, Value length,
                  Value prefix, Value kept);
  void emitKeys(OpBuilder &nb, Location l, Value bi, Value h, Value votes,
                Value keys, Value prefix, Value start, Value step);
  void emitSelection(OpBuilder &nb, Location l, Value bi, Value h,
                     Value votes, Value keys, Value keptKeys, Value ranked,
                     Value indices, Value prefix);
  void emitGather(OpBuilder &nb, Location l, Value bi, Value h, Value indices,
                  Value keysOut, Value valuesOut, Value kept, Value start,
                  Value step);

  SelectOp op;
  PatternRewriter &b;
  Location loc;
  bool device;
  Type elemTy, f32, i32, i64;
  int64_t batch, queryHeads, kvHeads, group, window, dim, capacity, keep,
      kernel, heads;
  bool expand;
  double scale;
  Value q, k, v; // device copies of the operands
};

void GPUSelectEmitter::launchBlocks(
    Value blocks,
    ArrayRef<function_ref<void(OpBuilder &, Location, Value, Value)>> phases) {
  MLIRContext *ctx = b.getContext();
  Value zero = cIndex(0), one = cIndex(1), block = cIndex(kBlockSize);
  AffineMap id = b.getDimIdentityMap();
  auto blockMap =
      gpu::ParallelLoopDimMappingAttr::get(ctx, gpu::Processor::BlockX, id, id);
  if (device) {
    auto loop = scf::ParallelOp::create(
        b, loc, ValueRange{zero, zero}, ValueRange{blocks, block},
        ValueRange{one, one}, [&](OpBuilder &nb, Location l, ValueRange ids) {
          for (auto [i, phase] : llvm::enumerate(phases)) {
            if (i)
              gpu::BarrierOp::create(nb, l);
            phase(nb, l, ids[0], ids[1]);
          }
        });
    (void)gpu::setMappingAttr(
        loop, {blockMap, gpu::ParallelLoopDimMappingAttr::get(
                             ctx, gpu::Processor::ThreadX, id, id)});
    return;
  }
  auto loop = scf::ParallelOp::create(
      b, loc, ValueRange{zero}, ValueRange{blocks}, ValueRange{one},
      [&](OpBuilder &nb, Location l, ValueRange ids) {
        for (auto phase : phases)
          scf::ForOp::create(nb, l, zero, block, one, ValueRange{},
                             [&](OpBuilder &fb, Location fl, Value tid,
                                 ValueRange) {
                               phase(fb, fl, ids[0], tid);
                               scf::YieldOp::create(fb, fl);
                             });
      });
  (void)gpu::setMappingAttr(loop, {blockMap});
}


SmallVector<Value> GPUSelectEmitter::dots(OpBuilder &nb, Location l, Value bi,
                                          Value kv, Value t, Value j) {
  SmallVector<Value> zeros(group, cF32(nb, l, 0.0f));
  Value firstHead = arith::MulIOp::create(nb, l, kv, cIdx(nb, l, group));
  auto loop = scf::ForOp::create(
      nb, l, cIdx(nb, l, 0), cIdx(nb, l, dim), cIdx(nb, l, 1), zeros,
      [&](OpBuilder &fb, Location fl, Value d, ValueRange acc) {
        Value key = toF32(fb, fl,
                          memref::LoadOp::create(fb, fl, k,
                                                 ValueRange{bi, kv, j, d}));
        SmallVector<Value> next;
        for (int64_t g = 0; g < group; ++g) {
          Value h = arith::AddIOp::create(fb, fl, firstHead, cIdx(fb, fl, g));
          Value query = toF32(
              fb, fl,
              memref::LoadOp::create(fb, fl, q, ValueRange{bi, h, t, d}));
          next.push_back(math::FmaOp::create(fb, fl, query, key, acc[g]));
        }
        scf::YieldOp::create(fb, fl, next);
      });
  SmallVector<Value> scaled;
  Value s = cF32(nb, l, static_cast<float>(scale));
  for (Value raw : loop.getResults())
    scaled.push_back(arith::MulFOp::create(nb, l, raw, s));
  return scaled;
}

/// One block per (b, kv head). Phase 1: the block's threads take the G * W
/// rows of the kv head's query heads (row maximum and sum of the full causal
/// softmax, two passes over the keys) and store the statistics. Barrier.
/// Phase 2: the threads take the prefix columns: logits again, probabilities
/// with the statistics, summed over the rows, aggregated over the group.
Value GPUSelectEmitter::dot(OpBuilder &nb, Location l, Value bi, Value kv,
                            Value h, Value t, Value j) {
  auto loop = scf::ForOp::create(
      nb, l, cIdx(nb, l, 0), cIdx(nb, l, dim), cIdx(nb, l, 1),
      ValueRange{cF32(nb, l, 0.0f)},
      [&](OpBuilder &fb, Location fl, Value d, ValueRange acc) {
        Value key = toF32(
            fb, fl, memref::LoadOp::create(fb, fl, k, ValueRange{bi, kv, j, d}));
        Value query = toF32(
            fb, fl, memref::LoadOp::create(fb, fl, q, ValueRange{bi, h, t, d}));
        scf::YieldOp::create(
            fb, fl, ValueRange{math::FmaOp::create(fb, fl, query, key, acc[0])});
      });
  return arith::MulFOp::create(nb, l, loop.getResult(0),
                               cF32(nb, l, static_cast<float>(scale)));
}

void GPUSelectEmitter::emitVotes(Value rowMax, Value rowSum, Value votes,
                                 Value prefix) {
  GqaPolicy gqa = op.getGqa();
  int64_t rows = group * window;
  auto statistics = [&](OpBuilder &pb, Location pl, Value blockId, Value tid) {
    Value bi = arith::DivUIOp::create(pb, pl, blockId, cIdx(pb, pl, kvHeads));
    Value kv = arith::RemUIOp::create(pb, pl, blockId, cIdx(pb, pl, kvHeads));
    scf::ForOp::create(
        pb, pl, tid, cIdx(pb, pl, rows), cIdx(pb, pl, kBlockSize), ValueRange{},
        [&](OpBuilder &nb, Location l, Value row, ValueRange) {
          Value g = arith::DivUIOp::create(nb, l, row, cIdx(nb, l, window));
          Value t = arith::RemUIOp::create(nb, l, row, cIdx(nb, l, window));
          Value h = arith::AddIOp::create(
              nb, l, arith::MulIOp::create(nb, l, kv, cIdx(nb, l, group)), g);
          // Row t sees columns 0 .. P + t: prefix AND window (the full
          // denominator).
          Value end = arith::AddIOp::create(
              nb, l, arith::AddIOp::create(nb, l, prefix, t), cIdx(nb, l, 1));
          float negInf = -std::numeric_limits<float>::infinity();
          auto maxLoop = scf::ForOp::create(
              nb, l, cIdx(nb, l, 0), end, cIdx(nb, l, 1),
              ValueRange{cF32(nb, l, negInf)},
              [&](OpBuilder &fb, Location fl, Value j, ValueRange acc) {
                Value logit = dot(fb, fl, bi, kv, h, t, j);
                scf::YieldOp::create(
                    fb, fl,
                    ValueRange{arith::MaximumFOp::create(fb, fl, acc[0], logit)});
              });
          Value m = maxLoop.getResult(0);
          auto sumLoop = scf::ForOp::create(
              nb, l, cIdx(nb, l, 0), end, cIdx(nb, l, 1),
              ValueRange{cF32(nb, l, 0.0f)},
              [&](OpBuilder &fb, Location fl, Value j, ValueRange acc) {
                Value x = shifted(fb, fl, dot(fb, fl, bi, kv, h, t, j), m);
                scf::YieldOp::create(
                    fb, fl,
                    ValueRange{arith::AddFOp::create(
                        fb, fl, acc[0], math::ExpOp::create(fb, fl, x))});
              });
          memref::StoreOp::create(nb, l, m, rowMax, ValueRange{bi, h, t});
          memref::StoreOp::create(nb, l, sumLoop.getResult(0), rowSum,
                                  ValueRange{bi, h, t});
          scf::YieldOp::create(nb, l);
        });
  };
  auto columns = [&](OpBuilder &pb, Location pl, Value blockId, Value tid) {
    Value bi = arith::DivUIOp::create(pb, pl, blockId, cIdx(pb, pl, kvHeads));
    Value kv = arith::RemUIOp::create(pb, pl, blockId, cIdx(pb, pl, kvHeads));
    scf::ForOp::create(
        pb, pl, tid, prefix, cIdx(pb, pl, kBlockSize), ValueRange{},
        [&](OpBuilder &nb, Location l, Value j, ValueRange) {
          Value firstHead = arith::MulIOp::create(nb, l, kv, cIdx(nb, l, group));
          SmallVector<Value> zeros(group, cF32(nb, l, 0.0f));
          // Every window row sees every prefix column: no mask here. The G
          // heads share each key element.
          auto loop = scf::ForOp::create(
              nb, l, cIdx(nb, l, 0), cIdx(nb, l, window), cIdx(nb, l, 1), zeros,
              [&](OpBuilder &fb, Location fl, Value t, ValueRange acc) {
                SmallVector<Value> logits = dots(fb, fl, bi, kv, t, j), next;
                for (int64_t g = 0; g < group; ++g) {
                  Value h =
                      arith::AddIOp::create(fb, fl, firstHead, cIdx(fb, fl, g));
                  Value m = memref::LoadOp::create(fb, fl, rowMax,
                                                   ValueRange{bi, h, t});
                  Value sum = memref::LoadOp::create(fb, fl, rowSum,
                                                     ValueRange{bi, h, t});
                  Value p = arith::DivFOp::create(
                      fb, fl,
                      math::ExpOp::create(fb, fl,
                                          shifted(fb, fl, logits[g], m)),
                      sum);
                  next.push_back(arith::AddFOp::create(fb, fl, acc[g], p));
                }
                scf::YieldOp::create(fb, fl, next);
              });
          if (gqa == GqaPolicy::expand) {
            for (int64_t g = 0; g < group; ++g) {
              Value h = arith::AddIOp::create(nb, l, firstHead, cIdx(nb, l, g));
              memref::StoreOp::create(nb, l, loop.getResult(g), votes,
                                      ValueRange{bi, h, j});
            }
          } else {
            // mean accumulates v / G in head order, like the CPU lowering.
            bool mean = gqa == GqaPolicy::mean;
            Value acc = cF32(nb, l,
                             mean ? 0.0f
                                  : -std::numeric_limits<float>::infinity());
            Value groupSize = cF32(nb, l, static_cast<float>(group));
            for (int64_t g = 0; g < group; ++g) {
              Value x = loop.getResult(g);
              acc = mean ? Value(arith::AddFOp::create(
                               nb, l, acc,
                               arith::DivFOp::create(nb, l, x, groupSize)))
                         : Value(arith::MaximumFOp::create(nb, l, acc, x));
            }
            memref::StoreOp::create(nb, l, acc, votes, ValueRange{bi, kv, j});
          }
          scf::YieldOp::create(nb, l);
        });
  };
  launchBlocks(cIndex(batch * kvHeads), {statistics, columns});
}

/// Pooled score -> order-preserving i32 key (NaN -> 0, -0 folded into +0)
/// for prefix columns start, start + step, ...
void GPUSelectEmitter::emitKeys(OpBuilder &nb, Location l, Value bi, Value h,
                                Value votes, Value keys, Value prefix,
                                Value start, Value step) {
  int64_t radius = kernel / 2;
  bool avg = op.getPooling() == PoolingKind::avg;
  float pad = avg ? 0.0f : -std::numeric_limits<float>::infinity();
  scf::ForOp::create(
      nb, l, start, prefix, step, ValueRange{},
      [&](OpBuilder &fb, Location fl, Value j, ValueRange) {
        Value acc = cF32(fb, fl, pad);
        for (int64_t o = 0; o < kernel; ++o) {
          // Neighbour j + o - radius, if in [0, P).
          Value at = arith::AddIOp::create(fb, fl, j, cIdx(fb, fl, o));
          Value low = arith::CmpIOp::create(fb, fl, arith::CmpIPredicate::uge,
                                            at, cIdx(fb, fl, radius));
          Value src = arith::SubIOp::create(fb, fl, at, cIdx(fb, fl, radius));
          Value high = arith::CmpIOp::create(fb, fl, arith::CmpIPredicate::ult,
                                             src, prefix);
          Value inRange = arith::AndIOp::create(fb, fl, low, high);
          Value safe = arith::SelectOp::create(fb, fl, inRange, src, cIdx(fb, fl, 0));
          Value x = memref::LoadOp::create(fb, fl, votes, ValueRange{bi, h, safe});
          x = arith::SelectOp::create(fb, fl, inRange, x, cF32(fb, fl, pad));
          acc = avg ? Value(arith::AddFOp::create(fb, fl, acc, x))
                    : Value(arith::MaximumFOp::create(fb, fl, acc, x));
        }
        if (avg)
          acc = arith::DivFOp::create(fb, fl, acc,
                                      cF32(fb, fl, static_cast<float>(kernel)));
        Value x = arith::AddFOp::create(fb, fl, acc, cF32(fb, fl, 0.0f));
        Value bits = arith::BitcastOp::create(fb, fl, fb.getI32Type(), x);
        Value negative = arith::CmpIOp::create(fb, fl, arith::CmpIPredicate::slt,
                                               bits, cI32(fb, fl, 0));
        Value flipped = arith::XOrIOp::create(fb, fl, bits, cI32(fb, fl, -1));
        Value signSet = arith::OrIOp::create(
            fb, fl, bits, cI32(fb, fl, std::numeric_limits<int32_t>::min()));
        Value key = arith::SelectOp::create(fb, fl, negative, flipped, signSet);
        Value isNan = arith::CmpFOp::create(fb, fl, arith::CmpFPredicate::UNO,
                                            acc, acc);
        key = arith::SelectOp::create(fb, fl, isNan, cI32(fb, fl, 0), key);
        memref::StoreOp::create(fb, fl, key, keys, ValueRange{bi, h, j});
        scf::YieldOp::create(fb, fl);
      });

}

void GPUSelectEmitter::emitSelection(OpBuilder &nb, Location l, Value bi,
                                     Value h, Value votes, Value keys,
                                     Value keptKeys, Value ranked,
                                     Value indices, Value prefix) {
  Value zero = cIdx(nb, l, 0), one = cIdx(nb, l, 1);

  // Count of keys (unsigned) >= / > a value.
  auto countKeys = [&](OpBuilder &cb, Location cl, Value value,
                       arith::CmpIPredicate pred) {
    auto loop = scf::ForOp::create(
        cb, cl, zero, prefix, one, ValueRange{cI32(cb, cl, 0)},
        [&](OpBuilder &fb, Location fl, Value j, ValueRange acc) {
          Value key = memref::LoadOp::create(fb, fl, keys, ValueRange{bi, h, j});
          Value hit = arith::CmpIOp::create(fb, fl, pred, key, value);
          Value inc = arith::ExtUIOp::create(fb, fl, fb.getI32Type(), hit);
          scf::YieldOp::create(
              fb, fl, ValueRange{arith::AddIOp::create(fb, fl, acc[0], inc)});
        });
    return loop.getResult(0);
  };

  // The K-th largest key, bit by bit from the top.
  Value need = cI32(nb, l, static_cast<int32_t>(keep));
  auto search = scf::ForOp::create(
      nb, l, zero, cIdx(nb, l, 32), one, ValueRange{cI32(nb, l, 0)},
      [&](OpBuilder &fb, Location fl, Value iv, ValueRange acc) {
        Value shift = arith::SubIOp::create(
            fb, fl, cI32(fb, fl, 31),
            arith::IndexCastOp::create(fb, fl, fb.getI32Type(), iv));
        Value bit = arith::ShLIOp::create(fb, fl, cI32(fb, fl, 1), shift);
        Value cand = arith::OrIOp::create(fb, fl, acc[0], bit);
        Value count = countKeys(fb, fl, cand, arith::CmpIPredicate::uge);
        Value enough = arith::CmpIOp::create(fb, fl, arith::CmpIPredicate::sge,
                                             count, need);
        scf::YieldOp::create(
            fb, fl, ValueRange{arith::SelectOp::create(fb, fl, enough, cand, acc[0])});
      });
  Value thresh = search.getResult(0);
  Value above = countKeys(nb, l, thresh, arith::CmpIPredicate::ugt);
  Value ties = arith::SubIOp::create(nb, l, need, above);

  // Kept positions in ascending order; equal keys: the lowest positions.
  scf::ForOp::create(
      nb, l, zero, prefix, one, ValueRange{zero, cI32(nb, l, 0)},
      [&](OpBuilder &fb, Location fl, Value j, ValueRange acc) {
        Value key = memref::LoadOp::create(fb, fl, keys, ValueRange{bi, h, j});
        Value isAbove = arith::CmpIOp::create(fb, fl, arith::CmpIPredicate::ugt,
                                              key, thresh);
        Value equal = arith::CmpIOp::create(fb, fl, arith::CmpIPredicate::eq,
                                            key, thresh);
        Value room = arith::CmpIOp::create(fb, fl, arith::CmpIPredicate::slt,
                                           acc[1], ties);
        Value tie = arith::AndIOp::create(fb, fl, equal, room);
        Value take = arith::OrIOp::create(fb, fl, isAbove, tie);
        scf::IfOp::create(fb, fl, take, [&](OpBuilder &ib, Location il) {
          Value pos = arith::IndexCastOp::create(ib, il, ib.getI64Type(), j);
          memref::StoreOp::create(ib, il, pos, indices, ValueRange{bi, h, acc[0]});
          memref::StoreOp::create(ib, il, key, keptKeys, ValueRange{bi, h, acc[0]});
          scf::YieldOp::create(ib, il);
        });
        Value inc = arith::IndexCastOp::create(
            fb, fl, fb.getIndexType(),
            arith::ExtUIOp::create(fb, fl, fb.getI64Type(), take));
        Value tieInc = arith::ExtUIOp::create(fb, fl, fb.getI32Type(), tie);
        scf::YieldOp::create(
            fb, fl,
            ValueRange{arith::AddIOp::create(fb, fl, acc[0], inc),
                       arith::AddIOp::create(fb, fl, acc[1], tieInc)});
      });

  Value numKept = cIdx(nb, l, keep);
  if (op.getOrder() == Order::score) {
    // rank(i) = #(kept with a higher key) + #(earlier kept with an equal key).
    scf::ForOp::create(
        nb, l, zero, numKept, one, ValueRange{},
        [&](OpBuilder &fb, Location fl, Value i, ValueRange) {
          Value mine = memref::LoadOp::create(fb, fl, keptKeys, ValueRange{bi, h, i});
          auto rank = scf::ForOp::create(
              fb, fl, zero, numKept, one, ValueRange{zero},
              [&](OpBuilder &rb, Location rl, Value e, ValueRange acc) {
                Value other = memref::LoadOp::create(rb, rl, keptKeys,
                                                     ValueRange{bi, h, e});
                Value higher = arith::CmpIOp::create(
                    rb, rl, arith::CmpIPredicate::ugt, other, mine);
                Value equal = arith::CmpIOp::create(
                    rb, rl, arith::CmpIPredicate::eq, other, mine);
                Value earlier = arith::CmpIOp::create(
                    rb, rl, arith::CmpIPredicate::ult, e, i);
                Value before = arith::OrIOp::create(
                    rb, rl, higher, arith::AndIOp::create(rb, rl, equal, earlier));
                Value inc = arith::IndexCastOp::create(
                    rb, rl, rb.getIndexType(),
                    arith::ExtUIOp::create(rb, rl, rb.getI64Type(), before));
                scf::YieldOp::create(
                    rb, rl, ValueRange{arith::AddIOp::create(rb, rl, acc[0], inc)});
              });
          Value pos = memref::LoadOp::create(fb, fl, indices, ValueRange{bi, h, i});
          memref::StoreOp::create(fb, fl, pos, ranked,
                                  ValueRange{bi, h, rank.getResult(0)});
          scf::YieldOp::create(fb, fl);
        });
    scf::ForOp::create(nb, l, zero, numKept, one, ValueRange{},
                       [&](OpBuilder &fb, Location fl, Value i, ValueRange) {
                         Value pos = memref::LoadOp::create(
                             fb, fl, ranked, ValueRange{bi, h, i});
                         memref::StoreOp::create(fb, fl, pos, indices,
                                                 ValueRange{bi, h, i});
                         scf::YieldOp::create(fb, fl);
                       });
  }
  // The window, always kept, in order.
  scf::ForOp::create(
      nb, l, zero, cIdx(nb, l, window), one, ValueRange{},
      [&](OpBuilder &fb, Location fl, Value t, ValueRange) {
        Value pos = arith::IndexCastOp::create(
            fb, fl, fb.getI64Type(), arith::AddIOp::create(fb, fl, prefix, t));
        Value slot = arith::AddIOp::create(fb, fl, numKept, t);
        memref::StoreOp::create(fb, fl, pos, indices, ValueRange{bi, h, slot});
        scf::YieldOp::create(fb, fl);
      });
}

void GPUSelectEmitter::emitGather(OpBuilder &nb, Location l, Value bi,
                                  Value h, Value indices, Value keysOut,
                                  Value valuesOut, Value kept, Value start,
                                  Value step) {
  Value source = expand ? Value(arith::DivUIOp::create(nb, l, h, cIdx(nb, l, group)))
                        : h;
  // Element e = i * D + d of the [S, D] rows: consecutive threads copy
  // consecutive elements of a row.
  Value total = arith::MulIOp::create(nb, l, kept, cIdx(nb, l, dim));
  scf::ForOp::create(
      nb, l, start, total, step, ValueRange{},
      [&](OpBuilder &fb, Location fl, Value e, ValueRange) {
        Value i = arith::DivUIOp::create(fb, fl, e, cIdx(fb, fl, dim));
        Value d = arith::RemUIOp::create(fb, fl, e, cIdx(fb, fl, dim));
        Value row = arith::IndexCastOp::create(
            fb, fl, fb.getIndexType(),
            memref::LoadOp::create(fb, fl, indices, ValueRange{bi, h, i}));
        // Exact copies: no conversion on the way.
        Value key =
            memref::LoadOp::create(fb, fl, k, ValueRange{bi, source, row, d});
        memref::StoreOp::create(fb, fl, key, keysOut, ValueRange{bi, h, i, d});
        Value value =
            memref::LoadOp::create(fb, fl, v, ValueRange{bi, source, row, d});
        memref::StoreOp::create(fb, fl, value, valuesOut,
                                ValueRange{bi, h, i, d});
        scf::YieldOp::create(fb, fl);
      });
}

/// One block per (b, cache head). Phase 1: the threads compute the pooled
/// keys of the prefix columns. Phase 2: thread 0 finds the threshold and
/// writes the kept positions in order (the steps that depend on every key).
/// Phase 3: the threads copy the kept K/V rows. L < C skips the first two.
void GPUSelectEmitter::emitSelect(Value votes, Value keys, Value keptKeys,
                                  Value ranked, Value indices, Value keysOut,
                                  Value valuesOut, Value length, Value prefix,
                                  Value kept) {
  auto kTy = op.getKeys().getType();
  bool staticLength = !kTy.isDynamicDim(2);
  // Emits `selecting` when selection runs and `bypass` (if any) otherwise.
  auto byLength = [&](OpBuilder &nb, Location l,
                      function_ref<void(OpBuilder &, Location)> selecting,
                      function_ref<void(OpBuilder &, Location)> bypass) {
    if (staticLength) {
      if (kTy.getDimSize(2) >= capacity)
        selecting(nb, l);
      else if (bypass)
        bypass(nb, l);
      return;
    }
    Value isShort = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::slt,
                                          length, cIdx(nb, l, capacity));
    scf::IfOp::create(
        nb, l, isShort,
        [&](OpBuilder &ib, Location il) {
          if (bypass)
            bypass(ib, il);
          scf::YieldOp::create(ib, il);
        },
        [&](OpBuilder &ib, Location il) {
          selecting(ib, il);
          scf::YieldOp::create(ib, il);
        });
  };
  auto batchOf = [&](OpBuilder &nb, Location l, Value blockId) -> Value {
    return arith::DivUIOp::create(nb, l, blockId, cIdx(nb, l, heads));
  };
  auto headOf = [&](OpBuilder &nb, Location l, Value blockId) -> Value {
    return arith::RemUIOp::create(nb, l, blockId, cIdx(nb, l, heads));
  };
  auto pooledKeys = [&](OpBuilder &pb, Location pl, Value blockId, Value tid) {
    Value bi = batchOf(pb, pl, blockId), h = headOf(pb, pl, blockId);
    byLength(
        pb, pl,
        [&](OpBuilder &nb, Location l) {
          emitKeys(nb, l, bi, h, votes, keys, prefix, tid,
                   cIdx(nb, l, kBlockSize));
        },
        nullptr);
  };
  auto chooseRows = [&](OpBuilder &pb, Location pl, Value blockId, Value tid) {
    Value bi = batchOf(pb, pl, blockId), h = headOf(pb, pl, blockId);
    Value first = arith::CmpIOp::create(pb, pl, arith::CmpIPredicate::eq, tid,
                                        cIdx(pb, pl, 0));
    scf::IfOp::create(pb, pl, first, [&](OpBuilder &tb, Location tl) {
      byLength(
          tb, tl,
          [&](OpBuilder &nb, Location l) {
            emitSelection(nb, l, bi, h, votes, keys, keptKeys, ranked, indices,
                          prefix);
          },
          [&](OpBuilder &nb, Location l) {
            // L < C: every position is kept, in order.
            scf::ForOp::create(
                nb, l, cIdx(nb, l, 0), length, cIdx(nb, l, 1), ValueRange{},
                [&](OpBuilder &fb, Location fl, Value i, ValueRange) {
                  Value pos =
                      arith::IndexCastOp::create(fb, fl, fb.getI64Type(), i);
                  memref::StoreOp::create(fb, fl, pos, indices,
                                          ValueRange{bi, h, i});
                  scf::YieldOp::create(fb, fl);
                });
          });
      scf::YieldOp::create(tb, tl);
    });
  };
  auto copyRows = [&](OpBuilder &pb, Location pl, Value blockId, Value tid) {
    Value bi = batchOf(pb, pl, blockId), h = headOf(pb, pl, blockId);
    emitGather(pb, pl, bi, h, indices, keysOut, valuesOut, kept, tid,
               cIdx(pb, pl, kBlockSize));
  };
  launchBlocks(cIndex(batch * heads), {pooledKeys, chooseRows, copyRows});
}

SmallVector<Value> GPUSelectEmitter::emit() {
  auto qTy = op.getQueries().getType();
  auto kTy = op.getKeys().getType();
  // Run-time checks first (dynamic L): nothing is read before they pass.
  Value length = kTy.isDynamicDim(2)
                     ? Value(tensor::DimOp::create(b, loc, op.getKeys(), 2))
                     : cIndex(kTy.getDimSize(2));
  if (kTy.isDynamicDim(2) || op.getValues().getType().isDynamicDim(2)) {
    Value valuesLength = tensor::DimOp::create(b, loc, op.getValues(), 2);
    Value same = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, length,
                                       valuesLength);
    cf::AssertOp::create(
        b, loc, same,
        "snapkv.select: prompt length of 'values' differs from 'keys'");
    Value longEnough = arith::CmpIOp::create(
        b, loc, arith::CmpIPredicate::sge, length, cIndex(window));
    cf::AssertOp::create(
        b, loc, longEnough,
        llvm::formatv("snapkv.select: prompt length (keys dim 2) is shorter "
                      "than window {0}",
                      window)
            .str());
  }
  Value prefix = arith::SubIOp::create(b, loc, length, cIndex(window));
  Value kept = arith::MinUIOp::create(b, loc, length, cIndex(capacity));

  // Operands on the device.
  auto stage = [&](Value tensor, RankedTensorType type) {
    auto hostTy = memrefOf(type.getShape(), type.getElementType());
    Value host = bufferization::ToBufferOp::create(b, loc, hostTy, tensor,
                                                   /*readOnly=*/true);
    SmallVector<Value> dynamic;
    if (type.isDynamicDim(2))
      dynamic.push_back(length);
    Value onDevice = alloc(hostTy, dynamic);
    copy(host, onDevice);
    return onDevice;
  };
  q = stage(op.getQueries(), qTy);
  k = stage(op.getKeys(), kTy);
  v = stage(op.getValues(), op.getValues().getType());

  int64_t dyn = ShapedType::kDynamic;
  Value rowMax = alloc(memrefOf({batch, queryHeads, window}, f32), {});
  Value rowSum = alloc(memrefOf({batch, queryHeads, window}, f32), {});
  Value votes = alloc(memrefOf({batch, heads, dyn}, f32), {prefix});
  Value keys = alloc(memrefOf({batch, heads, dyn}, i32), {prefix});
  Value keptKeys = alloc(memrefOf({batch, heads, std::max<int64_t>(keep, 1)}, i32), {});
  Value ranked = alloc(memrefOf({batch, heads, std::max<int64_t>(keep, 1)}, i64), {});

  auto outKTy = cast<RankedTensorType>(op.getSelectedKeys().getType());
  auto outIdxTy = cast<RankedTensorType>(op.getIndices().getType());
  SmallVector<Value> keptDyn;
  if (outKTy.isDynamicDim(2))
    keptDyn.push_back(kept);
  auto outKMem = memrefOf(outKTy.getShape(), outKTy.getElementType());
  auto outIdxMem = memrefOf(outIdxTy.getShape(), i64);
  Value indices = alloc(outIdxMem, keptDyn);
  Value keysOut = alloc(outKMem, keptDyn);
  Value valuesOut = alloc(outKMem, keptDyn);

  // Statistics and votes only matter when selection runs; for a short
  // prompt P can still be >= 0, and the kernels are cheap no-ops for P = 0.
  emitVotes(rowMax, rowSum, votes, prefix);
  emitSelect(votes, keys, keptKeys, ranked, indices, keysOut, valuesOut,
             length, prefix, kept);

  SmallVector<Value> results;
  for (auto [buffer, type] :
       {std::pair{keysOut, outKTy}, std::pair{valuesOut, outKTy},
        std::pair{indices, outIdxTy}}) {
    Value host = buffer;
    if (device) {
      // Results go back to host memory, which the caller owns.
      host = memref::AllocOp::create(
          b, loc, memrefOf(type.getShape(), type.getElementType()), keptDyn);
      copy(buffer, host);
      release(buffer);
    }
    results.push_back(bufferization::ToTensorOp::create(
        b, loc, type, host, /*restrict=*/true, /*writable=*/true));
  }
  // On the host the deallocation pipeline frees what is left.
  if (device)
    for (Value scratch :
         {q, k, v, rowMax, rowSum, votes, keys, keptKeys, ranked})
      release(scratch);
  return results;
}

struct GPUSelectLowering : OpRewritePattern<SelectOp> {
  GPUSelectLowering(MLIRContext *ctx, bool deviceBuffers)
      : OpRewritePattern(ctx), deviceBuffers(deviceBuffers) {}
  LogicalResult matchAndRewrite(SelectOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getScoring() != Scoring::votes)
      return rewriter.notifyMatchFailure(op, "only the default scoring");
    GPUSelectEmitter emitter(op, rewriter, deviceBuffers);
    rewriter.replaceOp(op, emitter.emit());
    return success();
  }
  bool deviceBuffers;
};

struct ConvertSnapKVToGPUPass
    : snapkv::impl::ConvertSnapKVToGPUBase<ConvertSnapKVToGPUPass> {
  using Base::Base;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateSnapKVToGPUPatterns(patterns, deviceBuffers);
    GreedyRewriteConfig config;
    config.setStrictness(GreedyRewriteStrictness::ExistingOps);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns),
                                     config)))
      return signalPassFailure();
    WalkResult leftover = getOperation()->walk([](Operation *op) {
      if (!isa<SelectOp, ScoreOp>(op))
        return WalkResult::advance();
      op->emitError() << op->getName()
                      << " has no GPU lowering (lower it with "
                         "convert-snapkv-to-linalg instead)";
      return WalkResult::interrupt();
    });
    if (leftover.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace

void mlir::snapkv::populateSnapKVToGPUPatterns(RewritePatternSet &patterns,
                                              bool deviceBuffers) {
  patterns.add<GPUSelectLowering>(patterns.getContext(), deviceBuffers);
}

//===- Formulation.h - SnapKV selection as structured linalg ops -*- C++
//-*-===//
//
// The one formulation of snapkv.select / snapkv.score that every target
// derives from: batched linalg.generic ops on tensors, with the key axis
// split into tiles of `keyTile` positions and the compaction split into
// chunks of `chunk` positions, so that every step whose work grows with the
// prompt length is a structured op with a parallel axis over tiles or rows.
// Targets differ only in how they tile these ops (see TileRecorder).
//
//===----------------------------------------------------------------------===//

#ifndef SNAPKV_LIB_CONVERSION_SNAPKVTOLINALG_FORMULATION_H
#define SNAPKV_LIB_CONVERSION_SNAPKVTOLINALG_FORMULATION_H

#include "snapkv/Conversion/SnapKVToLinalg/SnapKVToLinalg.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/Builders.h"

namespace mlir::snapkv::detail {

using utils::IteratorType;
inline constexpr IteratorType par = IteratorType::parallel;
inline constexpr IteratorType red = IteratorType::reduction;

/// Shapes and options of one select (or score), read off the op.
struct SelectShape {
  Type elemTy;
  int64_t batch, queryHeads, kvHeads, group, window, dim;
  /// Prompt length, or ShapedType::kDynamic.
  int64_t length;
  /// Heads of the selection: Hq for gqa expand, Hkv otherwise.
  int64_t heads;
  int64_t capacity, keep, kernel;
  /// Prefix positions per ranked block (1: each position on its own).
  int64_t block = 1;
  PoolingKind pooling;
  GqaPolicy gqa;
  Order order;
  Scoring scoring;
  int64_t sinks, seed;
  float scale;
  std::string opName;

  static SelectShape get(SelectOp op);
  /// score has no capacity: selection never runs.
  static SelectShape get(ScoreOp op);
  /// The stage ops: only the fields their lowering reads.
  static SelectShape get(TopPositionsOp op);
  static SelectShape get(GatherOp op);
  bool expand() const { return gqa == GqaPolicy::expand; }
};

using FormulationOptions = SnapKVToLinalgOptions;

/// The compaction chunk of a static prompt of `length` positions: the power
/// of two from 16 to 1024 nearest above sqrt(prefix).
int64_t autoChunkSize(int64_t length, int64_t window);

/// Writes the GPU kernels into the IR as the formulation emits them: a group
/// is ops that one kernel of GPU blocks computes, `root` tiled with one size
/// per loop (0 = not tiled; `#snapkv.tile` on the root) and every producer in
/// `fuse` that the tiled root needs fused into the same block loop (the
/// group's number in the producer's `snapkv.fuse`). snapkv-tile-and-fuse
/// applies them. Nothing refers to the ops afterwards, so an op that the
/// conversion later folds or erases takes its attributes with it. (The CPU
/// records none: it tiles the stage ops through TilingInterface.)
class TileRecorder {
public:
  /// Groups take their numbers from `next` (shared by the recorders of one
  /// function, after any group already in the IR). `config` is the op's
  /// `gpu_blocks` configuration, put on the roots for their block loops.
  TileRecorder(int64_t &next, LoweringConfigAttr config)
      : next(next), config(config) {}
  void record(Operation *root, ArrayRef<int64_t> tileSizes,
              ArrayRef<Operation *> fuse);

private:
  int64_t &next;
  LoweringConfigAttr config;
};

class Formulation;

/// Key tiles of one span of positions: [B, Hkv, n, T, D].
struct KeyTiles {
  Value tiles;
  /// Position of the span's first key.
  Value start;
};

/// The (batch, head) row a per-row step runs on; no row (`bi` null) for a
/// step on whole [B, H, ...] tensors.
struct Rows {
  Formulation *outer = nullptr;
  Value bi, h;
  /// `source` ([B, Hkv or Hc, ...]) restricted to the row; itself without
  /// one. `byKvHead`: the row's kv head (for keys and values).
  Value of(Value source, bool byKvHead) const;
};

/// A per-row step: its results, computed by `f` on `rows`' slices.
using RowBody =
    function_ref<SmallVector<Value>(Formulation &f, const Rows &rows)>;

/// Where a target's kernels draw their boundaries; the ops are the same.
/// WholeTensors (Formulation.cpp) runs every step on whole tensors (on the
/// CPU, those of one stage op's tile); RowBlocks (Blocks.cpp, for
/// GPU blocks) stages each key tile as a bounded copy and runs the per-row
/// steps in one block per (batch, head) row. The formulation asks its
/// layout, never the target.
class Layout {
public:
  virtual ~Layout() = default;
  /// The layout of the options' mapping (`gpu_blocks`: RowBlocks).
  static const Layout &of(const FormulationOptions &options);
  /// The key tiles the scoring reads, in spans.
  virtual SmallVector<KeyTiles> keyTiles(Formulation &f, Value keys,
                                         Value length) const = 0;
  /// Whether each kernel of the votes stages its own queries and key tiles.
  virtual bool restagesPerKernel() const = 0;
  /// Whether the scoring may keep one head's logits between its passes.
  virtual bool keepsLogits() const = 0;
  /// The per-row steps of `body`, on whole tensors (`inits` not called), or
  /// in one block per row writing into `inits()`.
  virtual SmallVector<Value> perRow(Formulation &f,
                                    function_ref<SmallVector<Value>()> inits,
                                    RowBody body) const = 0;
};

/// The GPU block layout (Blocks.cpp).
const Layout &rowBlocks();

/// Emits the formulation at the builder's insertion point.
class Formulation {
  friend class WholeTensors;
  friend class RowBlocks;
  friend struct Rows;

public:
  /// With `tiles` (GPU blocks), the formulation records its kernels.
  Formulation(OpBuilder &builder, Location loc, const SelectShape &shape,
              const FormulationOptions &options, TileRecorder *tiles = nullptr);

  /// snapkv.select: (keys, values, indices) with the result types of `op`.
  SmallVector<Value> select(Value queries, Value keys, Value values,
                            TypeRange resultTypes);
  /// snapkv.score: (votes, pooled), each [B, Hc, P] f32.
  SmallVector<Value> score(Value queries, Value keys, TypeRange resultTypes);
  /// snapkv.top_positions: the [B, H, C] positions of the `scores`
  /// ([B, H, P] f32), written into `init`.
  Value topPositions(Value scores, Value init);
  /// The positions snapkv.top_positions keeps of `scores`, whose prefix
  /// length is `prefix`, written into `init` when given.
  Value rankPositions(Value scores, Value prefix, Value init);
  /// snapkv.gather: the rows of `source` at `indices`, clamped into the
  /// source, written into `init`.
  Value gatherRows(Value source, Value indices, Value init);
  /// The run-time checks of a stage op's dynamic sizes (what lowering it
  /// checks first), for a loop over its tiles to make before the loop.
  void checkStage(Operation *op);

private:
  // --- builders -------------------------------------------------------------
  Value cIndex(int64_t v);
  Value cI32(int32_t v);
  Value cF32(float v);
  OpFoldResult ofr(int64_t v) { return b.getIndexAttr(v); }
  Value empty(ArrayRef<OpFoldResult> shape, Type elem);
  Value filled(ArrayRef<OpFoldResult> shape, Type elem, Value init);
  AffineMap map(unsigned numDims, ArrayRef<unsigned> dims);
  linalg::GenericOp
  generic(TypeRange resultTypes, ValueRange ins, ValueRange outs,
          ArrayRef<AffineMap> maps, ArrayRef<utils::IteratorType> iters,
          function_ref<void(OpBuilder &, Location, ValueRange)> body);
  /// Records a GPU group (only for the RowBlocks layout, with a recorder):
  /// one block per tile of `tileSizes`; the linalg producers of the inputs
  /// of `staged` (the staging of the queries and key tiles) are fused into
  /// the block too.
  void blockGroup(Operation *root, ArrayRef<int64_t> tileSizes,
                  ArrayRef<Operation *> fuse = {},
                  ArrayRef<Operation *> staged = {});

  // --- scoring --------------------------------------------------------------
  /// The keys as whole tiles: views of the keys and a zero-padded last tile.
  SmallVector<KeyTiles> viewKeyTiles(Value keys, Value length);
  /// The spans of keyTiles (CPU): `whole` tiles as a view of the keys
  /// (null when L < T is static) and, unless L is a static multiple of T,
  /// one zero-padded tile after them.
  struct KeySpans {
    OpFoldResult whole;
    bool padded;
    /// Tiles per span, in order.
    SmallVector<OpFoldResult> counts(OpBuilder &b) const;
  };
  KeySpans keySpans(Value length);
  /// GPU: one span of ceil(L / T) tiles, each a bounded copy of the keys.
  KeyTiles stagedKeyTiles(Value keys, Value length);
  Value queriesByHead(Value queries);
  /// The span's logits, written into `dest` ([B, Hkv, n, T, G, W] f32)
  /// when given, else into a new tensor.
  Operation *logits(Value queriesT, const KeyTiles &tiles, Value dest = {});
  /// Per tile and window row: maximum and sum of exp(logit - maximum) over
  /// the causally visible columns of the tile.
  std::pair<Value, Value> tileStatistics(Value logits, const KeyTiles &tiles,
                                         Value prefix, Operation *producer);
  /// Row maximum and reciprocal of the full softmax denominator.
  std::pair<Value, Value> rowStatistics(Value tileMax, Value tileSum);
  /// Votes of the span's columns: [B, Hc, n * T].
  Value tileVotes(Value logits, const KeyTiles &tiles, Value rowMax,
                  Value rowInv, Operation *producer);
  /// Votes of the prefix positions after GQA aggregation: [B, Hc, P].
  Value votes(Value queries, Value keys, Value length, Value prefix);
  /// The votes with the logits of each span computed once (`keep`, used by
  /// the statistics and the votes) or twice (recomputed per tile).
  /// With `keep`, span i's logits are written into `scratch[i]` if given
  /// and returned in `keptLogits`.
  Value spanVotes(Value queries, Value keys, Value length, Value prefix,
                  bool keep, ValueRange scratch = {},
                  SmallVectorImpl<Value> *keptLogits = nullptr);
  /// `options.keepLogits`: an scf.for over the (batch, query head) rows, each
  /// scored by the formulation of one head (B = Hq = Hkv = 1) keeping its
  /// logits.
  Value votesPerHead(Value queries, Value keys, Value length, Value prefix);
  /// Scoring sum / norm_sum: the votes of every given query, [B, Hc, P].
  Value accumulatedVotes(Value queries, Value keys, Value length, Value prefix);
  /// Scoring keydiff: each prefix key's distinctness from its kv head's
  /// mean key direction, [B, Hc, P].
  Value keydiffScores(Value keys, Value length, Value prefix);
  /// Pooled scores over the chunk-padded prefix: [B, Hc, Pp].
  Value pool(Value votes, Value prefix, OpFoldResult paddedPrefix);
  /// `block > 1`: each position's score is its block's sum of `pooled`.
  Value blockSums(Value pooled, Value prefix, OpFoldResult paddedPrefix);

  // --- selection ------------------------------------------------------------
  Value orderKeys(Value pooled, Value prefix);
  /// Keys of `scoring recent` / `random` over the chunk-padded prefix.
  Value comparisonKeys(Value prefix, OpFoldResult paddedPrefix);
  Value threshold(Value keys);
  Value countAbove(Value keys, Value thresh);
  std::pair<Value, Value> keptPositions(Value keys, Value thresh, Value above);
  Value orderByScore(Value positions, Value keptKeys);
  /// Written into `dest` when given.
  Value withWindow(Value prefixPositions, Value prefix, Value dest = {});
  Value allPositions(OpFoldResult length);
  /// Written into `dest` when given; with `clampLength`, indices are clamped
  /// into [0, clampLength).
  Value gather(Value source, Value indices, OpFoldResult kept, Value dest = {},
               Value clampLength = {});

  SmallVector<Value> selection(Value queries, Value keys, Value values,
                               Value length);
  /// Pooling, top-k, order, window and gather of the rows of `votes`, or,
  /// without votes, the top-k of the `ranked` comparison keys.
  SmallVector<Value> choose(Value votes, Value ranked, Value keys, Value values,
                            Value prefix);
  SmallVector<Value> bypass(Value keys, Value values, Value length);
  /// Every position of each row, gathered (the bypass's per-row step).
  SmallVector<Value> keepAll(Value keys, Value values, Value length);

  // --- rows (Blocks.cpp) ----------------------------------------------------
  /// The shape of one (batch, head) row: B = Hc = 1, G = 1.
  SelectShape rowShape() const;
  /// Runs `body` in an scf.forall over the (b, h) rows mapped to GPU blocks;
  /// `body` gets the row-local formulation and the row and returns its
  /// [1, 1, ...] results, inserted into `inits` at [b, h].
  SmallVector<Value> inRowBlocks(ValueRange inits, RowBody body);
  /// The row of a [B, Hkv or Hc, ...] tensor that (b, h) reads, or with
  /// `heads` the rows h .. h + heads - 1.
  Value rowOf(Value source, Value bi, Value h, bool byKvHead,
              int64_t heads = 1);
  /// The prompt length, with the run-time checks a dynamic length needs.
  Value checkedLength(Value keys, Value values);
  /// The checks of a dynamic number of query rows (accumulated scorings).
  void checkQueryRows(Value rows, Value length);
  /// The checks of a dynamic prefix of top_positions' scores.
  void checkPrefix(Value prefix);
  /// The checks of gather's dynamic slots and its source's `length` rows.
  void checkGather(Value length, Value indices, OpFoldResult slots);
  Value prefixLength(Value length);
  OpFoldResult paddedPrefix(Value prefix);
  SmallVector<Value> castTo(SmallVector<Value> values, TypeRange types);

  OpBuilder &b;
  Location loc;
  SelectShape s;
  FormulationOptions opts;
  const Layout &layout;
  /// Key positions per scoring tile (at most the prompt length).
  int64_t keyTile;
  /// Prefix positions per compaction chunk for this op.
  int64_t chunk;
  Type f32, i32, i64;
  TileRecorder *tiles;
};

/// `v` as f32 (extended from f16/bf16).
Value toF32(OpBuilder &nb, Location l, Value v);
Value constF32(OpBuilder &nb, Location l, float v);
/// The exponent of a logit `x` in a softmax whose maximum is `max`: x - max,
/// except that x == max gives exactly 0, so that an infinite maximum still
/// yields probabilities (1 / #maxima) instead of inf - inf = NaN.
Value shifted(OpBuilder &nb, Location l, Value x, Value max);

/// snapkv.sdpa as its definition in linalg (Sdpa.cpp).
void populateSdpaLowering(RewritePatternSet &patterns);

} // namespace mlir::snapkv::detail

#endif // SNAPKV_LIB_CONVERSION_SNAPKVTOLINALG_FORMULATION_H

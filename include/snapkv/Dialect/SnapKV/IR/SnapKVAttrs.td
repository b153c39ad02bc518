#ifndef SNAPKV_DIALECT_SNAPKV_IR_SNAPKVATTRS_TD
#define SNAPKV_DIALECT_SNAPKV_IR_SNAPKVATTRS_TD

include "snapkv/Dialect/SnapKV/IR/SnapKVDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def SnapKV_TileMapping : I32EnumAttr<"TileMapping",
    "what the loops of a tiled group become",
    [I32EnumAttrCase<"forall", 0>, I32EnumAttrCase<"gpu_blocks", 1>]> {
  let cppNamespace = "::mlir::snapkv";
  let genSpecializedAttr = 0;
}
def SnapKV_TileMappingAttr : EnumAttr<SnapKV_Dialect, SnapKV_TileMapping,
                                      "mapping">;

def SnapKV_Microkernel : I32EnumAttr<"Microkernel",
    "the CPU instructions an op's inner products are built from",
    [I32EnumAttrCase<"none", 0>, I32EnumAttrCase<"avx512bf16", 1>,
     I32EnumAttrCase<"amx", 2>, I32EnumAttrCase<"avx512vnni", 3>]> {
  let cppNamespace = "::mlir::snapkv";
  let genSpecializedAttr = 0;
}
def SnapKV_MicrokernelAttr : EnumAttr<SnapKV_Dialect, SnapKV_Microkernel,
                                      "microkernel"> {
  let assemblyFormat = "`<` $value `>`";
  let summary = "The microkernel of one root op, as chosen for its target";
  let description = [{
    `none`: the generic vectorisation (f32 FMAs, 16-bit operands widened);
    `avx512bf16`: bf16 pairs multiplied and accumulated in f32 by
    `vdpbf16ps` (AVX512_BF16); `amx`: bf16 tiles on AMX (AMX_BF16);
    `avx512vnni`: int8 x int8 block sums by `vpdpbusd` (AVX512_VNNI, the
    int8 products of snapkv-quantize-weights' `activations=i8`). Chosen
    by `snapkv-configure-lowering` from the op's element types and the CPU
    features, as the `microkernel` of a `#snapkv.lowering_config` (snapkv
    ops) or on its own as `snapkv.microkernel` (a linalg contraction).
  }];
}
def SnapKV_MicrokernelParameter : EnumParameter<SnapKV_Microkernel> {
  let defaultValue = "::mlir::snapkv::Microkernel::none";
}

def SnapKV_TileAttr : AttrDef<SnapKV_Dialect, "Tile"> {
  let mnemonic = "tile";
  let summary = "How to tile one structured op and which producers to fuse";
  let description = [{
    The tiling of a group of the lowered selection, as data: set as the
    discardable attribute `snapkv.tile` on the group's root (an op that
    implements `TilingInterface`) by `convert-snapkv-to-linalg`, read by
    `snapkv-tile-and-fuse`. `sizes` has one entry per loop of the root (0:
    not tiled); `mapping` is `forall` (an `scf.forall`, which the CPU
    pipeline runs through OpenMP) or `gpu_blocks` (each tile one GPU block,
    the innermost tiled loop on `x`). The group's producers carry
    `snapkv.fuse = array<i64: group, ...>` and are fused into its tile.

    ```mlir
    %r = linalg.generic {...} ins(...) outs(...)
        {snapkv.tile = #snapkv.tile<group = 0, sizes = [1, 1, 0],
                                    mapping = forall>} {...}
    ```
  }];
  let parameters = (ins "int64_t":$group,
                        ArrayRefParameter<"int64_t">:$sizes,
                        EnumParameter<SnapKV_TileMapping>:$mapping);
  let assemblyFormat = [{
    `<` `group` `=` $group `,` `sizes` `=` `[` $sizes `]` `,` `mapping` `=`
    $mapping `>`
  }];
  let genVerifyDecl = 1;
}

def SnapKV_LoweringConfigAttr : AttrDef<SnapKV_Dialect, "LoweringConfig"> {
  let mnemonic = "lowering_config";
  let summary = "How one snapkv op is lowered and tiled for its target";
  let description = [{
    The lowering of one op, as data: set as the discardable attribute
    `snapkv.lowering_config` on a `snapkv.select`, `score`, `top_positions`,
    `gather`, `select_adaptive`, `attention` or `ragged_attention` by
    `snapkv-configure-lowering` (or by hand), read by
    `convert-snapkv-to-linalg`, which lowers the op with these sizes and
    records its groups' tiling as `#snapkv.tile` with this `mapping`:
    `forall` (the CPU layout, `scf.forall` loops that the CPU pipeline runs
    through OpenMP) or `gpu_blocks` (the GPU block layout, one kernel per
    group). `key_tile` is the keys per scoring (and attention) tile,
    `query_tile` the query rows per attention tile, `chunk` the prefix
    positions per compaction chunk (0: about sqrt(prefix) for a static
    prompt length, 128 for a dynamic one), and `keep_logits` whether the
    CPU scoring keeps one head's logits for the votes (`forall` only).
    With `gpu_blocks`, `threads` is each block's thread count and
    `tensor_cores` whether 16-bit logits go to warp-level MMA: the
    conversion puts the configuration on the block loops it makes, and
    `snapkv-gpu-distribute` splits each block over its own threads (warps).
    Both are absent for `forall`. `microkernel` (CPU only; `none`, the
    default, is not printed) names the instructions the op's inner products
    use: `avx512bf16` or `amx` for bf16 operands on a CPU that has them.

    ```mlir
    %k, %v, %i = snapkv.select %q, %k0, %v0 window 32 capacity 1024
        {snapkv.lowering_config = #snapkv.lowering_config<mapping = forall,
           key_tile = 64, query_tile = 32, chunk = 0, keep_logits = true>}
        : ...
    // GPU blocks of 128 threads, f16 logits on tensor cores:
    #snapkv.lowering_config<mapping = gpu_blocks, key_tile = 64,
        query_tile = 32, chunk = 0, keep_logits = false, threads = 128,
        tensor_cores = true>
    ```
  }];
  let parameters = (ins EnumParameter<SnapKV_TileMapping>:$mapping,
                        "int64_t":$key_tile, "int64_t":$query_tile,
                        "int64_t":$chunk, "::mlir::BoolAttr":$keep_logits,
                        DefaultValuedParameter<"int64_t", "0">:$threads,
                        OptionalParameter<"::mlir::BoolAttr">:$tensor_cores,
                        SnapKV_MicrokernelParameter:$microkernel);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // SNAPKV_DIALECT_SNAPKV_IR_SNAPKVATTRS_TD

#ifndef SNAPKV_DIALECT_SNAPKV_IR_SNAPKVENUMS_TD
#define SNAPKV_DIALECT_SNAPKV_IR_SNAPKVENUMS_TD

include "snapkv/Dialect/SnapKV/IR/SnapKVDialect.td"
include "mlir/IR/EnumAttr.td"

// The enums are dialect attributes (printed `#snapkv<pooling avg>` in the
// generic form, bare `avg` in the ops' custom form).

def SnapKV_PoolingKind : I32EnumAttr<"PoolingKind",
    "neighbourhood pooling of the votes before top-k",
    [I32EnumAttrCase<"avg", 0>, I32EnumAttrCase<"max", 1>]> {
  let cppNamespace = "::mlir::snapkv";
  let genSpecializedAttr = 0;
}
def SnapKV_PoolingKindAttr : EnumAttr<SnapKV_Dialect, SnapKV_PoolingKind,
                                      "pooling">;

def SnapKV_GqaPolicy : I32EnumAttr<"GqaPolicy",
    "how the query heads of one key/value head share a selection",
    [I32EnumAttrCase<"expand", 0>, I32EnumAttrCase<"mean", 1>,
     I32EnumAttrCase<"max", 2>]> {
  let cppNamespace = "::mlir::snapkv";
  let genSpecializedAttr = 0;
}
def SnapKV_GqaPolicyAttr : EnumAttr<SnapKV_Dialect, SnapKV_GqaPolicy, "gqa">;

def SnapKV_Order : I32EnumAttr<"Order", "layout of the kept prefix positions",
    [I32EnumAttrCase<"position", 0>, I32EnumAttrCase<"score", 1>]> {
  let cppNamespace = "::mlir::snapkv";
  let genSpecializedAttr = 0;
}
def SnapKV_OrderAttr : EnumAttr<SnapKV_Dialect, SnapKV_Order, "order">;

def SnapKV_Scoring : I32EnumAttr<"Scoring",
    "what ranks the prefix positions",
    [I32EnumAttrCase<"votes", 0>, I32EnumAttrCase<"prefix_votes", 1>,
     I32EnumAttrCase<"recent", 2>, I32EnumAttrCase<"random", 3>,
     I32EnumAttrCase<"sum", 4>, I32EnumAttrCase<"norm_sum", 5>,
     I32EnumAttrCase<"keydiff", 6>]> {
  let cppNamespace = "::mlir::snapkv";
  let genSpecializedAttr = 0;
}
def SnapKV_ScoringAttr : EnumAttr<SnapKV_Dialect, SnapKV_Scoring, "scoring">;

// Why snapkv-compress-kv-cache left a module unchanged: one case per kind,
// with the stable code programs read (`str`, the `reason` of the module's
// `snapkv.refusal` record and of `snapkv-describe-module`'s JSON) and the
// message people read (`format`, `{i}` standing for the i-th value the pass
// fills in). The pass decides by kind, never by message text.
class SnapKV_RefusalCase<string sym, int val, string name, string fmt>
    : I32EnumCase<sym, val, name> {
  string format = fmt;
}

defvar SnapKV_RefusalCases = [
  SnapKV_RefusalCase<"NoPrefillFunction", 0, "no-prefill-function",
      "no function with a body by this name (prefill-func)">,
  SnapKV_RefusalCase<"NoDecodeFunction", 1, "no-decode-function",
      "no function with a body by this name (decode-func; pass "
      "decode-func=\"\" to rewrite prefill only)">,
  SnapKV_RefusalCase<"NotSingleBlock", 2, "not-single-block",
      "the function does not have a single block ending in func.return">,
  SnapKV_RefusalCase<"UnrecognisedBatchMatmul", 3, "unrecognised-batch-matmul",
      "{0} is not part of a recognised attention: {1}">,
  SnapKV_RefusalCase<"UnrecognisedSdpa", 43, "unrecognised-sdpa",
      "{0} (torch's scaled_dot_product_attention, kept by the export) is "
      "not in a form the rewrite recognises: {1}">,
  SnapKV_RefusalCase<"NoAttention", 4, "no-attention",
      "no attention (Q.K^T, scale, mask, softmax, P.V) found">,
  SnapKV_RefusalCase<"SharedKV", 5, "shared-kv",
      "its keys or values are also read by another attention (or serve as"
      " both keys and values)">,
  SnapKV_RefusalCase<"UnsupportedElementType", 6, "unsupported-element-type",
      "element type is not f32, f16 or bf16">,
  SnapKV_RefusalCase<"Mask", 7, "mask",
      "{0}">,
  SnapKV_RefusalCase<"NotSelfAttention", 8, "not-self-attention",
      "the mask does not compare the prompt's positions with themselves "
      "(not causal self-attention over the prompt)">,
  SnapKV_RefusalCase<"SlidingWindowNarrower", 9, "sliding-window-narrower",
      "the sliding window ({0} positions) is narrower than the prompt "
      "({1} positions), and snapkv.select has no window mask">,
  SnapKV_RefusalCase<"SlidingWindowDynamicPrompt", 10,
      "sliding-window-dynamic-prompt",
      "the sliding window ({0} positions) cannot be proven to cover the "
      "prompt, whose length is dynamic">,
  SnapKV_RefusalCase<"SlidingWindowInDecode", 11, "sliding-window-in-decode",
      "the mask hides keys outside a sliding window of {0} positions; the"
      " new token's logical position is not bounded, so the window cannot"
      " be proven to cover the compacted cache">,
  SnapKV_RefusalCase<"PromptShorterThanWindow", 12,
      "prompt-shorter-than-window",
      "the prompt has {0} positions, fewer than window={1}">,
  SnapKV_RefusalCase<"KVNotReturned", 13, "kv-not-returned",
      "the {0} this attention reads are not returned exactly once (K/V "
      "must reach a result of the function to be cached)">,
  SnapKV_RefusalCase<"NotCacheAppend", 14, "not-cache-append",
      "the keys/values attention reads are not concat(cache argument, new"
      " token) along the sequence">,
  SnapKV_RefusalCase<"AppendNotFromArgument", 15, "append-not-from-argument",
      "the first operand of the cache append is not a function argument">,
  SnapKV_RefusalCase<"AppendedTokenNotOneRow", 16, "appended-token-not-one-row",
      "the token appended to the cache is not one static row">,
  SnapKV_RefusalCase<"AppendNotReturned", 17, "append-not-returned",
      "the appended cache {0} is not returned exactly once">,
  SnapKV_RefusalCase<"CacheOtherUse", 18, "cache-other-use",
      "cache argument {0} has a use other than the append and tensor.dim "
      "({1})">,
  SnapKV_RefusalCase<"AppendOtherUse", 19, "append-other-use",
      "the appended cache has a use other than the return and the GQA "
      "repeat ({0})">,
  SnapKV_RefusalCase<"NoRopeTables", 20, "no-rope-tables",
      "no RoPE tables (generics computing math.cos/math.sin) found, so "
      "the logical position cannot be checked">,
  SnapKV_RefusalCase<"RopeFromCache", 21, "rope-from-cache",
      "the RoPE position is computed from cache argument {0} (its "
      "physical length), not from the logical position argument">,
  SnapKV_RefusalCase<"RopeNotFromArgument", 22, "rope-not-from-argument",
      "the RoPE position does not come from a function argument (it must "
      "be the logical position)">,
  SnapKV_RefusalCase<"DecodeManyQueries", 23, "decode-many-queries",
      "decode attention has more than one query row">,
  SnapKV_RefusalCase<"DecodeMaskPosition", 24, "decode-mask-position",
      "the mask's query position is not the cache length or the position "
      "argument, so the mask cannot be rebuilt for logical positions">,
  SnapKV_RefusalCase<"LayerCountMismatch", 25, "layer-count-mismatch",
      "@{0} has {1} attention layers but @{2} has {3}">,
  SnapKV_RefusalCase<"CachesMisaligned", 26, "caches-misaligned",
      "the cache arguments and results of @{0} do not line up with the "
      "K/V results of @{1}">,
  SnapKV_RefusalCase<"AttentionInCallee", 27, "attention-in-callee",
      "no attention in the function itself, but it calls @{0}, which "
      "holds attention: name that function (prefill-func / decode-func); "
      "its callers are updated with it">,
  SnapKV_RefusalCase<"CalleeNotOnlyCalled", 28, "callee-not-only-called",
      "its signature changes, but it is used by {0}, not only by "
      "func.call">,
  SnapKV_RefusalCase<"CallNotInEntryBlock", 29, "call-not-in-entry-block",
      "its signature changes, but it is called from a nested region or a "
      "function without a single block ending in func.return (@{0})">,
  SnapKV_RefusalCase<"CallerRewritten", 30, "caller-rewritten",
      "it is called from @{0}, which the pass rewrites too">,
  SnapKV_RefusalCase<"CallerCalled", 31, "caller-called",
      "its signature changes and so does that of its caller @{0}, which "
      "is itself used ({1})">,
  SnapKV_RefusalCase<"CallResultOtherUse", 32, "call-result-other-use",
      "result {0} of the call in @{1} changes type but is used by {2}, "
      "not only returned">,
  SnapKV_RefusalCase<"CallOperandNotArgument", 33, "call-operand-not-argument",
      "operand {0} of the call in @{1} changes type but is not an "
      "argument of that function">,
  SnapKV_RefusalCase<"CallArgumentOtherUse", 34, "call-argument-other-use",
      "argument {0} of @{1} changes type (it feeds operand {2} of the "
      "call) but is also used by {3}">,
  SnapKV_RefusalCase<"LayerCopies", 35, "layer-copies",
      "budget=pyramid (or inverted-pyramid) gives each layer its own copy"
      " of a function called once per layer, but {0}">,
  SnapKV_RefusalCase<"RaggedDecode", 36, "ragged-decode",
      "budget=adaptive needs a decode step that appends each head's row "
      "to a ragged cache in place, but {0}">,
  SnapKV_RefusalCase<"AdaptiveTooLarge", 37, "adaptive-too-large",
      "budget=adaptive ranks a layer's (head, position) pairs together "
      "with 32-bit indices, but heads x {0} = {1} x {2} reaches 2^31 - 1">,
  SnapKV_RefusalCase<"NoExtendFunction", 38, "no-extend-function",
      "no function with a body by this name (extend-func, which chunk=N "
      "needs: a prompt chunk, its first position and the caches in)">,
  SnapKV_RefusalCase<"ExtendQueryPositions", 39, "extend-query-positions",
      "the mask's query positions are not `cache length + row` (the "
      "chunk's queries must follow every cached key)">,
  SnapKV_RefusalCase<"SlidingWindowInExtend", 40, "sliding-window-in-extend",
      "the mask hides keys outside a sliding window of {0} positions, "
      "which the compacted cache's positions cannot be checked against">,
  SnapKV_RefusalCase<"ExtendEntry", 41, "extend-entry",
      "decode-capacity differs from capacity with chunk, so decode-time "
      "compression needs its own copy of the extend call chain, called "
      "through one public function, but {0}">,
  SnapKV_RefusalCase<"StagingEntry", 42, "staging-entry",
      "staging compacts the chunks before the last through its own copy of "
      "the extend call chain, called through one public function, but {0}">
];

def SnapKV_RefusalKind : I32Enum<"RefusalKind",
    "why snapkv-compress-kv-cache left a module unchanged",
    SnapKV_RefusalCases> {
  let cppNamespace = "::mlir::snapkv";
  let description = "The `reason` codes of the module attribute "
      "`snapkv.refusal` (which stores the code as a string, its JSON name), "
      "each with its message (`{i}`: a value the pass fills in):\n\n" #
      !interleave(!foreach(c, SnapKV_RefusalCases,
                           "* `" # c.str # "`: " # c.format), "\n");
}

// `snapkv.refusal` stores the code as a string (what programs read); the
// attribute form of the enum is where ODS generates the message table from the
// cases above (its extra class declarations), with no custom TableGen backend.
def SnapKV_RefusalKindAttr : EnumAttr<SnapKV_Dialect, SnapKV_RefusalKind,
                                      "refusal"> {
  let extraClassDeclaration = [{
    /// The message of `kind`, with `{i}` placeholders.
    static ::llvm::StringRef getFormat(::mlir::snapkv::RefusalKind kind) {
      switch (kind) {
}] # !interleave(!foreach(c, SnapKV_RefusalCases,
        "    case ::mlir::snapkv::RefusalKind::" # c.symbol # ":\n"
        "      return R\"(" # c.format # ")\";"), "\n") # [{
      }
      llvm_unreachable("unknown RefusalKind");
    }
  }];
}

#endif // SNAPKV_DIALECT_SNAPKV_IR_SNAPKVENUMS_TD

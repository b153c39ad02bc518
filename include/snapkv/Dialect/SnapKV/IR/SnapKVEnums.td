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
     I32EnumAttrCase<"recent", 2>, I32EnumAttrCase<"random", 3>]> {
  let cppNamespace = "::mlir::snapkv";
  let genSpecializedAttr = 0;
}
def SnapKV_ScoringAttr : EnumAttr<SnapKV_Dialect, SnapKV_Scoring, "scoring">;

#endif // SNAPKV_DIALECT_SNAPKV_IR_SNAPKVENUMS_TD

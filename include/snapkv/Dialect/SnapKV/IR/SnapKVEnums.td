#ifndef SNAPKV_DIALECT_SNAPKV_IR_SNAPKVENUMS_TD
#define SNAPKV_DIALECT_SNAPKV_IR_SNAPKVENUMS_TD

include "mlir/IR/EnumAttr.td"

def SnapKV_PoolingAvg : I32EnumAttrCase<"avg", 0>;
def SnapKV_PoolingMax : I32EnumAttrCase<"max", 1>;
def SnapKV_PoolingKindAttr : I32EnumAttr<"PoolingKind",
    "neighbourhood pooling of the votes before top-k",
    [SnapKV_PoolingAvg, SnapKV_PoolingMax]> {
  let cppNamespace = "::mlir::snapkv";
}

def SnapKV_GqaExpand : I32EnumAttrCase<"expand", 0>;
def SnapKV_GqaMean : I32EnumAttrCase<"mean", 1>;
def SnapKV_GqaMax : I32EnumAttrCase<"max", 2>;
def SnapKV_GqaPolicyAttr : I32EnumAttr<"GqaPolicy",
    "how the query heads of one key/value head share a selection",
    [SnapKV_GqaExpand, SnapKV_GqaMean, SnapKV_GqaMax]> {
  let cppNamespace = "::mlir::snapkv";
}

def SnapKV_OrderPosition : I32EnumAttrCase<"position", 0>;
def SnapKV_OrderScore : I32EnumAttrCase<"score", 1>;
def SnapKV_OrderAttr : I32EnumAttr<"Order",
    "layout of the kept prefix positions",
    [SnapKV_OrderPosition, SnapKV_OrderScore]> {
  let cppNamespace = "::mlir::snapkv";
}

#endif // SNAPKV_DIALECT_SNAPKV_IR_SNAPKVENUMS_TD

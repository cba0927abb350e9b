"""Not-fuse reason codes.  NF1xxx follow graph-autofusion's autofuse codes; NF2xxx are the
named passes' constraint failures.  Every Miss carries one of these."""

NAMES = {
    "NF1001": "NoSharedData",
    "NF1002": "WillCreateCycle",
    "NF1003": "IncreasePeakMemory",
    "NF1004": "ExceedMaxFusionSize",
    "NF1005": "OpaqueOp",
    "NF1006": "PassDisabled",
    "NF1007": "ReduceNotSink",
    "NF1008": "ShapeIncompatible",
    "NF1009": "MultipleAnchors",
    "NF1010": "AnchorTakesNoPrologue",
    "NF2001": "IntermediateHasOtherConsumers",
    "NF2002": "NonConstantParameter",
    "NF2003": "UnsupportedAttribute",
    "NF2004": "ShapeMismatch",
    "NF2005": "DtypeMismatch",
    "NF2006": "UnsupportedVariant",
    "NF2007": "DisabledBySwitch",
    "NF2008": "DependsOnDynamicDim",
    "NF9999": "Unknown",
}

NO_SHARED_DATA = "NF1001"
WILL_CREATE_CYCLE = "NF1002"
INCREASE_PEAK_MEMORY = "NF1003"
EXCEED_MAX_FUSION_SIZE = "NF1004"
OPAQUE_OP = "NF1005"
PASS_DISABLED = "NF1006"
REDUCE_NOT_SINK = "NF1007"
SHAPE_INCOMPATIBLE = "NF1008"
MULTIPLE_ANCHORS = "NF1009"
NO_PROLOGUE = "NF1010"
OTHER_CONSUMERS = "NF2001"
NON_CONSTANT = "NF2002"
UNSUPPORTED_ATTRIBUTE = "NF2003"
SHAPE_MISMATCH = "NF2004"
DTYPE_MISMATCH = "NF2005"
UNSUPPORTED_VARIANT = "NF2006"
DISABLED_BY_SWITCH = "NF2007"
DYNAMIC_DIM = "NF2008"
UNKNOWN = "NF9999"

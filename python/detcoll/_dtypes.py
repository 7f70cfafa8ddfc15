"""detcollDataType_t codes (NCCL's numbering) and their names."""

INT8 = 0
UINT8 = 1
INT32 = 2
UINT32 = 3
INT64 = 4
UINT64 = 5
FLOAT16 = 6
FLOAT32 = 7
FLOAT64 = 8
BFLOAT16 = 9
FLOAT8E4M3 = 10
FLOAT8E5M2 = 11

# code -> (canonical name, element size)
INFO = {
    INT8: ("int8", 1),
    UINT8: ("uint8", 1),
    INT32: ("int32", 4),
    UINT32: ("uint32", 4),
    INT64: ("int64", 8),
    UINT64: ("uint64", 8),
    FLOAT16: ("fp16", 2),
    FLOAT32: ("fp32", 4),
    FLOAT64: ("fp64", 8),
    BFLOAT16: ("bf16", 2),
    FLOAT8E4M3: ("fp8e4m3", 1),
    FLOAT8E5M2: ("fp8e5m2", 1),
}

REDUCIBLE = frozenset({FLOAT16, FLOAT32, FLOAT64, BFLOAT16})

_ALIASES = {
    "int8": INT8, "char": INT8,
    "uint8": UINT8, "byte": UINT8, "u8": UINT8,
    "int32": INT32, "int": INT32, "i32": INT32,
    "uint32": UINT32, "u32": UINT32,
    "int64": INT64, "long": INT64, "i64": INT64,
    "uint64": UINT64, "u64": UINT64,
    "fp16": FLOAT16, "float16": FLOAT16, "half": FLOAT16, "f16": FLOAT16,
    "fp32": FLOAT32, "float32": FLOAT32, "float": FLOAT32, "f32": FLOAT32,
    "fp64": FLOAT64, "float64": FLOAT64, "double": FLOAT64, "f64": FLOAT64,
    "bf16": BFLOAT16, "bfloat16": BFLOAT16,
    "fp8e4m3": FLOAT8E4M3, "float8_e4m3fn": FLOAT8E4M3, "float8e4m3": FLOAT8E4M3,
    "fp8e5m2": FLOAT8E5M2, "float8_e5m2": FLOAT8E5M2, "float8e5m2": FLOAT8E5M2,
}


def code(dtype):
    """The detcollDataType_t of dtype: a name ("bf16", "float32", ...), a
    code, or a torch / numpy dtype (by its name)."""
    if isinstance(dtype, bool):
        raise TypeError(f"dtype {dtype!r} is not a dtype")
    if isinstance(dtype, int):
        if dtype in INFO:
            return dtype
        raise ValueError(f"dtype {dtype} is not a detcollDataType_t (0-11)")
    name = str(dtype).strip().lower()
    if name.startswith("torch."):
        name = name[len("torch."):]
    if name in _ALIASES:
        return _ALIASES[name]
    raise TypeError(
        f"unknown dtype {dtype!r}: want bf16, fp16, fp32, fp64 (for AllGather also "
        "int8, uint8, int32, uint32, int64, uint64)"
    )


def name(c):
    return INFO[c][0]


def size(c):
    return INFO[c][1]

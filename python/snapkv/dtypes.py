"""Element types. numpy has no bfloat16, so bf16 tensors travel as uint16 bit patterns and the
element type is then named explicitly (``dtype="bf16"``)."""

import numpy as np

ELEMENT_TYPES = ("f32", "f16", "bf16")
_NUMPY = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}
# Signed integers of the same width: how K/V rows are compared bit for bit.
_BITS = {"f32": np.int32, "f16": np.int16, "bf16": np.int16}


def bf16_to_f32(bits):
    """Widen bf16 bit patterns (uint16) to float32 exactly."""
    bits = np.asarray(bits)
    if bits.dtype != np.uint16:
        raise TypeError(f"bf16 values must be given as uint16 bit patterns, got {bits.dtype}")
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(values):
    """Round to bf16 (nearest, ties to even) and return the uint16 bit patterns."""
    x = np.asarray(values, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    quiet_nan = ((u >> 16) | 0x40).astype(np.uint16)  # keep NaN a NaN after truncation
    return np.where(np.isnan(x), quiet_nan, rounded)


def element_type(array, dtype=None):
    """Return 'f32', 'f16' or 'bf16' for `array`, checking it against an explicit `dtype`."""
    array = np.asarray(array)
    if dtype is None:
        if array.dtype == np.uint16:
            raise ValueError("uint16 arrays are only accepted as bf16 bits: pass dtype='bf16'")
        for name, np_type in _NUMPY.items():
            if array.dtype == np_type:
                return name
        raise ValueError(f"element type must be float32, float16 or bf16, got {array.dtype}")
    if dtype not in ELEMENT_TYPES:
        raise ValueError(f"dtype must be one of {ELEMENT_TYPES}, got {dtype!r}")
    if array.dtype != _NUMPY[dtype]:
        raise ValueError(f"dtype={dtype!r} needs {np.dtype(_NUMPY[dtype])} arrays, "
                         f"got {array.dtype}")
    return dtype


def to_float64(array, elem):
    """Exact float64 values of an array of element type `elem`."""
    if elem == "bf16":
        return bf16_to_f32(array).astype(np.float64)
    return np.asarray(array).astype(np.float64)


def from_float32(values, elem):
    """Convert float32 values to the storage array of element type `elem` (rounding)."""
    values = np.asarray(values, dtype=np.float32)
    if elem == "bf16":
        return f32_to_bf16(values)
    return values.astype(_NUMPY[elem])


def bits(array, elem):
    """The raw bits of `array` as signed integers (for bit-exact comparisons)."""
    return np.ascontiguousarray(array).view(_BITS[elem])

"""Independent reference for the Python tests: deterministic per-rank inputs and the expected
results of every collective, computed with plain numpy from all ranks' inputs (each rank can
regenerate every other rank's input). Inputs are small integers, so float sums are exact and
results are compared bitwise. bfloat16 is carried as uint16 bit patterns (numpy has no bf16).
"""

import numpy as np

SKIP_RETURN_CODE = 77  # CTest SKIP_RETURN_CODE for a missing optional dependency (torch)

# Chorus dtype name -> numpy type used to hold it (bfloat16 travels as uint16 bits).
NUMPY_HOLDER = {
    "int8": np.int8, "uint8": np.uint8, "int32": np.int32, "uint32": np.uint32,
    "int64": np.int64, "uint64": np.uint64, "float16": np.float16, "bfloat16": np.uint16,
    "float32": np.float32, "float64": np.float64,
}
SIGNED = {"int8", "int32", "int64", "float16", "bfloat16", "float32", "float64"}
FLOATS = {"float16", "bfloat16", "float32", "float64"}
OPS = ("sum", "prod", "max", "min", "avg")


def f32_to_bf16_bits(values_f32):
    """float32 -> bfloat16 bits, round to nearest even (NaN not needed here)."""
    bits = np.asarray(values_f32, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounding = ((bits >> 16) & 1) + 0x7FFF
    return ((bits + rounding) >> 16).astype(np.uint16)


def bf16_bits_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def integer_values(rank, count, dtype, op, salt=0):
    """The exact integer values rank contributes (int64), chosen so that no op overflows any
    dtype for up to 8 ranks: products use {1, 2}, signed types include negatives."""
    index = np.arange(count, dtype=np.int64)
    if op == "prod":
        return 1 + (index * 5 + rank * 3 + salt) % 2
    raw = (index * 7 + rank * 13 + salt * 5) % 15  # 0..14
    return raw - 7 if dtype in SIGNED else raw  # -7..7 signed: a sum of 8 ranks fits int8


def to_holder(values_i64, dtype):
    """Integer values -> the numpy array that holds them in `dtype`."""
    if dtype == "bfloat16":
        return f32_to_bf16_bits(values_i64.astype(np.float32))
    return values_i64.astype(NUMPY_HOLDER[dtype])


def rank_input(rank, count, dtype, op="sum", salt=0):
    return to_holder(integer_values(rank, count, dtype, op, salt), dtype)


def _avg(total_i64, nranks, dtype):
    if dtype in FLOATS:
        if dtype == "float64":
            return total_i64.astype(np.float64) / np.float64(nranks)
        quotient_f32 = total_i64.astype(np.float32) / np.float32(nranks)
        if dtype == "float32":
            return quotient_f32
        if dtype == "float16":
            return quotient_f32.astype(np.float16)  # numpy rounds to nearest even
        return f32_to_bf16_bits(quotient_f32)
    # Integers: C division, truncating toward zero.
    truncated = np.sign(total_i64) * (np.abs(total_i64) // nranks)
    return truncated.astype(NUMPY_HOLDER[dtype])


def expected_reduction(nranks, count, dtype, op, salt=0):
    """op over all ranks' inputs, in the holder representation."""
    stacked = np.stack([integer_values(r, count, dtype, op, salt) for r in range(nranks)])
    if op == "sum":
        return to_holder(stacked.sum(axis=0), dtype)
    if op == "prod":
        return to_holder(stacked.prod(axis=0), dtype)
    if op == "max":
        return to_holder(stacked.max(axis=0), dtype)
    if op == "min":
        return to_holder(stacked.min(axis=0), dtype)
    if op == "avg":
        return _avg(stacked.sum(axis=0), nranks, dtype)
    raise ValueError(op)


def same_bits(actual, expected):
    """Bitwise equality of two numpy arrays (shape-insensitive, dtype size must match)."""
    a = np.ascontiguousarray(actual).reshape(-1)
    e = np.ascontiguousarray(expected).reshape(-1)
    return a.nbytes == e.nbytes and a.view(np.uint8).tobytes() == e.view(np.uint8).tobytes()

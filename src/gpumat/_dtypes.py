"""The element types a Matrix holds: float32, float64, float16 and bfloat16, which every operation computes
in, and int8 and int32, the integer storage of the INT8 products (int8 @ int8 -> int32 on the tensor cores).

This module owns the dtype facts every other module uses: the numpy dtypes, the kernel-name suffix of
each (`suffix`; ITEMSIZE, bytes by suffix; SUFFIXES, the four computed dtypes from which the computing
kernel families are declared; MOVE_SUFFIX, whose bit-moving kernels carry each dtype), the conversion
rule below, and bfloat16 without ml_dtypes.

Two tiers: `as_dtype` answers the four computed dtypes alone (every operation that computes in its
operands' dtype refuses the integers through it, or through operands.same_dtype's gate for matrices
already made); `as_storage_dtype` adds int8 and int32 where a matrix only holds or moves its elements (empty,
zeros, from_numpy with dtype=, to_numpy, copies, transposes, astype from them, the interop imports) and
where the INT8 product takes them.

A dtype is a numpy dtype. bfloat16 is ml_dtypes' when that package is installed (the `bfloat16`
extra); without it, gpumat still holds bfloat16 matrices on the GPU and names their dtype with a
uint16 dtype tagged "bfloat16" (to_numpy then asks for ml_dtypes, or converts when given a dtype).

The conversion rule of from_numpy (and CSRMatrix data): a supported floating dtype is kept; an integer
array becomes float64 when every value is exact in float64 (always for 8-32 bit integers, for 64-bit
ones when |x| <= 2^53), else TypeError asks for an explicit dtype=; anything else (bool, complex,
object, long double) is a TypeError unless dtype= says what to convert to. from_numpy's dtype=int8 or
int32 takes integer (or bool) arrays whose values fit, a ValueError otherwise, and never floats (a
TypeError: rounding and clipping to integers is the caller's choice).
"""

from __future__ import annotations

import numpy as np

FLOAT32, FLOAT64, FLOAT16 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16)
INT8, INT32 = np.dtype(np.int8), np.dtype(np.int32)
EXACT_INT = 2**53


def bfloat16() -> np.dtype:
    """bfloat16 as gpumat names it: ml_dtypes' type, or a tagged uint16 stand-in. ml_dtypes is imported
    here, at the first use of bfloat16, not with gpumat (it is a twentieth of the package's import time)."""
    dt = globals().get("BFLOAT16")
    if dt is None:
        try:
            import ml_dtypes

            ml = np.dtype(ml_dtypes.bfloat16)
        except ImportError:  # optional: bfloat16 matrices still work on the device
            ml = None
        globals()["ML_BFLOAT16"] = ml
        dt = globals()["BFLOAT16"] = ml if ml is not None else np.dtype(np.uint16, metadata={"gpumat": "bfloat16"})
    return dt


def __getattr__(name: str):
    """BFLOAT16 and ML_BFLOAT16 (None without ml_dtypes), made on first use (see bfloat16())."""
    if name in ("BFLOAT16", "ML_BFLOAT16"):
        bfloat16()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# The one table of kernel-name suffixes and of their element sizes in bytes; SUFFIXES, the computed four
# (every computing kernel family declares one entry point a suffix, in this order); the integers are held
# and moved, and multiplied by the INT8 product alone.
ITEMSIZE = {"f32": 4, "f64": 8, "f16": 2, "bf16": 2, "s8": 1, "s32": 4, "e4m3": 1, "e5m2": 1}
SUFFIXES = ("f32", "f64", "f16", "bf16")
INTEGER_SUFFIXES = ("s8", "s32")
FP8_SUFFIXES = ("e4m3", "e5m2")  # ml_dtypes' float8_e4m3fn and float8_e5m2
STORAGE_ONLY_SUFFIXES = (*INTEGER_SUFFIXES, *FP8_SUFFIXES)  # held and moved; computed by few operations
FP8_NAMES = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}
FP8_MAX = {"e4m3": 448.0, "e5m2": 57344.0}  # the largest finite values: where a conversion saturates
DTYPE_NAMES = {  # by kernel suffix
    "f32": "float32",
    "f64": "float64",
    "f16": "float16",
    "bf16": "bfloat16",
    "s8": "int8",
    "s32": "int32",
    **FP8_NAMES,
}
# The kernels that move a dtype's bits (copies, gathers, transposes) by suffix: int32 moves as float32's
# 4-byte words do (those kernels copy bits and never compute), int8 by its own 1-byte entries.
MOVE_SUFFIX = {**{s: s for s in SUFFIXES}, "s8": "s8", "s32": "f32", "e4m3": "s8", "e5m2": "s8"}
MOVE_SUFFIXES = tuple(dict.fromkeys(MOVE_SUFFIX.values()))  # the move families' entry points: f32 f64 f16 bf16 s8


def is_bfloat16(dt: np.dtype) -> bool:
    """ml_dtypes' bfloat16, or gpumat's tagged stand-in (never a plain uint16)."""
    if dt.metadata and dt.metadata.get("gpumat") == "bfloat16":
        return True
    return dt.kind == "V" and dt.name == "bfloat16"


# dtype -> suffix, for the dtypes seen so far: ml_dtypes' bfloat16 joins at its first use (the tagged
# uint16 stand-in never does: numpy compares dtypes without their metadata, so it equals every uint16)
SUFFIX_OF = {FLOAT32: "f32", FLOAT64: "f64", FLOAT16: "f16", INT8: "s8", INT32: "s32"}


def suffix(dt: np.dtype) -> str:
    """The kernel-name suffix: f32, f64, f16, bf16, s8, s32, e4m3, e5m2."""
    sfx = SUFFIX_OF.get(dt)
    if sfx is not None:
        return sfx
    fp8 = fp8_suffix(dt)
    if fp8 is not None:
        SUFFIX_OF[dt] = fp8
        return fp8
    if is_bfloat16(dt):
        if not dt.metadata:
            SUFFIX_OF[dt] = "bf16"
        return "bf16"
    raise TypeError(f"gpumat has no kernels for {dt}")


def name(dt: np.dtype) -> str:
    return "bfloat16" if is_bfloat16(dt) else str(dt)


SUPPORTED = "float32, float64, float16, bfloat16"
STORED = SUPPORTED + ", int8, int32, float8_e4m3fn, float8_e5m2"


def as_dtype(dtype) -> np.dtype:
    """A computed gpumat dtype (float32, float64, float16, bfloat16) from anything numpy understands, or
    the string "bfloat16"; TypeError for the rest, int8 and int32 included (see as_storage_dtype)."""
    return _answered(_KNOWN, dtype, _as_dtype)


_KNOWN: dict = {}  # as_dtype's answers by what it was given


def _answered(cache: dict, dtype, rule) -> np.dtype:
    """rule(dtype), answered once for the common spellings (np.float16, "float32", a dtype) and kept in
    `cache` by what it was given (at most 64: a program names a few)."""
    try:
        known = cache.get(dtype)
    except TypeError:  # unhashable: the rule says what it makes of it
        known = None
    if known is not None:
        return known
    dt = rule(dtype)
    if _cacheable(dtype) and len(cache) < 64:
        cache[dtype] = dt
    return dt


def _cacheable(dtype) -> bool:
    """Whether a dtype's spelling may key a cache of answers: a string, a type, or a dtype without metadata
    (numpy compares dtypes without their metadata: the tagged bfloat16 stand-in, as a key, would answer for
    every plain uint16)."""
    return isinstance(dtype, (str, type)) or (isinstance(dtype, np.dtype) and not dtype.metadata)


def fp8_suffix(dt) -> str | None:
    """e4m3 or e5m2 for ml_dtypes' float8_e4m3fn and float8_e5m2 (a dtype or its name), else None."""
    name = dt if isinstance(dt, str) else getattr(dt, "name", None)
    return next((sfx for sfx, n in FP8_NAMES.items() if n == name), None)


def float8(sfx: str) -> np.dtype:
    """ml_dtypes' FP8 type of suffix e4m3 or e5m2; TypeError without ml_dtypes (FP8 matrices come and go to
    the host in ml_dtypes' types: there is no stand-in as for bfloat16)."""
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError(f"{FP8_NAMES[sfx]} matrices need ml_dtypes on the host: pip install ml_dtypes") from None
    return np.dtype(getattr(ml_dtypes, FP8_NAMES[sfx]))


def as_storage_dtype(dtype) -> np.dtype:
    """A dtype a Matrix holds: as_dtype's four, int8, int32, or ml_dtypes' float8_e4m3fn and float8_e5m2
    (TypeError naming all eight otherwise)."""
    return _answered(_STORED_KNOWN, dtype, _as_storage_dtype)


# as_storage_dtype's answers by what it was given: the FP8 test below reads a dtype's name, which numpy
# computes in Python (a third of a small astype's host time, on the stand-in driver)
_STORED_KNOWN: dict = {}


def _as_storage_dtype(dtype) -> np.dtype:
    if isinstance(dtype, str):
        fp8 = fp8_suffix(dtype)
    else:
        try:
            fp8 = None if dtype is None else fp8_suffix(np.dtype(dtype))
        except TypeError:
            fp8 = None
    if fp8 is not None:
        return float8(fp8)
    try:
        return as_dtype(dtype)
    except TypeError as err:
        refused = err
    try:
        dt = np.dtype(dtype)  # (None: refused above, a dtype must be named)
    except TypeError:
        dt = None
    if dt is not None and is_integer(dt):  # (a byte-swapped int32 is not: the GPU's order only)
        return dt
    raise TypeError(str(refused).replace(SUPPORTED, STORED)) from None


def is_integer(dt: np.dtype) -> bool:
    """int8 or int32: held and moved, multiplied by the INT8 product alone."""
    return dt in (INT8, INT32)


def _as_dtype(dtype) -> np.dtype:
    if isinstance(dtype, str) and dtype.lower() in ("bfloat16", "bf16"):
        return bfloat16()
    if isinstance(dtype, np.dtype) and is_bfloat16(dtype):
        return bfloat16()
    if dtype is None:  # numpy reads None as float64; here a dtype must be named
        raise TypeError(f"a dtype is needed (one of {SUPPORTED}), got None")
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"unknown dtype {dtype!r}; gpumat matrices hold {SUPPORTED}") from None
    if dt in (FLOAT32, FLOAT64, FLOAT16):
        return dt
    if is_bfloat16(dt):  # ml_dtypes.bfloat16 itself, the scalar type, as np.float16 is given
        return bfloat16()
    if dt.kind == "f" and not dt.isnative and dt.newbyteorder("=") in (FLOAT32, FLOAT64, FLOAT16):
        raise TypeError(
            f"gpumat matrices hold their elements in the GPU's byte order: ask for {dt.newbyteorder('=')}, not "
            f"{dt.str} (from_numpy converts byte-swapped arrays)"
        )
    raise TypeError(f"gpumat matrices hold {SUPPORTED}, not {dt}")


def host_dtype_for(a: np.ndarray, dtype=None, storage: bool = False) -> np.dtype:
    """The Matrix dtype an array becomes (the rule in this module's docstring); storage=True (from_numpy)
    also takes dtype=int8 or int32, for integer arrays whose every value fits (quantising floats is the
    caller's: a float array asked for as integers is a TypeError, a value out of range a ValueError), and
    FP8: an FP8 array kept, other real arrays rounded to it (to_host_array)."""
    if dtype is not None:
        if not storage:
            return as_dtype(dtype)
        dt = as_storage_dtype(dtype)
        if is_integer(dt):
            _check_integers(a, dt)
        return dt
    if storage and fp8_suffix(a.dtype) is not None:
        return a.dtype
    dt = a.dtype
    if dt.kind in "fiu" and not dt.isnative:  # big-endian data (read from a file): the same numbers, native order
        dt = dt.newbyteorder("=")
    if dt in (FLOAT32, FLOAT64, FLOAT16) or is_bfloat16(dt):
        return bfloat16() if is_bfloat16(dt) else dt
    if dt.kind in "iu":
        if dt.itemsize <= 4 or a.size == 0:
            return FLOAT64
        lo, hi = (int(a.min()), int(a.max()))
        if -EXACT_INT <= lo and hi <= EXACT_INT:
            return FLOAT64
        raise TypeError(
            f"the {dt} array holds values beyond 2^53, which float64 cannot hold exactly; pass dtype= to convert anyway"
        )
    raise TypeError(
        f"gpumat matrices hold real numbers ({SUPPORTED}); got dtype {dt} (convert it explicitly, or pass dtype=)"
    )


def _check_integers(a: np.ndarray, dt: np.dtype) -> None:
    """An array uploaded as int8 or int32 holds integers that fit: no float rounds or wraps on the way."""
    if a.dtype.kind not in "iub":
        raise TypeError(
            f"a {a.dtype} array becomes {dt} only from integers: round and clip it on the host first (e.g. "
            f"np.clip(np.rint(x), {np.iinfo(dt).min}, {np.iinfo(dt).max}).astype(np.{dt}))"
        )
    if a.size and a.dtype.kind != "b" and not np.can_cast(a.dtype, dt):
        lo, hi = int(a.min()), int(a.max())
        info = np.iinfo(dt)
        if lo < info.min or hi > info.max:
            raise ValueError(f"the array holds values in [{lo}, {hi}], beyond {dt}'s [{info.min}, {info.max}]")


def to_host_array(a: np.ndarray, dt: np.dtype) -> np.ndarray:
    """a converted to dt on the host, C-contiguous (bfloat16 without ml_dtypes: rounded bits in uint16),
    rounded once to nearest even; into FP8 saturated first (+-Inf and values beyond the finite range become
    +-max, NaN stays NaN: what the GPU's conversions do)."""
    fp8 = fp8_suffix(dt)
    if fp8 is not None and a.dtype != dt:
        with np.errstate(invalid="ignore"):
            wide = np.clip(np.asarray(a, dtype=np.float64), -FP8_MAX[fp8], FP8_MAX[fp8])
        # ml_dtypes rounds float64 through float32 (twice: a value just under a tie came out rounded up);
        # rounded to odd there, its rounding into FP8 is the one correct rounding
        return np.ascontiguousarray(_float32_rounded_to_odd(wide).astype(dt))
    if is_bfloat16(dt) and not is_bfloat16(a.dtype) and a.dtype not in (FLOAT32, FLOAT16):
        # float64 (or integers) to bfloat16 goes through float32, which would round twice (1 + 2^-8 + 2^-30
        # came out as 1.0): rounded to odd there, the second rounding gives the nearest bfloat16
        a = _float32_rounded_to_odd(np.asarray(a, dtype=np.float64))
    if is_bfloat16(dt) and bfloat16().metadata:  # the stand-in: no ml_dtypes
        if is_bfloat16(a.dtype):
            return np.ascontiguousarray(a).view(np.uint16)
        return float32_to_bfloat16_bits(np.asarray(a, dtype=np.float32))
    return np.ascontiguousarray(a, dtype=dt)


def _float32_rounded_to_odd(x: np.ndarray) -> np.ndarray:
    """x in float32, rounded toward zero with the last bit set where that was inexact (round to odd): a
    later rounding to any format at least 2 bits narrower then rounds x itself correctly."""
    with np.errstate(over="ignore", invalid="ignore"):
        f = x.astype(np.float32)
        f = np.where(np.abs(f.astype(np.float64)) > np.abs(x), np.nextafter(f, np.float32(0)), f)
        inexact = f.astype(np.float64) != x  # (NaN too: it stays a NaN)
    return (np.ascontiguousarray(f).view(np.uint32) | inexact.astype(np.uint32)).view(np.float32)


def float32_to_bfloat16_bits(x: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16 (nearest even), as uint16 bit patterns; NaN stays NaN."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        rounded[nan] = ((bits[nan] >> 16) | 0x0040).astype(np.uint16)  # keep a quiet NaN
    return rounded


def bfloat16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    return (np.ascontiguousarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)

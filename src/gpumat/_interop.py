"""Zero-copy exchange with other GPU libraries: the CUDA array interface (v3) and DLPack, both ways.

Export: `Matrix.__cuda_array_interface__` and `Matrix.__dlpack__` hand out the matrix's own memory
(padded strides included); the consumer's reference keeps the Matrix alive, and gpumat's free()
then waits for nothing: freeing a matrix that another library still reads is the caller's bug, as
with any shared buffer. Import: `from_dlpack(x)` and `Matrix.from_cuda_array(x)` wrap the producer's
memory without a copy when its rows are contiguous (any row stride), keep the producer alive, and
never free that memory. Other layouts are refused, or copied when `copy=True` (a column-major array
is a transpose away).

Streams: on export, the consumer's stream waits for gpumat's current stream (DLPack) or is told
which stream to wait for (CAI's "stream" key); on import, gpumat's stream waits for the producer's.

The DLPack structures are declared with ctypes (DLPack 1.0 and 1.1, which adds the FP8 codes, and the
older unversioned capsule): no dependency beyond the standard library.
"""

from __future__ import annotations

import ctypes
import struct
from typing import NamedTuple

import numpy as np

from ._dtypes import STORED, as_storage_dtype, bfloat16, float8, fp8_suffix, is_bfloat16, suffix
from .convert import gather
from .matrix import Matrix
from .memory import BorrowedBuffer
from .memory.ordering import done_on, use_on
from .runtime import memops
from .runtime.devices import Device, device
from .runtime.streams import (
    CAI_LEGACY,
    LEGACY_STREAM,
    PER_THREAD_STREAM,
    checked_handle,
    stream_handle,
    synchronize_stream,
    wait_for_streams,
)

KDL_CUDA, KDL_CUDA_MANAGED = 2, 13  # the DLPack device types of GPU memory
KDL_INT, KDL_UINT, KDL_FLOAT, KDL_BFLOAT = 0, 1, 2, 4
KDL_FLOAT8 = {"e4m3": 10, "e5m2": 12}  # DLPack 1.1's kDLFloat8_e4m3fn and kDLFloat8_e5m2 (8 bits)
FLAG_READ_ONLY = 1  # DLPack 1.0's flag bits
FLAG_IS_COPIED = 2
# the DLPack version gpumat writes and reads: 1.1 has the 1.0 structures and adds dtype codes (FP8 among them)
DLPACK_VERSION = (1, 1)


# dtype <-> (DLPack code, bits) and CAI typestr ------------------------------------------------------
def dlpack_dtype(dtype: np.dtype) -> tuple[int, int]:
    fp8 = fp8_suffix(dtype)
    if fp8 is not None:
        return KDL_FLOAT8[fp8], 8
    if is_bfloat16(dtype):
        return KDL_BFLOAT, 16
    if dtype.kind == "f":
        return KDL_FLOAT, dtype.itemsize * 8
    if dtype.kind == "i":
        return KDL_INT, dtype.itemsize * 8
    raise TypeError(f"no DLPack code for {dtype}")


def dtype_from_dlpack(code: int, bits: int, lanes: int) -> np.dtype:
    if lanes != 1:
        raise TypeError(f"vector DLPack dtypes (lanes={lanes}) are not supported")
    if code == KDL_FLOAT and bits in (16, 32, 64):
        return np.dtype(f"float{bits}")
    if code == KDL_BFLOAT and bits == 16:
        return bfloat16()
    if code == KDL_INT and bits in (8, 32):
        return np.dtype(f"int{bits}")
    fp8 = next((sfx for sfx, c in KDL_FLOAT8.items() if c == code), None)
    if fp8 is not None and bits == 8:
        return float8(fp8)
    names = {KDL_INT: "int", KDL_UINT: "uint", KDL_FLOAT: "float", KDL_BFLOAT: "bfloat"}
    raise TypeError(f"DLPack dtype {names.get(code, f'code {code}')}{bits} is not a gpumat dtype")


_dlpack_dtypes: dict[tuple[int, int, int], np.dtype] = {}  # (code, bits, lanes) -> gpumat dtype, as met


def dlpack_dtype_of(code: int, bits: int, lanes: int) -> np.dtype:
    """The gpumat dtype of a DLPack dtype, or the TypeError of dtype_from_dlpack / supported (a dict lookup
    after the first time: every import asks)."""
    dtype = _dlpack_dtypes.get((code, bits, lanes))
    if dtype is None:
        dtype = _dlpack_dtypes[(code, bits, lanes)] = supported(dtype_from_dlpack(code, bits, lanes))
    return dtype


def typestr(dtype: np.dtype) -> str:
    if fp8_suffix(dtype) is not None:  # the interface has no FP8 code
        raise TypeError(f"the CUDA array interface has no code for {dtype}: convert with .astype() first")
    if is_bfloat16(dtype):
        return "<V2"  # the CUDA array interface has no bfloat16 code: two raw bytes (as CuPy and Numba)
    return dtype.str


def supported(dtype: np.dtype) -> np.dtype:
    try:
        return as_storage_dtype(dtype)
    except TypeError:
        raise TypeError(
            f"the array is {dtype}, not a gpumat dtype ({STORED}): convert it on the producer's side first"
        ) from None


# structures -------------------------------------------------------------------------------------
class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", DELETER),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


_api = ctypes.pythonapi
# The destructor gets the dying capsule as a raw pointer: wrapping it in a py_object would revive it.
CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_raw_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, CAPSULE_DESTRUCTOR]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]

NAME, USED = b"dltensor", b"used_dltensor"
NAME_V, USED_V = b"dltensor_versioned", b"used_dltensor_versioned"

# An import reads a capsule's structures with struct, in one unpack each: a ctypes Structure's fields cost a
# Python object a read (the structures above stay for export, and the two agree: tests/test_interop.py).
# DLTensor: data, device (type, id), ndim, dtype (code, bits, lanes), shape, strides, byte_offset
_TENSOR = "QiiiBBHQQQ"
VERSIONED_HEADER = struct.Struct("=IIQQQ" + _TENSOR)  # version, manager_ctx, deleter, flags, then dl_tensor
UNVERSIONED_HEADER = struct.Struct("=" + _TENSOR + "QQ")  # dl_tensor, then manager_ctx, deleter
VersionedBytes = ctypes.c_char * VERSIONED_HEADER.size
UnversionedBytes = ctypes.c_char * UNVERSIONED_HEADER.size
MOST_DIMENSIONS = 32  # what an import reads of a shape or strides; gpumat takes 1-3 and names the rest
_INT64S = [(struct.Struct(f"={n}q"), ctypes.c_char * (8 * n)) for n in range(MOST_DIMENSIONS + 1)]
_capsule_pointer = _api.PyCapsule_GetPointer  # ValueError for another name, or for no capsule


def _int64s(address: int, n: int) -> tuple[int, ...]:
    """The n int64 at `address` (a DLTensor's shape or strides)."""
    if not 0 <= n <= MOST_DIMENSIONS:
        raise ValueError(f"gpumat matrices are 1-D, 2-D or 3-D (a batch); the DLPack tensor has {n} dimensions")
    if n and not address:
        raise ValueError("the DLPack tensor has dimensions but no shape")
    unpack, raw = _INT64S[n]
    return unpack.unpack_from(raw.from_address(address))


class HandBack:
    """The way back to its producer of one imported DLPack tensor: its address and the producer's deleter
    (a function address, 0 for none), called once by hand_back, whichever path gets there first."""

    __slots__ = ("address", "deleter")

    def __init__(self, address: int, deleter: int):
        self.address, self.deleter = address, deleter


def hand_back(owner: HandBack) -> None:
    """Hand an imported tensor back to its producer (a BorrowedBuffer's release): once."""
    deleter, owner.deleter = owner.deleter, 0
    if deleter:
        DELETER(deleter)(owner.address)


# export -----------------------------------------------------------------------------------------
def cuda_array_interface(m: Matrix, stream: int | None = None) -> dict:
    """The v3 CUDA array interface of a Matrix (a dict; nothing is allocated on the GPU).

    "stream" names gpumat's current stream for the matrix's device (1 for the legacy default stream):
    a consumer waits for it before reading."""
    ptr = m.elements  # FreedMatrixError for freed matrices
    dev = m.device
    if not ptr:  # an empty matrix: consumers (CuPy) refuse a null address without a device to go with it
        ptr = _empty_address(dev)
    s = stream_handle(None, dev) if stream is None else stream
    return {
        "shape": m.shape,
        "typestr": typestr(m.dtype),
        "descr": [("", typestr(m.dtype))],
        "data": (ptr, bool(getattr(m._buffer, "readonly", False))),
        "strides": None if m.is_contiguous else m.strides,
        "version": 3,
        "stream": CAI_LEGACY if s == LEGACY_STREAM else s,
    }


def _empty_address(dev: Device) -> int:
    """A valid, never-written address on the device for empty exports (256 bytes, allocated once a device)."""
    return dev.scratch_for("empty export", lambda _: memops.alloc_unpooled(256))


_exports: dict[int, tuple] = {}  # address of a DLManagedTensor(Versioned) -> what keeps it and the Matrix alive


def _export_deleter(address: int) -> None:
    _exports.pop(address, None)


_DELETER = DELETER(_export_deleter)


def _capsule_destructor(capsule: int) -> None:
    # called when the capsule dies; a consumer that took the tensor renamed it "used_...", and then owns it
    for name in (NAME, NAME_V):
        if _raw_is_valid(capsule, name):
            _export_deleter(_raw_get_pointer(capsule, name))


_DESTRUCTOR = CAPSULE_DESTRUCTOR(_capsule_destructor)


def export_dlpack(m: Matrix, stream=None, max_version=None, dl_device=None, copy=None):
    """Matrix.__dlpack__: a DLPack capsule over the matrix's memory (a copy only when copy=True)."""
    _ = m.elements  # a freed matrix raises FreedMatrixError here
    dev = m.device.activate()
    if dl_device is not None and tuple(dl_device) != (KDL_CUDA, dev.ordinal):
        raise BufferError(f"the matrix lives on CUDA device {dev.ordinal}; cannot export it to {tuple(dl_device)}")
    # the consumer's stream, as DLPack spells it for CUDA: None the legacy default stream, -1 no ordering
    if stream is None:
        consumer = LEGACY_STREAM
    elif stream == -1:
        consumer = None
    else:
        consumer = _protocol_stream(stream, "__dlpack__: stream is an integer handle, -1 or None")
    if max_version is not None and not (
        isinstance(max_version, (tuple, list))
        and len(max_version) == 2
        and all(isinstance(v, (int, np.integer)) for v in max_version)
    ):
        raise TypeError(f"__dlpack__: max_version is a (major, minor) tuple of ints, got {max_version!r}")
    versioned = max_version is not None and max_version[0] >= 1
    # the newest version both sides read (a 1.0 consumer gets 1.0: the same structures)
    version = min(DLPACK_VERSION, (int(max_version[0]), int(max_version[1]))) if versioned else (0, 0)
    # (FP8's codes are DLPack 1.1's, but a consumer asking for 1.0 may read them: PyTorch 2.11 asks for 1.0
    # and takes its float8 tensors back; one that cannot refuses the unknown code itself)
    flags = FLAG_READ_ONLY if getattr(m._buffer, "readonly", False) else 0
    producer = stream_handle(None, dev)
    if copy:
        m = m.copy(stream=producer)  # queued before the consumer's wait below, which then covers it
        flags = FLAG_IS_COPIED  # the copy is the consumer's to write
    if consumer is not None and consumer != producer:
        wait_for_streams(consumer, (producer,))
    ndim = m.ndim
    shape = (ctypes.c_int64 * ndim)(*m.shape)
    strides = (ctypes.c_int64 * ndim)(*(x // m.itemsize for x in m.strides))
    code, bits = dlpack_dtype(m.dtype)
    tensor = DLTensor(
        ctypes.c_void_p(m.elements or None),
        DLDevice(KDL_CUDA, dev.ordinal),
        ndim,
        DLDataType(code, bits, 1),
        shape,
        strides,
        0,
    )
    if versioned:
        managed = DLManagedTensorVersioned(DLPackVersion(*version), None, _DELETER, flags, tensor)
    else:
        managed = DLManagedTensor(tensor, None, _DELETER)
    address = ctypes.addressof(managed)
    _exports[address] = (managed, shape, strides, m)  # alive until the consumer calls the deleter
    return _api.PyCapsule_New(address, NAME_V if versioned else NAME, _DESTRUCTOR)


# import -----------------------------------------------------------------------------------------
class Layout(NamedTuple):
    """How an array's elements map onto a Matrix: one matrix (batch None) or a batch, each height x width
    with its storage rows `ld` elements apart, read transposed when `trans` (column-major), matrices
    `bstride` elements apart."""

    batch: int | None
    height: int
    width: int
    ld: int
    bstride: int
    trans: bool


def _matrix_layout(h: int, w: int, sr: int, sc: int) -> tuple[int, bool] | None:
    """(leading dimension, transposed) of a 2-D layout with contiguous rows (row-major) or contiguous
    columns (column-major, read as a transposed view), else None. Row-major wins where both hold."""
    if h == 0 or w == 0:  # an empty array has no layout to honour (CuPy gives (0, 0) strides)
        return max(w, 1), False
    if w <= 1 or sc == 1:
        ld = sr if h > 1 else max(w, 1)
        if ld >= w:
            return ld, False
    if h <= 1 or sr == 1:
        ld = sc if w > 1 else max(h, 1)
        if ld >= h:
            return ld, True
    return None


def _layout(shape: tuple, strides: tuple | None) -> Layout | None:
    """The Layout of an array of `shape` with `strides` in elements (None: C-contiguous), or None when
    gpumat cannot view it (neither rows nor columns contiguous, negative or overlapping strides); a
    ValueError for ranks other than 1, 2 and 3."""
    ndim = len(shape)
    if ndim == 2 and strides is not None:
        h, w = shape
        if strides[1] == 1 and h > 1 and 0 < w <= strides[0]:  # rows contiguous: the common array, at once
            return Layout(None, h, w, strides[0], 0, False)
    if ndim not in (1, 2, 3):
        raise ValueError(
            f"gpumat matrices are 1-D, 2-D or 3-D (a batch); the array has {ndim} dimensions, shape {tuple(shape)}"
        )
    if strides is None:  # C-contiguous
        strides = tuple(int(np.prod(shape[i + 1 :])) for i in range(ndim))
    if ndim == 1:
        shape, strides = (1, shape[0]), (max(shape[0], 1), strides[0])
    batch, bstride = None, 0
    if len(shape) == 3:
        batch, bstride = shape[0], strides[0]
        shape, strides = shape[1:], strides[1:]
    h, w = shape
    inner = _matrix_layout(h, w, *strides)
    if inner is None:
        return None
    ld, trans = inner
    if batch is not None:
        if batch <= 1 or h * w == 0:
            bstride = h * w
        elif bstride < 0 or (bstride and bstride < ((w if trans else h) - 1) * ld + (h if trans else w)):
            return None  # matrices that run into each other (or backwards) are not a batch gpumat can view
    return Layout(batch, h, w, ld, bstride, trans)


def _pointer_device(ptr: int) -> Device:
    ordinal = memops.pointer_device_ordinal(ptr)
    if ordinal is None:
        raise ValueError(f"0x{ptr:x} is not GPU memory that the CUDA driver knows of")
    return Device(ordinal)


def _wrap(
    ptr: int, layout: Layout, dtype: np.dtype, dev: Device, owner, release, stream: int, readonly: bool = False
) -> Matrix:
    b, h, w, ld, bstride, trans = layout
    rows, cols = (w, h) if trans else (h, w)  # the storage's
    nbytes = ((rows - 1) * ld + cols + ((b or 1) - 1) * bstride) * dtype.itemsize if h and w and b != 0 else 0
    buf = BorrowedBuffer(ptr, nbytes, dev, owner, release, stream, readonly)
    return Matrix._wrap(buf, 0, h, w, ld, owner=True, dtype=dtype, trans=trans, batch=b, bstride=bstride)


def from_cuda_array(obj, copy: bool | None = None, stream=None) -> Matrix:
    """Matrix over obj.__cuda_array_interface__ (v2/v3)."""
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is None:
        raise TypeError(f"{type(obj).__name__} has no __cuda_array_interface__")
    shape, typestr, ptr, readonly, strides, producer = _read_interface(cai, type(obj).__name__)
    dtype = np.dtype(typestr)
    if dtype.kind == "V" and dtype.itemsize == 2:  # two raw bytes: what CAI producers write for bfloat16
        dtype = bfloat16()
    supported(dtype)
    isz = dtype.itemsize
    if strides is not None:
        if len(strides) != len(shape):
            raise ValueError(f"the array's strides {strides} do not match its shape {shape}")
        if any(s % isz for s in strides):
            raise ValueError(f"strides {strides} are not multiples of the element size {isz}")
        strides = tuple(s // isz for s in strides)  # floor division: exact for negative multiples too
    dev = (_pointer_device(ptr) if ptr else device()).activate()
    s = stream_handle(stream, dev)
    if producer is not None and ptr and producer != s:
        wait_for_streams(s, (producer,))
    return _import(ptr, shape, strides, dtype, dev, obj, None, s, copy, readonly)


def _integers(values, what: str) -> tuple[int, ...]:
    """A tuple of Python ints from a sequence of integers (bools, floats and other objects refused)."""
    if not isinstance(values, (tuple, list)):
        raise TypeError(f"the array's {what} must be a tuple of integers, got {type(values).__name__}")
    if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in values):
        raise TypeError(f"the array's {what} must be integers, got {tuple(values)!r}")
    return tuple(int(v) for v in values)


def _read_interface(cai, producer: str):
    """(shape, typestr, data address, read-only, strides in bytes or None, stream or None) from a CUDA array
    interface, each checked for its type: a malformed interface is a TypeError naming what is wrong."""
    if not isinstance(cai, dict):
        raise TypeError(f"{producer}.__cuda_array_interface__ must be a dict, got {type(cai).__name__}")
    missing = [key for key in ("shape", "typestr", "data") if key not in cai]
    if missing:
        raise TypeError(f"{producer}.__cuda_array_interface__ has no {', '.join(missing)}")
    shape = _integers(cai["shape"], "shape")
    typestr = cai["typestr"]
    if not isinstance(typestr, str):
        raise TypeError(f"the array's typestr must be a string such as '<f4', got {typestr!r}")
    data = cai["data"]
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise TypeError(f"the array's data must be (address, read_only), got {data!r}")
    ptr = data[0] or 0
    if isinstance(ptr, bool) or not isinstance(ptr, (int, np.integer)):
        raise TypeError(f"the array's data address must be an integer, got {data[0]!r}")
    if not 0 <= ptr < 2**64:
        raise ValueError(f"the array's data address must be in [0, 2**64), got {ptr}")
    strides = cai.get("strides")
    strides = None if strides is None else _integers(strides, "strides")
    producer_stream = cai.get("stream")
    if producer_stream is not None:
        producer_stream = _protocol_stream(producer_stream, "the array's stream must be an integer handle or None")
    return shape, typestr, int(ptr), bool(data[1]), strides, producer_stream


def _protocol_stream(value, what: str) -> int:
    """A stream as the CUDA array interface and DLPack spell it (1, or 0, for the legacy default stream; else
    a handle), as gpumat's handle; a TypeError saying `what` for anything but an integer."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what}, got {value!r}")
    return LEGACY_STREAM if value in (0, CAI_LEGACY) else checked_handle(int(value))


def _import(
    ptr,
    shape,
    strides,
    dtype,
    dev,
    owner,
    release,
    s: int,
    copy,
    readonly: bool = False,
    check_pointer: bool = False,
    copied: bool = False,
) -> Matrix:
    """A Matrix over an array's memory, or with copy=True a copy of it; `copied`: the producer already
    made this array a copy for gpumat (DLPack's copy=True), which is then kept as it is where gpumat can
    view it."""
    if shape and min(shape) < 0:
        raise ValueError(f"the array's shape {shape} has a negative dimension")
    if not ptr and all(shape):
        raise ValueError(f"the array's data address is NULL, but its shape {shape} holds elements")
    if ptr % dtype.itemsize:
        raise ValueError(f"the array's data at 0x{ptr:x} is not aligned to its {dtype.itemsize}-byte elements")
    layout = _layout(shape, strides)
    if layout is None and copy is not True:
        raise ValueError(_not_viewable(shape, strides))
    if check_pointer and ptr and memops.pointer_device_ordinal(ptr) != dev.ordinal:
        # a capsule's word is not enough: host memory, or another GPU's, is never taken for this GPU's
        raise ValueError(f"the tensor's data at 0x{ptr:x} is not memory of CUDA device {dev.ordinal}: refused")
    if layout is None:
        return _gathered_copy(ptr, shape, strides, dtype, dev, owner, release, s)
    view = _wrap(ptr, layout, dtype, dev, owner, release, s, readonly)
    if copy is not True or copied:
        return view
    try:  # copy=True: a packed copy of the same shape and layout
        out = view.copy(stream=s)
        synchronize_stream(s)  # the copy has read the source before the producer gets it back
        return out
    finally:
        view.free()


def _not_viewable(shape, strides) -> str:
    """Why an array's layout cannot be viewed (the ValueError's text)."""
    if strides is not None and any(d > 1 and x < 0 for d, x in zip(shape, strides, strict=True)):
        return (
            f"the array has negative strides {strides} (in elements: a reversed view, such as x[::-1] or "
            "x[:, ::-1]); gpumat views memory only going forward: pass copy=True for a copy"
        )
    return (
        f"the array's layout (shape {tuple(shape)}, strides {strides} in elements) is not one gpumat can "
        "view: it needs each row or each column contiguous in memory (a column-major array becomes a "
        "transposed view) and the matrices of a batch one after another; pass copy=True for a copy"
    )


def _gathered_copy(ptr, shape, strides, dtype, dev, owner, release, s: int) -> Matrix:
    """copy=True of a layout gpumat cannot view (negative strides, every other column, a broadcast): a
    packed C-order copy of the same shape, gathered in one launch (convert.gather); the producer gets its
    memory back once the copy has run."""
    if len(shape) == 3:
        (batch, rows, cols), steps = shape, strides
    elif len(shape) == 2:
        (batch, rows, cols), steps = (1, *shape), (0, *strides)
    else:  # a vector: one row
        (batch, rows, cols), steps = (1, 1, shape[0]), (0, 0, strides[0])
    try:
        out = Matrix._allocate(rows, cols, dev, s, dtype, batch if len(shape) == 3 else None)
        if out.size:
            with dev.lock:
                address, *_, buffer = out._operand()
                use_on(s, buffer)
                gather(ptr, address, (batch, rows, cols), steps, suffix(dtype), s, dev)
                done_on(s, buffer)
            synchronize_stream(s)  # the copy has read the source before the producer gets it back
    finally:
        if release is not None:
            release(owner)
    return out


def _signed(strides: tuple, itemsize: int) -> tuple:
    """Strides in elements as a DLPack producer meant them: a stride of 2^63 bytes or more is a negative one
    that went through an unsigned division (CuPy 14 divides its byte strides by the itemsize as unsigned
    numbers, so a reversed view's -1 arrives as 2^64 / itemsize - 1); no array spans 2^63 bytes."""
    if not strides or max(strides) * itemsize < 1 << 63:
        return strides
    wrap = (1 << 64) // itemsize
    return tuple(x - wrap if x * itemsize >= 1 << 63 else x for x in strides)


def _export(obj, consumer: int, **keywords):
    """obj.__dlpack__ for the `consumer` stream. A producer that refuses the per-thread default stream
    (PyTorch: BufferError) is asked for the legacy one instead: the per-thread stream waits for the legacy
    stream's earlier work by CUDA's rule for the two default streams, so what the producer orders there
    comes before gpumat's work."""
    try:
        return obj.__dlpack__(stream=consumer, **keywords)
    except BufferError:
        if consumer != PER_THREAD_STREAM:
            raise
    return obj.__dlpack__(stream=CAI_LEGACY, **keywords)


def _capsule(obj, consumer: int, copy, refusal: Exception):
    """(the capsule of obj.__dlpack__, whether the producer made it a copy) once from_dlpack's plain request
    (DLPack 1.x's keywords; `copy` passed on as DLPack 1.0 defines it, False for None: gpumat imports without
    a copy unless asked for one) raised `refusal`. A producer that refuses the per-thread default stream is
    asked for the legacy one (see _export); one that does not take the keywords is asked without them
    (max_version, then copy); one that cannot honour copy=True (BufferError) is asked for its array as it
    is, and gpumat copies; one that cannot export without a copy is a ValueError that says to pass
    copy=True."""
    want = copy is True
    if isinstance(refusal, BufferError) and consumer == PER_THREAD_STREAM:
        try:
            return obj.__dlpack__(stream=CAI_LEGACY, max_version=DLPACK_VERSION, copy=want), want
        except (TypeError, BufferError) as again:
            refusal = again
    if isinstance(refusal, BufferError) and not want:
        raise ValueError(
            f"{type(obj).__name__}.__dlpack__ refused the export with copy=False ({refusal}); where the array's "
            "layout needs a copy, pass copy=True"
        ) from None
    try:  # (a TypeError: a producer from before the copy keyword)
        return _export(obj, consumer, max_version=DLPACK_VERSION), False
    except TypeError:  # a producer from before DLPack 1.0
        return _export(obj, consumer), False


def from_dlpack(obj, copy: bool | None = None, stream=None) -> Matrix:
    """A Matrix over another library's GPU array through DLPack, without a copy.

    For CuPy, PyTorch, JAX, Numba, gpumat itself, ...: 1-D (one row), 2-D or 3-D (a batch) arrays
    whose rows are contiguous (padded row strides welcome) or whose columns are (a column-major array,
    such as PyTorch's ``w.t()`` or a Fortran-order array, becomes a transposed view). The producer
    stays alive as long as the Matrix does, and gpumat never frees its memory; work the producer queued
    before the call is ordered before gpumat's ``stream``. Negative strides are a ``ValueError`` unless
    ``copy=True``.

    Parameters
    ----------
    obj : object
        Anything with ``__dlpack__`` and ``__dlpack_device__`` on a CUDA device.
    copy : bool, optional
        True: a copy (the producer's own where DLPack's ``copy=`` gets one and flags it IS_COPIED,
        else gpumat's, packed in the same layout; a layout gpumat cannot view arrives in C order). A
        producer asked for a copy is waited for on the whole device: DLPack does not say which stream
        the producer copied on.
        None or False: never a copy (the producer is asked with ``copy=False``).
    stream : Stream or stream-like, optional
        The stream gpumat's use of the memory is ordered on.

    Returns
    -------
    Matrix
        A view of the producer's memory (``is_borrowed``), or a copy.

    Raises
    ------
    TypeError
        No DLPack support, a host array, or a dtype gpumat does not hold.
    ValueError
        A layout gpumat cannot view without a copy (negative strides among them), more than three
        dimensions, or a copy the producer made where none was asked for.
    BufferError
        A DLPack version newer than gpumat reads.

    Examples
    --------
    >>> A = gm.Matrix.from_numpy(np.ones((2, 3), np.float32))  # doctest: +GPU
    >>> gm.from_dlpack(A) is A  # a Matrix comes back as it is; another library's array, as a view
    True
    >>> gm.from_dlpack(A, copy=True).elements == A.elements
    False
    """
    if isinstance(obj, Matrix):
        return obj.copy(stream=stream) if copy else obj
    dl_device = getattr(obj, "__dlpack_device__", None)
    if dl_device is None:
        raise TypeError(f"{type(obj).__name__} does not support DLPack (no __dlpack_device__)")
    dev_type, dev_id = dl_device()
    if dev_type not in (KDL_CUDA, KDL_CUDA_MANAGED):
        raise ValueError(
            f"the array is not on a CUDA device (DLPack device type {dev_type}); use Matrix.from_numpy for host arrays"
        )
    if copy not in (None, False, True):
        raise TypeError(f"copy is True, False or None, got {copy!r}")
    dev = Device(dev_id).activate()
    s = stream_handle(stream, dev)
    consumer = CAI_LEGACY if s == LEGACY_STREAM else s
    asked_copy = copy is True
    try:  # what every DLPack 1.x producer takes (_capsule asks again otherwise)
        capsule = obj.__dlpack__(stream=consumer, max_version=DLPACK_VERSION, copy=asked_copy)
    except (TypeError, BufferError) as refusal:
        capsule, asked_copy = _capsule(obj, consumer, copy, refusal)
    try:
        address = _capsule_pointer(capsule, NAME_V)
        header, used = VERSIONED_HEADER.unpack_from(VersionedBytes.from_address(address)), USED_V
    except ValueError:  # not a versioned capsule
        try:
            address = _capsule_pointer(capsule, NAME)
        except ValueError:
            raise TypeError("__dlpack__ did not return a DLPack capsule") from None
        *tensor, context, deleter = UNVERSIONED_HEADER.unpack_from(UnversionedBytes.from_address(address))
        header, used = (0, 0, context, deleter, 0, *tensor), USED  # as a versioned one: no version, no flags
    (
        major,
        minor,
        _,
        deleter,
        flags,
        data,
        device_type,
        device_id,
        ndim,
        code,
        bits,
        lanes,
        shape_at,
        strides_at,
        offset,
    ) = header
    if major > DLPACK_VERSION[0]:
        raise BufferError(f"DLPack {major}.{minor} is newer than gpumat reads")
    _api.PyCapsule_SetName(capsule, used)  # from here on the tensor is ours to release
    handback = HandBack(address, deleter)
    try:
        # the tensor's own device, not only what __dlpack_device__ said: memory the capsule says is on the
        # host (or on another GPU) is never taken for this GPU's
        if device_id != dev_id or device_type not in (KDL_CUDA, KDL_CUDA_MANAGED):
            raise ValueError(
                f"the DLPack tensor lives on device type {device_type} id {device_id}, but its "
                f"producer said CUDA device {dev_id}: refused"
            )
        dtype = dlpack_dtype_of(code, bits, lanes)
        shape = _int64s(shape_at, ndim)
        strides = _signed(_int64s(strides_at, ndim), dtype.itemsize) if strides_at else None
        if flags & FLAG_IS_COPIED and copy is not True:  # asked for none: the Matrix would not share x's memory
            raise ValueError(f"{type(obj).__name__} exported a copy where gpumat asked for none (copy={copy})")
        # the producer's copy is kept only where its flag says it made one: a producer may take the keyword and
        # still hand out its own memory (a view kept as a "copy" would share the caller's array)
        copied = asked_copy and bool(flags & FLAG_IS_COPIED)
        if asked_copy:
            # a producer that took copy=True may have queued a copy its stream promise does not cover:
            # PyTorch orders the consumer's stream after its own and only then queues the copy there, and
            # may not flag it IS_COPIED (measured: gpumat read the copy's block before PyTorch wrote it).
            # Which stream the producer copied on is not in the protocol: wait for the whole device.
            dev.synchronize()
        readonly = bool(flags & FLAG_READ_ONLY) and not copied
        device_memory = device_type == KDL_CUDA  # managed memory answers the driver differently
        return _import(
            data + offset, shape, strides, dtype, dev, handback, hand_back, s, copy, readonly, device_memory, copied
        )
    except BaseException:  # a refused import (dimensions, alignment, layout, dtype) leaks nothing
        hand_back(handback)
        raise


def asmatrix(obj, copy: bool | None = None, stream=None, device=None) -> Matrix:
    """A Matrix from anything: a Matrix, a GPU array, or host data.

    A Matrix is returned as it is (or copied with ``copy=True``); a GPU array comes through DLPack,
    else the CUDA array interface, without a copy; host data (numpy arrays and array-likes) is copied
    to ``device``.

    Parameters
    ----------
    obj : object
        A Matrix, a GPU array, or an array-like.
    copy : bool, optional
        As for :func:`from_dlpack`.
    stream : Stream or stream-like, optional
        The stream the import or copy is ordered on.
    device : Device or int, optional
        For host data: the GPU to copy to (the current device by default).

    Returns
    -------
    Matrix
        The matrix.

    Raises
    ------
    TypeError
        Data gpumat cannot hold (non-real dtypes, objects).
    ValueError
        A GPU layout gpumat cannot view without ``copy=True``.

    Examples
    --------
    >>> A = gm.asmatrix([[1.0, 2.0]])  # doctest: +GPU
    >>> gm.asmatrix(A) is A
    True
    """
    if isinstance(obj, Matrix):
        return obj.copy(stream=stream) if copy else obj
    dl = getattr(obj, "__dlpack_device__", None)
    if dl is not None and dl()[0] in (KDL_CUDA, KDL_CUDA_MANAGED):
        return from_dlpack(obj, copy=copy, stream=stream)
    if hasattr(obj, "__cuda_array_interface__"):
        return from_cuda_array(obj, copy=copy, stream=stream)
    return Matrix.from_numpy(obj, device=device, stream=stream)
